"""Composite-rigid-body algorithm in the world frame.

With every quantity about one fixed origin O (world axes), a body's composite inertia is the
plain sum of the inertias of its subtree (one masked product) and
``M[a, b] = S_a . (Ic_b S_b)`` whenever coordinate a supports coordinate b.

The base rows are kept batch-last (they still change with the velocity
representation); the joint block, which does not, is computed batch-first with
one batched matmul, the layout of the final matrix.
"""

from __future__ import annotations

import torch

from .inertia import SpatialInertia
from .kinematics import Kinematics
from .topology import topology


def mass_matrix_top(model, kin: Kinematics, inertia: SpatialInertia):
    """Base rows of the joint-space inertia for the base twist about O (world axes).

    Returns ``(Mbb, F, S)``: ``Mbb`` (6, 6, B) the composite inertia of the whole
    robot, ``F`` (n, 6, B) with ``F_b = Ic_b S_b`` (the base-joint coupling
    column of coordinate b) and ``S`` (n, 6, B) the coordinates' motion subspaces.
    """
    topo = topology(model)
    Ic = inertia.subtree_sums(model)  # row 0 the whole robot, then one per coordinate
    S = kin.S[topo.body_of_dof]
    (m0, m), (h0, h), (J0, J) = (x.split_with_sizes([1, model.n]) for x in (Ic.m, Ic.h, Ic.J))
    F = SpatialInertia(m, h, J).apply(S)
    Mbb = SpatialInertia(m0, h0, J0).matrix()[0]
    return Mbb, F, S


def assemble(model, Mbb, F, S, F_joint=None, contiguous: bool = False) -> torch.Tensor:
    """The joint-space inertia as a (B, 6+n, 6+n) tensor.

    ``Mbb`` (6, 6, B) base block and ``F`` (n, 6, B) coupling rows (in the wanted
    representation); ``S`` (n, 6, B) and ``F_joint`` (n, 6, B, default ``F``) give the
    joint block ``S_a . F_b`` (a supports b), which no representation changes.
    One batched matmul makes every ``S_a . F_b``; one row gather places the blocks,
    mirrors the joint block and zeroes unrelated pairs.

    By default the result is a batch-first *view* of batch-last storage (cheapest);
    ``contiguous=True`` gathers straight into batch-first memory instead (what a
    batched Cholesky wants; transposing afterwards would cost more).
    """
    topo = topology(model)
    F_joint = F if F_joint is None else F_joint
    n, B = model.n, S.shape[-1]
    N = 6 + n
    zero = torch.zeros(B, 1, dtype=S.dtype, device=S.device)
    if torch.compiler.is_compiling():
        # under torch.compile a batch-last multiply-sum fuses into the gather; a
        # bmm on CPU would run one small product per matrix
        P = (S[:, None] * F_joint[None]).sum(2)  # (n, n, B): P[a, b] = S_a . F_b
        _add_armature(model, P.diagonal(0, 0, 1))
        parts = [Mbb.reshape(36, B), F.reshape(6 * n, B), P.reshape(n * n, B), zero.T]
        M = torch.cat(parts, 0).index_select(0, topo.mass_matrix_index).reshape(N, N, B).permute(2, 0, 1)
        return M.contiguous() if contiguous else M
    P = torch.bmm(S.permute(2, 0, 1).contiguous(), F_joint.permute(2, 1, 0).contiguous())  # (B, n, n)
    _add_armature(model, P.diagonal(0, 1, 2))
    if contiguous:
        parts = [Mbb.permute(2, 0, 1).reshape(B, 36), F.permute(2, 0, 1).reshape(B, 6 * n), P.reshape(B, n * n), zero]
        return torch.cat(parts, 1).index_select(1, topo.mass_matrix_index).reshape(B, N, N)
    parts = [Mbb.reshape(36, B), F.reshape(6 * n, B), P.permute(1, 2, 0).reshape(n * n, B), zero.T]
    return torch.cat(parts, 0).index_select(0, topo.mass_matrix_index).reshape(N, N, B).permute(2, 0, 1)


def _add_armature(model, diagonal: torch.Tensor) -> None:
    """Adds the joints' armature (rotor inertia, MuJoCo models) in place to ``diagonal``
    (B, n), a view of the freshly computed joint block (cheaper than adding a
    diagonal matrix to the whole mass matrix)."""
    if model.has_armature:
        diagonal.add_(model.armature)
