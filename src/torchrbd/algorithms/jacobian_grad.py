"""A frame's MIXED or INERTIAL_FIXED Jacobian with its gradient w.r.t. the joint
positions written out (eager).

MIXED: the chain columns are the joints' unit twists about the frame's origin,
``J_k = [l_k; s_k]`` with ``l_k = s_k x (r_F - o_k)`` (``[a_k; 0]`` for a prismatic
joint), the base block ``[[1, -[r_F]x], [0, 1]]``. Moving joint j of the chain turns
what lies beyond it and moves the frame's origin by ``l_j``, so

* ``dJ_k / dq_j = [s_j x l_k; s_j x s_k]`` for a joint j before k (its twist turns),
* ``dJ_k / dq_j = [s_k x l_j; 0]`` for j at or after k (only the frame's origin moves),
* ``d(-[r_F]x) / dq_j = -[l_j]x``.

INERTIAL_FIXED: the twists are about the world origin, which does not move, and the
base block is the identity: only the first kind of term, ``dJ_k / dq_j = [s_j x l_k +
l_j x s_k; s_j x s_k]`` for j before k (the motion cross product).

For a cotangent ``G`` (chain columns ``[G_l; G_w]``, base block's upper right ``G_b``)
joint j then receives ``s_j . sum_{k > j} (l_k x G_l,k + s_k x G_w,k)`` plus, MIXED,
``l_j . (sum_{k <= j} G_l,k x s_k + t)`` with ``t`` the axial vector of ``G_b^T -
G_b``, or, INERTIAL_FIXED, ``l_j . sum_{k > j} s_k x G_l,k``: running sums along the
chain, where autograd differentiates the groups' products and compositions operator by
operator. The world axes come from the base's rotation, so the rule holds for base
transforms whose rotation part is a rotation (the Jacobian's meaning); a gradient
wanted from the base transform takes the operator-by-operator path. Second derivatives
(``create_graph``) recompute the Jacobian inside the graph.
"""

from __future__ import annotations

import torch

from ..model.model import Model
from . import frame_transform_grad
from .batchlast import cross, differentiated_again
from .frame_twists import frame_twists

FROM = 1
"""The smallest batch that takes :func:`frame_jacobian`: every batch. Without gradients
a batch of one composes the chain joint by joint (see ``frame_twists.FROM``); with them
the chain's groups and this backward took 0.77x that path's time for iCub's l_sole at B =
1 (forward+backward, in-process, interleaved)."""


def applies(model: Model, frame: str, H: torch.Tensor, q: torch.Tensor) -> bool:
    """Whether :func:`frame_jacobian` serves ``H`` (B, 4, 4) and ``q`` (B, n): a base
    transform without gradient, and the frame pose's condition
    (:func:`~.frame_transform_grad.applies`) from :data:`FROM` configurations on."""
    return not H.requires_grad and frame_transform_grad.applies(model, frame, H, q, FROM)


def frame_jacobian(model: Model, frame: str, R: torch.Tensor, q: torch.Tensor, place,
                   about: torch.Tensor | None = None) -> torch.Tensor:
    """(B, 6, 6+n) the Jacobian of ``frame`` for the base rotation ``R`` (3, 3, B) and
    ``q`` (B, n): MIXED, or with ``about`` (3, B) the world origin relative to the base,
    INERTIAL_FIXED. ``place(chain, twists, r_F)`` makes the (6, 6+n, B) Jacobian (a view
    of batch-first memory) from the chain's twists about the frame's origin ``r_F``, or
    about ``about`` (``KinDynComputations``' placement of the columns)."""
    return _FrameJacobian.apply(model, frame, R, q, place, about)


class _FrameJacobian(torch.autograd.Function):
    @staticmethod
    def forward(ctx, model, frame, R, q, place, about):
        chain, twists, origin, _ = frame_twists(model, R, q.t(), frame, about=about)
        ctx.model, ctx.frame, ctx.place, ctx.dofs = model, frame, place, chain.dofs
        ctx.save_for_backward(R, q, twists, about)
        return place(chain, twists, origin).permute(2, 0, 1)

    @staticmethod
    def backward(ctx, G):
        R, q, twists, about = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: the operator-by-operator path, differentiated
            def jacobian_again():
                chain, cols, origin, _ = frame_twists(ctx.model, R, q.t(), ctx.frame, about=about)
                return ctx.place(chain, cols, origin).permute(2, 0, 1)
            return None, None, None, *differentiated_again(jacobian_again, (q,), (True,), G), None, None
        columns = G.index_select(2, ctx.dofs + 6).permute(2, 1, 0).contiguous()  # (k, 6, B)
        G_l, G_w = columns[:, :3], columns[:, 3:]
        l, s = twists[:, :3], twists[:, 3:]
        turned = cross(l, G_l) + cross(s, G_w)  # what joint j's turn adds for each k after it
        after = turned.sum(0) - turned.cumsum(0)  # sum over k > j
        if about is None:  # MIXED: the frame's origin moves with every joint
            G_b = G[:, :3, 3:6]
            t = torch.stack([G_b[:, 1, 2] - G_b[:, 2, 1], G_b[:, 2, 0] - G_b[:, 0, 2], G_b[:, 0, 1] - G_b[:, 1, 0]])
            moved = cross(G_l, s).cumsum(0) + t  # sum over k <= j, and the base block's
        else:  # INERTIAL_FIXED: the columns after j turn about a fixed point
            slid = cross(s, G_l)
            moved = slid.sum(0) - slid.cumsum(0)  # sum over k > j
        per_joint = (s * after).sum(1) + (l * moved).sum(1)  # (k, B)
        return None, None, None, torch.zeros_like(q).index_copy(1, ctx.dofs, per_joint.t()), None, None
