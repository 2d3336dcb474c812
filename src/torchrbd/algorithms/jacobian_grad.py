"""A frame's Jacobian (MIXED, INERTIAL_FIXED or BODY_FIXED) with its gradient w.r.t.
the joint positions written out (eager).

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

BODY_FIXED: ``J_B = Rot(R_F)^T J_M diag(T, 1)`` with ``J_M`` the MIXED Jacobian, ``R_F``
the frame's rotation (``Rot``: on each half) and ``T = diag(R, R)`` the base's BODY to
MIXED velocity map. Joint j turns ``R_F`` about ``s_j``, so a cotangent ``G`` gives the
MIXED rule for ``G' = Rot(R_F) G diag(T, 1)^T`` minus ``s_j . v``, with ``v`` the sum
over all of ``J_M``'s columns of ``l x G'_l + s x G'_w``: the chain's, plus the base
block's ``[[1, -[r_F]x], [0, 1]]``, ``-axial(G'_11) - axial(G'_22) + r_F tr(G'_12) -
G'_12^T r_F`` (``axial(A)`` the vector of the skew matrix ``A^T - A``).
"""

from __future__ import annotations

import torch

from ..model.model import Model
from . import frame_transform_grad
from .batchlast import cross, differentiated_again, matmul, mv, transpose
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
                   about: torch.Tensor | None = None, body: bool = False) -> torch.Tensor:
    """(B, 6, 6+n) the Jacobian of ``frame`` for the base rotation ``R`` (3, 3, B) and
    ``q`` (B, n): MIXED; with ``about`` (3, B) the world origin relative to the base,
    INERTIAL_FIXED; with ``body``, BODY_FIXED. ``place(chain, twists, r_F, R_F)`` makes
    the (6, 6+n, B) Jacobian (a view of batch-first memory) from the chain's twists about
    the frame's origin ``r_F``, or about ``about``, and (``body``) the frame's rotation
    ``R_F`` (else None): ``KinDynComputations``' placement of the columns."""
    return _FrameJacobian.apply(model, frame, R, q, place, about, body)


def _axial(A: torch.Tensor) -> torch.Tensor:
    """(3, B) ``[A_12 - A_21, A_20 - A_02, A_01 - A_10]`` of ``A`` (3, 3, B): ``sum_i
    A[:, i] x e_i``, the vector of the skew part ``A^T - A``."""
    return torch.stack([A[1, 2] - A[2, 1], A[2, 0] - A[0, 2], A[0, 1] - A[1, 0]])


class _FrameJacobian(torch.autograd.Function):
    @staticmethod
    def forward(ctx, model, frame, R, q, place, about, body):
        chain, twists, origin, R_F = frame_twists(model, R, q.t(), frame, about=about, rotation=body)
        ctx.model, ctx.frame, ctx.place, ctx.dofs, ctx.body = model, frame, place, chain.dofs, body
        ctx.save_for_backward(R, q, twists, about, origin, R_F)
        return place(chain, twists, origin, R_F).permute(2, 0, 1)

    @staticmethod
    def backward(ctx, G):
        R, q, twists, about, origin, R_F = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: the operator-by-operator path, differentiated
            def jacobian_again():
                chain, cols, r_F, R_F = frame_twists(ctx.model, R, q.t(), ctx.frame, about=about, rotation=ctx.body)
                return ctx.place(chain, cols, r_F, R_F).permute(2, 0, 1)
            return None, None, None, *differentiated_again(jacobian_again, (q,), (True,), G), None, None, None
        columns = G.index_select(2, ctx.dofs + 6).permute(2, 1, 0).contiguous()  # (k, 6, B)
        base = G[:, :, :6].permute(1, 2, 0)  # (6, 6, B)
        G_l, G_w = columns[:, :3], columns[:, 3:]
        if ctx.body:  # the cotangent of the MIXED Jacobian: G' = Rot(R_F) G diag(T, 1)^T
            G_l, G_w = mv(R_F, G_l), mv(R_F, G_w)
            base = base.reshape(2, 3, 2, 3, -1).transpose(1, 2)  # (2, 2, 3, 3, B) blocks
            base = matmul(matmul(R_F, base), transpose(R))
            G_11, G_12, G_22 = base[0, 0], base[0, 1], base[1, 1]
        else:
            G_12 = base[:3, 3:]
        l, s = twists[:, :3], twists[:, 3:]
        turned = cross(l, G_l) + cross(s, G_w)  # what joint j's turn adds for each k after it
        after = turned.sum(0) - turned.cumsum(0)  # sum over k > j
        if about is None:  # MIXED (and BODY_FIXED): the frame's origin moves with every joint
            moved = cross(G_l, s).cumsum(0) + _axial(G_12)  # sum over k <= j, and the base block's
        else:  # INERTIAL_FIXED: the columns after j turn about a fixed point
            slid = cross(s, G_l)
            moved = slid.sum(0) - slid.cumsum(0)  # sum over k > j
        per_joint = (s * after).sum(1) + (l * moved).sum(1)  # (k, B)
        if ctx.body:  # each joint also turns the frame's axes: - s_j . v
            v = turned.sum(0) - _axial(G_11) - _axial(G_22) + origin * G_12.diagonal(0, 0, 1).sum(-1)
            v = v - mv(transpose(G_12), origin)
            per_joint = per_joint - (s * v).sum(1)
        return None, None, None, torch.zeros_like(q).index_copy(1, ctx.dofs, per_joint.t()), None, None, None
