"""Recursive Newton-Euler inverse dynamics in the world frame (batch-last).

World-origin twists add up along the tree, so the forward pass is a masked sum
over each body's support and the backward pass a masked sum over its subtree:
``V_i = V_0 + sum_j S_j qd_j``, ``A_i = A_0 + sum_j (S_j qdd_j + V_j x S_j qd_j)``,
``f_i = I_i A_i + V_i x* I_i V_i``, ``F_i = sum_{k in subtree(i)} f_k``.
"""

from __future__ import annotations

import torch

from .batchlast import cross, halves, mask_sum, pair, with_rules
from .inertia import SpatialInertia
from .kinematics import Kinematics, dof_subspaces, per_body
from .topology import topology


def motion_cross(V, m):
    """``V x m = [w x m_l + v x m_a; w x m_a]`` for twists (k, 6, B)."""
    (v, w), (_, ma) = halves(V), halves(m)
    return _plus_half(cross(w[:, None], pair(m)), 0, cross(v, ma))


def force_cross(V, f):
    """``V x* f = [w x f_l; w x f_a + v x f_l]`` for a twist and a wrench (k, 6, B)."""
    (v, w), (fl, _) = halves(V), halves(f)
    return _plus_half(cross(w[:, None], pair(f)), 1, cross(v, fl))


def _plus_half(pairs, half: int, x):
    """(k, 2, 3, B) ``pairs`` with ``x`` added to one half, as (k, 6, B) 6-vectors.
    Without gradients, added in place into the fresh product (no concatenation); with
    them (eager), unbound and concatenated, whose backward is one split."""
    if with_rules(pairs, x):
        parts = list(pairs.unbind(1))
        parts[half] = parts[half] + x
        return torch.cat(parts, 1)
    pairs.select(1, half).add_(x)
    return pairs.flatten(1, 2)


def body_velocities(model, kin: Kinematics, V0, qd):
    """(nb, 6, B) twist of every body and (nb, 6, B) the joint twists ``S qd``."""
    anc = topology(model).ancestor
    Sqd = kin.S * per_body(model, qd)[:, None]
    return mask_sum(anc, Sqd, add=V0), Sqd


def rnea_mixed(model, kin: Kinematics, inertia: SpatialInertia, V0, A0, qd, qdd, body_wrenches=None):
    """Generalized forces (6+n, B) for the base twist about O (world axes), from the
    whole-tree kinematics ``kin`` of :func:`~.kinematics.forward`.

    ``V0``/``A0`` (6, B): base twist and spatial acceleration about the world
    origin (gravity included in A0 as ``-[g; 0]``). ``qd``/``qdd`` (n, B); ``qdd=None``
    for zero joint accelerations (the bias forces).
    ``body_wrenches`` (nb, 6, B): external wrenches about O acting
    on each body (world axes). Returns ``[F_base; tau]``.
    """
    topo = topology(model)
    anc = topo.ancestor
    V, Sqd = body_velocities(model, kin, V0, qd)
    dA = motion_cross(V, Sqd)
    if qdd is not None:
        dA = torch.addcmul(dA, kin.S, per_body(model, qdd)[:, None])
    A = mask_sum(anc, dA, add=A0)
    f = inertia.apply(A) + force_cross(V, inertia.apply(V))
    if body_wrenches is not None:
        f = f - body_wrenches
    F = mask_sum(topo.subtrees, f)  # the total wrench, then one per coordinate's subtree
    F0, F = F.split_with_sizes([1, model.n])
    tau = (dof_subspaces(model, kin) * F).sum(1)
    return torch.cat([F0[0], tau], 0)
