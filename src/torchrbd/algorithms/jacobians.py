"""Frame Jacobians in the world frame and their time derivatives (batch-last)."""

from __future__ import annotations

import torch

from .kinematics import Kinematics
from .rnea import motion_cross


def chain_column_rates(kin: Kinematics, V0: torch.Tensor, qd: torch.Tensor):
    """Time derivatives (k, 6, B) of the chain's columns of a frame's Jacobian about O,
    the twists ``kin.S`` (``dS_j/dt = V_j x S_j``; the base's six columns, unit twists,
    are constant), and the twist (6, B) of the chain's last body.

    ``V0`` (6, B) base twist about O, ``qd`` (n, B). Along a chain, the bodies' twists
    are running sums from the base: ``V_j = V0 + sum_{i <= j} S_i qd_i``.
    """
    S = kin.S
    V = (S * qd.index_select(0, kin.chain.dofs)[:, None]).cumsum(0) + V0
    return motion_cross(V, S), (V[-1] if len(kin.chain) else V0)
