"""Composite-rigid-body algorithm in the world frame.

With every quantity about one fixed origin O (world axes), a body's composite inertia is the
plain sum of the inertias of its subtree (one masked product) and
``M[a, b] = S_a . (Ic_b S_b)`` whenever coordinate a supports coordinate b.

In a velocity representation whose base velocity maps to the internal one by
``T`` (see :mod:`.representation`), ``M = [[T^T Mbb T, T^T F^T], [F T, P]]`` with
``F`` the coupling rows and ``P[a, b] = S_a . F_b``: :func:`assemble` makes all the
distinct entries with one batched product and places them with one gather.
:func:`mass_matrix` does both, or for long eager batches without gradients works on
the bodies' rows in their own order and leaves the coordinates' order to that gather.
"""

from __future__ import annotations

import torch

from ..inference import result_buffer
from .inertia import SpatialInertia, subtree_masses
from .kinematics import Kinematics, dof_subspaces
from .batchlast import (
    DENSE_BELOW, batch_last_grad, crosswise_empty, crosswise_pad, dense_products, dense_times, gathered_dots, mask_sum,
    matmul, one_configuration, writes_into_buffers,
)
from . import placement, tree_sums
from .topology import topology


def mass_matrix(model, kin: Kinematics, inertia: SpatialInertia, T=None, own_inertia: bool = False) -> torch.Tensor:
    """(B, 6+n, 6+n) the joint-space inertia from whole-tree kinematics and the bodies'
    world inertias (:func:`~.inertia.world_inertias`), in the representation whose
    base-velocity map is ``T`` (None: the internal one, MIXED): :func:`mass_matrix_top`
    then :func:`assemble`, or for long eager batches without gradients
    :func:`_mass_matrix_by_bodies`. ``own_inertia``: ``inertia`` is the
    caller's own, not used again (its sums may overwrite it)."""
    if _by_bodies(model, kin, inertia, T):
        return _mass_matrix_by_bodies(model, kin, inertia, own_inertia, T)
    Mbb, F, S = mass_matrix_top(model, kin, inertia)
    return assemble(model, Mbb, F, S, T)


def _by_bodies(model, kin: Kinematics, inertia: SpatialInertia, T=None) -> bool:
    """Whether :func:`_mass_matrix_by_bodies` runs: a long batch (the component-wise
    products), eager and outside autograd, bodies stored level by level (the sweeps),
    one body per coordinate besides the base."""
    return (kin.S is not None and kin.S.shape[-1] >= DENSE_BELOW and model.nbody == model.n + 1
            and topology(model).unsort is None
            and writes_into_buffers(kin.S, inertia.h, inertia.J, T))


def _mass_matrix_by_bodies(model, kin: Kinematics, inertia: SpatialInertia, own_inertia: bool,
                           T=None) -> torch.Tensor:
    """:func:`mass_matrix` in the bodies' order: the composite inertias summed by a
    sweep of the levels (no product with the subtree mask, whose rows are in coordinate
    order), the coupling columns ``F = Ic S`` of the bodies' own motion subspaces
    (``kin.S``, no gather into coordinate order) written straight into the distinct
    entries, and the placing gather (``Topology.mass_matrix_body_place``) reading them in
    coordinate order. Otherwise as :func:`_assemble_from_entries`. In another
    representation (``T`` (6, 6, B)) only the base rows change: see
    :func:`_base_rows_in_representation`."""
    topo = topology(model)
    n, B = model.n, kin.S.shape[-1]
    N, K = 6 + n, topo.mass_matrix_entries.shape[0]
    masses = subtree_masses(model)[:, None]
    h, J = (tree_sums.subtree_sums(model, x, in_place=own_inertia) for x in (inertia.h, inertia.J))
    S = kin.S[1:]  # (n, 6, B) body r + 1's in row r
    k = 6 * N
    DT = crosswise_empty(S, K, B)  # (the gather reads across its rows)
    base = DT[:k].view(6, N, B)
    base[:, :6].copy_(SpatialInertia(masses[:1], h[:1], J[:1]).matrix()[0])  # the whole robot's
    F = SpatialInertia(masses[1:], h[1:], J[1:]).apply_out(S, base[:, 6:].transpose(0, 1))  # (n, 6, B)
    a, b = topo.mass_matrix_body_pairs
    kp = a.shape[0]
    P = gathered_dots(S, a, F, b, out=DT[k:k + kp])  # (k', B) S_a . F_b
    if model.has_armature:  # rotor inertia on the joints' diagonal
        armature = model.armature.index_select(0, topo.dof_of_body_row)
        P.index_add_(0, topo.mass_matrix_body_joint_diagonal - k, armature[:, None].expand(n, B))
    if T is not None:  # (after the products above, which read F in the base rows)
        _base_rows_in_representation(base, T)
    DT[k + kp:].zero_()  # G's zero, where some coordinates are unrelated
    return _place(DT, topo.mass_matrix_body_place).view(B, N, N)


