"""Recursive Newton-Euler inverse dynamics in the world frame (batch-last).

World-origin twists add up along the tree, so the forward pass is a masked sum
over each body's support and the backward pass a masked sum over its subtree:
``V_i = V_0 + sum_j S_j qd_j``, ``A_i = A_0 + sum_j (S_j qdd_j + V_j x S_j qd_j)``,
``f_i = I_i A_i + V_i x* I_i V_i``, ``F_i = sum_{k in subtree(i)} f_k``.
"""

from __future__ import annotations

import torch

from ..inference import tensor_cache
from .batchlast import (
    DENSE_BELOW, cross, cross_add_, cross_sum, dense_products, dense_t_times, dense_times, halves, has_tangent,
    pair, plain, with_rules, writes_into_buffers,
)
from .inertia import SpatialInertia, subtree_moments
from .kinematics import Kinematics, dof_subspaces, per_body
from .topology import model_cached, topology
from .tree_sums import subtree_sums, support_sums


def motion_cross(V, m):
    """``V x m = [w x m_l + v x m_a; w x m_a]`` for twists (k, 6, B)."""
    (v, w), (_, ma) = halves(V), halves(m)
    return _plus_half(cross(w[:, None], pair(m)), 0, v, ma)


def force_cross(V, f):
    """``V x* f = [w x f_l; w x f_a + v x f_l]`` for a twist and a wrench (k, 6, B)."""
    (v, w), (fl, _) = halves(V), halves(f)
    return _plus_half(cross(w[:, None], pair(f)), 1, v, fl)


def _plus_half(pairs, half: int, a, b):
    """(k, 2, 3, B) ``pairs`` with ``a x b`` added to one half, as (k, 6, B) 6-vectors.
    Without gradients, added in place into the fresh product (eager long batches: by
    multiply-adds, :func:`~.batchlast.cross_add_`, no product made first); with them
    (eager), unbound and concatenated, whose backward is one split."""
    if with_rules(pairs, a, b):
        parts = list(pairs.unbind(1))
        parts[half] = parts[half] + cross(a, b)
        return torch.cat(parts, 1)
    if pairs.shape[-1] >= DENSE_BELOW and pairs.shape[1:] == (2, 3, a.shape[-1]) and writes_into_buffers(pairs, a, b):
        cross_add_(pairs.select(1, half), a, b)
    else:
        pairs.select(1, half).add_(cross(a, b))
    return pairs.view(pairs.shape[0], 6, *pairs.shape[3:])


def gravity_twist(model) -> torch.Tensor:
    """(6, 1) gravity as a spatial acceleration ``[g; 0]``. Cached on the model unless
    the gravity needs a gradient (:func:`~.topology.model_cached`)."""
    def make():
        g = model.gravity
        return torch.cat([g, torch.zeros_like(g)])[:, None]
    return model_cached(model, "_gravity_twist", make, depends_on=(model.gravity,))


def generalized_gravity(model, kin: Kinematics) -> torch.Tensor:
    """(6+n, B) the generalized gravity force G(q) from whole-tree kinematics (:func:`~.kinematics.forward`):
    base rows the wrench about O (world axes), then the joints. At rest every body's
    spatial acceleration is ``[a; 0]``, ``a = -g``, so body i needs the wrench ``[m_i a;
    h_i x a]`` (``h_i = m_i c_i``, its world first moment about O), and coordinate k
    carries their sum over its subtree, ``[M_k a; H_k x a]``, projected on its motion
    subspace: one subtree sum of the first moments, where the Newton-Euler pass with
    zero velocities also makes twists, accelerations and the bodies' rotational inertias."""
    a = -gravity_twist(model)[:3]  # (3, 1)
    M, H = subtree_moments(model, kin)  # (1+n,), (1+n, 3, B): the robot, then the subtrees
    W = torch.cat([(M[:, None] * a.t())[..., None].expand(H.shape), cross(H, a[None])], 1)  # (1+n, 6, B)
    return torch.cat([W[0], (dof_subspaces(model, kin) * W[1:]).sum(1)])


