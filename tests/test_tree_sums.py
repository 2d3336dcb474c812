"""Sums over supports and subtrees (``algorithms.tree_sums``) against plain loops over
each robot's parent list, on both of their paths: the level sweeps (eager, no
gradients, long batches) and the products with the 0/1 masks (gradients, short
batches)."""

import pytest
import torch
from torchrbd.algorithms.batchlast import DENSE_BELOW
from torchrbd.algorithms.topology import topology
from torchrbd.algorithms import tree_sums
from torchrbd.algorithms.tree_sums import subtree_sums, support_sums


def _supports(parents):
    """Body i's support (i and its ancestors), from the parent list."""
    out = []
    for i in range(len(parents)):
        chain, j = [], i
        while j >= 0:
            chain.append(j)
            j = parents[j] if j > 0 else -1
        out.append(chain)
    return out


def _loops(model, x, add):
    parents = [int(p) for p in model.body_parent]
    supports = _supports(parents)
    support = torch.stack([add + sum(x[j] for j in s) for s in supports])
    subtree = torch.stack([sum(x[k] for k in range(len(parents)) if i in supports[k]) for i in range(len(parents))])
    return support, subtree


@pytest.mark.parametrize("B", [3, DENSE_BELOW + 32])
def test_sums_against_loops(robot, B):
    model = robot.kd.model
    g = torch.Generator().manual_seed(B)
    x = torch.randn(model.nbody, 6, B, generator=g, dtype=torch.float64)
    add = torch.randn(6, B, generator=g, dtype=torch.float64)
    support, subtree = _loops(model, x, add)
    kept = x.clone()
    with torch.no_grad():  # B >= DENSE_BELOW: the level sweeps
        torch.testing.assert_close(support_sums(model, x, add=add), support, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(support_sums(model, x), _loops(model, x, torch.zeros_like(add))[0],
                                   rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(subtree_sums(model, x), subtree, rtol=1e-12, atol=1e-12)
        assert torch.equal(x, kept)  # not summed in place unless asked
        own = x.clone()
        torch.testing.assert_close(subtree_sums(model, own, in_place=True), subtree, rtol=1e-12, atol=1e-12)
    xg = x.clone().requires_grad_()  # with gradients: the mask products
    torch.testing.assert_close(support_sums(model, xg, add=add), support, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(subtree_sums(model, xg), subtree, rtol=1e-12, atol=1e-12)


def test_compiledsubtree_sums_by_levels(robot, monkeypatch):
    """The level-by-level subtree sums that compiled code takes without gradients
    (children gathered with a zero row for the missing ones), traced through
    ``torch.compile`` (the only place they run), against the loops."""
    model = robot.kd.model
    traced = []
    original = tree_sums.subtree_sums_by_levels
    monkeypatch.setattr(tree_sums, "subtree_sums_by_levels", lambda *a: traced.append(1) or original(*a))
    g = torch.Generator().manual_seed(7)
    x = torch.randn(model.nbody, 3, tree_sums.LEVEL_SUMS_FROM, generator=g, dtype=torch.float64)
    expected = _loops(model, x, torch.zeros(3, tree_sums.LEVEL_SUMS_FROM, dtype=torch.float64))[1]
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: subtree_sums(model, t), backend="eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), expected, rtol=1e-12, atol=1e-12)
    assert bool(traced) == (topology(model).unsort is None and len(topology(model).levels) > 0)
    assert not tree_sums.by_levels(topology(model), x)  # eager never takes it
    torch._dynamo.reset()