def _base_rows_in_representation(base: torch.Tensor, T: torch.Tensor) -> None:
    """The mass matrix's base rows ``[Mbb | F^T]`` (6, 6+n, B) in the internal
    representation overwritten by ``T^T [Mbb T | F^T]``, those of the representation
    whose base-velocity map is ``T`` (6, 6, B); the joints' block does not change. Two
    batch-last products of 6 multiply-adds, where the batched product of the whole of G
    in :func:`assemble` runs one library call per configuration (iCub, B = 1024, BODY_FIXED
    mass matrix: see docs/performance.md)."""
    Mbb = base[:, :6]
    Mbb.copy_(matmul(Mbb, T))  # (the product reads Mbb: written to a fresh tensor first)
    base.copy_(matmul(T.transpose(0, 1), base))


def mass_matrix_top(model, kin: Kinematics, inertia: SpatialInertia):
    """Base rows of the joint-space inertia for the base twist about O (world axes),
    from the whole-tree kinematics of :func:`~.kinematics.forward`.

    Returns ``(Mbb, F, S)``: ``Mbb`` (6, 6, B) the composite inertia of the whole
    robot, ``F`` (n, 6, B) with ``F_b = Ic_b S_b`` (the base-joint coupling
    column of coordinate b) and ``S`` (n, 6, B) the coordinates' motion subspaces.
    """
    S = dof_subspaces(model, kin)
    if dense_products(inertia.h, S):  # a short batch: the subtree sums of the dense matrices
        Ic = mask_sum(topology(model).subtrees, inertia.matrices())  # (1+n, 6, 6, B)
        return Ic[0], dense_times(Ic[1:], S), S
    Ic = inertia.subtree_sums(model)  # row 0 the whole robot, then one per coordinate
    (m0, m), (h0, h), (J0, J) = (x.split_with_sizes([1, model.n]) for x in (Ic.m, Ic.h, Ic.J))
    F = SpatialInertia(m, h, J).apply(S)
    Mbb = SpatialInertia(m0, h0, J0).matrix()[0]
    return Mbb, F, S