def body_velocities(model, kin: Kinematics, V0, qd):
    """(nb, 6, B) twist of every body and (nb, 6, B) the joint twists ``S qd``."""
    return _twists(model, kin.S, V0, qd)


def _twists(model, S, V0, qd):
    """:func:`body_velocities` from the bodies' motion subspaces ``S`` (nb, 6, B)."""
    Sqd = S * per_body(model, qd)[:, None]
    return support_sums(model, Sqd, add=V0), Sqd


@tensor_cache(8)
def _cross_entries(device: str) -> torch.Tensor:
    """(36,) where each entry of ``V x`` sits in the values ``(0, v, w, -v, -w)`` of
    :func:`motion_cross_matrices` (row-major; ``[a]x = [[0, -a_z, a_y], [a_z, 0, -a_x],
    [-a_y, a_x, 0]]``)."""
    (vx, vy, vz), (wx, wy, wz), (nvx, nvy, nvz), (nwx, nwy, nwz) = (1, 2, 3), (4, 5, 6), (7, 8, 9), (10, 11, 12)
    rows = [
        [0, nwz, wy, 0, nvz, vy],
        [wz, 0, nwx, vz, 0, nvx],
        [nwy, wx, 0, nvy, vx, 0],
        [0, 0, 0, 0, nwz, wy],
        [0, 0, 0, wz, 0, nwx],
        [0, 0, 0, nwy, wx, 0],
    ]
    return torch.tensor(rows, device=device).flatten()


def rnea_mixed(model, kin: Kinematics, inertia: SpatialInertia, V0, A0, qd, qdd, body_wrenches=None):
    """Generalized forces (6+n, B) for the base twist about O (world axes), from the
    whole-tree kinematics ``kin`` of :func:`~.kinematics.forward`.

    ``V0``/``A0`` (6, B): base twist and spatial acceleration about the world
    origin (gravity included in A0 as ``-[g; 0]``). ``qd``/``qdd`` (n, B); ``qdd=None``
    for zero joint accelerations (the bias forces).
    ``body_wrenches`` (nb, 6, B): external wrenches about O acting
    on each body (world axes). Returns ``[F_base; tau]``.
    Eager with gradients: through :class:`_RNEA`, whose backward is the adjoint sweep.
    """
    inputs = (kin.S, inertia.m, inertia.h, inertia.J, V0, A0, qd, qdd, body_wrenches)
    given = [t for t in inputs if t is not None]
    if with_rules(*given) and all(plain(t) for t in given) and not has_tangent(*given):
        return _RNEA.apply(model, *inputs)
    # the inertia itself, with the dense matrices a short batch's CRBA may have kept on it
    return _forward_sweeps(model, kin.S, inertia, V0, A0, qd, qdd, body_wrenches)[0]


def _forward_sweeps(model, S, inertia: SpatialInertia, V0, A0, qd, qdd, body_wrenches, velocity=None, forces=True):
    """``[F_base; tau]`` (6+n, B) and what the backward needs: the bodies' joint
    twists ``Sqd``, twists ``V``, accelerations ``A``, momenta ``I V`` and subtree
    wrenches ``F`` (nb, 6, B; ``F[0]`` the total). ``S`` (nb, 6, B) the bodies' motion
    subspaces; ``velocity``: the :func:`velocity_terms` of these inputs when they are
    already known; ``forces`` False: the terms alone (no generalized forces)."""
    V, Sqd, dA, IV, VxIV = velocity or _velocity_terms(model, S, inertia, V0, qd)
    if qdd is not None:
        dA = torch.addcmul(dA, S, per_body(model, qdd)[:, None])
    A = support_sums(model, dA, add=A0)
    # I A + V x* I V: added into V x* I V where it is this call's own
    f = inertia.apply(A, add_to=VxIV) if velocity is None else inertia.apply(A) + VxIV
    if body_wrenches is not None:
        f = f - body_wrenches
    F = subtree_sums(model, f, in_place=True)  # f is this call's own
    if not forces:
        return None, (Sqd, V, A, IV, F)
    tau = (S * F).sum(1).index_select(0, topology(model).body_of_dof)  # S_a . F_a at each coordinate's body
    return torch.cat([F[0], tau], 0), (Sqd, V, A, IV, F)


