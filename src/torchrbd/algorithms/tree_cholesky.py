"""Solving with the joint-space inertia through its tree-sparse factorisation.

For a kinematic tree, ``M[i, j]`` is nonzero only when coordinate ``j`` is ``i`` or one
of its ancestors (or the reverse). Factorising ``M = L^T L`` from the leaves towards
the root (Featherstone, "Efficient factorization of the joint-space inertia matrix for
branched kinematic trees", IJRR 2005) keeps that pattern: ``L[i, j]`` is nonzero only
for ``j`` on the path from the root to ``i``, and no fill-in ever appears. The six base
coordinates are a chain at the root (they are ancestors of every joint).

Here the factorisation runs one tree level at a time over batch-last *packed* storage
(``(size, B)``: one row per stored entry, see :class:`TreePlan`), so that one level is
a handful of batched gathers and scatter-adds (under ``torch.compile``, gathers only:
see :func:`_subtract_outer`), and ``M`` never has to be assembled as a dense batch-first
matrix. For iCub (29 coordinates) that is about 1,100
multiply-adds per matrix against 4,000 for a dense Cholesky, but some 250 operators
where LAPACK's batched call is one: :func:`pays_off` says when it wins.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from ..inference import tensor_cache
from .batchlast import gathered_dots, plain
from .solve import traceable, with_forward_mode
from .topology import _uncached, model_cached


@dataclass(frozen=True)
class _Level:
    """The k coordinates at depth d of the coordinate tree (path length d, the
    coordinate last): ``nodes`` (k,); ``row`` (k*d,) packed positions of their rows
    ``M[i, path(i)]``; ``ancestors`` (k*(d-1),) the coordinates of their paths without
    themselves; ``square`` (k*(d-1)^2,) where ``M[path[a], path[b]]`` is stored for
    each pair of path positions (a, b) with b <= a, and the scratch row ``size`` (one
    past the stored entries) for b > a: a whole outer product scatters in one call.
    The same updates as gathers, for ``torch.compile`` (see :func:`_subtract_outer`):
    ``square_targets`` (T,) the distinct entries of ``square`` other than the scratch
    row, and per target the two factors of each of its terms, ``square_left`` and
    ``square_right`` (T, m): positions in the level's rows ``L[i, ancestors]`` flattened
    (k*(d-1),), padded with k*(d-1) (a zero row). ``ancestor_targets`` (T',) the
    distinct ``ancestors`` and ``ancestor_pull`` (T', m') where the terms of each sit in
    the solve's products (k*(d-1),), padded the same way (see :func:`_subtract_at`)."""

    k: int
    d: int
    nodes: torch.Tensor
    row: torch.Tensor
    ancestors: torch.Tensor
    square: torch.Tensor
    square_targets: torch.Tensor
    square_left: torch.Tensor
    square_right: torch.Tensor
    ancestor_targets: torch.Tensor
    ancestor_pull: torch.Tensor


@dataclass(frozen=True)
class TreePlan:
    """Index tensors of the tree-sparse factorisation of one model's M on one device.

    Packed layout of the ``size`` stored entries (batch-last ``(size, B)``):

    * floating base: ``Mbb`` as 36 row-major entries (only ``j <= i`` are read), then
      the coupling rows ``F`` (n, 6) row-major (``M[6+a, c] = F[a, c]``), then the
      joint pairs;
    * fixed base: the joint pairs alone.

    Joint pair p is ``M[a, b] = S_b . F_a`` for joint ``b = pair_col[p]`` on the path of
    joint ``a = pair_row[p]`` (itself included). ``diagonal`` (N,) holds where each
    ``M[i, i]`` is; ``entry_row``/``entry_col`` (size,) the coordinates of every stored
    entry and ``entry_weight`` (size,) 1 for an off-diagonal entry (it stands for
    ``M[i, j]`` and ``M[j, i]``), 1/2 on the diagonal, 0 for the unread upper half of
    ``Mbb`` (so that ``-(g_i x_j + g_j x_i) * weight`` is the gradient of each entry).
    ``levels`` run from the deepest to the root.
    """

    floating: bool
    N: int
    size: int
    levels: tuple
    diagonal: torch.Tensor
    pair_row: torch.Tensor
    pair_col: torch.Tensor
    entry_row: torch.Tensor
    entry_col: torch.Tensor
    entry_weight: torch.Tensor


@tensor_cache(64)
def _plan(body_parent: tuple, body_dof: tuple, floating: bool, device: str, dtype) -> TreePlan:
    n = sum(1 for d in body_dof if d >= 0)
    dof_body = {d: b for b, d in enumerate(body_dof) if d >= 0}
    joint_parent = [body_dof[body_parent[dof_body[a]]] for a in range(n)]  # -1: the base
    off = 6 if floating else 0
    parents = ([-1, 0, 1, 2, 3, 4] if floating else []) + [off + p if p >= 0 else off - 1 for p in joint_parent]
    paths = [[] for _ in parents]  # coordinates follow the user's order, not the tree's

    def path(i):
        if not paths[i]:
            paths[i] = (path(parents[i]) if parents[i] >= 0 else []) + [i]
        return paths[i]

    for i in range(len(parents)):
        path(i)
    # packed positions
    where, rows, cols = {}, [], []
    if floating:
        for i in range(6):
            for j in range(6):
                where[i, j] = len(rows)
                rows.append(i), cols.append(j)
        for a in range(n):
            for c in range(6):
                where[6 + a, c] = len(rows)
                rows.append(6 + a), cols.append(c)
    pair_row, pair_col = [], []
    for a in range(n):
        for j in paths[off + a]:
            if j >= off:
                where[off + a, j] = len(rows)
                rows.append(off + a), cols.append(j)
                pair_row.append(a), pair_col.append(j - off)
    weight = [0.0] * len(rows)
    for (i, j), pos in where.items():
        if j in paths[i]:
            weight[pos] = 0.5 if i == j else 1.0

    def long(x):
        return torch.tensor(x, dtype=torch.long, device=device)

    def pull(flat, skip):
        """Distinct values of ``flat`` (other than ``skip``), and per value the positions
        in ``flat`` that hold it, padded with ``len(flat)`` (an appended zero)."""
        groups = {}
        for pos, t in enumerate(flat):
            if t != skip:
                groups.setdefault(t, []).append(pos)
        targets = sorted(groups)
        m = max([0] + [len(g) for g in groups.values()])
        return targets, [groups[t] + [len(flat)] * (m - len(groups[t])) for t in targets]

    def table(rows_):
        return long(rows_).view(len(rows_), len(rows_[0]) if rows_ else 0)

    levels = []
    for d in range(max([0] + [len(p) for p in paths]), 0, -1):
        nodes = [i for i in range(len(paths)) if len(paths[i]) == d]
        square = [where[paths[i][a], paths[i][b]] if b <= a else len(rows)
                  for i in nodes for a in range(d - 1) for b in range(d - 1)]
        ancestors = [j for i in nodes for j in paths[i][:-1]]
        square_targets, square_pull = pull(square, len(rows))
        ancestor_targets, ancestor_pull = pull(ancestors, -1)
        k, D = len(nodes), d - 1
        # a position in the (k, D, D) outer product -> its two factors in the (k*D,) rows
        left = [[p // (D * D) * D + p // D % D if p < len(square) else k * D for p in g] for g in square_pull]
        right = [[p // (D * D) * D + p % D if p < len(square) else k * D for p in g] for g in square_pull]
        levels.append(_Level(
            k=len(nodes), d=d, nodes=long(nodes),
            row=long([where[i, j] for i in nodes for j in paths[i]]),
            ancestors=long(ancestors),
            square=long(square), square_targets=long(square_targets),
            square_left=table(left), square_right=table(right),
            ancestor_targets=long(ancestor_targets), ancestor_pull=table(ancestor_pull),
        ))
    return TreePlan(
        floating=floating, N=len(parents), size=len(rows), levels=tuple(levels),
        diagonal=long([where[i, i] for i in range(len(parents))]),
        pair_row=long(pair_row), pair_col=long(pair_col), entry_row=long(rows), entry_col=long(cols),
        entry_weight=torch.tensor(weight, dtype=dtype, device=device),
    )


def tree_plan(model, floating: bool = True) -> TreePlan:
    """The cached :class:`TreePlan` of ``model`` (with its 6 base coordinates first when
    ``floating``, else the joints alone) on the model's device and dtype."""
    plans = model_cached(model, "_tree_plans", dict)  # where compiled code finds it (see topology.chain)
    found = plans.get(floating)
    if found is not None:
        return found
    ref = model.body_rot
    args = (model.body_parent, model.body_dof, floating, str(ref.device), ref.dtype)
    if torch.compiler.is_compiling():
        return _uncached(_plan)(*args)
    # Built with torch.func switched off: inside a transform, ``torch.tensor`` would give
    # tensors wrapped for that transform's level, and the cache would keep them past it.
    with getattr(torch._C, "_DisableFuncTorch", contextlib.nullcontext)():
        plans[floating] = _plan(*args)
    return plans[floating]


def packed_inertia(model, plan: TreePlan, F: torch.Tensor, S: torch.Tensor, Mbb: torch.Tensor | None = None,
                   diagonal: torch.Tensor | None = None) -> torch.Tensor:
    """The stored entries (size, B) of M from the CRBA's pieces (see
    :func:`~torchrbd.algorithms.crba.mass_matrix_top`, internal coordinates): ``F``
    (n, 6, B) coupling rows, ``S`` (n, 6, B) motion subspaces, ``Mbb`` (6, 6, B) the
    base block (floating base only). The model's armature goes on the joints'
    diagonal (as :func:`~torchrbd.algorithms.crba.assemble` adds it), and so does
    ``diagonal`` (N, B) or (N, 1) when given (e.g. implicit damping)."""
    if torch.compiler.is_compiling() and (F.requires_grad or S.requires_grad):
        # Every product S_b . F_a, then the pairs at distinct positions: the backward of
        # gathering rows of F and S (repeated rows) would be atomic adds under inductor,
        # which the threads contend on (n^2 products instead of one per pair, but aba's
        # compiled forward+backward of iCub on 2 threads 20-21.5 -> 16-17.7 ms).
        n = F.shape[0]
        full = (F[:, None] * S[None]).sum(2).view(n * n, -1)
        pairs = full.index_select(0, plan.pair_row * n + plan.pair_col)
    else:
        pairs = gathered_dots(F, plan.pair_row, S, plan.pair_col)
    B = pairs.shape[-1]
    if plan.floating:
        packed = torch.cat([Mbb.reshape(36, -1).expand(36, B), F.reshape(-1, B), pairs])
    else:
        packed = pairs
    if model.has_armature:
        armature = torch.cat([model.armature.new_zeros(plan.N - model.n), model.armature])[:, None]
        diagonal = armature if diagonal is None else armature + diagonal
    if diagonal is not None:
        packed = packed.index_add(0, plan.diagonal, diagonal.expand(plan.N, B))
    return packed


def factor(plan: TreePlan, packed: torch.Tensor) -> list:
    """``M = L^T L`` from the packed entries: per level (deepest first) the pair
    ``(1 / L_ii (k, 1, B), L[i, ancestors] (k, d-1, B))``. A pivot that is not positive
    gives inf or NaN."""
    B = packed.shape[-1]
    # the entries still to be reduced (each level subtracts its outer products), and a scratch row
    W = torch.cat([packed, packed.new_zeros(1, B)])
    out = []
    for lvl in plan.levels:
        rows = W.index_select(0, lvl.row).view(lvl.k, lvl.d, B)
        anc, diag = rows.split_with_sizes([lvl.d - 1, 1], 1)
        inv = diag.rsqrt()
        row = anc * inv
        out.append((inv, row))
        if lvl.d > 1:
            W = _subtract_outer(W, row, lvl)
    return out


def _subtract_outer(W, row, lvl):
    """``W`` with each node's outer product ``row row^T`` (k, d-1, d-1, B) subtracted at
    ``lvl.square`` (its lower half; the upper half lands on the scratch row). Eager: the
    products, then one ``index_add``. Under ``torch.compile`` each distinct target
    gathers the two factors of each of its terms (no scatter, as in
    :func:`_subtract_at`), and inductor computes the products inside that loop instead
    of storing the outer products first (compiled aba of iCub, B = 1024, 2 threads,
    in-process A/B: 0.71x the time; the same form for the solve's updates made no
    difference to aba and slowed its forward+backward)."""
    B = row.shape[-1]
    if not torch.compiler.is_compiling():
        return W.index_add_(0, lvl.square, (row[:, :, None] * row[:, None]).view(-1, B), alpha=-1)
    flat = torch.cat([row.reshape(-1, B), row.new_zeros(1, B)])  # the factors, and a zero
    left, right = (flat.index_select(0, i.reshape(-1)).view(*i.shape, B) for i in (lvl.square_left, lvl.square_right))
    targets = lvl.square_targets
    return W.index_copy(0, targets, W.index_select(0, targets) - (left * right).sum(1))


def _subtract_at(x, values, index, targets, pull):
    """``x`` with each row ``values[k]`` subtracted from row ``index[k]`` of ``x`` (repeated
    indices add up). Eager: one ``index_add``. Under ``torch.compile`` inductor would
    make that atomic adds, which contend between threads (aba of iCub ran slower on 2
    threads than on 1); there each of the distinct ``targets`` (T,) gathers its own
    terms instead, ``pull`` (T, m) their positions in ``values`` padded with
    ``len(values)`` (standing for zero), and is written once."""
    if torch.compiler.is_compiling():
        padded = torch.cat([values, values.new_zeros(1, *values.shape[1:])])
        terms = padded.index_select(0, pull.reshape(-1)).view(*pull.shape, *values.shape[1:]).sum(1)
        return x.index_copy(0, targets, x.index_select(0, targets) - terms)
    return x.index_add(0, index, values, alpha=-1)


def solve_upper(plan: TreePlan, fac: list, b: torch.Tensor) -> torch.Tensor:
    """``y = L^-T b`` for ``b`` (N, c, B) (leaves first)."""
    y = torch.zeros_like(b)
    for lvl, (inv, row) in zip(plan.levels, fac):
        yi = b.index_select(0, lvl.nodes) * inv
        y = y.index_copy(0, lvl.nodes, yi)  # each coordinate is set once
        if lvl.d > 1:  # (out of place: b and the factor may differ in requires_grad or vmap batching)
            contrib = (row[:, :, None] * yi[:, None]).flatten(0, 1)
            b = _subtract_at(b, contrib, lvl.ancestors, lvl.ancestor_targets, lvl.ancestor_pull)
    return y


def solve_lower(plan: TreePlan, fac: list, y: torch.Tensor) -> torch.Tensor:
    """``x = L^-1 y`` for ``y`` (N, c, B) (root first)."""
    x = torch.zeros_like(y)
    for lvl, (inv, row) in zip(reversed(plan.levels), reversed(fac)):
        xi = y.index_select(0, lvl.nodes)
        if lvl.d > 1:
            known = x.index_select(0, lvl.ancestors).view(lvl.k, lvl.d - 1, *x.shape[1:])
            xi = xi - (row[:, :, None] * known).sum(1)
        x = x.index_copy(0, lvl.nodes, xi * inv)
    return x


def inverse_diagonal(plan: TreePlan, fac: list) -> torch.Tensor:
    """``diag(M^-1)`` (N, B) from :func:`factor`: ``M^-1 = X X^T`` with ``X = L^-1``, whose
    rows have L's pattern and follow root first from ``L X = 1``:
    ``X[i, i] = 1 / L_ii`` and ``X[i, j] = -(1 / L_ii) sum_k L[i, k] X[k, j]`` over the
    ancestors k of i that have j on their path; ``(M^-1)_ii = |X[i]|^2``."""
    B = fac[0][0].shape[-1]
    X = fac[0][0].new_zeros(plan.size + 1, B)  # packed like M, and a scratch row of zeros
    out = fac[0][0].new_zeros(plan.N, B)
    for lvl, (inv, row) in zip(reversed(plan.levels), reversed(fac)):
        if lvl.d == 1:
            x = inv
        else:
            known = X.index_select(0, lvl.square).view(lvl.k, lvl.d - 1, lvl.d - 1, B)  # X[path[a], path[b]], b <= a
            s = (row[:, :, None] * known).sum(1)
            x = torch.cat([-s * inv, inv], 1)
        X.index_copy_(0, lvl.row, x.reshape(-1, B))
        out.index_copy_(0, lvl.nodes, x.square().sum(1))
    return out


def solve_factored(plan: TreePlan, fac: list, b: torch.Tensor) -> torch.Tensor:
    """``M^-1 b`` for ``b`` (N, c, B) from :func:`factor`."""
    return solve_lower(plan, fac, solve_upper(plan, fac, b))


def factor_tensors(fac: list) -> tuple:
    """The tensors of a :func:`factor`, flattened (``(inv, row)`` per level)."""
    return tuple(t for pair in fac for t in pair)


def factor_from_tensors(flat) -> list:
    """The factor of :func:`factor` from its :func:`factor_tensors`."""
    return list(zip(flat[0::2], flat[1::2]))


def check_positive(fac: list) -> None:
    """Raise ``torch.linalg.LinAlgError`` (as LAPACK's Cholesky) when a pivot of the
    factor ``fac`` was not positive (inf or NaN in its ``1 / L_ii``); under
    ``torch.compile`` a traced test, no graph break. Not checked inside ``torch.func``
    transforms, where the test would be data-dependent control flow."""
    if not fac:
        return
    finite = torch.cat([inv.reshape(-1) for inv, _ in fac]).isfinite().all()
    if torch.compiler.is_compiling():
        torch._assert_async(finite, NOT_PD)
    elif plain(fac[0][0]) and not bool(finite):
        raise torch.linalg.LinAlgError(NOT_PD)


class _TreeSolve(torch.autograd.Function):
    """x = M^-1 b with M given by its packed entries. The backward reuses the factor:
    ``g_b = M^-1 g`` and, for the entry standing for ``M[i, j]`` and ``M[j, i]``,
    ``-(g_b[i] x[j] + g_b[j] x[i])`` (halved on the diagonal). With ``create_graph``
    it factorises again inside the graph, so higher derivatives stay exact.
    Outputs: x, then the factor's tensors (``(inv, row)`` per level, flattened).
    Forward mode: ``_TreeSolveJvp``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(plan, packed, b):
        fac = factor(plan, packed)
        return (solve_factored(plan, fac, b), *factor_tensors(fac))

    @staticmethod
    def setup_context(ctx, inputs, output):
        plan, packed, _ = inputs
        x, *flat = output
        ctx.plan = plan
        ctx.mark_non_differentiable(*flat)
        ctx.save_for_backward(packed, x, *flat)

    @staticmethod
    def backward(ctx, gx, *_):
        plan, (packed, x, *flat) = ctx.plan, ctx.saved_tensors
        fac = factor(plan, packed) if torch.is_grad_enabled() else factor_from_tensors(flat)
        gb = solve_factored(plan, fac, gx)
        r, c = plan.entry_row, plan.entry_col
        g_packed = gb.index_select(0, r) * x.index_select(0, c) + gb.index_select(0, c) * x.index_select(0, r)
        g_packed = -(g_packed.sum(1) * plan.entry_weight[:, None])
        return None, g_packed, gb


def _tree_jvp(ctx, _d_plan, d_packed, d_b):
    """Forward mode: ``dx = M^-1 (db - dM x)``, with ``dM x`` summed over the stored
    entries (each stands for ``M[i, j]`` and ``M[j, i]``, see ``entry_weight``)."""
    plan, (x, *flat) = ctx.plan, ctx.saved_tensors
    rhs = torch.zeros_like(x) if d_b is None else d_b
    if d_packed is not None:
        r, c = plan.entry_row, plan.entry_col
        dw = (d_packed * plan.entry_weight[:, None])[:, None]
        rhs = rhs - x.new_zeros(x.shape).index_add(0, r, dw * x.index_select(0, c)).index_add(
            0, c, dw * x.index_select(0, r))
    dx = solve_factored(plan, factor_from_tensors(flat), rhs)
    return (dx, *(None for _ in flat))


_TreeSolveJvp = with_forward_mode(_TreeSolve, _tree_jvp)


def pays_off(batch: int, dtype: torch.dtype, device: torch.device, compiled: bool = False) -> bool:
    """Whether the tree factorisation beats the dense path (M assembled batch-first,
    then LAPACK's batched Cholesky), which needs far fewer operators. Measured on a
    2-core CPU, in-process A/B:

    * eager, float32 (one thread): the MJCF humanoid's simulator step takes 0.91x the
      time at 256-512 environments and 0.69-0.82x at 4096, aba of iCub 0.93x at 4096.
    * eager, float64, aba of iCub: on one thread 0.89-0.92x at 512-4096 configurations
      (0.96x at 256); on two threads 0.92-1.06x at 1024, because the tree's ``index_add``
      runs on one thread while the dense path's elementwise work uses both. For one
      matrix the tree is 2-3x slower. So: batches of 512 or more, in float32 on any
      thread count, in float64 when torch runs on one thread.
    * under ``torch.compile`` (inductor fuses each level's operators; LAPACK stays a
      library call per matrix), aba of iCub in float64: 0.42x the time at 1024
      configurations, 0.71x at 256, 1.13x at 64 (1 thread); on 2 threads 0.74x at
      1024, 0.84x at 256, even at 64. So: batches of ``COMPILED_FROM`` or more, in
      either dtype. Compiling takes about twice as long.

    On CUDA it is unmeasured, so the dense path stays."""
    if device.type != "cpu":
        return False
    if compiled:
        return batch >= COMPILED_FROM
    return batch >= 512 and (dtype == torch.float32 or torch.get_num_threads() == 1)


COMPILED_FROM = 256


def tree_solve(plan: TreePlan, packed: torch.Tensor, b: torch.Tensor, check: bool = False) -> torch.Tensor:
    """``M^-1 b`` for M given by ``packed`` (size, B) (see :func:`packed_inertia`) and
    ``b`` (N, B) or (N, c, B), batch-last. Differentiable in both (a lean backward, see
    :class:`_TreeSolve`; ``torch.func`` transforms too). A matrix that is not positive
    definite gives inf or NaN, or with ``check`` raises ``torch.linalg.LinAlgError`` (as
    LAPACK's Cholesky; not checked inside ``torch.func`` transforms, where the test would
    be data-dependent control flow)."""
    one = b.dim() == 2
    b3 = b[:, None] if one else b
    if torch.is_grad_enabled() and (packed.requires_grad or b.requires_grad):
        x, *flat = traceable(_TreeSolve, _TreeSolveJvp).apply(plan, packed, b3)
        fac = factor_from_tensors(flat)
    else:
        fac = factor(plan, packed)
        x = solve_factored(plan, fac, b3)
    if check:
        check_positive(fac)
    return x[:, 0] if one else x


NOT_PD = "the matrix is not positive definite"  # also the message of the compiled check