def assemble(model, Mbb, F, S, T=None) -> torch.Tensor:
    """The joint-space inertia (B, 6+n, 6+n), batch-first and contiguous (what a
    batched Cholesky wants).

    ``Mbb`` (6, 6, B), ``F`` (n, 6, B), ``S`` (n, 6, B) from :func:`mass_matrix_top`
    (internal coordinates); ``T`` (6, 6, B) the base-velocity map of the wanted
    representation (None: the internal one, MIXED). One batched product

        G = [T^T; S; 0] @ [Mbb T | F^T]        (7+n, 6) @ (6, 6+n)

    holds the base rows ``T^T [Mbb T | F^T]`` and ``S_a . F_b`` (its rows ``S Mbb T``
    are not used); one gather (``Topology.mass_matrix_index``) places the entries,
    mirrors the blocks below the diagonal and zeroes pairs of unrelated coordinates.
    That product serves gradients and eager batches shorter than ``DENSE_BELOW``;
    without gradients, compiled code and long eager batches make only G's distinct
    entries (``Topology.mass_matrix_entries``) and place those.
    """
    topo = topology(model)
    n, B = model.n, S.shape[-1]
    N = 6 + n
    if one_configuration(Mbb, F, S):
        return _assemble_one(model, Mbb, F, S, T)
    if T is None:
        top, right = torch.eye(6, dtype=S.dtype, device=S.device)[..., None].expand(6, 6, B), Mbb
    else:
        top, right = T.transpose(0, 1), matmul(Mbb, T)
    wants_grad = any(x.requires_grad for x in (Mbb, F, S, T) if x is not None)
    if B >= DENSE_BELOW and writes_into_buffers(Mbb, F, S, T):
        return _assemble_from_entries(model, Mbb, F, S, T)  # (eager, no autograd of any kind)
    if torch.compiler.is_compiling() and not wants_grad:
        # Only G's distinct entries (K, a third of G for iCub) as batch-last
        # multiply-sums, which inductor vectorises (a bmm on CPU would run one small
        # product per matrix); then a small transpose to batch-first and a gather of
        # whole values. Placing them from batch-last memory instead would leave a
        # (N, N, B) view whose batch-first copy (for a Cholesky, or the user's next
        # operation) costs more than the rest of the mass matrix.
        right = torch.cat([right, F.transpose(0, 1)], 1)  # (6, N, B)
        # G's base rows in the internal representation are right's (its first 6N entries):
        # copied, not summed over products with 0 and 1
        k = 6 * N if T is None else 0
        entries = topo.mass_matrix_entries[k:]
        if T is None:
            left, rows = torch.cat([S, S.new_zeros(1, 6, B)], 0), entries // N - 6  # (n+1, 6, B): G's rows from 6 on
        else:
            left, rows = torch.cat([top, S, S.new_zeros(1, 6, B)], 0), entries // N  # (N+1, 6, B)
        D = (left.index_select(0, rows) * right.index_select(1, entries % N).transpose(0, 1)).sum(1)
        if model.has_armature:  # rotor inertia on the joints' diagonal
            D = D.index_add(0, topo.mass_matrix_joint_diagonal - k, model.armature[:, None].expand(n, B))
        if D.device.type == "cpu" and B >= DENSE_BELOW:
            # the eager placement, opaque to inductor, whose own transpose and gather took
            # twice the time (iCub, B = 1024: compiled M 1.74 against 2.29 ms, in-process
            # 0.81x; 0.88x at 256, 0.95x at 128). Shorter batches keep inductor's: the
            # operator's call costs about 20 us (B = 1 took 1.45x the time)
            DT = _padded_rows(*([right.reshape(k, B), D] if k else [D]))  # (K, B), batch-last
            return _place_op(DT, topo.mass_matrix_place).view(B, N, N)
        # (B, K), each part transposed straight into its columns
        D = torch.cat([right.reshape(k, B).t(), D.t()], 1) if k else D.t().contiguous()
        # as_strided makes inductor write D's transpose to memory (a tiled copy) before
        # the gather; fused, the gather read D column-wise, one cache line per entry
        # (iCub, B = 1024: 0.63 against 1.46 ms for these lines alone). A no-op eager.
        D = D.as_strided(D.shape, D.stride())
        return D.index_select(1, topo.mass_matrix_place).reshape(B, N, N)
    # Eager, and compiled with gradients: inductor makes the backward of the gathers above
    # atomic adds, contended between threads (iCub, B = 1024, 2 threads: the compiled
    # forward+backward took 37.8 ms against 10.9 ms with this path and eager's 21.6 ms).
    # The concatenations write batch-first memory directly (no cat, then a transposing copy).
    top, S, right, F = (batch_last_grad(x) for x in (top, S, right, F))
    left = torch.cat([top.permute(2, 0, 1), S.permute(2, 0, 1), S.new_zeros(B, 1, 6)], 1)  # (B, N+1, 6)
    right = torch.cat([right.permute(2, 0, 1), F.permute(2, 1, 0)], 2)  # (B, 6, N)
    G = torch.bmm(left, right)  # (B, N+1, N)
    if model.has_armature:
        G.diagonal(0, 1, 2)[:, 6:].add_(model.armature)  # rotor inertia on the joints' diagonal
    index = topo.mass_matrix_index.expand(B, N * N)  # gather: several times faster than index_select on dim 1
    return torch.gather(G.reshape(B, (N + 1) * N), 1, index, out=result_buffer(G, B, N * N)).view(B, N, N)


def _assemble_one(model, Mbb, F, S, T) -> torch.Tensor:
    """:func:`assemble` of one configuration (eager): G as the rows ``[T^T; S] right``
    and a zero row, ``right = [Mbb T | F^T]`` (6, 6+n), by two library products (one
    in the internal representation, where ``T^T right`` is ``right``), then the same
    placing index. No batch dimension to move: 12 operators (5 of them computing)
    where the batched path takes 15."""
    N = 6 + model.n
    right = torch.cat([(Mbb if T is None else matmul(Mbb, T))[..., 0], F[..., 0].t()], 1)  # (6, N)
    top = right if T is None else T[..., 0].t() @ right
    G = torch.cat([top, S[..., 0] @ right, right.new_zeros(1, N)])  # (N + 1, N)
    if model.has_armature:
        G.diagonal()[6:].add_(model.armature)  # rotor inertia on the joints' diagonal
    index = topology(model).mass_matrix_index.view(-1)
    return torch.index_select(G.view(-1), 0, index, out=result_buffer(G, N * N)).view(1, N, N)


