"""Featherstone's articulated-body algorithm (ABA), world frame, batch-last.

Forward dynamics in O(n) per configuration without forming the mass matrix. As in
:mod:`.rnea`, every quantity is about the reference origin O with world axes, so an
articulated inertia passes from a body to its parent with no change of frame: the
backward sweep is one level of the tree at a time, each level's results added into
its parents' rows. Per body i, with one coordinate and motion subspace ``S_i``:

* velocity terms: ``c_i = V_i x S_i qd_i`` (``S_i`` moves with the body, so
  ``d/dt (S_i qd_i) = S_i qdd_i + c_i``) and the bias wrench ``p_i = V_i x* I_i V_i``;
* backward, leaves to root: ``IA_i = I_i + sum_c Ia_c``, ``pA_i = p_i + sum_c pa_c``,
  ``U_i = IA_i S_i``, ``D_i = S_i . U_i`` (plus the armature), ``u_i = tau_i - S_i . pA_i``,
  ``Ia_i = IA_i - U_i U_i^T / D_i``, ``pa_i = pA_i + Ia_i c_i + U_i u_i / D_i``;
* base: ``a_0 = IA_0^-1 (f_0 - pA_0)`` (Gaussian elimination over the batch);
* forward, root to leaves: ``a_i = a_parent + c_i``, ``qdd_i = (u_i - U_i . a_i) / D_i``,
  ``a_i += S_i qdd_i``.

Gravity is the acceleration of the frame: the sweep runs on accelerations relative to
free fall, ``a - [g; 0]``, and adds ``[g; 0]`` back to the base's.

Each body's ``[IA_i | pA_i]`` is one (6, 7) block: since ``IA_i`` is symmetric,
``S_i^T [IA_i | pA_i] = [U_i^T, S_i . pA_i]`` comes out of one product, and one
rank-one update ``[IA_i | pA_i] - (U_i / D_i) [U_i^T, S_i . pA_i]`` leaves
``[Ia_i | pA_i - U_i (S_i . pA_i) / D_i]``, whose product with ``[c_i; 1]`` is
``pa_i - U_i tau_i / D_i``.

The articulated inertias depend on the configuration only: a sweep's
:class:`Factor` (the ``U_i / D_i``, ``D_i`` and the base's eliminated block) solves
``M x = y`` for another right-hand side with no velocity terms and no rank-one
updates (:func:`solve_again`), which is what the implicit backward of
:mod:`.forward_dynamics` needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import checkable
from ..model.model import Model
from .batchlast import plain
from .inertia import SpatialInertia, _skew_bl
from .kinematics import Kinematics, per_body
from .rnea import velocity_terms
from .topology import add_to_parents, host_topology, model_cached, topology


def _level_plan(model: Model):
    """Per level (deepest last): the rows of its bodies, the rows their results go to
    (:func:`~.topology.add_to_parents`: a slice of one parent row per body, a slice of
    the one row all go into, or an index over the global rows), and the position of
    each body's parent within the previous level (for the forward sweep).
    Plus the (n,) position of each coordinate's body in the concatenated levels (its
    position in ``Topology.unsort``'s processing order, less the base), or None when
    that is the identity."""
    def make():
        topo = topology(model)
        plan, prev = [], slice(0, 1)
        for rows, pos in zip(topo.levels, topo.level_parent_pos):
            k = _count(rows)
            if isinstance(pos, slice) and isinstance(prev, slice):
                target = slice(prev.start + pos.start, prev.start + pos.stop)
            else:
                target = _as_index(prev, model)[_as_index(pos, model, k)]
            plan.append((rows, target, pos))
            prev = rows
        body_pos = topo.body_of_dof if topo.unsort is None else topo.unsort[topo.body_of_dof]
        host = host_topology(model)  # the same positions, read on the CPU
        host_pos = host.body_of_dof if host.unsort is None else host.unsort[host.body_of_dof]
        identity = host_pos.tolist() == list(range(1, model.n + 1))
        return tuple(plan), None if identity else body_pos - 1
    return model_cached(model, "_aba_level_plan", make)


def _count(rows) -> int:
    return rows.stop - rows.start if isinstance(rows, slice) else rows.numel()


def _as_index(rows, model: Model, k: int | None = None) -> torch.Tensor:
    """A slice of rows (a length-1 slice repeated ``k`` times) as a long tensor."""
    if isinstance(rows, torch.Tensor):
        return rows
    index = torch.arange(rows.start, rows.stop, device=model.body_rot.device)
    return index.expand(k) if k is not None and index.numel() == 1 else index


def _blocks(inertia: SpatialInertia, bias: torch.Tensor) -> torch.Tensor:
    """(nb, 6, 7, B) ``[I_i | p_i]``, each entry written once."""
    m, h, J = inertia.m, inertia.h, inertia.J
    nb, B = h.shape[0], h.shape[-1]
    out = h.new_empty(nb, 6, 7, B)
    eye = torch.eye(3, dtype=h.dtype, device=h.device)
    H = _skew_bl(h)
    out[:, :3, :3] = (m[:, :, None] * eye)[..., None]
    out[:, :3, 3:6] = H.transpose(1, 2)  # -[h]x
    out[:, 3:, :3] = H
    out[:, 3:, 3:6] = J
    out[:, :, 6] = bias
    return out


def _solve_base(block: torch.Tensor, f0: torch.Tensor) -> torch.Tensor:
    """``IA_0^-1 (f_0 - pA_0)`` (6, B) from the base's block ``[IA_0 | pA_0]`` (6, 7, B)
    (overwritten: its first six columns are left as the factor that
    :func:`_solve_base_again` reuses) by Gaussian elimination over the batch: about
    forty operators on rows of length B instead of LAPACK's Cholesky and solve, one
    matrix at a time (0.38 against 0.52 ms for 1024 matrices; aba 0.90-0.95x the time).
    ``IA_0`` is symmetric positive definite, so no pivoting is needed; a pivot that is
    not positive (or NaN: a joint that moves no inertia has D = U = 0, whose NaNs reach
    IA_0) means M is not positive definite, raised as for M."""
    block[:, 6].neg_().add_(f0)
    for j in range(5):
        below = block[j + 1:, j] / block[j, j]
        block[j + 1:, j + 1:].addcmul_(below[:, None], block[j, j + 1:][None], value=-1)
    pivots = block.diagonal(0, 0, 1)
    if checkable(pivots) and not bool(pivots.gt(0).all()):
        raise torch.linalg.LinAlgError("the base's articulated inertia is not positive definite")
    return _back_substitute(block, block[:, 6])


def _back_substitute(block: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """(6, B) solution of the upper triangle of the eliminated ``block`` (6, 6+, B) for
    the eliminated right-hand side ``rhs`` (6, B)."""
    x = [None] * 6
    for j in range(5, -1, -1):
        r = rhs[j] if j == 5 else rhs[j] - (block[j, j + 1:6] * torch.stack(x[j + 1:])).sum(0)
        x[j] = r / block[j, j]
    return torch.stack(x)


def _solve_base_again(block: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """``IA_0^-1 rhs`` (6, B) with the block that :func:`_solve_base` eliminated: the
    multipliers of each step are still below its pivot, ``block[i, j] / block[j, j]``."""
    rhs = rhs.clone()
    for j in range(5):
        rhs[j + 1:].addcmul_(block[j + 1:, j] / block[j, j], rhs[j][None], value=-1)
    return _back_substitute(block, rhs)


def articulated_body(
    model: Model, kin: Kinematics, inertia: SpatialInertia, V0: torch.Tensor, qd: torch.Tensor,
    force: torch.Tensor, gravity: torch.Tensor,
) -> torch.Tensor:
    """Accelerations (6+n, B): ``[A_0; qdd]`` with ``A_0`` the base's spatial acceleration
    about O (world axes), for generalized forces ``force = [f_0; tau]`` (6+n, B) in the same
    coordinates (external wrenches already mapped in).

    ``kin``: whole-tree kinematics (:func:`~.kinematics.forward`; only ``kin.S`` is read);
    ``inertia``: the bodies' world inertias (:func:`~.inertia.world_inertias`); ``V0``
    (6, B) the base twist about O; ``qd`` (n, B); ``gravity`` (6, B) ``[g; 0]``. Every
    body but the base has one coordinate (as :func:`~torchrbd.model.builder.build_model`
    makes them: a MuJoCo body with several joints becomes a chain of bodies)."""
    return sweep(model, kin, inertia, V0, qd, force, gravity)[0]


@dataclass
class Factor:
    """What one sweep leaves for solving ``M x = y`` again (:func:`solve_again`), M the
    joint-space inertia in the sweep's coordinates: per level, deepest first, ``Ud``
    (k, 6, B) the ``U_i / D_i`` and ``D`` (k, B); ``base`` (6, 6, B) the base's eliminated
    block (see :func:`_solve_base`). The articulated inertias depend on the configuration
    only, so a new right-hand side needs no velocity terms and no rank-one updates."""

    Ud: list
    D: list
    base: torch.Tensor

    def tensors(self) -> tuple:
        """Its tensors flattened (what an autograd Function saves), ``Ud``, ``D``, ``base``."""
        return (*self.Ud, *self.D, self.base)

    @classmethod
    def from_tensors(cls, flat) -> "Factor":
        """The factor of its :meth:`tensors`."""
        k = (len(flat) - 1) // 2
        return cls(list(flat[:k]), list(flat[k:2 * k]), flat[-1])


def sweep(
    model: Model, kin: Kinematics, inertia: SpatialInertia, V0: torch.Tensor, qd: torch.Tensor,
    force: torch.Tensor, gravity: torch.Tensor,
) -> tuple[torch.Tensor, Factor, tuple]:
    """:func:`articulated_body`'s accelerations (6+n, B), its :class:`Factor` and the
    RNEA's :func:`~.rnea.velocity_terms` it used."""
    plan, dof_pos = _level_plan(model)
    terms = velocity_terms(model, kin, inertia, V0, qd)
    c = terms[2]
    blocks = _blocks(inertia, terms[4])
    f0, tau = force.split_with_sizes([6, model.n])
    tau = per_body(model, tau)
    armature = per_body(model, model.armature[:, None]) if model.has_armature else None

    factor, uDs = Factor([], [], None), []
    for rows, target, _ in reversed(plan):
        A, S = blocks[rows], kin.S[rows]
        w = (A * S[:, :, None]).sum(1)  # [U; S . pA] (k, 7, B)
        U, SpA = w.split_with_sizes([6, 1], 1)
        D = (U * S).sum(1)
        if armature is not None:
            D = D + armature[rows]
        Ud = U / D[:, None]
        A = torch.addcmul(A, Ud[:, :, None], w[:, None], value=-1)  # [Ia | pA - U (S.pA)/D]
        pa = A.select(2, 6).addcmul_(Ud, tau[rows][:, None])  # in place: A's last column becomes pa
        pa.add_((A[:, :, :6] * c[rows][:, None]).sum(2))  # + Ia c
        factor.Ud.append(Ud)
        factor.D.append(D)
        uDs.append((tau[rows] - SpA[:, 0]) / D)
        add_to_parents(blocks, target, A)

    a = _solve_base(blocks[0], f0)[None]
    factor.base = blocks[0, :, :6].clone()  # (not a view: the blocks can go)
    base = a[0] + gravity
    qdd = _forward_sweep(plan, kin.S, a, c, factor.Ud, uDs)
    return torch.cat([base, qdd if dof_pos is None else qdd[dof_pos]]), factor, terms


