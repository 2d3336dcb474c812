"""Link poses and velocities of an entity (for the getters), on plain tensors."""

from __future__ import annotations

import torch

from ..spatial import homogeneous


def link_states(kd, R, p, q, nu, qd):
    """World poses and velocities of every link (``kd.model.link_names`` order).

    ``kd``: a MIXED-representation :class:`~torchrbd.KinDynComputations`;
    ``R`` (B, 3, 3), ``p`` (B, 3): base pose; ``q``/``qd`` (B, n); ``nu`` (B, 6)
    MIXED base velocity or None (fixed base). Returns ``R_l`` (B, nl, 3, 3),
    ``p_l`` (B, nl, 3), ``v_l`` (B, nl, 3) the velocity of each link origin and
    ``w_l`` (B, nl, 3) its angular velocity, world axes.
    """
    H = homogeneous(R, p)
    T = kd.link_poses(H, q)
    if nu is None:
        nu = torch.zeros(q.shape[0], 6, dtype=q.dtype, device=q.device)
    nuq = torch.cat([nu, qd], -1).unsqueeze(-1)
    # a MIXED frame velocity is [velocity of the frame origin; angular velocity], world axes
    V = torch.stack([(kd.jacobian(name, H, q) @ nuq).squeeze(-1) for name in kd.model.link_names], 1)
    return T[..., :3, :3], T[..., :3, 3], V[..., :3], V[..., 3:]
