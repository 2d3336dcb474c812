"""Sums over supports and subtrees of world-frame quantities (batch-last).

``support_sums``: ``y_i = add + sum over the support of body i (i and its ancestors) of
x_j``; ``subtree_sums``: ``y_i = sum over the subtree of body i of x_k``. Both are
products with a 0/1 mask (``Topology.ancestor`` and its transpose), which is what
gradients, compiled code and short batches use. Eager long batches without gradients
sweep the tree level by level into one buffer instead: one addition per level (the
support sums, root first) or one addition into the parents per level (the subtree
sums, leaves first). In a call, the library product's operands come from memory, and
it took 2-3x its time alone (iCub's bias force at B = 1024: 0.25 ms per sum, see
BENCHMARKS.md).
"""

from __future__ import annotations

import torch

from .batchlast import DENSE_BELOW, mask_sum, writes_into_buffers
from .topology import add_to_parents, topology


def _sweeps(topo, *tensors) -> bool:
    """Whether to sweep the levels: eager, no gradients, a long batch, bodies stored
    level by level (every level a slice)."""
    return (tensors[0].shape[-1] >= DENSE_BELOW and topo.unsort is None
            and writes_into_buffers(*tensors))


def support_sums(model, x: torch.Tensor, add: torch.Tensor | None = None) -> torch.Tensor:
    """``add + sum_{j in support(i)} x_j``: (nb, *s) x, ``add`` (*s) broadcast over
    the bodies -> (nb, *s). Compiled: gathered terms (see :func:`~.batchlast.mask_sum`)."""
    topo = topology(model)
    if not _sweeps(topo, x, add):
        return mask_sum(topo.ancestor, x, add=add, columns=topo.ancestor_columns)
    out = torch.empty_like(x)
    if add is None:
        out[0].copy_(x[0])
    else:
        torch.add(x[0], add, out=out[0])
    above = out[:1]
    for rows, parents in zip(topo.levels, topo.level_parent_pos):
        up = above[parents] if isinstance(parents, slice) else above.index_select(0, parents)
        torch.add(x[rows], up, out=out[rows])
        above = out[rows]
    return out


def subtree_sums(model, x: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """``sum_{k in subtree(i)} x_k`` for x (nb, *s) -> (nb, *s); row 0 (the base's) is
    the whole tree's sum. ``in_place``: a sweep may sum into ``x`` itself (a tensor of
    the caller's own, not used again), which saves a copy."""
    topo = topology(model)
    if by_levels(topo, x):
        return subtree_sums_by_levels(topo, x)
    if not _sweeps(topo, x):
        return mask_sum(topo.ancestor.t(), x)
    out = x if in_place else x.clone()
    above = [slice(0, 1), *topo.levels[:-1]]  # the level above each level
    for rows, parents, up in reversed(list(zip(topo.levels, topo.level_parent_pos, above))):
        add_to_parents(out[up], parents, out[rows])
    return out


# Compiled code sums subtrees level by level from this batch on: iCub's compiled aba
# took 0.88-0.95x the time at B = 256-4096 that way, 0.99-1.08x at B = 128-192, and
# up to 1.2x below (the mask product's library call is cheap there).
LEVEL_SUMS_FROM = 256


def by_levels(topo, *tensors: torch.Tensor) -> bool:
    """Whether compiled code sums subtrees level by level (:func:`subtree_sums_by_levels`):
    a batch (the last dimension of the first tensor) of at least :data:`LEVEL_SUMS_FROM`,
    no gradient (inductor would make the gathers' backward atomic additions), bodies
    stored level by level."""
    return (torch.compiler.is_compiling() and tensors[0].shape[-1] >= LEVEL_SUMS_FROM and topo.unsort is None
            and len(topo.levels) > 0 and not any(t.requires_grad for t in tensors))


def subtree_sums_by_levels(topo, x: torch.Tensor) -> torch.Tensor:
    """:func:`subtree_sums` for compiled code, leaves first: each level's sums are its
    rows of ``x`` plus its children's sums, gathered (``Topology.level_children``, a zero
    row where a body has fewer children than the widest). A few terms per body, which
    inductor fuses into the kernels around them, where the product with the subtree
    mask is a library call whose operands and result each make a pass over memory."""
    parts = x.split_with_sizes([1] + [lvl.stop - lvl.start for lvl in topo.levels])
    sums = [parts[-1]]
    for part, children in zip(reversed(parts[:-1]), reversed(topo.level_children)):
        below = torch.cat([sums[-1], sums[-1].new_zeros(1, *x.shape[1:])])
        acc = part
        for k in range(children.shape[1]):
            acc = acc + below.index_select(0, children[:, k])
        sums.append(acc)
    return torch.cat(sums[::-1])
