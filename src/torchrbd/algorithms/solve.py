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
    refactors M inside the graph. Forward mode is :class:`_SPDSolveJvp`'s."""

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


class _SPDSolveJvp(_SPDSolve):
    """:class:`_SPDSolve` with a forward-mode rule (``torch.func.jacfwd``, ``hessian``).
    A separate class because ``torch.compile`` does not trace a Function that has a
    ``jvp`` (each call would break the graph); compiled code uses the plain one."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        _SPDSolve.setup_context(ctx, inputs, output)
        ctx.save_for_forward(*output)

    @staticmethod
    def jvp(ctx, dM, db):
        """Forward mode: ``dx = M^-1 (db - dM x)``."""
        x, U = ctx.saved_tensors
        rhs = torch.zeros_like(x) if db is None else db
        if dM is not None:
            rhs = rhs - dM @ x
        return torch.cholesky_solve(rhs, U, upper=True), None


def spd_solve(M: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``M^{-1} b`` for M (..., N, N) symmetric positive definite, b (..., N, k).

    Raises ``torch.linalg.LinAlgError`` when a matrix is not positive definite."""
    if torch.is_grad_enabled() and (M.requires_grad or b.requires_grad):
        return (_SPDSolve if torch.compiler.is_compiling() else _SPDSolveJvp).apply(M, b)[0]
    return _SPDSolve.forward(M, b)[0]  # nothing to differentiate: skip the Function machinery
