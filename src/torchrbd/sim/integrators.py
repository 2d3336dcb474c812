"""Time integrators over the states of all entities of a scene (plain tensors).

A state is a list with one ``(qpos, vel)`` pair per simulated entity (MIXED
velocities, see :mod:`torchrbd.sim.dynamics`). ``accel(states, h_implicit)``
returns the MIXED accelerations of all entities (the contact stage couples
them). Both integrators work in MuJoCo's coordinates (base angular velocity in
body axes, positions advanced by ``mj_integratePos``), so that they reproduce
MuJoCo's ``Euler`` and ``RK4`` step for step.
"""

from __future__ import annotations

from typing import Callable, Sequence

from .dynamics import EntityStatics, from_chart, integrate_pos, stage_rate, to_chart

State = list  # [(qpos (B, nq), vel (B, nv)), ...]
Accel = Callable[[State, "float | None"], list]

_RK4_A = ((0.5,), (0.0, 0.5), (0.0, 0.0, 1.0))
_RK4_B = (1.0 / 6.0, 1.0 / 3.0, 1.0 / 3.0, 1.0 / 6.0)


def euler(ents: Sequence[EntityStatics], accel: Accel, state: State, h: float) -> State:
    """Semi-implicit Euler with implicit joint damping (MuJoCo ``mj_Euler``):
    ``u' = u + h a(q, u)`` with ``(M + h D) a = f - D u``, then ``q' = q (+) h u'``."""
    acc = accel(state, h)
    out = []
    for ent, (qpos, vel), a in zip(ents, state, acc):
        u = to_chart(ent, qpos, vel) + h * to_chart(ent, qpos, a)
        qpos1 = integrate_pos(ent, qpos, u, h)
        out.append((qpos1, from_chart(ent, qpos1, u)))
    return out


def rk4(ents: Sequence[EntityStatics], accel: Accel, state: State, h: float) -> State:
    """Classic RK4 on the configuration manifold, as MuJoCo's ``mj_RungeKutta``
    (a Runge-Kutta-Munthe-Kaas scheme): stage ``i`` sits at
    ``q0 (+) h sum_j A_ij k_j`` with velocity ``u0 + h sum_j A_ij a_j``; the step ends
    at ``q0 (+) h sum_j B_j k_j``, ``u0 + h sum_j B_j a_j``. ``k_j`` is the stage
    velocity ``u_j``, with the base angular part mapped through ``dexp^-1`` of the
    stage's rotation offset (:func:`~torchrbd.sim.dynamics.stage_rate`)."""
    q0 = [qpos for qpos, _ in state]
    u0 = [to_chart(e, qpos, vel) for e, (qpos, vel) in zip(ents, state)]
    ks, accs = [u0], [[to_chart(e, qp, a) for e, qp, a in zip(ents, q0, accel(state, None))]]
    for row in _RK4_A:
        stage, rates = [], []
        for k, ent in enumerate(ents):
            du = sum(c * ks[j][k] for j, c in enumerate(row) if c)
            da = sum(c * accs[j][k] for j, c in enumerate(row) if c)
            qpos = integrate_pos(ent, q0[k], du, h)
            u = u0[k] + h * da
            rates.append(stage_rate(ent, du, u, h))
            stage.append((qpos, from_chart(ent, qpos, u)))
        a_stage = accel(stage, None)
        ks.append(rates)
        accs.append([to_chart(e, qp, a) for e, (qp, _), a in zip(ents, stage, a_stage)])
    out = []
    for k, ent in enumerate(ents):
        du = sum(b * ks[j][k] for j, b in enumerate(_RK4_B))
        da = sum(b * accs[j][k] for j, b in enumerate(_RK4_B))
        qpos1 = integrate_pos(ent, q0[k], du, h)
        out.append((qpos1, from_chart(ent, qpos1, u0[k] + h * da)))
    return out


INTEGRATORS = {"Euler": euler, "RK4": rk4}
