"""Forward dynamics in the internal coordinates: the accelerations ``a`` with
``M a + h = f`` (base twist about O, world axes), and which algorithm finds them.

* Eager, a batch of ``articulated.FROM`` or more: the articulated-body sweep
  (:mod:`.articulated`). Without gradients it runs as it is; with them, through
  :class:`_Sweep`, whose backward differentiates the equations of motion implicitly.
* Otherwise (small batches, ``torch.compile``, ``torch.func`` transforms, forward-mode
  tangents): the CRBA and the RNEA, then ``M^-1`` by a Cholesky factorisation
  (:func:`solve_mass_matrix`).

The implicit backward: the accelerations solve ``R(theta, a) = RNEA(theta, a) - f = 0``
(``theta``: the motion subspaces, world inertias, base twist, joint velocities, forces
and gravity), so ``da = -M^-1 dR/dtheta dtheta``. For a cotangent ``abar`` that is one
more solve with the sweep's articulated inertias, ``y = M^-1 abar``
(:func:`~.articulated.solve_again`), then the RNEA's vector-Jacobian product at the
computed accelerations with cotangent ``-y`` (its adjoint sweep). No mass matrix is
formed and nothing is differentiated through the sweep's rank-one updates.
"""

from __future__ import annotations

import torch

from . import articulated, crba_solve, tree_cholesky
from .batchlast import has_tangent, plain, to_batch_first, with_rules
from .crba import assemble, mass_matrix_top
from .inertia import SpatialInertia
from .kinematics import Kinematics
from .rnea import rnea_adjoint, rnea_mixed, rnea_terms
from .solve import spd_solve
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
    if sweep_with_gradients(*(t for t in inputs if t is not None)):
        return _Sweep.apply(model, *inputs)
    return crba_accelerations(model, kin, inertia, V0, qd, force, gravity)


def sweep_with_gradients(*tensors) -> bool:
    """Whether :class:`_Sweep` computes the accelerations: eager with a gradient wanted
    (:func:`~.batchlast.with_rules`), plain tensors without forward-mode tangents, and a
    batch of at least ``articulated.FROM``. iCub, B = 1024, float64, 2 threads, aba
    forward+backward against the CRBA path: see BENCHMARKS.md."""
    return (tensors[0].shape[-1] >= articulated.FROM and with_rules(*tensors)
            and all(plain(t) for t in tensors) and not has_tangent(*tensors))


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


class _Sweep(torch.autograd.Function):
    """The articulated-body sweep's accelerations, differentiable in every input (see the
    module note): ``S`` (nb, 6, B) the bodies' motion subspaces, the world inertias
    ``m``, ``h``, ``J``, ``V0``, ``qd``, ``force``, ``gravity`` and the model's
    ``armature`` (or None). The forward keeps what the RNEA's adjoint sweep needs at the
    computed accelerations (:func:`~.rnea.rnea_terms`, from the sweep's velocity terms).
    With ``create_graph`` the backward recomputes the accelerations by the CRBA path
    inside the graph and differentiates those: exact to every order (the implicit rule
    holds the accelerations constant)."""

    @staticmethod
    def forward(ctx, model, S, m, h, J, V0, qd, force, gravity, armature):
        inertia = SpatialInertia(m, h, J)
        acc, factor, velocity = articulated.sweep(model, Kinematics(None, None, S), inertia, V0, qd, force, gravity)
        A0 = acc[:6] - gravity
        # the RNEA's inputs that need a gradient (gravity through A0); none for the forces alone
        need = ctx.needs_input_grad[1:]
        ctx.rnea_need = {name for name, n in zip(("S", "m", "h", "J", "V0", "qd", "A0"), need[:6] + need[7:8]) if n}
        if "S" in ctx.rnea_need:
            ctx.rnea_need.add("S_dof")
        terms = rnea_terms(model, S, m, h, J, V0, A0, qd, acc[6:], velocity) if ctx.rnea_need else ()
        ctx.model, ctx.factor = model, factor
        ctx.save_for_backward(S, m, h, J, V0, qd, force, gravity, armature, acc, A0, *terms)
        return acc

    @staticmethod
    def backward(ctx, abar):
        model = ctx.model
        S, m, h, J, V0, qd, force, gravity, armature, acc, A0, *terms = ctx.saved_tensors
        inputs = (S, m, h, J, V0, qd, force, gravity, armature)
        need = ctx.needs_input_grad[1:]
        if torch.is_grad_enabled():  # double backward
            with_graph = crba_accelerations(model, Kinematics(None, None, S), SpatialInertia(m, h, J), V0, qd, force,
                                            gravity)
            wanted = [x for x, n in zip(inputs, need) if n]
            grads = iter(torch.autograd.grad(with_graph, wanted, abar, create_graph=True, allow_unused=True))
            return None, *(next(grads) if n else None for n in need)
        # R = RNEA(acc) (+ armature qdd) - force, A0 = acc_base - gravity; cotangent -M^-1 abar
        y = articulated.solve_again(model, S, ctx.factor, abar)
        qdd = acc[6:]
        g = rnea_adjoint(model, S, None, m, h, J, V0, A0, qd, qdd, terms, y.neg(), ctx.rnea_need) if terms else {}
        if "S" in g:
            g["S"] = g["S"].index_add(0, topology(model).body_of_dof, g.pop("S_dof"))
        grad_gravity = g["A0"].sum_to_size(gravity.shape).neg() if "A0" in g else None  # d A0 / d gravity = -1
        grad_armature = (y[6:] * qdd).sum(-1).neg() if need[8] else None
        return (None, g.get("S"), g.get("m"), g.get("h"), g.get("J"), g.get("V0"), g.get("qd"),
                y if need[6] else None, grad_gravity, grad_armature)
