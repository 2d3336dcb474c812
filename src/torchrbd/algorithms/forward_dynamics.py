"""Forward dynamics in the internal coordinates: the accelerations ``a`` with
``M a + h = f`` (base twist about O, world axes), and which algorithm finds them.

* Without gradients, eager, a batch of :func:`articulated.sweep_from` or more: the
  articulated-body sweep (:mod:`.articulated`) as it is.
* With gradients (plain tensors without forward-mode tangents): :class:`_Implicit`,
  whose backward differentiates the equations of motion implicitly. Its forward is,
  eager, the sweep from :func:`articulated.sweep_from` configurations on (with
  ``gradients``: later in chains) and the CRBA, the RNEA and LAPACK's Cholesky below;
  compiled, the CRBA and the tree-sparse factorisation of M where it pays
  (:func:`~.tree_cholesky.pays_off`).
* Otherwise (short batches without gradients, ``torch.func`` transforms, forward-mode
  tangents, compiled code without gradients or with short batches): the CRBA and the
  RNEA, then ``M^-1`` by a Cholesky factorisation (:func:`solve_mass_matrix`).

The implicit backward: the accelerations solve ``R(theta, a) = RNEA(theta, a) - f = 0``
(``theta``: the motion subspaces, world inertias, base twist, joint velocities, forces
and gravity), so ``da = -M^-1 dR/dtheta dtheta``. For a cotangent ``abar`` that is one
more solve with the factor the forward left (the sweep's articulated inertias, the
dense Cholesky factor or the tree-sparse ``L``), ``y = M^-1 abar``, then the RNEA's
vector-Jacobian product at the computed accelerations with cotangent ``-y`` (its
adjoint sweep). Nothing is differentiated through the factorisation or the CRBA.
"""

from __future__ import annotations

import torch

from . import articulated, crba_solve, tree_cholesky
from .batchlast import differentiated_again, has_tangent, plain, to_batch_first, with_rules
from .crba import assemble, mass_matrix_top
from .inertia import SpatialInertia
from .kinematics import Kinematics
from .rnea import rnea_adjoint, rnea_from_terms, rnea_mixed, rnea_terms, velocity_terms
from .solve import _SPDSolve, spd_solve
from .topology import topology


def accelerations(model, kin: Kinematics, inertia: SpatialInertia, V0, qd, force, gravity) -> torch.Tensor:
    """``[A_0; qdd]`` (6+n, B), ``A_0`` the base's spatial acceleration about O (world
    axes), for the generalized forces ``force`` (6+n, B) in the same coordinates.
    ``kin``: whole-tree kinematics; ``inertia``: world inertias; ``V0`` (6, B) the base
    twist about O; ``qd`` (n, B); ``gravity`` (6, B) ``[g; 0]``. Raises
    ``torch.linalg.LinAlgError`` when M is not positive definite."""
    if articulated.applies(model, kin, inertia, V0, qd, force):
        return articulated.articulated_body(model, kin, inertia, V0, qd, force, gravity)
    armature = model.armature if model.has_armature else None
    inputs = (kin.S, inertia.m, inertia.h, inertia.J, V0, qd, force, gravity, armature)
    if implicit_backward(model, *(t for t in inputs if t is not None)):
        return _Implicit.apply(model, *inputs)
    return crba_accelerations(model, kin, inertia, V0, qd, force, gravity)


def implicit_backward(model, *tensors) -> bool:
    """Whether :class:`_Implicit` computes the accelerations: a gradient is wanted, and

    * eager: plain tensors without forward-mode tangents (:func:`~.batchlast.with_rules`).
      Against autograd through the CRBA path, aba forward+backward (iCub, float64,
      2 threads, in-process A/Bs): the sweep 0.73x the time at B = 1024 (see BENCHMARKS.md),
      the dense factor below the sweep's batches 0.87x at B = 1, 0.93x at 8, 0.90x at 32;
    * compiled: a batch for the tree-sparse factorisation (:func:`~.tree_cholesky.pays_off`;
      iCub, B = 1024, 2 threads, forward+backward: 0.72x the time of autograd through the
      factorisation and the CRBA in float64, 0.74x in float32, in-process A/B)."""
    x = tensors[0]
    if torch.compiler.is_compiling():
        return (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
                and tree_cholesky.pays_off(x.shape[-1], x.dtype, x.device, compiled=True))
    return with_rules(*tensors) and all(plain(t) for t in tensors) and not has_tangent(*tensors)


