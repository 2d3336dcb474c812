"""Solving with a batch of symmetric positive-definite matrices, with a lean backward."""

from __future__ import annotations

import torch


class _SPDSolve(torch.autograd.Function):
    """x = M^{-1} b by Cholesky. The backward reuses the factor: ``grad_b = M^{-1} g``
    and ``grad_M = -grad_b x^T`` (one more solve and an outer product), instead of
    differentiating through the factorisation (triangular solves, ``tril``, several
    batched products). ``grad_M`` is not symmetrised: it is the derivative with
    respect to each entry of M as given, which is what flows back into M's builder.
    Higher-order derivatives stay exact: with ``create_graph`` the backward
    refactors M inside the graph. Forward mode: ``_SPDSolveJvp``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(M, b):
        # M = U^T U: for a row-major M the upper factor is what LAPACK (column-major)
        # computes without copying M first
        U = torch.linalg.cholesky(M, upper=True)  # raises torch.linalg.LinAlgError when M is not PD
        return torch.cholesky_solve(b, U, upper=True), U

    @staticmethod
    def setup_context(ctx, inputs, output):
        M, _ = inputs
        x, U = output
        ctx.mark_non_differentiable(U)
        ctx.save_for_backward(M, x, U)

    @staticmethod
    def backward(ctx, gx, _gL):
        M, x, U = ctx.saved_tensors
        if torch.is_grad_enabled():  # double backward: keep U's dependence on M
            U = torch.linalg.cholesky(M, upper=True)
        gb = torch.cholesky_solve(gx, U, upper=True)
        return -gb @ x.transpose(-1, -2), gb


def _spd_jvp(ctx, dM, db):
    """Forward mode: ``dx = M^-1 (db - dM x)``."""
    x, U = ctx.saved_tensors
    rhs = torch.zeros_like(x) if db is None else db
    if dM is not None:
        rhs = rhs - dM @ x
    return torch.cholesky_solve(rhs, U, upper=True), None


def with_forward_mode(plain: type, jvp) -> type:
    """A subclass of the autograd Function ``plain`` with the forward-mode rule ``jvp``
    (``torch.func.jacfwd``, ``hessian``), which sees ``plain``'s outputs as
    ``ctx.saved_tensors``. A separate class because ``torch.compile`` does not trace a
    Function that has a ``jvp`` (each call would break the graph): compiled code keeps
    the plain one (:func:`traceable`)."""

    def setup_context(ctx, inputs, output):
        plain.setup_context(ctx, inputs, output)
        ctx.save_for_forward(*output)

    body = {"setup_context": staticmethod(setup_context), "jvp": staticmethod(jvp), "__doc__": jvp.__doc__}
    return type(plain.__name__ + "Jvp", (plain,), body)


def traceable(plain: type, with_jvp: type) -> type:
    """``plain`` while ``torch.compile`` traces, else ``with_jvp`` (see :func:`with_forward_mode`)."""
    return plain if torch.compiler.is_compiling() else with_jvp


_SPDSolveJvp = with_forward_mode(_SPDSolve, _spd_jvp)


def spd_solve(M: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``M^{-1} b`` for M (..., N, N) symmetric positive definite, b (..., N, k).

    Raises ``torch.linalg.LinAlgError`` when a matrix is not positive definite."""
    if torch.is_grad_enabled() and (M.requires_grad or b.requires_grad):
        return traceable(_SPDSolve, _SPDSolveJvp).apply(M, b)[0]
    return _SPDSolve.forward(M, b)[0]  # nothing to differentiate: skip the Function machinery
