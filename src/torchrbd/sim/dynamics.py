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

The stage pipeline: :func:`stage_kinematics` (one forward kinematics per entity
and stage, shared with the contact stage), then in :func:`acceleration`:

    mass matrix + bias (CRBA, RNEA on those kinematics)  ->  control forces (PD /
    force, clamped to the force range)  ->  passive joint forces (spring, damping)
    ->  contact forces and their implicit damping (a :class:`ContactLoad` from the
    scene's contact stage)  ->  Cholesky solve (dense, or tree-sparse for large
    float32 batches: :func:`solve`)  ->  joint-limit constraint.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import algorithms as alg
from ..algorithms import tree_cholesky as tc_
from ..spatial import quat_multiply, quat_to_matrix
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


@dataclass(frozen=True)
class StageKinematics:
    """Forward kinematics of one entity at one integrator stage, computed once and
    shared by the contact stage and :func:`acceleration`.

    Batch-first: ``R0 (B, 3, 3)``, ``p0 (B, 3)``, ``quat (B, 4)`` the base pose,
    ``q``/``qd (B, n)`` the joint block. Batch-last (the layout of
    :mod:`torchrbd.algorithms`): ``kin`` with the base placed at the origin (positions
    relative to ``p0``, twists about ``p0``, world axes), ``nu (6, B)`` the MIXED base
    velocity (0 for a fixed base), ``qd_bl (n, B)``; ``S (n, 6, B)`` the joint twists
    per coordinate (``kin.S_dof``, see :func:`~torchrbd.algorithms.dof_subspaces`).
    """

    model: object  # torchrbd Model of the entity (its kd's)
    R0: torch.Tensor
    p0: torch.Tensor
    quat: torch.Tensor
    q: torch.Tensor
    qd: torch.Tensor
    kin: alg.Kinematics
    nu: torch.Tensor
    qd_bl: torch.Tensor
    S: torch.Tensor

    @property
    def n(self) -> int:
        return self.S.shape[0]

    def body_twists(self) -> torch.Tensor:
        """(nb, 6, B) twist ``[v; w]`` of every body about ``p0`` (world axes)."""
        return alg.body_velocities(self.model, self.kin, self.nu, self.qd_bl)[0]


def _kinematics(model, R0, p0, quat_cur, q, qd, nu) -> StageKinematics:
    """:class:`StageKinematics` of a base pose ``R0 (B, 3, 3), p0 (B, 3)``, joint state
    ``q, qd (B, n)`` and MIXED base velocity ``nu (B, 6)`` (None: fixed base)."""
    R_bl = R0.permute(1, 2, 0).contiguous()
    kin = alg.forward(model, R_bl, torch.zeros_like(R_bl[0]), q.T.contiguous())
    nu_bl = torch.zeros_like(R_bl[:2].reshape(6, -1)) if nu is None else nu.T.contiguous()
    return StageKinematics(model, R0, p0, quat_cur, q, qd, kin, nu_bl, qd.T.contiguous(), alg.dof_subspaces(model, kin))


def stage_kinematics(ent: EntityStatics, ctrl: EntityControl, qpos, vel) -> StageKinematics:
    """The :class:`StageKinematics` of one entity at state ``(qpos (B, nq), vel (B, nv))``."""
    R0, p0, quat_cur = base_pose(ent, qpos, ctrl.base_pose)
    nu = vel[:, :6] if ent.floating else None
    return _kinematics(ent.kd.model, R0, p0, quat_cur, joints(ent, qpos), joints(ent, vel), nu)


