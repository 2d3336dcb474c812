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
    refactors M inside the graph."""

    generate_vmap_rule = True

    @staticmethod
    def forward(M, b):
        L = torch.linalg.cholesky(M)  # raises torch.linalg.LinAlgError when M is not PD
        return torch.cholesky_solve(b, L), L

    @staticmethod
    def setup_context(ctx, inputs, output):
        M, _ = inputs
        x, L = output
        ctx.mark_non_differentiable(L)
        ctx.save_for_backward(M, x, L)

    @staticmethod
    def backward(ctx, gx, _gL):
        M, x, L = ctx.saved_tensors
        if torch.is_grad_enabled():  # double backward: keep L's dependence on M
            L = torch.linalg.cholesky(M)
        gb = torch.cholesky_solve(gx, L)
        return -gb @ x.transpose(-1, -2), gb


def spd_solve(M: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``M^{-1} b`` for M (..., N, N) symmetric positive definite, b (..., N, k).

    Raises ``torch.linalg.LinAlgError`` when a matrix is not positive definite."""
    return _SPDSolve.apply(M, b)[0]