def velocity_terms(model, kin: Kinematics, inertia: SpatialInertia, V0, qd):
    """The terms of the RNEA that depend on positions and velocities only (nb, 6, B):
    the twists ``V``, the joint twists ``Sqd``, ``V x Sqd`` (the acceleration each joint
    adds at zero ``qdd``), the momenta ``I V`` and ``V x* I V``."""
    return _velocity_terms(model, kin.S, inertia, V0, qd)


def _velocity_terms(model, S, inertia: SpatialInertia, V0, qd):
    V, Sqd = _twists(model, S, V0, qd)
    IV = inertia.apply(V)
    if dense_products(V, IV):  # a short batch: V x as (nb, 6, 6, B) matrices (V x* = -(V x)^T)
        X = motion_cross_matrices(V)
        return V, Sqd, dense_times(X, Sqd), IV, dense_t_times(X, IV).neg()
    return V, Sqd, motion_cross(V, Sqd), IV, force_cross(V, IV)


def motion_cross_matrices(V):
    """(k, 6, 6, B) the matrices of ``V x`` for twists V (k, 6, B): ``[[w x, v x], [0, w x]]``,
    one gather from ``(0, V, -V)``."""
    k, B = V.shape[0], V.shape[-1]
    values = torch.cat([V.new_zeros(k, 1, B), V, V.neg()], 1)  # (k, 13, B)
    return values.index_select(1, _cross_entries(str(V.device))).view(k, 6, 6, B)


def rnea_from_terms(model, S, inertia: SpatialInertia, V0, A0, qd, qdd, velocity):
    """:func:`rnea_mixed` without body wrenches (and without its backward rule), given the
    :func:`velocity_terms` ``velocity`` of these inputs; ``S`` (nb, 6, B) the bodies'
    motion subspaces."""
    return _forward_sweeps(model, S, inertia, V0, A0, qd, qdd, None, velocity)[0]


def rnea_terms(model, S, m, h, J, V0, A0, qd, qdd, velocity):
    """What :func:`rnea_adjoint` needs of the RNEA at these inputs (``S`` (nb, 6, B) the
    bodies' motion subspaces, the others as for :func:`rnea_mixed`), given their
    :func:`velocity_terms` ``velocity``: the forward sweeps but the last product."""
    return _forward_sweeps(model, S, SpatialInertia(m, h, J), V0, A0, qd, qdd, None, velocity, forces=False)[1]


class _RNEA(torch.autograd.Function):
    """:func:`rnea_mixed` with its adjoint sweep as the backward. With ``Fbar`` the
    cotangents of the subtree wrenches (``g_base`` for the total, ``g_a S_a`` for
    coordinate a), the adjoint runs the forward's sums the other way (ancestor sums
    become subtree sums and back) and transposes each product:

        fbar_i = sum of Fbar over the subtrees that contain body i
        Abar = I^T fbar,   u = V x fbar,   Vbar = -(fbar x* I V) - I^T u
        hbar = A_l x fbar_a - A_a x fbar_l - (V_l x u_a - V_a x u_l)
        Jbar = fbar_a A_a^T - u_a V_a^T,   mbar = fbar_l . A_l - u_l . V_l
        dAbar = sum over the body's subtree of Abar
        Vbar += Sqd x* dAbar,   Sqdbar = -(V x* dAbar) + (subtree sum of Vbar)

    (``(a x)^T = -(a x*)`` throughout; ``I^T`` has J transposed, so the backward is
    exact for any J). Against autograd through the forward's operators: iCub's bias
    force forward+backward 0.86-0.89x the time, aba's 0.88-0.94x (B = 1024, see
    BENCHMARKS.md). The backward is differentiable: with ``create_graph`` it
    recomputes the forward sweeps inside the graph."""

    @staticmethod
    def forward(ctx, model, S, m, h, J, V0, A0, qd, qdd, body_wrenches):
        tau, terms = _forward_sweeps(model, S, SpatialInertia(m, h, J), V0, A0, qd, qdd, body_wrenches)
        ctx.model = model
        ctx.save_for_backward(S, m, h, J, V0, A0, qd, qdd, body_wrenches, *terms)
        return tau

    @staticmethod
    def backward(ctx, g):
        model = ctx.model
        S, m, h, J, V0, A0, qd, qdd, wrenches, *terms = ctx.saved_tensors
        if torch.is_grad_enabled():  # double backward: the sweeps' values as functions of the inputs
            terms = _forward_sweeps(model, S, SpatialInertia(m, h, J), V0, A0, qd, qdd, wrenches)[1]
        names = ("S", "m", "h", "J", "V0", "A0", "qd", "qdd", "w")
        need = {name for name, wanted in zip(names, ctx.needs_input_grad[1:]) if wanted}
        grads = rnea_adjoint(model, S, m, h, J, V0, A0, qd, qdd, terms, g, need)
        return None, *(grads.get(name) for name in names)


