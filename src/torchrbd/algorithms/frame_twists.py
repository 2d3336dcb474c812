"""A frame's Jacobian columns for eager batches, from its chain's joints in groups.

Within a group of ``m = CHAIN_GROUP`` joints, the pose of each body relative to the
group's start is linear in the products of the joints' terms ``(1, sin q, cos q[, q])``
(:func:`~.kinematics._chain_monomials`; a product of fewer joints takes the later
joints' term 1). So are the quantities a Jacobian column needs, each body's joint axis
and origin in the group's start frame. One batched product of constant coefficients
with the monomials makes them for every group; one composition per group (not per
joint) takes them to world axes. iCub's l_sole (six joints, two groups): one product
and two compositions of three or four operators, where composing joint by joint took
six compositions of five. With nothing differentiated the compositions write into
buffers; otherwise they are plain operators, whose backward autograd makes.
"""

from __future__ import annotations

import torch

from ..model.model import Model
from .batchlast import cross, pieces, writes_into_buffers
from .kinematics import (
    CHAIN_GROUP, _axis_terms, _chain_monomials, _frame_constants, _group_products, _grouped_local_coefficients,
    _in_groups, _placements,
)
from .topology import model_cached_entry, topology


FROM = 2
"""Batches from this length on take :func:`frame_twists` (eager). iCub's l_sole, in-process
A/Bs against the chain composed joint by joint (one ``bmm`` per joint below 128
configurations, 384 with gradients, see ``kinematics.CHAIN_PRODUCTS_BELOW``), the
Jacobian / its forward+backward: B = 2 0.96x / 0.96x the time, 16 0.91x / 0.87x, 64
0.80x / 0.90x, 1024 0.84x / 0.85-0.92x; a batch of one keeps the chain (1.07x / 1.14x)."""


def applies(model: Model, frame: str, q: torch.Tensor) -> bool:
    """Whether :func:`frame_twists` serves ``frame`` at coordinates ``q`` (n, B): a batch
    of at least :data:`FROM`, a frame below the base, eager."""
    return q.shape[-1] >= FROM and model.frame(frame)[0] > 0 and not torch.compiler.is_compiling()


def frame_twists(model: Model, base_R: torch.Tensor | None, q: torch.Tensor, frame: str,
                 about: torch.Tensor | None = None, rotation: bool = False):
    """The unit twists of the joints on the chain to ``frame``'s body, for the base at
    the origin with rotation ``base_R`` (3, 3, B; None: the identity, the results in
    the base's axes) and coordinates ``q`` (n, B) (may be a transposed view).

    Returns ``(chain, twists, r_F, R_F)``: the :class:`~.topology.Chain`, the twists
    (k, 6, B) about ``about`` (3, B) or else about the frame's origin, world axes, linear
    first (as :func:`~.kinematics.motion_subspaces`), the frame's origin ``r_F`` (3, B)
    and, with ``rotation``, its rotation ``R_F`` (3, 3, B, a view), else None."""
    chain, W, is_point, cpj = _coefficients(model, frame)
    g, B = W.shape[0], q.shape[-1]
    Y = torch.bmm(W, _chain_monomials(topology(model), q.index_select(0, chain.dofs)))  # (g, 3 c, B)
    Y = Y.view(g, -1, 3, B)  # per group c columns: each joint's, then the group end's [R | p]
    c = Y.shape[1]
    in_place = writes_into_buffers(base_R, Y)
    world = torch.empty_like(Y) if in_place else []
    R = None if base_R is None else [col[None] for col in base_R.unbind(1)]  # the start's [R | p] as (1, 3, B) columns
    p = None
    for i, y in enumerate(Y):
        if R is None:  # the first group starts at the base itself: its columns as they are
            out = world[i].copy_(y) if in_place else y
        else:  # R y + p for the columns that are points
            rows = pieces(y, 1)
            if in_place:
                out = torch.mul(R[0], rows[0], out=world[i]).addcmul_(R[1], rows[1]).addcmul_(R[2], rows[2])
                out = out if p is None else out.addcmul_(p, is_point)
            else:
                out = R[0] * rows[0] + R[1] * rows[1] + R[2] * rows[2]
                out = out if p is None else out + p * is_point
        if not in_place:
            world.append(out)
        *R, p = pieces(out[c - 4:], 0)
    world = world if in_place else torch.stack(world)
    r_F = p[0]
    joints = world[:, :CHAIN_GROUP * cpj].view(g, CHAIN_GROUP, cpj, 3, B)
    s, o = joints[:, :, 0], joints[:, :, -1]  # revolute axes, joint origins (g, m, 3, B)
    d = o - (r_F if about is None else about)
    lin = cross(d, s)  # (into a buffer where nothing is differentiated)
    if cpj == 3:  # prismatic axes
        lin = lin + joints[:, :, 1]
    twists = torch.cat([lin, s], 2)  # (g, m, 6, B)
    R_F = world[-1, c - 4:c - 1].transpose(0, 1) if rotation else None
    return chain, twists.view(g * CHAIN_GROUP, 6, B)[:len(chain)], r_F, R_F


def _coefficients(model: Model, frame: str):
    """``(chain, W, is_point, cpj)`` for :func:`frame_twists`, kept on the model per frame
    (made anew while a placement needs grad). ``W`` (g, 3 c, t^m): group by group, the
    coordinates of c columns in the group's start frame, in the monomials: for each of its
    m joints ``cpj`` columns, its body's revolute axis, with prismatic joints its
    prismatic axis, and its origin; then the rotation's three columns and the origin of
    the group's end, for the last group the frame's. ``is_point`` (c, 1, 1) marks the
    origins, which a composition moves (the axes it only turns)."""
    chain, _, placement = _frame_constants(model, frame)

    def make():
        C, identity = _grouped_local_coefficients(model, chain)
        axes = _in_groups(_axis_terms(model)[chain.bodies], 0.0)  # (g, m, 3, 1 or 2), body frame
        columns = []
        for j in range(CHAIN_GROUP):
            P = _group_products(C, identity, j + 1)  # (g, t^m, 4, 4): body j relative to the start
            a = P[:, :, :3, :3] @ axes[:, j, None]  # (g, t^m, 3, 1 or 2)
            columns += [*a.unbind(-1), P[:, :, :3, 3]]
        end = torch.cat([P[:-1], P[-1:] @ placement])[:, :, :3]  # (the last P: the whole group's)
        columns += end.unbind(-1)
        W = torch.stack(columns, 2)  # (g, t^m, c, 3)
        cpj = axes.shape[-1] + 1
        is_point = torch.zeros(W.shape[2], 1, 1, dtype=W.dtype, device=W.device)
        is_point[cpj - 1:CHAIN_GROUP * cpj:cpj] = 1
        is_point[-1] = 1
        return W.flatten(2).transpose(1, 2).contiguous(), is_point, cpj
    W, is_point, cpj = model_cached_entry(model, "_frame_twist_coefficients", frame, make,
                                          depends_on=_placements(model) + (placement,))
    return chain, W, is_point, cpj
