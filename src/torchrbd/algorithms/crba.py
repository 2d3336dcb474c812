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
    Ic = inertia.subtree_sums(model)
    bod = topo.body_of_dof
    S = kin.S[bod]
    F = SpatialInertia(Ic.m[bod], Ic.h[bod], Ic.J[bod]).apply(S)
    Mbb = SpatialInertia(Ic.m[:1], Ic.h[:1], Ic.J[:1]).matrix()[0]
    return Mbb, F, S


def joint_block(model, S: torch.Tensor, F: torch.Tensor) -> torch.Tensor:
    """(B, n, n) joint block, batch-first: ``S_a . F_b`` where a supports b, mirrored."""
    topo = topology(model)
    # contiguous operands: bmm on strided ones falls back to a slow per-matrix copy
    P = torch.bmm(S.permute(2, 0, 1).contiguous(), F.permute(2, 1, 0).contiguous())  # P[a, b] = S_a . F_b
    sup = topo.dof_support
    below = sup.T - torch.eye(model.n, dtype=sup.dtype, device=sup.device)  # b strictly supports a
    M = torch.addcmul(P * sup, P.transpose(-1, -2), below)
    if model.armature is not None and model.n:
        M = M + torch.diag(model.armature)
    return M


def assemble(Mbb: torch.Tensor, F: torch.Tensor, Mjj: torch.Tensor) -> torch.Tensor:
    """Batch-first (B, 6+n, 6+n) matrix from batch-last Mbb (6, 6, B), F (n, 6, B)
    and batch-first Mjj (B, n, n)."""
    Fb = F.permute(2, 0, 1)  # (B, n, 6)
    top = torch.cat([Mbb.permute(2, 0, 1), Fb.transpose(-1, -2)], -1)
    return torch.cat([top, torch.cat([Fb, Mjj], -1)], -2)
