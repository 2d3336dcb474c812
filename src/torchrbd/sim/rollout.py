"""``scene.rollout``: many steps with per-step controls, optionally checkpointed.

Backpropagating through ``T`` plain ``scene.step()`` calls keeps the autograd
graph of every step (nodes and saved tensors) alive until ``backward()``. With
``checkpoint_every=K`` the rollout runs in segments of ``K`` steps, each one
autograd node (:class:`_Segment`) that runs its steps without recording a graph
and keeps only its inputs: the state at the segment start, the segment's
controls, gains and inertial parameters. During backward each segment is
recomputed with grad enabled and differentiated on its own. Memory grows like
``T / K`` states plus one segment's graph, for about one extra forward pass of
compute. See ``docs/simulator.md`` for numbers.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import torch

from ..errors import InputError
from . import dynamics as dyn
from .indexing import as_value
from .tensor import wrap

_MODES = {"force": dyn.FORCE, "velocity": dyn.VELOCITY, "position": dyn.POSITION}


def _controls(scene, controls, mode):
    """{entity: (T, B, n_dofs) plain tensor}, and T."""
    dynamic = scene._dynamic()
    if isinstance(controls, dict):
        items = list(controls.items())
    else:
        if len(dynamic) != 1:
            raise InputError(
                f"rollout: the scene has {len(dynamic)} entities with dofs; pass controls as "
                "{entity: tensor of shape (T, [n_envs,] n_dofs)}"
            )
        items = [(dynamic[0], controls)]
    out, T = {}, None
    for ent, u in items:
        if ent not in dynamic:
            raise InputError(f"rollout: {ent!r} is not a dynamic entity of this scene")
        u = as_value(u, scene, scene.dtype, scene.device, "rollout", "controls")
        batch = (scene.n_envs,) if scene.n_envs else ()
        if u.dim() != 2 + len(batch) or tuple(u.shape[1:]) != (*batch, ent.n_dofs):
            raise InputError(
                f"rollout: controls for {ent!r} have shape {tuple(u.shape)}, expected "
                f"(T, {', '.join(map(str, (*batch, ent.n_dofs)))})"
            )
        if T is not None and u.shape[0] != T:
            raise InputError(f"rollout: control sequences have different lengths ({T} and {u.shape[0]})")
        T = u.shape[0]
        out[ent] = u if scene.n_envs else u.unsqueeze(1)
        if not scene.requires_grad:
            out[ent] = out[ent].detach()
    return out, T or 0


def _step_control(ctrl: dyn.EntityControl, u_t, mode: int) -> dyn.EntityControl:
    modes = torch.full_like(ctrl.mode, mode)
    if mode == dyn.FORCE:
        return replace(ctrl, mode=modes, force=u_t, has_position=False)
    if mode == dyn.VELOCITY:
        return replace(ctrl, mode=modes, vel_target=u_t, has_position=False)
    return replace(ctrl, mode=modes, pos_target=u_t, vel_target=torch.zeros_like(u_t), has_position=True)


class _Segment(torch.autograd.Function):
    """Checkpointed run of ``K`` steps: ``run(*inputs) -> outputs`` without a graph in
    forward; recomputed and differentiated with ``torch.autograd.grad`` in backward,
    so it composes with both ``loss.backward()`` and ``torch.autograd.grad``.

    Every tensor that may need a gradient must be among ``inputs`` (the
    recomputation sees detached copies of them)."""

    @staticmethod
    def forward(ctx, run, *inputs):
        ctx.run = run
        ctx.save_for_backward(*inputs)
        with torch.no_grad():
            return run(*inputs)

    @staticmethod
    def backward(ctx, *grads):
        inputs = [x.detach().requires_grad_(x.requires_grad) for x in ctx.saved_tensors]
        with torch.enable_grad():
            outputs = ctx.run(*inputs)
        wanted = [i for i, x in enumerate(inputs) if x.requires_grad]
        pairs = [(o, g) for o, g in zip(outputs, grads) if o.requires_grad and g is not None]
        found = torch.autograd.grad(
            [o for o, _ in pairs], [inputs[i] for i in wanted], [g for _, g in pairs], allow_unused=True
        ) if pairs and wanted else [None] * len(wanted)
        out = [None] * len(inputs)
        for i, g in zip(wanted, found):
            out[i] = g
        return (None, *out)


# per dynamic entity, the tensors a segment depends on (in this order)
_FIELDS = ("qpos", "vel", "u", "force", "pos_target", "vel_target", "kp", "kv", "lo", "hi", "base_pose",
           "mass", "com", "inertia")


def _entity_inputs(entity, ctrl: dyn.EntityControl, u):
    inertial = entity._inertial
    base_pose = ctrl.base_pose if ctrl.base_pose is not None else entity._anchor
    return [entity._qpos, entity._vel, u if u is not None else entity._anchor, ctrl.force, ctrl.pos_target,
            ctrl.vel_target, ctrl.kp, ctrl.kv, ctrl.lo, ctrl.hi, base_pose,
            inertial["mass"].value, inertial["com"].value, inertial["inertia"].value]


def rollout(scene, controls, checkpoint_every: int | None = None, mode: str = "force"):
    """Run ``T`` steps applying ``controls[t]`` at step ``t``.

    Args:
        controls: (T, [n_envs,] n_dofs) tensor when the scene has one entity with
            dofs, else ``{entity: tensor}``. May require grad.
        checkpoint_every: segment length ``K`` for gradient checkpointing (None:
            record every step, as ``scene.step()`` does).
        mode: ``"force"`` (``control_dofs_force``), ``"position"`` or ``"velocity"``
            (PD targets with the entity's gains and force range).

    Returns:
        ``(qpos, dofs_velocity)`` trajectories, the states *after* each step, of
        shapes (T, [n_envs,] n_qs) and (T, [n_envs,] n_dofs); a dict
        ``{entity: (qpos, dofs_velocity)}`` when ``controls`` is a dict. The scene
        is left at the final state with the last control command in place.
    """
    scene._need_built("rollout")
    if mode not in _MODES:
        raise InputError(f"rollout: mode must be one of {sorted(_MODES)}, got {mode!r}")
    if checkpoint_every is not None and (int(checkpoint_every) != checkpoint_every or checkpoint_every < 1):
        raise InputError(f"rollout: checkpoint_every must be a positive integer, got {checkpoint_every!r}")
    m = _MODES[mode]
    us, T = _controls(scene, controls, mode)
    ents = scene._dynamic()
    base = [e._control() for e in ents]
    n, nf = len(ents), len(_FIELDS)
    checkpointed = checkpoint_every is not None and scene.requires_grad

    def segment(t0: int, t1: int, *flat):
        """Steps t0..t1-1 from the tensors ``flat`` (nf per entity, u sliced to the segment)."""
        statics, ctrls, state = [], [], []
        for i, e in enumerate(ents):
            f = dict(zip(_FIELDS, flat[i * nf : (i + 1) * nf]))
            statics.append(e._statics_with(f["mass"], f["com"], f["inertia"]) if checkpointed else e._statics())
            ctrls.append(replace(
                base[i], force=f["force"], pos_target=f["pos_target"], vel_target=f["vel_target"], kp=f["kp"],
                kv=f["kv"], lo=f["lo"], hi=f["hi"], base_pose=None if e.floating else f["base_pose"],
            ))
            state.append((f["qpos"], f["vel"]))
        qs, vs = [[] for _ in ents], [[] for _ in ents]
        for t in range(t1 - t0):
            step_ctrls = [
                _step_control(c, flat[i * nf + 2][t], m) if e in us else c for i, (e, c) in enumerate(zip(ents, ctrls))
            ]
            state = scene._advance(statics, step_ctrls, state)
            for i, (qpos, vel) in enumerate(state):
                qs[i].append(qpos)
                vs[i].append(vel)
        out = [x for pair in state for x in pair]
        return (*out, *[torch.stack(q) for q in qs], *[torch.stack(v) for v in vs])

    inputs = [_entity_inputs(e, c, us.get(e)) for e, c in zip(ents, base)]
    trajs_q, trajs_v = [[] for _ in ents], [[] for _ in ents]
    K = T if checkpoint_every is None else int(checkpoint_every)
    with torch.set_grad_enabled(scene.requires_grad):
        for t0 in range(0, T, max(K, 1)):
            t1 = min(t0 + K, T)
            flat = []
            for i, e in enumerate(ents):
                fields = list(inputs[i])
                if e in us:
                    fields[2] = us[e][t0:t1]
                flat.extend(fields)
            res = _Segment.apply(partial(segment, t0, t1), *flat) if checkpointed else segment(t0, t1, *flat)
            for i in range(n):
                inputs[i][0], inputs[i][1] = res[2 * i], res[2 * i + 1]
                trajs_q[i].append(res[2 * n + i])
                trajs_v[i].append(res[3 * n + i])
    for i, e in enumerate(ents):
        e._qpos, e._vel = inputs[i][0], inputs[i][1]
        if e in us and T:
            last = _step_control(base[i], us[e][-1], m)
            e._mode, e._force, e._pos_target, e._vel_target = last.mode, last.force, last.pos_target, last.vel_target
            e._has_position = last.has_position
    scene._t += T

    def out(parts, size):
        if not parts:
            x = torch.zeros(0, scene._B, size, dtype=scene.dtype, device=scene.device)
        else:
            x = torch.cat(parts)
        return wrap(x if scene.n_envs else x[:, 0], scene)

    result = {e: (out(trajs_q[i], e.n_qs), out(trajs_v[i], e.n_dofs)) for i, e in enumerate(ents) if e in us}
    return result if isinstance(controls, dict) else next(iter(result.values()))