def _forward_sweep(plan, S, a, c, Ud, uD) -> torch.Tensor:
    """Root to leaves: ``a_i = a_parent (+ c_i)``, ``qdd_i = u_i / D_i - Ud_i . a_i``,
    ``a_i += S_i qdd_i``; (n, B) the ``qdd`` in the levels' order. ``a`` (1, 6, B) the
    base's acceleration (relative to free fall), ``c`` None when there are no velocity
    terms; ``Ud``, ``uD`` per level, deepest first."""
    qdd = []
    for (rows, _, parent), Ud_k, uD_k in zip(plan, reversed(Ud), reversed(uD)):
        a = a[parent] if c is None else a[parent] + c[rows]
        x = uD_k - (Ud_k * a).sum(1)
        a = a.addcmul(S[rows], x[:, None]) if c is None else a.addcmul_(S[rows], x[:, None])
        qdd.append(x)
    return torch.cat(qdd)


def solve_again(model: Model, S: torch.Tensor, factor: Factor, y: torch.Tensor) -> torch.Tensor:
    """``M^-1 y`` (6+n, B) for ``y`` (6+n, B), with the :class:`Factor` of a sweep at the
    same configuration (``S`` (nb, 6, B) its bodies' motion subspaces): the sweep again
    with zero velocities and gravity, whose articulated inertias are the factor's.
    Backward, leaves to root: ``u_i = y_i - S_i . pA_i``, ``pA_parent += pA_i + Ud_i u_i``;
    the base: ``a_0 = IA_0^-1 (y_0 - pA_0)``; forward as in the sweep."""
    plan, dof_pos = _level_plan(model)
    y0, yj = y.split_with_sizes([6, model.n])
    yj = per_body(model, yj)
    pA = y.new_zeros(model.nbody, 6, y.shape[-1])
    uDs = []
    for (rows, target, _), Ud, D in zip(reversed(plan), factor.Ud, factor.D):
        p = pA[rows]
        u = yj[rows] - (S[rows] * p).sum(1)
        uDs.append(u / D)
        add_to_parents(pA, target, p.addcmul(Ud, u[:, None]))
    a = _solve_base_again(factor.base, y0 - pA[0])[None]
    qdd = _forward_sweep(plan, S, a, None, factor.Ud, uDs)
    return torch.cat([a[0], qdd if dof_pos is None else qdd[dof_pos]])


