"""Link poses and velocities of an entity (for the getters), on plain tensors."""

from __future__ import annotations

import torch

from ..spatial import homogeneous


def link_poses(kd, R, p, q):
    """World poses of every link (``kd.model.link_names`` order): ``R_l`` (B, nl, 3, 3),
    ``p_l`` (B, nl, 3), from the base pose ``R`` (B, 3, 3), ``p`` (B, 3) and ``q`` (B, n)."""
    T = kd.link_poses(homogeneous(R, p), q)
    return T[..., :3, :3], T[..., :3, 3]


def link_velocities(kd, R, p, q, nu, qd):
    """World velocities of every link (``kd.model.link_names`` order): ``v_l`` (B, nl, 3)
    the velocity of each link origin and ``w_l`` (B, nl, 3) its angular velocity, world
    axes, from one sweep of the tree (``kd.link_velocities``).

    ``kd``: a MIXED-representation :class:`~torchrbd.KinDynComputations`; ``R``, ``p`` the
    base pose as above, ``q``/``qd`` (B, n), ``nu`` (B, 6) MIXED base velocity or None
    (fixed base)."""
    if nu is None:
        nu = torch.zeros(q.shape[0], 6, dtype=q.dtype, device=q.device)
    V = kd.link_velocities(homogeneous(R, p), q, nu, qd)  # MIXED: [origin velocity; angular velocity]
    return V[..., :3], V[..., 3:]
