"""Index tensors derived once from a model's tree, cached per device.

The tree sweep used by every algorithm: bodies are processed one depth level
at a time (all bodies of a level in one batched op). Sums over subtrees and
over supports (ancestors) need no per-level transforms for world-frame quantities:
they are matrix products with 0/1 masks, or, for eager long batches without
gradients, level sweeps into one buffer (:mod:`~.tree_sums`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..inference import normal_tensors, tensor_cache
from ..model.model import JointType, Model


@dataclass(frozen=True)
class Topology:
    """Derived indices of one model on one device.

    * ``levels[d]``: bodies at depth d+1 (the base is depth 0): a ``slice`` when they
      are consecutive (models from :func:`~torchrbd.model.builder.build_model` store
      bodies level by level), else a (k_d,) long tensor.
    * ``level_parent_pos[d]``: position of each body's parent within the previous
      level (level -1 is the base alone): a ``slice`` when that is a plain run
      (a view, no copy; length 1 broadcasts), else a (k_d,) long tensor.
    * ``unsort``: (nbody,) position of each body in the processing order
      ``[0] + levels[0] + levels[1] + ...``, or None when that order is the
      bodies' own (models built by :func:`~torchrbd.model.builder.build_model`).
    * ``ancestor``: (nbody, nbody) float mask, ``ancestor[i, j] = 1`` when body j
      is body i or one of its ancestors (its *support*).
    * ``ancestor_columns``: ``(cols, weights)`` (nbody, depth) the same mask as each
      row's nonzero columns, padded with column 0 at weight 0 (compiled sums over
      supports, see :func:`~.batchlast.mask_sum`).
    * ``level_children``: per level from the base's (depth 0) to the last but one, a
      (k, c) long tensor of each body's children's positions in the next level, padded
      with that level's size (a zero row appended there; compiled sums over subtrees,
      see :func:`~.tree_sums.subtree_sums`).
    * ``body_of_dof``: (n,) body moved by each coordinate.
    * ``dof_row_of_body``: (nbody,) ``1 +`` the coordinate of each body's joint, 0 for
      bodies without one: the rows of the coordinates with a zero row prepended that
      :func:`~.kinematics.per_body` gathers.
    * ``is_revolute`` / ``is_prismatic``: (nbody,) float masks.
    * ``link_body``: (nlink,) body of each link.
    * ``subtrees``: (1+n, nbody) float mask: row 0 all ones (the whole tree, the
      base's subtree), row 1+a the subtree of the body of coordinate a.
    * ``mass_matrix_index``: ((6+n)^2,) where each entry of the joint-space inertia
      is read from in the flattened (7+n, 6+n) product ``G`` of
      :func:`~torchrbd.algorithms.crba.assemble`: its own entry for the base rows and
      for pairs where the row coordinate supports the column one, the mirrored entry
      for the transposed cases, and G's last row (zeros) for unrelated pairs.
    * ``mass_matrix_entries``: (K,) the distinct values of ``mass_matrix_index``
      (sorted), the only entries of ``G`` that the inertia holds (one of them zero),
      and ``mass_matrix_place``: ((6+n)^2,) where each entry of the inertia is in them.
    * ``mass_matrix_joint_diagonal``: (n,) where the joints' diagonal entries are in
      ``mass_matrix_entries`` (where the armature is added).
    * ``mass_matrix_pairs``: (2, k) the coordinates ``(a, b)`` of the entries after
      G's base rows (whose 6 (6+n) entries are all distinct and come first), but G's zero
      (the last entry, where some coordinates are unrelated).
    * ``mass_matrix_body_pairs`` and ``mass_matrix_body_joint_diagonal``: the same with
      the coordinates in body order (row r the coordinate of body r + 1), and
      ``mass_matrix_body_place``: ((6+n)^2,) where each entry of the inertia, in
      coordinate order, is in that order's distinct entries.
    * ``dof_of_body_row``: (n,) the coordinate of body r + 1 (the inverse of
      ``body_of_dof``, less one).
    """

    levels: tuple
    level_parent_pos: tuple
    unsort: torch.Tensor | None
    ancestor: torch.Tensor
    body_of_dof: torch.Tensor
    dof_row_of_body: torch.Tensor
    is_revolute: torch.Tensor
    is_prismatic: torch.Tensor
    link_body: torch.Tensor
    subtrees: torch.Tensor
    mass_matrix_index: torch.Tensor
    mass_matrix_entries: torch.Tensor
    mass_matrix_place: torch.Tensor
    mass_matrix_joint_diagonal: torch.Tensor
    mass_matrix_pairs: torch.Tensor
    mass_matrix_body_place: torch.Tensor
    mass_matrix_body_joint_diagonal: torch.Tensor
    mass_matrix_body_pairs: torch.Tensor
    dof_of_body_row: torch.Tensor
    ancestor_columns: tuple
    level_children: tuple
    has_revolute: bool
    has_prismatic: bool


@tensor_cache(64)
def _topology(parents: tuple, jtypes: tuple, body_dof: tuple, link_body: tuple, device: str, dtype) -> Topology:
    nb = len(parents)
    depth = [0] * nb
    for i in range(1, nb):
        depth[i] = depth[parents[i]] + 1
    levels = [[i for i in range(nb) if depth[i] == d] for d in range(1, max(depth) + 1)]
    order = [0]
    pos = {0: 0}
    parent_pos = []
    prev = [0]
    for lvl in levels:
        parent_pos.append([prev.index(parents[i]) for i in lvl])
        for i in lvl:
            pos[i] = len(order)
            order.append(i)
        prev = lvl
    # plain lists (no tensor-valued branching, so torch.compile traces through)
    anc = [[0.0] * nb for _ in range(nb)]
    for i in range(nb):
        j = i
        while j >= 0:
            anc[i][j] = 1.0
            j = parents[j]
    n = sum(1 for d in body_dof if d >= 0)
    body_of_dof = [0] * n
    for b, d in enumerate(body_dof):
        if d >= 0:
            body_of_dof[d] = b
    dof_support = [[anc[body_of_dof[b]][body_of_dof[a]] for b in range(n)] for a in range(n)]

    layout = _mass_matrix_layout(dof_support)
    # the same layout with the coordinates in body order (row r: body r + 1), its
    # placement read in coordinate order: where the eager mass matrix works on the
    # bodies' rows as the tree sweeps leave them (see :func:`~.crba.mass_matrix`)
    # (with one body per coordinate besides the base, as the model builder makes; other
    # trees keep the coordinate order here, and the mass matrix does not use it)
    one_each = nb == n + 1
    by_body = _mass_matrix_layout([[anc[b + 1][a + 1] for b in range(n)] for a in range(n)]) if one_each else layout
    N = 6 + n
    row = list(range(6)) + ([5 + b for b in body_of_dof] if one_each else list(range(6, N)))  # a coordinate's row
    body_place = [by_body["place"][row[i] * N + row[j]] for i in range(N) for j in range(N)]

    def long(x):
        return torch.tensor(x, dtype=torch.long, device=device)

    def rows(x):
        """x as a slice when it is a run of consecutive integers (or one repeated)."""
        if len(set(x)) == 1:
            return slice(x[0], x[0] + 1)
        if x == list(range(x[0], x[0] + len(x))):
            return slice(x[0], x[0] + len(x))
        return long(x)

    return Topology(
        levels=tuple(rows(lvl) for lvl in levels),
        level_parent_pos=tuple(rows(p) for p in parent_pos),
        unsort=None if order == list(range(nb)) else long([pos[i] for i in range(nb)]),
        ancestor=torch.tensor(anc, device=device, dtype=dtype),
        body_of_dof=long(body_of_dof),
        dof_row_of_body=long([d + 1 for d in body_dof]),
        is_revolute=torch.tensor([float(t == JointType.REVOLUTE) for t in jtypes], device=device, dtype=dtype),
        is_prismatic=torch.tensor([float(t == JointType.PRISMATIC) for t in jtypes], device=device, dtype=dtype),
        link_body=long(list(link_body)),
        subtrees=torch.tensor([[1.0] * nb] + [[anc[k][body_of_dof[a]] for k in range(nb)] for a in range(n)],
                              device=device, dtype=dtype),
        mass_matrix_index=long(layout["index"]),
        mass_matrix_entries=long(layout["entries"]),
        mass_matrix_place=long(layout["place"]),
        mass_matrix_joint_diagonal=long(layout["joint_diagonal"]),
        mass_matrix_pairs=long(layout["pairs"]),
        mass_matrix_body_place=long(body_place),
        mass_matrix_body_joint_diagonal=long(by_body["joint_diagonal"]),
        mass_matrix_body_pairs=long(by_body["pairs"]),
        dof_of_body_row=long([d for d in body_dof if d >= 0] if one_each else list(range(n))),
        ancestor_columns=_padded_columns(anc, device, dtype),
        level_children=_level_children(parent_pos, device),
        has_revolute=JointType.REVOLUTE in jtypes,
        has_prismatic=JointType.PRISMATIC in jtypes,
    )


def _mass_matrix_layout(support: list) -> dict:
    """The placing indices of :class:`Topology`'s ``mass_matrix_*`` fields (as lists) for
    coordinates whose support relation is ``support[a][b]`` (1 when coordinate a supports
    coordinate b): ``index``, ``entries``, ``place``, ``joint_diagonal`` and ``pairs``."""
    n = len(support)
    N = 6 + n
    zero = N * N  # the first entry of G's last row, all zeros

    def entry(i, j):
        if i < 6:
            return i * N + j
        if j < 6:
            return j * N + i
        a, b = i - 6, j - 6
        if support[a][b]:
            return i * N + j
        if support[b][a]:
            return j * N + i
        return zero

    index = [entry(i, j) for i in range(N) for j in range(N)]
    entries = sorted(set(index))
    where = {e: k for k, e in enumerate(entries)}
    pair_entries = [e for e in entries if 6 * N <= e < zero]  # after G's base rows, but its zero
    return {
        "index": index,
        "entries": entries,
        "place": [where[e] for e in index],
        "joint_diagonal": [where[i * N + i] for i in range(6, N)],
        "pairs": [[e // N - 6 for e in pair_entries], [e % N - 6 for e in pair_entries]],
    }


def _level_children(parent_pos: list, device) -> tuple:
    """``Topology.level_children`` from each level's parent positions (depth 1 on)."""
    out, above = [], 1  # the base's level holds one body
    for parents in parent_pos:
        children = [[j for j, p in enumerate(parents) if p == i] for i in range(above)]
        width = max(len(c) for c in children)
        padded = [c + [len(parents)] * (width - len(c)) for c in children]
        out.append(torch.tensor(padded, dtype=torch.long, device=device))
        above = len(parents)
    return tuple(out)


def _padded_columns(mask, device, dtype):
    """``(cols, weights)`` (r, w) of a 0/1 mask (r, k): each row's nonzero columns,
    padded to the longest row's count with column 0 and weight 0."""
    rows = [[j for j, v in enumerate(r) if v] for r in mask]
    w = max(len(r) for r in rows)
    return (torch.tensor([r + [0] * (w - len(r)) for r in rows], dtype=torch.long, device=device),
            torch.tensor([[1.0] * len(r) + [0.0] * (w - len(r)) for r in rows], dtype=dtype, device=device))


def topology(model: Model) -> Topology:
    """The cached :class:`Topology` of ``model`` on its device and dtype."""
    cached = model.__dict__.get("_topology")
    if cached is not None:
        return cached
    ref = model.body_rot
    build = _uncached(_topology)
    topo = build(model.body_parent, model.joint_type, model.body_dof, model.link_body, str(ref.device), ref.dtype)
    object.__setattr__(model, "_topology", topo)  # a model's device and dtype never change
    return topo


def host_topology(model: Model) -> Topology:
    """The :class:`Topology` of ``model`` on the CPU (float64), whatever the model's
    device: for decisions that read index values (no device synchronisation, and
    possible for meta tensors, whose values cannot be read)."""
    build = _uncached(_topology)
    return build(model.body_parent, model.joint_type, model.body_dof, model.link_body, "cpu", torch.float64)


def add_to_parents(buffer: torch.Tensor, parents, x: torch.Tensor) -> None:
    """Add the rows of ``x`` (k, ...) into their parents' rows of ``buffer``, in place.
    ``parents`` as :class:`Topology` stores a level's positions: a slice of k rows (one
    parent each), a slice of one row (all k siblings into it), or a (k,) index tensor."""
    if not isinstance(parents, slice):
        buffer.index_add_(0, parents, x)
    elif parents.stop - parents.start == x.shape[0]:
        buffer[parents].add_(x)
    else:
        buffer[parents].add_(x.sum(0, keepdim=True))


@dataclass(frozen=True)
class Chain:
    """The bodies on the path from the base's child down to one body (root side
    first; empty for the base): ``bodies`` and ``dofs`` (k,) long, their coordinates;
    ``columns`` (6+k,) the columns of the generalized velocity that move the body
    (the base's 6, then ``6 + dofs``); ``runs`` the joint columns as runs of consecutive
    coordinates, ``(first column, position along the chain, length)`` by column;
    ``jacobian_columns`` (6 k,) where the rows of the chain's columns (k, 6) go in a
    row-major (6, 6+n) Jacobian (for :func:`~.placement.place_zeroed`)."""

    bodies: torch.Tensor
    dofs: torch.Tensor
    columns: torch.Tensor
    runs: tuple
    jacobian_columns: torch.Tensor

    def __len__(self) -> int:
        return self.bodies.shape[0]


@tensor_cache(256)
def _chain(parents: tuple, body_dof: tuple, n: int, body: int, device: str) -> Chain:
    path = []
    while body > 0:
        path.append(body)
        body = parents[body]
    path.reverse()
    dofs = [body_dof[b] for b in path]
    runs = []
    for k, d in enumerate(dofs):
        if runs and runs[-1][1] + runs[-1][2] == k and runs[-1][0] + runs[-1][2] == 6 + d:
            runs[-1][2] += 1
        else:
            runs.append([6 + d, k, 1])
    N = 6 + n
    jacobian_columns = [r * N + 6 + d for d in dofs for r in range(6)]
    return Chain(
        bodies=torch.tensor(path, dtype=torch.long, device=device),
        dofs=torch.tensor(dofs, dtype=torch.long, device=device),
        columns=torch.tensor(list(range(6)) + [6 + d for d in dofs], dtype=torch.long, device=device),
        runs=tuple(sorted(tuple(r) for r in runs)),
        jacobian_columns=torch.tensor(jacobian_columns, dtype=torch.long, device=device),
    )


def chain(model: Model, body: int) -> Chain:
    """The cached :class:`Chain` from the base to ``body`` on the model's device.

    Also kept on the model (``model_cached``), where compiled code finds it: dynamo does
    not look into an ``lru_cache``, and a chain built while tracing would be rebuilt by
    the compiled graph on every call."""
    return model_cached_entry(
        model, "_chains", body, lambda: _uncached(_chain)(model.body_parent, model.body_dof, model.n, body, str(model.body_rot.device)))


def model_cached(model: Model, name: str, make, depends_on=()):
    """The model's cache attribute ``name``, created by ``make()`` on first use. Not
    stored while ``torch.compile`` traces (storing is a side effect dynamo would replay
    as a graph break, so a trace gets a fresh, unstored one; :func:`~.prepare.prepare`
    fills the caches first), nor while a tensor of ``depends_on`` (the model parameters
    it is made of) requires grad: then every call makes it again, inside the graph.
    Models are replaced, never changed, so a stored value cannot go stale."""
    cache = model.__dict__.get(name)
    if cache is None:
        if torch.compiler.is_compiling():  # (no wrapper made while tracing: dynamo breaks the graph on it)
            return make()
        cache = normal_tensors(make)()
        if not any(t.requires_grad for t in depends_on):
            object.__setattr__(model, name, cache)
    return cache


def model_cached_entry(model: Model, name: str, key, make, depends_on=()):
    """The entry ``key`` of the model's cache dict ``name`` (:func:`model_cached`), made by
    ``make()`` on first use. As for :func:`model_cached`, an entry is not stored while
    ``torch.compile`` traces (a stored one is read), and is made anew on every call while
    a tensor of ``depends_on`` requires grad."""
    if any(t.requires_grad for t in depends_on):
        return make()
    entries = model_cached(model, name, dict)
    found = entries.get(key)
    if found is None:
        if torch.compiler.is_compiling():
            return make()
        found = entries[key] = normal_tensors(make)()
    return found


def _uncached(fn):
    """``fn`` itself while ``torch.compile`` traces (dynamo skips an ``lru_cache`` anyway,
    with a warning; the result is a constant of the graph), else its cached wrapper."""
    return fn.__wrapped__ if torch.compiler.is_compiling() else fn
