"""The per-entity forward dynamics of one integrator stage, on plain tensors.

Everything here is a pure function of an :class:`EntityStatics` (model and
joint properties, fixed for the step), an :class:`EntityControl` (control
buffers, gains) and the state ``(qpos, vel)``; integrators call
:func:`acceleration` once per stage. Shapes: ``B`` environments, ``nq``/``nv``
the entity's position / velocity sizes.

Layout (the simulator's, as MuJoCo for the base):

* floating base: ``qpos = [p (3), quat wxyz (4), q (n)]``,
  ``vel = [v (3), w (3), qd (n)]`` with ``v`` the velocity of the base origin
  and ``w`` the angular velocity, both in world axes (torchrbd's MIXED
  representation), so ``d/dt p = v``.
* fixed base: ``qpos = q``, ``vel = qd``; the base pose is a separate (B, 7) tensor.

The stage pipeline, in :func:`acceleration`:

    kinematics + mass matrix + bias (CRBA, RNEA)  ->  control forces (PD / force,
    clamped to the force range)  ->  passive joint forces (spring, damping)  ->
    contact forces (given by the scene)  ->  solve  ->  joint-limit constraint.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..spatial import homogeneous, matvec, quat_multiply, quat_to_matrix
from . import quaternion as quat

FORCE, VELOCITY, POSITION = 0, 1, 2  # control modes per dof


@dataclass
class EntityStatics:
    """What the inner loop needs of one entity (plain tensors on the scene's dtype/device).

    ``kd`` (MIXED representation) carries the model and its (possibly
    grad-requiring) inertial parameters;
    ``damping``/``stiffness`` are (n,) joint properties; ``lower``/``upper`` (n,)
    the limits with infinite ones replaced by 0 and flagged off in
    ``has_lower``/``has_upper`` (bool, (n,)), so no inf enters the graph.
    ``limited`` is True when some joint has a finite limit and limits are enabled.
    """

    kd: object  # torchrbd.KinDynComputations
    floating: bool
    n: int
    damping: torch.Tensor
    stiffness: torch.Tensor
    lower: torch.Tensor
    upper: torch.Tensor
    has_lower: torch.Tensor
    has_upper: torch.Tensor
    limited: bool
    limit_timeconst: float
    limit_dampratio: float

    @property
    def nq(self) -> int:
        return self.n + (7 if self.floating else 0)

    @property
    def nv(self) -> int:
        return self.n + (6 if self.floating else 0)


@dataclass
class EntityControl:
    """Control buffers, all (B, nv): ``mode`` (long: FORCE / VELOCITY / POSITION),
    ``force``, ``pos_target`` (dof positions; base rotation as a rotation vector),
    ``vel_target``, gains ``kp``/``kv`` and the force range ``lo``/``hi``;
    ``base_pose`` (B, 7) ``[p, quat]`` of a fixed base (None when floating);
    ``has_position``: some dof is in POSITION mode (skips the error otherwise)."""

    mode: torch.Tensor
    force: torch.Tensor
    pos_target: torch.Tensor
    vel_target: torch.Tensor
    kp: torch.Tensor
    kv: torch.Tensor
    lo: torch.Tensor
    hi: torch.Tensor
    base_pose: torch.Tensor | None
    has_position: bool = True


# ----------------------------------------------------------------- pieces
def base_pose(ent: EntityStatics, qpos: torch.Tensor, fixed_pose: torch.Tensor | None):
    """World pose of the root link: R (B, 3, 3), p (B, 3), quat (B, 4); from ``qpos``
    for a floating base, else from ``fixed_pose`` (B or 1, 7)."""
    pose = qpos[:, :7] if ent.floating else fixed_pose.expand(qpos.shape[0], 7)
    p, q = pose[:, :3], pose[:, 3:7]
    return quat_to_matrix(q), p, q


def joints(ent: EntityStatics, x: torch.Tensor) -> torch.Tensor:
    """Joint block of a qpos (B, nq) or vel (B, nv)."""
    if not ent.floating:
        return x
    return x[:, 7:] if x.shape[1] == ent.nq else x[:, 6:]


def mass_and_bias(kd, R, p, q, nu, qd, floating: bool):
    """Mass matrix M (B, nv, nv) (armature included) and bias h = C nu + g (B, nv) in
    the simulator's velocity layout: ``kd`` (a MIXED-representation
    :class:`~torchrbd.KinDynComputations`) for a floating base, its joint block with
    zero base velocity for a fixed one."""
    H = homogeneous(R, p)
    if floating:
        return kd.mass_matrix_and_bias_force(H, q, nu, qd)
    zero6 = torch.zeros(q.shape[0], 6, dtype=q.dtype, device=q.device)
    M, h = kd.mass_matrix_and_bias_force(H, q, zero6, qd)
    return M[:, 6:, 6:], h[:, 6:]


def dofs_position_error(ent: EntityStatics, qpos, quat_cur, target):
    """target - position per dof (B, nv); for a floating base the rotation error is
    the world-frame rotation vector ``log(q_target q^-1)``."""
    if not ent.floating:
        return target - qpos
    q_t = quat.exp(target[:, 3:6])
    conj = quat_cur * torch.tensor([1.0, -1.0, -1.0, -1.0], dtype=quat_cur.dtype, device=quat_cur.device)
    rot_err = quat.log(quat_multiply(q_t, conj))
    return torch.cat([target[:, :3] - qpos[:, :3], rot_err, target[:, 6:] - qpos[:, 7:]], -1)


def control_force(ent: EntityStatics, ctrl: EntityControl, qpos, vel, quat_cur):
    """Genesis semantics, per dof: FORCE -> ``force``; VELOCITY -> ``kv (v* - v)``;
    POSITION -> ``kp (q* - q) + kv (v* - v)`` (``v* = 0`` unless set); then clamped
    to ``[lo, hi]``.

    Returns the forces (B, nv) and their velocity gain ``-d force / d v`` (B, nv):
    ``kv`` for PD dofs inside the force range, 0 otherwise (the Euler step treats
    it implicitly, like joint damping).
    """
    pd = ctrl.kv * (ctrl.vel_target - vel)
    tau = torch.where(ctrl.mode == FORCE, ctrl.force, pd)
    if ctrl.has_position:
        tau = tau + torch.where(
            ctrl.mode == POSITION, ctrl.kp * dofs_position_error(ent, qpos, quat_cur, ctrl.pos_target), 0.0
        )
    inside = (ctrl.mode != FORCE) & (tau > ctrl.lo) & (tau < ctrl.hi)
    return torch.clamp(tau, ctrl.lo, ctrl.hi), torch.where(inside, ctrl.kv, 0.0)


def passive_force(ent: EntityStatics, q, qd) -> torch.Tensor:
    """Joint springs towards 0 and viscous damping, (B, n)."""
    return -ent.stiffness * q - ent.damping * qd


def limit_correction(ent: EntityStatics, Minv, acc, q, qd) -> torch.Tensor:
    """One-sided soft joint-limit constraint (MuJoCo ``solref`` style, diagonal).

    For a joint past a limit by ``r > 0`` it asks for the reference acceleration
    ``a_ref = -b qd -/+ k r`` (``b = 2 / tc``, ``k = 1 / (tc zeta)^2``) and applies
    the force ``m_eff (a_ref - a)`` that achieves it, ``m_eff = 1 / (M^-1)_ii``,
    kept one-sided (it only pushes back into the range). Returns the extra
    generalized acceleration ``M^-1 f`` (B, nv).
    """
    tc, zeta = ent.limit_timeconst, ent.limit_dampratio
    b, k = 2.0 / tc, 1.0 / (tc * zeta) ** 2
    off = 6 if ent.floating else 0
    a = acc[:, off:]
    m_eff = 1.0 / torch.diagonal(Minv, dim1=-2, dim2=-1)[:, off:]
    r_up = torch.where(ent.has_upper, q - ent.upper, -1.0)  # > 0 past the upper limit
    r_lo = torch.where(ent.has_lower, ent.lower - q, -1.0)  # > 0 past the lower limit
    f_up = torch.clamp(m_eff * (-k * r_up - b * qd - a), max=0.0)
    f_lo = torch.clamp(m_eff * (k * r_lo - b * qd - a), min=0.0)
    f = torch.where(r_up > 0, f_up, 0.0) + torch.where(r_lo > 0, f_lo, 0.0)
    f = torch.nn.functional.pad(f, (off, 0))
    return matvec(Minv, f)


# ----------------------------------------------------------------- stage
def acceleration(ent: EntityStatics, ctrl: EntityControl, qpos, vel, h_implicit: float | None = None,
                 extra_force: torch.Tensor | None = None,
                 extra_damping: torch.Tensor | None = None) -> torch.Tensor:
    """Generalized acceleration (B, nv) of one entity at state (qpos, vel).

    ``h_implicit``: the Euler step when damping is integrated implicitly (the
    solve then uses ``M + h (D + Kv + C)``, with ``Kv`` the active PD velocity gains
    and ``C = extra_damping``); None for explicit damping (RK4).
    ``extra_force``: (B, nv) generalized forces from the contact stage, or None.
    ``extra_damping``: (B, nv, nv) ``-d extra_force / d vel`` (the contact stage's
    ``J^T D J``), or None; used only when ``h_implicit`` is given.
    The base part is the time derivative of the MIXED base velocity.
    """
    R, p, quat_cur = base_pose(ent, qpos, ctrl.base_pose)
    q, qd = joints(ent, qpos), joints(ent, vel)
    nu = vel[:, :6] if ent.floating else None
    M, h = mass_and_bias(ent.kd, R, p, q, nu, qd, ent.floating)
    off = 6 if ent.floating else 0
    tau, kv = control_force(ent, ctrl, qpos, vel, quat_cur)
    if ent.n:
        tau = tau + torch.nn.functional.pad(passive_force(ent, q, qd), (off, 0))
    if h_implicit is not None:
        # (M + h (D + Kv)) a = f: joint damping and PD velocity gains implicit in the Euler step
        damping = torch.nn.functional.pad(ent.damping, (off, 0)) + kv
        M = M + torch.diag_embed(h_implicit * damping)
        if extra_damping is not None:
            M = M + h_implicit * extra_damping
    if extra_force is not None:
        tau = tau + extra_force
    if not ent.limited:
        return torch.linalg.solve(M, tau - h)
    Minv = torch.linalg.inv(M)
    acc = matvec(Minv, tau - h)
    return acc + limit_correction(ent, Minv, acc, q, qd)


# ----------------------------------------------------------------- charts
def to_chart(ent: EntityStatics, qpos, x):
    """MIXED velocity or acceleration (B, nv) -> MuJoCo coordinates (base angular part
    in body axes). ``d/dt (R^T w) = R^T dw/dt`` since ``w x w = 0``, so the same map
    serves both."""
    if not ent.floating:
        return x
    w_local = quat.rotate_inv(qpos[:, 3:7], x[:, 3:6])
    return torch.cat([x[:, :3], w_local, x[:, 6:]], -1)


def from_chart(ent: EntityStatics, qpos, u):
    """Inverse of :func:`to_chart` at configuration ``qpos``."""
    if not ent.floating:
        return u
    return torch.cat([u[:, :3], quat.rotate(qpos[:, 3:7], u[:, 3:6]), u[:, 6:]], -1)


def stage_rate(ent: EntityStatics, du, u, h: float):
    """The rate of the stage offset ``h du`` for a stage with chart velocity ``u``
    (RKMK): the base angular part is corrected by ``dexp^-1(h du_w, u_w)``, as
    MuJoCo's RK4 does for quaternion joints; other entries are ``u``."""
    if not ent.floating:
        return u
    w = quat.dexp_inv(h * du[:, 3:6], u[:, 3:6])
    return torch.cat([u[:, :3], w, u[:, 6:]], -1)


def integrate_pos(ent: EntityStatics, qpos, u, h: float):
    """MuJoCo's ``mj_integratePos``: ``qpos (+) h u`` with ``u`` in chart coordinates
    (base position along the world velocity, quaternion by the body-axes angular
    velocity, joints linearly)."""
    if not ent.floating:
        return qpos + h * u
    pos = qpos[:, :3] + h * u[:, :3]
    rot = quat.integrate(qpos[:, 3:7], u[:, 3:6], h)
    return torch.cat([pos, rot, qpos[:, 7:] + h * u[:, 6:]], -1)