def applies(model: Model, kin: Kinematics, inertia: SpatialInertia, *tensors) -> bool:
    """Whether ``aba`` runs this sweep as it is, instead of the CRBA and a Cholesky solve:
    eager, no gradient wanted from any input, pose or inertial parameter (the sweep
    updates its blocks in place; with gradients, :mod:`.forward_dynamics` runs it with
    an implicit backward, from the same batch size on), plain tensors (not
    in a ``torch.func`` transform; forward-mode tangents of ``torch.autograd.forward_ad``
    pass through its in-place updates), and a batch of at least :func:`sweep_from`
    configurations."""
    if torch.compiler.is_compiling() or tensors[0].shape[-1] < sweep_from(model):
        return False
    tensors = (*tensors, kin.R, kin.p, kin.S, inertia.m, inertia.h, inertia.J)
    if model.has_armature:
        tensors = (*tensors, model.armature)
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    return all(plain(t) for t in tensors)


def sweep_from(model: Model, gradients: bool = False) -> int:
    """The smallest batch that takes the sweep for ``model``: :data:`FROM` for a branched
    tree (at least :data:`BRANCHED` bodies per level besides the base, on average),
    :data:`CHAIN_FROM` for chains and nearly chains (:data:`CHAIN_GRADIENTS_FROM` when
    ``gradients`` are wanted). The sweep runs a fixed number of operators per level, each
    over all of the level's bodies, where the CRBA path's Cholesky solve costs the same
    per configuration whatever the tree's shape: wide levels make the sweep's operators
    pay sooner."""
    levels = len(topology(model).levels)
    if model.nbody - 1 >= BRANCHED * max(levels, 1):
        return FROM
    return CHAIN_GRADIENTS_FROM if gradients else CHAIN_FROM


