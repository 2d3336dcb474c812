"""A frame's world pose with its gradient from the chain's joint twists (eager).

``forward_kinematics`` with a gradient wanted (inverse kinematics by gradient descent,
the commonest use of a differentiable pose) would otherwise differentiate the chain's
products operator by operator. Here the forward makes the chain's unit twists along
with the pose (:func:`~.frame_twists.frame_twists`, what the Jacobian is made of), and
the backward is a dot product per joint: for a cotangent ``G`` of ``world_H_frame``,
with the frame's pose ``[R | r]`` relative to the base and ``[G_R | G_r] = R_B^T G``
its cotangent in the base's axes, a joint of unit twist ``[v; w]`` about the frame's
origin receives ``v . G_r + w . tau``, ``tau = sum_k R[:, k] x G_R[:, k]`` (the torque
of ``G_R``); the base pose's rows receive ``G [R | r]^T`` and its position ``G_r``.
Written for any base matrix ``H`` (not only rotations), as the operator-by-operator
path differentiates it.

Second derivatives (``create_graph``) recompute the pose by
:func:`~.kinematics.frame_transforms` inside the graph and differentiate that.
"""

from __future__ import annotations

import torch

from ..model.model import Model
from .batchlast import cross, differentiated_again, hand_written_backward, mtv
from .frame_twists import frame_twists
from .kinematics import _compose, _placements, frame_transforms


FROM = 80
"""The smallest batch that takes :func:`frame_transform`: the twists cost more than the
pose alone (iCub's l_sole: 0.42 against 0.30 ms at B = 1024), which the cheaper backward
repays on long batches. ``forward_kinematics`` forward+backward w.r.t. q, in-process
A/Bs (``benchmarks/ab.py --only FKfb``) against autograd through the chain's products:
iCub, float64, B = 1024 0.73-0.75x the time (float32 0.74x), 256 0.70-0.72x, 96
0.74-0.75x, 80 0.90-0.94x, 64 0.97-0.98x, 16 1.26x, 1 1.54x; the embedded quadruped at
128 0.85-0.86x."""


def applies(model: Model, frame: str, H: torch.Tensor, q: torch.Tensor, batch_from: int | None = None) -> bool:
    """Whether :func:`frame_transform` serves ``H`` (B, 4, 4) and ``q`` (B, n): a frame
    below the base, and :func:`~.batchlast.hand_written_backward` from ``batch_from``
    (default :data:`FROM`) configurations on, with the joints' and the frame's
    placements without gradient (also the condition of ``jacobian_grad``)."""
    return (hand_written_backward(H, q, FROM if batch_from is None else batch_from,
                                  lambda: (*_placements(model), *model.frame(frame)[1:]))
            and model.frame(frame)[0] > 0)


def frame_transform(model: Model, H: torch.Tensor, q: torch.Tensor, frame: str) -> torch.Tensor:
    """world_H_frame (B, 4, 4) for ``H`` (B, 4, 4) world_H_base and ``q`` (B, n), whose
    backward is the chain's twists dotted with the cotangent (see the module note)."""
    return _FrameTransform.apply(model, frame, H, q)


class _FrameTransform(torch.autograd.Function):
    @staticmethod
    def forward(ctx, model, frame, H, q):
        B = H.shape[0]
        chain, twists, r, R = frame_twists(model, None, q.t(), frame, rotation=True)  # in the base's axes
        relative = torch.cat([R, r[:, None]], 1)  # (3, 4, B): [R | r]
        base = H[:, :3].permute(1, 2, 0).contiguous()  # (3, 4, B): [R_B | p_B]
        world = _compose(base[None], relative[None])[0]
        ctx.model, ctx.frame, ctx.dofs = model, frame, chain.dofs
        ctx.save_for_backward(H, q, twists, relative, base)
        return torch.cat([world.permute(2, 0, 1), H.new_tensor([0.0, 0.0, 0.0, 1.0]).expand(B, 1, 4)], 1)

    @staticmethod
    def backward(ctx, G):
        H, q, twists, relative, base = ctx.saved_tensors
        need_H, need_q = ctx.needs_input_grad[2:]
        if torch.is_grad_enabled():  # create_graph: the operator-by-operator path, differentiated
            return None, None, *differentiated_again(lambda: frame_transforms(ctx.model, H, q, ctx.frame),
                                                     (H, q), (need_H, need_q), G)
        grad_H = grad_q = None
        columns = G[:, :3].permute(2, 1, 0).contiguous()  # (4, 3, B): the cotangent's columns
        if need_H:  # d/d[R_B | p_B] of R_B [R | r] + [0 | p_B]: G [R | r]^T, and G_r
            grad_R = columns[0, :, None] * relative[None, :, 0]  # sum over the columns c of G_c [R | r]_c^T
            for c in range(1, 4):
                grad_R.addcmul_(columns[c, :, None], relative[None, :, c])
            grad_H = torch.cat([torch.cat([grad_R.permute(2, 0, 1), G[:, :3, 3:]], 2), H.new_zeros(H.shape[0], 1, 4)], 1)
        if need_q:
            local = mtv(base[None, :, :3], columns)  # R_B^T G by columns (4, 3, B): G_R's, then G_r
            tau = cross(relative.transpose(0, 1)[:3], local[:3]).sum(0)  # sum_k R[:, k] x G_R[:, k]
            per_joint = (twists[:, :3] * local[3]).sum(1) + (twists[:, 3:] * tau).sum(1)  # (k, B)
            grad_q = torch.zeros_like(q).index_copy(1, ctx.dofs, per_joint.t())
        return None, None, grad_H, grad_q
