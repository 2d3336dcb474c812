"""The centre of mass with its gradient from the coordinates' motion subspaces (eager).

A coordinate's unit twist ``[v_k; w_k]`` (about the base origin) moves the subtree it
carries, of mass ``M_k`` and first moment ``H_k``, so the CoM moves by
``(M_k v_k + w_k x H_k) / M`` (the columns of the CoM Jacobian). The gradient of a
loss with cotangent ``g`` of the CoM is then ``(v_k . M_k g + w_k . (H_k x g)) / M``
for each coordinate: one dot product per coordinate with numbers the forward already
has, where autograd through the whole tree's poses differentiates each of their
operators. The kinematics are taken in the base's axes (base rotation the identity)
and the CoM is ``R_B c + p_B``, so the gradient is exact for any base matrix, as the
operator-by-operator path's; the base pose's rows receive ``g c^T`` and its position
``g``.

Second derivatives (``create_graph``) recompute the CoM operator by operator inside
the graph and differentiate that.
"""

from __future__ import annotations

import torch

from ..model.model import Model
from .batchlast import cross, differentiated_again, halves, hand_written_backward, mtv, mv
from .inertia import center_of_mass, subtree_moments
from .kinematics import _placements, dof_subspaces, forward

FROM = 1
"""The smallest batch that takes :func:`com`: every batch. ``CoM_position``
forward+backward w.r.t. q, in-process A/Bs (``benchmarks/ab.py --only CoMfb``) against
autograd through the whole tree's poses, iCub, float64: B = 1 0.79-0.85x the time, 2
and 16 0.50x, 128 0.60x, 1024 0.57-0.69x."""


def applies(model: Model, H: torch.Tensor, q: torch.Tensor) -> bool:
    """Whether :func:`com` serves ``H`` (B, 4, 4) and ``q`` (B, n):
    :func:`~.batchlast.hand_written_backward` from :data:`FROM` configurations on, with
    the joints' placements and the links' inertial parameters without gradient."""
    return hand_written_backward(H, q, FROM, lambda: (*_placements(model), model.link_mass, model.link_com,
                                                      model.link_pos, model.link_rot))


def com(model: Model, H: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """(B, 3) the CoM (world) for ``H`` (B, 4, 4) world_H_base and ``q`` (B, n)."""
    return _CenterOfMass.apply(model, H, q)


def _relative(model: Model, q: torch.Tensor, subspaces: bool):
    """Whole-tree kinematics for ``q`` (B, n) with the base at the origin, in its own axes."""
    B = q.shape[0]
    identity = torch.eye(3, dtype=q.dtype, device=q.device)[..., None].expand(3, 3, B)
    return forward(model, identity, q.new_zeros(3, B), q.t().contiguous(), subspaces)


class _CenterOfMass(torch.autograd.Function):
    @staticmethod
    def forward(ctx, model, H, q):
        kin = _relative(model, q, subspaces=True)
        M, moments = subtree_moments(model, kin)  # (1+n,), (1+n, 3, B): the whole robot's, then each subtree's
        c = moments[0] / M[0]  # (3, B)
        base = H[:, :3].permute(1, 2, 0).contiguous()  # (3, 4, B)
        ctx.model = model
        ctx.save_for_backward(H, q, dof_subspaces(model, kin), M, moments, c, base)
        return (mv(base[:, :3], c) + base[:, 3]).t().contiguous()  # batch-first, as every result

    @staticmethod
    def backward(ctx, g):
        H, q, S, M, moments, c, base = ctx.saved_tensors
        need_H, need_q = ctx.needs_input_grad[1:]
        if torch.is_grad_enabled():  # create_graph: the operator-by-operator path, differentiated
            def com_again():
                c_rel = center_of_mass(ctx.model, _relative(ctx.model, q, subspaces=False))[0]
                return (H[:, :3, :3] @ c_rel.t()[..., None])[..., 0] + H[:, :3, 3]
            return None, *differentiated_again(com_again, (H, q), (need_H, need_q), g)
        grad_H = grad_q = None
        if need_H:
            rows = torch.cat([g[:, :, None] * c.t()[:, None], g[:, :, None]], 2)  # g [c^T | 1]
            grad_H = torch.cat([rows, H.new_zeros(H.shape[0], 1, 4)], 1)
        if need_q:
            g_base = mtv(base[:, :3], g.t())  # R_B^T g (3, B)
            v, w = halves(S)  # (n, 3, B) each
            per_dof = (v * (M[1:, None, None] * g_base)).sum(1) + (w * cross(moments[1:], g_base)).sum(1)
            grad_q = (per_dof / M[0]).t()
        return None, grad_H, grad_q
