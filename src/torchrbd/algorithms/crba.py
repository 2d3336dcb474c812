"""Composite-rigid-body algorithm in the world frame.

With every quantity about the world origin, a body's composite inertia is the
plain sum of the inertias of its subtree (one masked matrix product) and
``M[a, b] = S_a . (Ic_b S_b)`` whenever a supports b.
"""

from __future__ import annotations

import torch

from .kinematics import Kinematics
from .topology import topology


def composite_inertias(model, I_world: torch.Tensor) -> torch.Tensor:
    """(B, nb, 6, 6) subtree sums of the world inertias (B, nb, 6, 6)."""
    anc = topology(model).ancestor
    return torch.einsum("ki,bkrc->birc", anc, I_world)


def mass_matrix_inertial(model, kin: Kinematics, I_world: torch.Tensor):
    """Joint-space inertia (B, 6+n, 6+n) for the inertial base velocity, and the
    composite inertias (B, nb, 6, 6)."""
    topo = topology(model)
    Ic = composite_inertias(model, I_world)
    bod = topo.body_of_dof
    S = kin.S[:, bod]  # (B, n, 6)
    F = (Ic[:, bod] @ S.unsqueeze(-1)).squeeze(-1)  # (B, n, 6) = Ic_b S_b
    P = S @ F.transpose(-1, -2)  # P[a, b] = S_a . F_b
    strict = topo.dof_support - torch.eye(model.n, dtype=S.dtype, device=S.device)
    U = P * strict
    Mjj = U + U.transpose(-1, -2) + torch.diag_embed(torch.diagonal(P, dim1=-2, dim2=-1))
    Mbj = F.transpose(-1, -2)  # (B, 6, n)
    top = torch.cat([Ic[:, 0], Mbj], -1)
    bottom = torch.cat([Mbj.transpose(-1, -2), Mjj], -1)
    return torch.cat([top, bottom], -2), Ic