def rnea_adjoint(model, S, m, h, J, V0, A0, qd, qdd, terms, g, need) -> dict:
    """The vector-Jacobian product of :func:`rnea_mixed` for the cotangent ``g``
    (6+n, B) (the adjoint sweep of :class:`_RNEA`), from the forward's ``terms``
    (:func:`rnea_terms`): the gradients named in ``need`` among ``S``, ``m``, ``h``,
    ``J``, ``V0``, ``A0``, ``qd``, ``qdd`` and ``w`` (the body wrenches), by name."""
    Sqd, V, A, IV, F = terms
    transposed = SpatialInertia(m, h, J.transpose(1, 2))  # I^T (I as given: exact for any J)
    g0, gj = g.split_with_sizes([6, model.n])
    g_b = per_body(model, gj)[:, None]  # (nb, 1, B) each body's joint's cotangent, 0 for the base
    fbar = support_sums(model, g_b * S, add=g0)  # the subtrees holding body i: its support's joints
    u = motion_cross(V, fbar)
    Abar = transposed.apply(fbar)
    minus_Vbar = force_cross(fbar, IV) + transposed.apply(u)
    grads = {}
    if "A0" in need:  # (before the subtree sums overwrite Abar)
        grads["A0"] = Abar.sum(0).sum_to_size(A0.shape)
    dAbar = subtree_sums(model, Abar, in_place=True)
    Vbar = force_cross(Sqd, dAbar) - minus_Vbar
    if "V0" in need:  # (before the subtree sums overwrite Vbar)
        grads["V0"] = Vbar.sum(0).sum_to_size(V0.shape)
    Sqdbar = subtree_sums(model, Vbar, in_place=True) - force_cross(V, dAbar)
    qd_b = per_body(model, qd)
    if "S" in need:  # through the twists, the accelerations and tau = S . F
        grads["S"] = torch.addcmul(Sqdbar * qd_b[:, None], g_b, F)
        if qdd is not None:
            grads["S"] = torch.addcmul(grads["S"], dAbar, per_body(model, qdd)[:, None])
    if need & {"m", "h", "J"}:  # <fbar, I A> - <u, I V> as a function of (m, h, J)
        (fl, fa), (ul, ua), (Al, Aa), (Vl, Va) = (halves(x) for x in (fbar, u, A, V))
        if "m" in need:
            grads["m"] = ((fl * Al).sum(1) - (ul * Vl).sum(1)).sum_to_size(m.shape)
        if "h" in need:
            grads["h"] = cross_sum((Al, fa), (fl, Aa), (ua, Vl), (Va, ul)).sum_to_size(h.shape)
        if "J" in need:  # fa Aa^T - ua Va^T
            grads["J"] = (fa[:, :, None] * Aa[:, None]).addcmul_(ua[:, :, None], Va[:, None], value=-1)
            grads["J"] = grads["J"].sum_to_size(J.shape)
    body_of_dof = topology(model).body_of_dof
    if "qd" in need:
        grads["qd"] = (Sqdbar * S).sum(1).index_select(0, body_of_dof)
    if "qdd" in need:
        grads["qdd"] = (dAbar * S).sum(1).index_select(0, body_of_dof)
    if "w" in need:
        grads["w"] = -fbar
    return grads
