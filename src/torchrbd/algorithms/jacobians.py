"""Frame Jacobians in the world frame and their time derivatives (batch-last)."""

from __future__ import annotations

import torch

from .kinematics import Kinematics
from .rnea import motion_cross


def chain_columns(kin: Kinematics) -> torch.Tensor:
    """(6+k, 6, B) the nonzero columns of a frame's Jacobian about O, as twists, from a
    :func:`~.kinematics.chain_forward`: the base's 6 unit twists, then the chain
    coordinates' ``S_j`` (they go to the columns ``kin.chain.columns``)."""
    S = kin.S
    eye = torch.eye(6, dtype=S.dtype, device=S.device)[..., None].expand(6, 6, S.shape[-1])
    return torch.cat([eye, S], 0)


def chain_column_rates(kin: Kinematics, V0: torch.Tensor, qd: torch.Tensor):
    """Time derivatives (6+k, 6, B) of :func:`chain_columns` (``dS_j/dt = V_j x S_j``,
    the base's columns are constant) and the twist (6, B) of the chain's last body.

    ``V0`` (6, B) base twist about O, ``qd`` (n, B). Along a chain, the bodies' twists
    are running sums from the base: ``V_j = V0 + sum_{i <= j} S_i qd_i``.
    """
    S = kin.S
    V = (S * qd.index_select(0, kin.chain.dofs)[:, None]).cumsum(0) + V0
    rates = torch.cat([S.new_zeros(6, 6, S.shape[-1]), motion_cross(V, S)], 0)
    return rates, (V[-1] if len(kin.chain) else V0)