FROM = 96
"""The smallest batch that takes the sweep in a branched tree. Its operator count does
not depend on the batch (about 150 more than the CRBA path's), so it only pays off once
the batch is long. In-process A/Bs against the CRBA path (float64, 2 threads, samples
interleaved), aba / aba forward+backward: iCub 0.97x / 0.93x the time at 96 configurations, 0.92x / 0.92x
at 128, 0.82x / 0.89x at 192 (1.14x / 1.10x at 64; float32 0.94x / 0.98x at 96, 0.85x
/ 0.86x at 160; one thread 0.95x / 0.93x at 96, 0.90x / 0.88x at 128); the embedded
quadruped 0.92x / 0.95x at 96, 0.92x / 0.83x at 128; solo12 0.92x / 0.89x at 96, 0.91x /
0.91x at 128; MuJoCo's humanoid 0.98x / 0.95x at 96, 0.94x / 0.92x at 128. From 256 on
the older A/Bs hold: iCub 0.85-0.89x at 256, 0.72-0.78x at 1024, 0.77x at 4096 on one
thread. Under ``torch.compile`` the tree-sparse factorisation stays (the compiled sweep
measured 1.5-2x its time: 9.8-14 against 6.5-6.9 ms on 2 threads). On CUDA the same
thresholds apply, unmeasured (``benchmarks/gpu_check.py`` checks the sweep's agreement
with the CPU)."""

CHAIN_FROM = 256
"""The smallest batch that takes the sweep in a chain (fewer than :data:`BRANCHED` bodies
per level). Chains gain little from it: the embedded 7-joint arm (one body per level)
took 1.10x / 1.03x the time at 96 configurations, 1.02x / 0.98x at 256, 1.01x / 1.02x
at 1024; Panda (1.1 bodies per level) 1.08x / 1.04x at 96, 1.01x / 0.98x at 256; TIAGo
(1.5) 0.94-1.04x from 96 to 1024."""

CHAIN_GRADIENTS_FROM = 512
""":data:`CHAIN_FROM` for ``aba`` with gradients, where both paths take the implicit
backward (:mod:`.forward_dynamics`) and the dense factor's forward stays cheaper for
longer: the sweep took (forward+backward, float64, 2 threads, interleaved) 1.08-1.09x
the time for the 7-joint arm at 256 and 384 configurations, 0.99-1.01x at 512 and 1024;
Panda 1.10x at 256, 1.04x at 384, 1.03x at 512, 0.99x at 1024. Branched trees keep
:data:`FROM` (iCub 1.02x at 96, 0.98x at 128, 0.80x at 1024)."""

BRANCHED = 2.0
"""Bodies per level (besides the base, on average) from which a tree counts as branched
for :func:`sweep_from`: iCub has 3.3, the quadrupeds 4, MuJoCo's humanoid 3."""