@dataclass(frozen=True)
class ContactLoad:
    """The contact forces on one entity and their implicit damping, in body-level form
    (batch-last, about the base origin ``p0``, world axes; see
    :mod:`torchrbd.sim.contact_stage`).

    ``base (6, B)``: the total contact wrench ``[f; r x f]``; ``joint (n, B)``: the
    joint forces ``S_j . W_j`` with ``W_j`` the wrench on the subtree moved by ``j``.
    Damping (None unless the Euler step asked for it): ``damping_base (6, 6, B)`` the
    sum of the contacts' 6x6 damping matrices ``Lambda`` (see the contact stage) and
    ``damping_rows (n, 6, B)`` ``Lambda_j S_j`` with ``Lambda_j`` the sum over the
    subtree moved by ``j``; with the joint twists ``S (n, 6, B)`` and
    ``joint_support (n, n)`` (1 where coordinate a moves the body of coordinate b) they
    make ``J^T D J`` as the CRBA makes M from composite inertias.
    """

    floating: bool
    S: torch.Tensor
    joint_support: torch.Tensor
    base: torch.Tensor
    joint: torch.Tensor
    damping_base: torch.Tensor | None = None
    damping_rows: torch.Tensor | None = None

    @property
    def generalized(self) -> torch.Tensor:
        """(B, nv) generalized contact force ``sum J^T f``."""
        return (torch.cat([self.base, self.joint], 0) if self.floating else self.joint).T

    @property
    def damping(self) -> torch.Tensor | None:
        """(B, nv, nv) ``J^T D J`` (``-d generalized / d vel`` without friction), or None."""
        if self.damping_rows is None:
            return None
        F = self.damping_rows.permute(2, 1, 0)  # (B, 6, n)
        P = torch.bmm(self.S.permute(2, 0, 1), F)  # P[a, b] = S_a . Lambda_b S_b
        sup = self.joint_support
        joint = torch.where(sup.bool(), P, P.transpose(1, 2) * sup.T)
        if not self.floating:
            return joint
        top = torch.cat([self.damping_base.permute(2, 0, 1), F], 2)
        return torch.cat([top, torch.cat([F.transpose(1, 2), joint], 2)], 1)


def crba_and_bias(sk: StageKinematics, floating: bool, damping=None):
    """The CRBA's pieces of M, batch-last in the internal coordinates (see
    :func:`~torchrbd.algorithms.mass_matrix_top`: ``Mbb (6, 6, B)``, ``F (n, 6, B)``,
    ``S (n, 6, B)``; armature not included), and the bias h = C nu + g (B, nv) in the
    simulator's velocity layout, from the kinematics ``sk``.

    ``damping``: ``(h, load)`` adds ``h J^T D J`` of a :class:`ContactLoad` to M, folded
    into the CRBA's base block and coupling rows (no separate nv x nv matrix).
    """
    model, kin = sk.model, sk.kin
    inertia = alg.world_inertias(model, kin)
    Mbb, F, S = alg.mass_matrix_top(model, kin, inertia)
    if damping is not None:
        h, load = damping
        Mbb = Mbb + h * load.damping_base if floating else Mbb
        F = F + h * load.damping_rows
    v, w = sk.nu[:3], sk.nu[3:]
    g = model.gravity[:, None]
    A0 = torch.cat([torch.linalg.cross(v, w, dim=0) - g, torch.zeros_like(w)], 0)  # MIXED: Tdot nu - [g; 0]
    bias = alg.rnea_mixed(model, kin, inertia, sk.nu, A0, sk.qd_bl, None).T
    return Mbb, F, S, (bias if floating else bias[:, 6:])


def mass_matrix_and_bias(sk: StageKinematics, floating: bool, damping=None):
    """Mass matrix M (B, nv, nv) (armature included, batch-first contiguous) and bias
    h (B, nv) of :func:`crba_and_bias` (the dense M for users and tests; the step
    itself solves with the tree-sparse factorisation and never assembles it)."""
    Mbb, F, S, bias = crba_and_bias(sk, floating, damping)
    return _dense_mass_matrix(sk.model, floating, Mbb, F, S), bias


def _dense_mass_matrix(model, floating: bool, Mbb, F, S) -> torch.Tensor:
    """M (B, nv, nv), batch-first and contiguous, from the CRBA's pieces (armature included)."""
    M = alg.assemble(model, Mbb, F, S)
    return M if floating else M[:, 6:, 6:].contiguous()