def _assemble_from_entries(model, Mbb, F, S, T=None) -> torch.Tensor:
    """:func:`assemble` eager, without gradients: G's distinct entries, batch-last (its
    base rows copied from ``Mbb`` and ``F``, then taken to the representation of ``T``
    where given, the products ``S_a . F_b`` of supporting pairs as multiply-sums), then
    the same placing gather, reading them through a transposed view. From
    ``DENSE_BELOW`` configurations on, a batched product of the whole of G spends most
    of its time on the per-matrix calls of a library. Below, that product is the faster
    way in every representation: it takes fewer operators than the multiply-sums of
    :func:`~.batchlast.gathered_dots` (iCub, internal representation, in-process A/B
    of the product against these entries: the mass matrix 0.93x the time at B = 2,
    0.91x at 8, 0.98-0.99x at 32-64; aba 0.91x, 0.92x, 0.97-0.98x).

    The gather writes batch-first rows and reads one entry from each of K batch-last
    rows per configuration: eight consecutive configurations share those K cache lines
    (17 KB for iCub), so the reads stay in L1, where the rows spread over its sets
    (:func:`~.batchlast.crosswise_empty`). A transposing copy to batch-first first,
    then a gather of contiguous rows, took 1.8x the time (iCub, B = 1024: 0.68 against
    0.38 ms; the mass matrix 0.905x the time in-process). Writing the entries
    batch-first piece by piece made strided copies element by element (0.54 against
    0.26 ms for the copy alone)."""
    topo = topology(model)
    n, B = model.n, S.shape[-1]
    N, K = 6 + n, topo.mass_matrix_entries.shape[0]
    k = 6 * N  # G's base rows: all their entries are distinct, and come first
    a, b = topo.mass_matrix_pairs
    DT = crosswise_empty(S, K, B)  # (the gather reads across its rows)
    base = DT[:k].view(6, N, B)
    base[:, :6].copy_(Mbb)
    base[:, 6:].copy_(F.transpose(0, 1))
    kp = a.shape[0]
    P = gathered_dots(S, a, F, b, out=DT[k:k + kp])  # (k', B) S_a . F_b
    if model.has_armature:  # rotor inertia on the joints' diagonal
        P.index_add_(0, topo.mass_matrix_joint_diagonal - k, model.armature[:, None].expand(n, B))
    if T is not None:
        _base_rows_in_representation(base, T)
    DT[k + kp:].zero_()  # G's zero, where some coordinates are unrelated
    return _place(DT, topo.mass_matrix_place).view(B, N, N)


def _place(DT: torch.Tensor, place: torch.Tensor) -> torch.Tensor:
    """(B, P) ``DT[place[j], b]`` for entries ``DT`` (K, B) batch-last and ``place`` (P,):
    one gather through the transposed view (see :func:`_assemble_from_entries`), into
    the method's result where it has one (:func:`~torchrbd.inference.result_buffer`)."""
    B, P = DT.shape[1], place.shape[0]
    return placement.place(DT, place, out=result_buffer(DT, B, P))


def _padded_rows(*parts: torch.Tensor) -> torch.Tensor:
    """The (K, B) concatenation of ``parts`` (k_i, B), its rows spaced as in
    :func:`~.batchlast.crosswise_empty`'s buffers (for :func:`_place`'s gather), made by
    compiled code: each part padded where it is made, so that inductor writes the
    padded buffer directly (a pad of the concatenation made a second copy). iCub, B =
    1024: the gather 0.86 against 1.35 ms, but the compiled mass matrix only about 0.98x
    the time in-process (0.958 paired, against 0.981 for unchanged code in that run)."""
    B = parts[0].shape[1]
    pad = crosswise_pad(parts[0], B)
    if pad:
        parts = [torch.nn.functional.pad(x, (0, pad)) for x in parts]
    DT = torch.cat(parts) if len(parts) > 1 else parts[0]
    return DT[:, :B]


_OPS = f"{__name__.split('.')[0]}"
"""The operators' namespace: the package's, so that a second copy of the package, as
``benchmarks/ab.py`` imports, registers its own."""
_library = torch.library.Library(_OPS, "FRAGMENT")
_library.define("place_entries(Tensor DT, Tensor place) -> Tensor")
_library.impl("place_entries", _place, "CompositeExplicitAutograd")


@torch.library.register_fake(f"{_OPS}::place_entries")
def _(DT, place):
    return DT.new_empty(DT.shape[1], place.shape[0])


def _place_op(DT: torch.Tensor, place: torch.Tensor) -> torch.Tensor:
    """:func:`_place` as an operator of its own (``torchrbd::place_entries``), which
    compiled code calls as it is. Registered with ``torch.library.Library`` rather than
    ``torch.library.custom_op``, whose Python wrapper cost about 20 us more per call
    (eager, a batch of 8: 0.023 against 0.042 ms; :func:`_place` itself 0.017 ms)."""
    return getattr(torch.ops, _OPS).place_entries(DT, place)
