"""Forward kinematics: world poses of bodies, links and frames, and the world-frame
motion subspaces of the joints.

Shapes: ``B`` is the flattened batch, ``nb`` the number of bodies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..model.model import Model
from ..spatial import axis_angle_to_matrix, matvec
from .topology import topology


@dataclass
class Kinematics:
    """World-frame kinematic quantities of a batch of configurations.

    * ``R`` (B, nb, 3, 3): world_R_body.   ``p`` (B, nb, 3): body origin in world.
    * ``S`` (B, nb, 6): each body's joint motion subspace as a twist about the
      world origin, world axes, linear-first (row 0, the base, is zero):
      revolute ``[o x s; s]``, prismatic ``[s; 0]`` with s the world axis and o
      the joint origin.
    """

    R: torch.Tensor
    p: torch.Tensor
    S: torch.Tensor


def joint_positions_per_body(model: Model, q: torch.Tensor) -> torch.Tensor:
    """(B, n) coordinates -> (B, nb) position of each body's joint (0 for the base)."""
    topo = topology(model)
    qb = torch.zeros(q.shape[0], model.nbody, dtype=q.dtype, device=q.device)
    return qb.index_copy(1, topo.body_of_dof, q)


def body_poses(model: Model, base_R: torch.Tensor, base_p: torch.Tensor, q: torch.Tensor):
    """World poses of all bodies: (B, nb, 3, 3), (B, nb, 3), one batched op per tree level."""
    topo = topology(model)
    qb = joint_positions_per_body(model, q)
    # pose of each body in its parent: joint frame at q=0, then the joint's motion
    R_loc = model.body_rot @ axis_angle_to_matrix(model.joint_axis, qb * topo.is_revolute)
    p_loc = model.body_pos + matvec(model.body_rot, model.joint_axis * (qb * topo.is_prismatic)[..., None])
    Rs, ps = base_R.unsqueeze(1), base_p.unsqueeze(1)
    for lvl, par in zip(topo.levels, topo.level_parent_pos):
        Rp, pp = Rs[:, par], ps[:, par]
        Rs = torch.cat([Rs, Rp @ R_loc[:, lvl]], dim=1)
        ps = torch.cat([ps, pp + matvec(Rp, p_loc[:, lvl])], dim=1)
    return Rs[:, topo.unsort], ps[:, topo.unsort]


def motion_subspaces(model: Model, R: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """(B, nb, 6) world-origin joint twists per unit joint velocity (see :class:`Kinematics`)."""
    topo = topology(model)
    s = matvec(R, model.joint_axis)
    lin = torch.linalg.cross(p, s) * topo.is_revolute[:, None] + s * topo.is_prismatic[:, None]
    ang = s * topo.is_revolute[:, None]
    return torch.cat([lin, ang], dim=-1)


def forward(model: Model, base_R: torch.Tensor, base_p: torch.Tensor, q: torch.Tensor) -> Kinematics:
    R, p = body_poses(model, base_R, base_p, q)
    return Kinematics(R=R, p=p, S=motion_subspaces(model, R, p))


def link_poses(model: Model, kin: Kinematics):
    """World poses of every link: (B, nlink, 3, 3), (B, nlink, 3)."""
    lb = topology(model).link_body
    Rb, pb = kin.R[:, lb], kin.p[:, lb]
    return Rb @ model.link_rot, pb + matvec(Rb, model.link_pos)


def frame_pose(model: Model, kin: Kinematics, frame: str):
    """World pose of one frame: body index, (B, 3, 3), (B, 3)."""
    body, rot, pos = model.frame(frame)
    Rb, pb = kin.R[:, body], kin.p[:, body]
    return body, Rb @ rot, pb + matvec(Rb, pos)