def mass_and_bias(kd, R, p, q, nu, qd, floating: bool):
    """:func:`mass_matrix_and_bias` of ``kd`` (a MIXED-representation
    :class:`~torchrbd.KinDynComputations`) at base pose ``R (B, 3, 3), p (B, 3)``,
    joints ``q, qd (B, n)`` and base velocity ``nu (B, 6)`` (ignored for a fixed base)."""
    sk = _kinematics(kd.model, R, p, None, q, qd, nu if floating else None)
    return mass_matrix_and_bias(sk, floating)


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


class _DenseFactor:
    """M assembled batch-first (B, nv, nv) and LAPACK's Cholesky ``M = U^T U`` (the
    upper factor is what LAPACK computes from row-major M without a copy): few
    operators, the choice for small batches."""

    def __init__(self, ent: EntityStatics, Mbb, F, S, diagonal):
        M = _dense_mass_matrix(ent.kd.model, ent.floating, Mbb, F, S)
        if diagonal is not None:
            M.diagonal(dim1=-2, dim2=-1).add_(diagonal)  # M is a fresh tensor of ours
        self.U = torch.linalg.cholesky_ex(M, upper=True)[0]

    def solve(self, b):
        """M^-1 b for b (B, nv)."""
        return torch.cholesky_solve(b[..., None], self.U, upper=True)[..., 0]

    def inverse_diagonal(self):
        """diag(M^-1) (B, nv)."""
        eye = torch.eye(self.U.shape[-1], dtype=self.U.dtype, device=self.U.device).expand_as(self.U)
        Uinv = torch.linalg.solve_triangular(self.U, eye, upper=True)  # M^-1 = Uinv Uinv^T
        return Uinv.square().sum(2)


class _TreeFactor:
    """M as its packed entries and the tree-sparse ``M = L^T L`` of
    :mod:`torchrbd.algorithms.tree_cholesky`, batch-last, never a dense M: fewer bytes
    and flops, more operators, the choice for large float32 batches on CPU."""

    def __init__(self, ent: EntityStatics, Mbb, F, S, diagonal):
        model = ent.kd.model
        self.plan = tc_.tree_plan(model, ent.floating)
        self.packed = tc_.packed_inertia(model, self.plan, F, S, Mbb, None if diagonal is None else diagonal.T)
        self.fac = None

    def solve(self, b):
        """M^-1 b for b (B, nv). With gradients to track and no factor at hand, through
        :func:`~torchrbd.algorithms.tree_cholesky.tree_solve` (its lean backward); else
        with the factor, made once and kept (the joint limits may need it again)."""
        b = b.T.contiguous()
        if self.fac is None:
            if torch.is_grad_enabled() and (self.packed.requires_grad or b.requires_grad):
                return tc_.tree_solve(self.plan, self.packed, b).T
            self.fac = tc_.factor(self.plan, self.packed)
        return tc_.solve_factored(self.plan, self.fac, b[:, None])[:, 0].T

    def inverse_diagonal(self):
        """diag(M^-1) (B, nv), differentiable in M (the factor is made in the graph)."""
        if self.fac is None:
            self.fac = tc_.factor(self.plan, self.packed)
        return tc_.inverse_diagonal(self.plan, self.fac).T


def compacts(x: torch.Tensor) -> bool:
    """Whether a step skips, for tensors like ``x``, the work it finds to be zero from
    their values: the joint-limit correction when no joint is past a limit, the contacts
    (and joints) that cannot push. On the CPU, where the skipped work is saved. Elsewhere
    it is done (it gives exact zeros): finding it would read the device's values back
    to the host, a synchronisation in every step."""
    return x.device.type == "cpu"