def crba_accelerations(model, kin: Kinematics, inertia: SpatialInertia, V0, qd, force, gravity) -> torch.Tensor:
    """:func:`accelerations` by the CRBA, the RNEA and a Cholesky solve."""
    Mbb, F, S = mass_matrix_top(model, kin, inertia)
    h = rnea_mixed(model, kin, inertia, V0, -gravity, qd, None)
    return solve_mass_matrix(model, Mbb, F, S, force - h)


def solve_mass_matrix(model, Mbb, F, S, rhs) -> torch.Tensor:
    """``M^-1 rhs`` (6+n, B) in the internal coordinates from the CRBA's pieces,
    batch-last. Where :func:`~.tree_cholesky.pays_off` says so (large CPU batches:
    float32, or float64 on one thread; compiled, from ``COMPILED_FROM`` configurations
    on in either dtype): the tree-sparse factorisation, with no dense M. Otherwise
    LAPACK's Cholesky of the assembled M."""
    compiling = torch.compiler.is_compiling()
    if not tree_cholesky.pays_off(rhs.shape[-1], rhs.dtype, rhs.device, compiled=compiling):
        pieces = (Mbb, F, S, rhs)
        if crba_solve.applies(model, *pieces):
            return crba_solve.crba_solve(model, *pieces)  # a backward without the dense gradient of M
        M = assemble(model, Mbb, F, S)
        return spd_solve(M, to_batch_first(rhs).unsqueeze(-1)).squeeze(-1).transpose(0, 1)
    plan = tree_cholesky.tree_plan(model)
    return tree_cholesky.tree_solve(plan, tree_cholesky.packed_inertia(model, plan, F, S, Mbb), rhs, check=True)


def _crba_and_bias(model, kin: Kinematics, inertia: SpatialInertia, V0, qd, gravity):
    """The CRBA's pieces ``Mbb``, ``F``, ``S`` (:func:`~.crba.mass_matrix_top`), the
    bias force ``h`` (6+n, B) and the RNEA's velocity terms it used (which
    :class:`_Implicit` keeps for its backward)."""
    Mbb, F, S = mass_matrix_top(model, kin, inertia)
    velocity = velocity_terms(model, kin, inertia, V0, qd)
    h = rnea_from_terms(model, kin.S, inertia, V0, -gravity, qd, None, velocity)
    return Mbb, F, S, h, velocity


def _tree_accelerations(model, kin: Kinematics, inertia: SpatialInertia, V0, qd, force, gravity):
    """:func:`crba_accelerations` by the tree-sparse factorisation, with what
    :class:`_Implicit` keeps of it: the accelerations (6+n, B), the factor's tensors
    (:func:`~.tree_cholesky.factor_tensors`) and the RNEA's velocity terms."""
    Mbb, F, S, h, velocity = _crba_and_bias(model, kin, inertia, V0, qd, gravity)
    plan = tree_cholesky.tree_plan(model)
    fac = tree_cholesky.factor(plan, tree_cholesky.packed_inertia(model, plan, F, S, Mbb))
    tree_cholesky.check_positive(fac)
    acc = tree_cholesky.solve_factored(plan, fac, (force - h)[:, None])[:, 0]
    return acc, tree_cholesky.factor_tensors(fac), velocity


def _dense_accelerations(model, kin: Kinematics, inertia: SpatialInertia, V0, qd, force, gravity):
    """:func:`crba_accelerations` with what :class:`_Implicit` keeps of it: the
    accelerations (6+n, B), the upper Cholesky factor ``U`` of M (B, 6+n, 6+n, in a
    tuple) and the RNEA's velocity terms. Raises ``torch.linalg.LinAlgError`` when M
    is not positive definite."""
    Mbb, F, S, h, velocity = _crba_and_bias(model, kin, inertia, V0, qd, gravity)
    acc, U = _SPDSolve.forward(assemble(model, Mbb, F, S), to_batch_first(force - h).unsqueeze(-1))
    return acc.squeeze(-1).transpose(0, 1), (U,), velocity


