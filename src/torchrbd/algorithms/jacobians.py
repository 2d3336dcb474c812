"""Frame Jacobians in the world frame and their time derivatives (batch-last)."""

from __future__ import annotations

import torch

from .batchlast import mask_sum
from .kinematics import Kinematics
from .rnea import motion_cross
from .topology import topology


def support_mask(model, body: int) -> torch.Tensor:
    """(n,) 1 for the coordinates that move ``body``."""
    topo = topology(model)
    return topo.ancestor[body, topo.body_of_dof]


def jacobian_mixed(model, kin: Kinematics, body: int) -> torch.Tensor:
    """(6, 6+n, B): twist of ``body`` about O from the generalized velocity whose base
    part is the base twist about O (world axes)."""
    S = kin.S[topology(model).body_of_dof] * support_mask(model, body)[:, None, None]  # (n, 6, B)
    B = S.shape[-1]
    eye = torch.eye(6, dtype=S.dtype, device=S.device)[..., None].expand(6, 6, B)
    return torch.cat([eye, S.transpose(0, 1)], 1)


def jacobian_dot_mixed(model, kin: Kinematics, body: int, V0, qd) -> torch.Tensor:
    """(6, 6+n, B) time derivative of :func:`jacobian_mixed` (``dS_j/dt = V_j x S_j``).

    ``V0`` (6, B) base twist about O, ``qd`` (n, B).
    """
    topo = topology(model)
    bod = topo.body_of_dof
    S = kin.S[bod]
    Sqd = S * qd[:, None]  # (n, 6, B)
    V = mask_sum(topo.dof_support.T, Sqd, add=V0)  # twist of each coordinate's body
    Sd = motion_cross(V, S) * support_mask(model, body)[:, None, None]
    B = S.shape[-1]
    zeros = torch.zeros(6, 6, B, dtype=S.dtype, device=S.device)
    return torch.cat([zeros, Sd.transpose(0, 1)], 1)
