"""``M^-1 b`` from the CRBA's pieces, with a backward that never forms a dense matrix.

The forward assembles M (:func:`~.crba.assemble`, internal coordinates) and solves
with LAPACK's Cholesky. Differentiating that through autograd would build the
(B, N, N) gradient of M, scatter it back through the placement gather and run two
batched products and the concatenations backwards. But the gradient of M is the
outer product ``G = -g x^T`` (``g = M^-1 grad_x``), and every entry of M is a known
product of the pieces:

* ``M[i, j] = Mbb[i, j]`` for base coordinates i, j;
* ``M[i, 6+b] = M[6+b, i] = F_b[i]``;
* ``M[6+a, 6+b] = M[6+b, 6+a] = S_a . F_b`` when joint a supports joint b (a = b
  included, stored once); zero for unrelated joints.

Collecting ``G`` over those entries gives, with ``A_y[b] = y_base + sum_{a supports b}
y_a S_a`` and ``D_y[a] = sum_{a supports b} y_b F_b`` (two masked sums over the tree):

    grad Mbb = -g_base x_base^T
    grad F_b = -(x_b A_g[b] + g_b A_x[b] - g_b x_b S_b)
    grad S_a = -(g_a D_x[a] + x_a D_g[a] - g_a x_a F_a)

(the last terms undo the double count of the diagonal). That is O(n) work per
configuration instead of O(N^2) memory traffic.
"""

from __future__ import annotations

import torch

from .batchlast import mask_sum, plain, to_batch_first, with_rules
from .crba import assemble
from .solve import _SPDSolve, spd_solve
from .topology import host_topology, model_cached, topology


def dof_support(model) -> torch.Tensor:
    """(n, n) 0/1 mask, ``[b, a] = 1`` when joint coordinate a supports coordinate b
    (its body is b's body or one of its ancestors). Cached on the model."""
    def make():
        topo = topology(model)
        return topo.ancestor.index_select(0, topo.body_of_dof).index_select(1, topo.body_of_dof)

    return model_cached(model, "_dof_support", make)


def applies(model, *tensors) -> bool:
    """Whether :func:`crba_solve` should stand in for autograd through the assembled M:
    a gradient is wanted in eager mode (:func:`~.batchlast.with_rules`), the tensors are
    plain (not inside a ``torch.func`` transform), one coordinate per body, and no
    armature that needs a gradient."""
    if not with_rules(*tensors) or not all(plain(t) for t in tensors):
        return False
    if not model_cached(model, "_one_dof_per_body", lambda: len(set(host_topology(model).body_of_dof.tolist())) == model.n):
        return False
    return not (model.armature is not None and model.armature.requires_grad)


def crba_solve(model, Mbb: torch.Tensor, F: torch.Tensor, S: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """``M^-1 rhs`` (6+n, B) for the joint-space inertia in internal coordinates given by
    ``Mbb`` (6, 6, B), ``F`` (n, 6, B), ``S`` (n, 6, B) (:func:`~.crba.mass_matrix_top`)
    and ``rhs`` (6+n, B), all batch-last. Differentiable in all four (see the module
    note; second derivatives refactorise M inside the graph). Raises
    ``torch.linalg.LinAlgError`` when a matrix is not positive definite."""
    return _CRBASolve.apply(model, Mbb, F, S, rhs)


class _CRBASolve(torch.autograd.Function):
    @staticmethod
    def forward(ctx, model, Mbb, F, S, rhs):
        M = assemble(model, Mbb, F, S)
        x, U = _SPDSolve.forward(M, to_batch_first(rhs).unsqueeze(-1))  # raises LinAlgError when not PD
        x = x.squeeze(-1)  # (B, N)
        ctx.model = model
        ctx.save_for_backward(Mbb, F, S, rhs, U, x)
        return x.transpose(0, 1)

    @staticmethod
    def backward(ctx, grad):
        model = ctx.model
        Mbb, F, S, rhs, U, x = ctx.saved_tensors
        if torch.is_grad_enabled():  # double backward: solve again inside the graph
            M = assemble(model, Mbb, F, S)
            x = spd_solve(M, to_batch_first(rhs).unsqueeze(-1)).squeeze(-1)
            g = spd_solve(M, to_batch_first(grad).unsqueeze(-1)).squeeze(-1)
        else:
            g = torch.cholesky_solve(to_batch_first(grad).contiguous().unsqueeze(-1), U, upper=True).squeeze(-1)
        x, g = x.transpose(0, 1).contiguous(), g.transpose(0, 1).contiguous()  # (N, B) batch-last
        (x0, xj), (g0, gj) = x.split_with_sizes([6, model.n]), g.split_with_sizes([6, model.n])
        y = torch.stack([xj, gj], 1)[:, :, None]  # (n, 2, 1, B): x and g of each joint
        support = dof_support(model)
        A = mask_sum(support, S[:, None] * y, add=torch.stack([x0, g0]))  # (n, 2, 6, B): A_x, A_g
        D = mask_sum(support.t(), F[:, None] * y)  # D_x, D_g
        xg = (xj * gj)[:, None]
        grad_F = torch.addcmul(xj[:, None] * A[:, 1], gj[:, None], A[:, 0]).sub_(xg * S).neg_()
        grad_S = torch.addcmul(gj[:, None] * D[:, 0], xj[:, None], D[:, 1]).sub_(xg * F).neg_()
        grad_Mbb = -(g0[:, None] * x0[None])
        return None, grad_Mbb, grad_F, grad_S, g
