"""Frame Jacobians in the world frame and their time derivatives."""

from __future__ import annotations

import torch

from ..spatial import motion_cross
from .kinematics import Kinematics
from .topology import topology


def support_mask(model, body: int) -> torch.Tensor:
    """(n,) 1 for the coordinates that move ``body``."""
    topo = topology(model)
    return topo.ancestor[body, topo.body_of_dof]


def jacobian_inertial(model, kin: Kinematics, body: int) -> torch.Tensor:
    """(B, 6, 6+n): inertial twist of ``body`` from the inertial generalized velocity."""
    S = kin.S[:, topology(model).body_of_dof] * support_mask(model, body)[:, None]
    eye = torch.eye(6, dtype=S.dtype, device=S.device).expand(S.shape[0], 6, 6)
    return torch.cat([eye, S.transpose(-1, -2)], -1)


def jacobian_dot_inertial(model, kin: Kinematics, body: int, V0, qd) -> torch.Tensor:
    """(B, 6, 6+n) time derivative of :func:`jacobian_inertial` (``dS_j/dt = V_j x S_j``).

    ``V0`` (B, 6) inertial base twist, ``qd`` (B, n).
    """
    topo = topology(model)
    bod = topo.body_of_dof
    Sqd = kin.S[:, bod] * qd[..., None]  # (B, n, 6)
    # twist of the body moved by each coordinate: V0 + sum over its support
    V = V0[:, None] + topo.dof_support.transpose(0, 1).to(Sqd) @ Sqd
    Sd = motion_cross(V, kin.S[:, bod]) * support_mask(model, body)[:, None]
    zeros = torch.zeros(Sd.shape[0], 6, 6, dtype=Sd.dtype, device=Sd.device)
    return torch.cat([zeros, Sd.transpose(-1, -2)], -1)