def limit_correction(ent: EntityStatics, factor, acc, q, qd) -> torch.Tensor | None:
    """One-sided soft joint-limit constraint (MuJoCo ``solref`` style, diagonal).

    For a joint past a limit by ``r > 0`` it asks for the reference acceleration
    ``a_ref = -b qd -/+ k r`` (``b = 2 / tc``, ``k = 1 / (tc zeta)^2``) and applies
    the force ``m_eff (a_ref - a)`` that achieves it, ``m_eff = 1 / (M^-1)_ii``,
    kept one-sided (it only pushes back into the range). ``factor`` solves with M
    (:class:`_DenseFactor` or :class:`_TreeFactor`); ``acc`` (B, nv). Returns the extra
    generalized acceleration ``M^-1 f`` (B, nv), or None on the CPU when no joint
    of any environment is past a limit (the force is then 0).
    """
    r_up = torch.where(ent.has_upper, q - ent.upper, -1.0)  # > 0 past the upper limit
    r_lo = torch.where(ent.has_lower, ent.lower - q, -1.0)  # > 0 past the lower limit
    past_up, past_lo = r_up > 0, r_lo > 0
    if compacts(past_up) and not bool((past_up | past_lo).any()):
        return None
    tc, zeta = ent.limit_timeconst, ent.limit_dampratio
    b, k = 2.0 / tc, 1.0 / (tc * zeta) ** 2
    off = 6 if ent.floating else 0
    a = acc[:, off:]
    m_eff = 1.0 / factor.inverse_diagonal()[:, off:]
    f_up = torch.clamp(m_eff * (-k * r_up - b * qd - a), max=0.0)
    f_lo = torch.clamp(m_eff * (k * r_lo - b * qd - a), min=0.0)
    f = torch.where(past_up, f_up, 0.0) + torch.where(past_lo, f_lo, 0.0)
    return factor.solve(torch.nn.functional.pad(f, (off, 0)))


def solve(ent: EntityStatics, Mbb, F, S, diagonal, rhs, q, qd) -> torch.Tensor:
    """``M^-1 rhs`` (B, nv) plus the joint-limit correction, with M given by the
    CRBA's pieces of :func:`crba_and_bias` (plus the model's armature) and ``diagonal``
    (B, nv) (or None: the implicit damping) added to its diagonal. M is symmetric positive definite; a
    pivot that is not (a diverged environment) gives NaN there, not an error."""
    tree = tc_.pays_off(rhs.shape[0], rhs.dtype, rhs.device)
    factor = (_TreeFactor if tree else _DenseFactor)(ent, Mbb, F, S, diagonal)
    acc = factor.solve(rhs)
    correction = limit_correction(ent, factor, acc, q, qd) if ent.limited else None
    return acc if correction is None else acc + correction


# ----------------------------------------------------------------- stage
def acceleration(ent: EntityStatics, ctrl: EntityControl, qpos, vel, h_implicit: float | None = None,
                 contact: ContactLoad | None = None, kinematics: StageKinematics | None = None) -> torch.Tensor:
    """Generalized acceleration (B, nv) of one entity at state (qpos, vel).

    ``h_implicit``: the Euler step when damping is integrated implicitly (the
    solve then uses ``M + h (D + Kv + C)``, with ``Kv`` the active PD velocity gains
    and ``C = J^T D J`` the contact damping of ``contact``); None for explicit damping (RK4).
    ``contact``: the forces of the contact stage on this entity, or None.
    ``kinematics``: :func:`stage_kinematics` at this state if already computed.
    The base part is the time derivative of the MIXED base velocity.
    """
    sk = kinematics if kinematics is not None else stage_kinematics(ent, ctrl, qpos, vel)
    implicit_contact = h_implicit is not None and contact is not None and contact.damping_rows is not None
    Mbb, F, S, h = crba_and_bias(sk, ent.floating, (h_implicit, contact) if implicit_contact else None)
    off = 6 if ent.floating else 0
    tau, kv = control_force(ent, ctrl, qpos, vel, sk.quat)
    if ent.n:
        tau = tau + torch.nn.functional.pad(passive_force(ent, sk.q, sk.qd), (off, 0))
    diagonal = None
    if h_implicit is not None:
        # (M + h (D + Kv)) a = f: joint damping and PD velocity gains implicit in the Euler step
        diagonal = h_implicit * (torch.nn.functional.pad(ent.damping, (off, 0)) + kv)
    if contact is not None:
        tau = tau + contact.generalized
    return solve(ent, Mbb, F, S, diagonal, tau - h, sk.q, sk.qd)


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
