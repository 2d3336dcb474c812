"""Forward kinematics: world poses of bodies, links and frames, and the world-frame
motion subspaces of the joints. Batch-last layout (see :mod:`.batchlast`):
``B`` configurations, ``nb`` bodies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..model.model import Model
from ..spatial import skew
from .batchlast import cross, mm, mv
from .topology import topology


@dataclass
class Kinematics:
    """World-frame kinematic quantities of a batch of configurations.

    * ``R`` (nb, 3, 3, B): world_R_body.   ``p`` (nb, 3, B): body origin in world.
    * ``S`` (nb, 6, B): each body's joint motion subspace as a twist about the
      reference origin O, world axes, linear-first (row 0, the base, is zero):
      revolute ``[o x s; s]``, prismatic ``[s; 0]`` with s the world axis and o
      the joint origin.
    """

    R: torch.Tensor
    p: torch.Tensor
    S: torch.Tensor


def per_body(model: Model, x: torch.Tensor) -> torch.Tensor:
    """(n, B) coordinates -> (nb, B) value at each body's joint (0 for the base)."""
    topo = topology(model)
    out = torch.zeros(model.nbody, x.shape[-1], dtype=x.dtype, device=x.device)
    return out.index_copy(0, topo.body_of_dof, x)


def body_poses(model: Model, base_R: torch.Tensor, base_p: torch.Tensor, q: torch.Tensor):
    """World poses (nb, 3, 3, B), (nb, 3, B) of all bodies; one batched step per tree level.

    ``base_R`` (3, 3, B), ``base_p`` (3, B), ``q`` (n, B).
    """
    topo = topology(model)
    qb = per_body(model, q)
    angle = qb * topo.is_revolute[:, None]
    # parent_R_body = body_rot @ Rodrigues(axis, angle), expanded into constant
    # matrices times sin/cos so that only elementwise ops touch the batch
    K = skew(model.joint_axis)
    A1, A2 = model.body_rot @ K, model.body_rot @ K @ K
    s, c = torch.sin(angle)[:, None, None], (1 - torch.cos(angle))[:, None, None]
    R_loc = model.body_rot[..., None] + A1[..., None] * s + A2[..., None] * c
    slide = (model.body_rot @ model.joint_axis[..., None]).squeeze(-1)  # (nb, 3)
    p_loc = model.body_pos[..., None] + slide[..., None] * (qb * topo.is_prismatic[:, None])[:, None]
    Rs, ps = [base_R.unsqueeze(0)], [base_p.unsqueeze(0)]
    for lvl, par in zip(topo.levels, topo.level_parent_pos):
        Rp, pp = Rs[-1][par], ps[-1][par]  # parents all sit on the previous level
        Rs.append(mm(Rp, R_loc[lvl]))
        ps.append(pp + mv(Rp, p_loc[lvl]))
    R, p = torch.cat(Rs, 0), torch.cat(ps, 0)
    return (R, p) if topo.unsort is None else (R[topo.unsort], p[topo.unsort])


def motion_subspaces(model: Model, R: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """(nb, 6, B) world-origin joint twists per unit joint velocity (see :class:`Kinematics`)."""
    topo = topology(model)
    s = (R * model.joint_axis[:, None, :, None]).sum(-2)  # world axis (nb, 3, B)
    rev, pri = topo.is_revolute[:, None, None], topo.is_prismatic[:, None, None]
    return torch.cat([cross(p, s) * rev + s * pri, s * rev], dim=1)


def forward(model: Model, base_R: torch.Tensor, base_p: torch.Tensor, q: torch.Tensor) -> Kinematics:
    R, p = body_poses(model, base_R, base_p, q)
    return Kinematics(R=R, p=p, S=motion_subspaces(model, R, p))


def link_poses(model: Model, kin: Kinematics):
    """World poses of every link: (nlink, 3, 3, B), (nlink, 3, B)."""
    lb = topology(model).link_body
    Rb, pb = kin.R[lb], kin.p[lb]
    return mm(Rb, model.link_rot[..., None]), pb + mv(Rb, model.link_pos[..., None])


def frame_pose(model: Model, kin: Kinematics, frame: str):
    """World pose of one frame: body index, (3, 3, B), (3, B)."""
    body, rot, pos = model.frame(frame)
    Rb, pb = kin.R[body], kin.p[body]
    return body, mm(Rb, rot[..., None]), pb + mv(Rb, pos[..., None])
