"""Recursive Newton-Euler inverse dynamics in the world frame.

World-origin twists add up along the tree, so the forward pass is a masked sum
over each body's support and the backward pass a masked sum over its subtree:
``V_i = V_0 + sum_j S_j qd_j``, ``A_i = A_0 + sum_j (S_j qdd_j + V_j x S_j qd_j)``,
``f_i = I_i A_i + V_i x* I_i V_i``, ``F_i = sum_{k in subtree(i)} f_k``.
"""

from __future__ import annotations

import torch

from ..spatial import force_cross, matvec, motion_cross
from .kinematics import Kinematics
from .topology import topology


def _per_body(model, x):
    topo = topology(model)
    out = torch.zeros(x.shape[0], model.nbody, dtype=x.dtype, device=x.device)
    return out.index_copy(1, topo.body_of_dof, x)


def rnea_inertial(model, kin: Kinematics, I_world, V0, A0, qd, qdd, body_wrenches=None):
    """Generalized forces (B, 6+n) for the inertial base twist.

    ``V0``/``A0`` (B, 6): base twist and spatial acceleration about the world
    origin (gravity included in A0 as ``-[g; 0]``). ``qd``/``qdd`` (B, n).
    ``body_wrenches`` (B, nb, 6): external wrenches about the world origin acting
    on each body (world axes). Returns ``[F_base; tau]``.
    """
    topo = topology(model)
    anc = topo.ancestor
    Sqd = kin.S * _per_body(model, qd)[..., None]
    V = V0[:, None] + torch.einsum("ij,bjk->bik", anc, Sqd)
    dA = kin.S * _per_body(model, qdd)[..., None] + motion_cross(V, Sqd)
    A = A0[:, None] + torch.einsum("ij,bjk->bik", anc, dA)
    IV = matvec(I_world, V)
    f = matvec(I_world, A) + force_cross(V, IV)
    if body_wrenches is not None:
        f = f - body_wrenches
    F = torch.einsum("ki,bkr->bir", anc, f)
    bod = topo.body_of_dof
    tau = (kin.S[:, bod] * F[:, bod]).sum(-1)
    return torch.cat([F[:, 0], tau], -1)