def _dense_solve(U: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``M^-1 y`` (6+n, B) for ``M = U^T U``, ``U`` (B, 6+n, 6+n), ``y`` (6+n, B)."""
    return torch.cholesky_solve(to_batch_first(y).unsqueeze(-1), U, upper=True).squeeze(-1).transpose(0, 1)


def _sweep_accelerations(model, kin: Kinematics, inertia: SpatialInertia, V0, qd, force, gravity):
    """The articulated-body sweep's accelerations (6+n, B), its factor's tensors
    (:meth:`~.articulated.Factor.tensors`) and the RNEA's velocity terms."""
    acc, factor, velocity = articulated.sweep(model, kin, inertia, V0, qd, force, gravity)
    return acc, factor.tensors(), velocity


_FACTORED = {"sweep": _sweep_accelerations, "dense": _dense_accelerations, "tree": _tree_accelerations}
"""What :class:`_Implicit`'s forward runs, by method: the accelerations, the factor's
tensors it keeps for the backward's solve (:func:`_solve_again`), the velocity terms."""


def _solve_again(model, S, method: str, factor: tuple, y: torch.Tensor) -> torch.Tensor:
    """``M^-1 y`` (6+n, B) with the factor's tensors that :class:`_Implicit`'s forward
    kept by ``method`` (a key of ``_FACTORED``)."""
    if method == "dense":
        return _dense_solve(factor[0], y)
    if method == "tree":
        fac = tree_cholesky.factor_from_tensors(factor)
        return tree_cholesky.solve_factored(tree_cholesky.tree_plan(model), fac, y[:, None])[:, 0]
    return articulated.solve_again(model, S, articulated.Factor.from_tensors(factor), y)


class _Implicit(torch.autograd.Function):
    """The accelerations, differentiable in every input (see the module note): ``S``
    (nb, 6, B) the bodies' motion subspaces, the world inertias ``m``, ``h``, ``J``,
    ``V0``, ``qd``, ``force``, ``gravity`` and the model's ``armature`` (or None).
    Eager the forward is the articulated-body sweep from :func:`articulated.sweep_from`
    configurations on, below it the CRBA and LAPACK's Cholesky of the assembled M;
    under ``torch.compile`` the CRBA and the tree-sparse factorisation of M (which
    inductor runs faster than the sweep).
    It keeps its factor and what the RNEA's adjoint sweep needs at the computed
    accelerations (:func:`~.rnea.rnea_terms`, from the forward's velocity terms).
    With ``create_graph`` (eager) the backward recomputes the accelerations by the CRBA
    path inside the graph and differentiates those: exact to every order (the implicit
    rule holds the accelerations constant)."""

    @staticmethod
    def forward(ctx, model, S, m, h, J, V0, qd, force, gravity, armature):
        inertia, kin = SpatialInertia(m, h, J), Kinematics(None, None, S)
        if torch.compiler.is_compiling():
            ctx.method = "tree"
        else:
            ctx.method = "sweep" if qd.shape[-1] >= articulated.sweep_from(model, gradients=True) else "dense"
        acc, factor, velocity = _FACTORED[ctx.method](model, kin, inertia, V0, qd, force, gravity)
        A0 = acc[:6] - gravity
        # the RNEA's inputs that need a gradient (gravity through A0); none for the forces alone
        need = ctx.needs_input_grad[1:]
        ctx.rnea_need = {name for name, n in zip(("S", "m", "h", "J", "V0", "qd", "A0"), need[:6] + need[7:8]) if n}
        terms = rnea_terms(model, S, m, h, J, V0, A0, qd, acc[6:], velocity) if ctx.rnea_need else ()
        ctx.model, ctx.n_terms = model, len(terms)
        ctx.save_for_backward(S, m, h, J, V0, qd, force, gravity, armature, acc, A0, *terms, *factor)
        return acc

    @staticmethod
    def backward(ctx, abar):
        model = ctx.model
        S, m, h, J, V0, qd, force, gravity, armature, acc, A0, *rest = ctx.saved_tensors
        terms, factor = rest[:ctx.n_terms], rest[ctx.n_terms:]
        inputs = (S, m, h, J, V0, qd, force, gravity, armature)
        need = ctx.needs_input_grad[1:]
        if torch.is_grad_enabled():  # double backward
            def with_graph():
                return crba_accelerations(model, Kinematics(None, None, S), SpatialInertia(m, h, J), V0, qd, force,
                                          gravity)
            return None, *differentiated_again(with_graph, inputs, need, abar)
        # R = RNEA(acc) (+ armature qdd) - force, A0 = acc_base - gravity; cotangent -M^-1 abar
        y = _solve_again(model, S, ctx.method, factor, abar)
        qdd = acc[6:]
        g = rnea_adjoint(model, S, m, h, J, V0, A0, qd, qdd, terms, y.neg(), ctx.rnea_need) if terms else {}
        grad_gravity = g["A0"].sum_to_size(gravity.shape).neg() if "A0" in g else None  # d A0 / d gravity = -1
        grad_armature = (y[6:] * qdd).sum(-1).neg() if need[8] else None
        return (None, g.get("S"), g.get("m"), g.get("h"), g.get("J"), g.get("V0"), g.get("qd"),
                y if need[6] else None, grad_gravity, grad_armature)
