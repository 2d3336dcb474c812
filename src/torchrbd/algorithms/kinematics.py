"""Forward kinematics: world poses of bodies, links and frames, and the world-frame
motion subspaces of the joints. Batch-last layout (see :mod:`.batchlast`):
``B`` configurations, ``nb`` bodies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..model.model import Model
from ..spatial import skew
from .batchlast import (
    DENSE_BELOW, bilinear_function, const_lmatmul, const_matmul, cross, differentiated_again, has_tangent, mask_sum,
    matmul, mm, mv, one_configuration, pieces, plain, transpose, with_rules, writes_into_buffers,
)
from .topology import Chain, add_to_parents, chain, model_cached, model_cached_entry, topology


@dataclass
class Kinematics:
    """World-frame kinematic quantities of a batch of configurations.

    * ``R`` (nb, 3, 3, B): world_R_body.   ``p`` (nb, 3, B): body origin in world.
    * ``S`` (nb, 6, B): each body's joint motion subspace as a twist about the
      reference origin O, world axes, linear-first (row 0, the base, is zero):
      revolute ``[o x s; s]``, prismatic ``[s; 0]`` with s the world axis and o
      the joint origin.
    * ``S_dof`` (n, 6, B): ``S`` at each coordinate's body, the rows the CRBA and RNEA
      use; gathered on first use by :func:`dof_subspaces` and kept here.
    * ``X`` (nb, 3, 4, B): the poses as rows ``[R | p]``, of which ``R`` and ``p`` are
      views (whole-tree kinematics of :func:`forward`; else None).
    """

    R: torch.Tensor
    p: torch.Tensor
    S: torch.Tensor | None  # None when forward() was told not to make them
    chain: Chain | None = None  # set by chain_forward: rows for these bodies only
    S_dof: torch.Tensor | None = None
    X: torch.Tensor | None = None


def per_body(model: Model, x: torch.Tensor) -> torch.Tensor:
    """(n, B) coordinates -> (nb, B) value at each body's joint (0 for the base).

    A gather of the rows of ``[0; x]`` (``Topology.dof_row_of_body``): eager, about 0.6x
    the time of scattering ``x`` into zeros (iCub, B = 1024); compiled, inductor may
    vectorise that scatter through a buffer of indices read back as scalars (a quarter
    of a compiled graph of iCub's kinematics). Compiled code with gradients keeps the
    scatter, whose backward is a gather (the gather's would be atomic adds)."""
    topo = topology(model)
    if torch.compiler.is_compiling() and x.requires_grad:
        out = torch.zeros(model.nbody, x.shape[-1], dtype=x.dtype, device=x.device)
        return out.index_copy(0, topo.body_of_dof, x)
    return torch.cat([x.new_zeros(1, x.shape[-1]), x]).index_select(0, topo.dof_row_of_body)


def _joint_pose_terms(model: Model):
    """(4, nb, 4, 4) constant matrices C with parent_X_body(q) = C0 + C1 sin(q) +
    C2 (1 - cos(q)) + C3 q as 4x4 homogeneous matrices (Rodrigues' formula for
    revolute joints, a slide along the axis for prismatic ones; the constant last
    row is in C0). Cached on the model unless a placement needs grad."""
    def make():
        topo = topology(model)
        rot, pos, axis = model.body_rot, model.body_pos, model.joint_axis
        K = skew(axis)
        rev, pri = topo.is_revolute[:, None, None], topo.is_prismatic[:, None, None]
        zero = torch.zeros_like(pos[..., None])
        C = torch.stack(
            [
                torch.cat([rot, pos[..., None]], -1),
                torch.cat([rot @ K * rev, zero], -1),
                torch.cat([rot @ K @ K * rev, zero], -1),
                torch.cat([torch.zeros_like(rot), (rot @ axis[..., None]) * pri], -1),
            ]
        )
        last = torch.zeros(4, C.shape[1], 1, 4, dtype=C.dtype, device=C.device)
        last[0, :, 0, 3] = 1
        return torch.cat([C, last], 2)
    return model_cached(model, "_joint_pose_terms", make, depends_on=_placements(model))


def _placements(model: Model) -> tuple:
    """The model parameters the joints' local transforms are made of."""
    return model.body_rot, model.body_pos, model.joint_axis


def _joint_pose_matrix(model: Model, homogeneous: bool = False) -> torch.Tensor:
    """(nb, 12, t) the coefficients of the rows ``[R | p]`` of parent_X_body in the
    terms ``(1, sin q, cos q[, q])`` (``q`` only with prismatic joints): the terms of
    :func:`_joint_pose_terms` with ``1 - cos q`` split. ``homogeneous``: (nb, 16, t),
    the 4x4 matrices' (the last row a constant). Cached with them."""
    rows = 4 if homogeneous else 3

    def make():
        topo = topology(model)
        C = _joint_pose_terms(model)[:, :, :rows].flatten(2)  # (4, nb, 4 * rows)
        cols = [C[0] + C[2], C[1], -C[2]] if topo.has_revolute else [C[0]]
        if topo.has_prismatic:
            cols.append(C[3])
        return torch.stack(cols, -1)
    name = "_joint_pose_matrix_h" if homogeneous else "_joint_pose_matrix"
    return model_cached(model, name, make, depends_on=_placements(model))


def _pose_matrix_rows(model: Model, bodies, homogeneous: bool = False) -> torch.Tensor:
    """``_joint_pose_matrix(model, homogeneous)[bodies]``, for an index tensor ``bodies``
    (a :class:`~.topology.Chain`'s, kept on the model) kept on the model too: one gather
    fewer per call of a frame's methods (see :func:`~.topology.model_cached_entry`)."""
    C = _joint_pose_matrix(model, homogeneous)
    if isinstance(bodies, slice):
        return C[bodies]
    # keyed by the index tensor's id, which the entry keeps alive (so no other tensor takes it)
    return model_cached_entry(model, "_pose_matrix_rows", (homogeneous, id(bodies)), lambda: (bodies, C[bodies]),
                              depends_on=_placements(model))[1]


def _local_transforms(model: Model, q: torch.Tensor, bodies=slice(None), fuse: bool = True) -> torch.Tensor:
    """parent_X_body of ``bodies`` at their coordinates ``q`` (k, B): (k, 3, 4, B)
    ``[R | p]`` rows, or (k, 4, 4) homogeneous matrices for a batch of one in eager mode.

    Long batches: one batched product of the constant coefficients (k, 12, t) of
    :func:`_joint_pose_matrix` with the terms (k, t, B) (``fuse``: see
    :func:`~.batchlast.const_lmatmul`); compiled with ``fuse`` False (a frame's chain,
    whose compiled methods store every intermediate), one multiply-add per term, each
    stored as a (k, 12, B) buffer, where the library product of a three-term inner
    dimension took 60 of the compiled Jacobian's 250 us (iCub's l_sole, in-process
    A/B: B = 1024 0.90-0.92x the time, float32 0.86x, B = 4096 0.95x, B = 16 1.02x;
    its forward+backward 1.00-1.03x); a batch of one: the same with the 4x4
    coefficients (six operators where the multiply-adds take ten), or compiled, the
    multiply-adds."""
    topo = topology(model)
    if q.shape[-1] == 1 and torch.compiler.is_compiling():  # multiply-adds, which inductor fuses
        C, q = _joint_pose_terms(model)[:, bodies, :3, :, None], q[:, None, None]  # (k, 3, 4, 1), (k, 1, 1, 1)
        local = C[0]
        if topo.has_revolute:
            local = torch.addcmul(local, C[1], torch.sin(q))
            local = torch.addcmul(local, C[2], 1 - torch.cos(q))
        if topo.has_prismatic:
            local = torch.addcmul(local, C[3], q)
        return local
    terms = _pose_terms(topo, q)
    if not fuse and torch.compiler.is_compiling():  # a frame's chain: one multiply-add per term
        C = _pose_matrix_rows(model, bodies)  # (k, 12, t)
        local = C[:, :, 0, None] * terms[:, None, 0]
        for a in range(1, C.shape[2]):
            local = torch.addcmul(local, C[:, :, a, None], terms[:, None, a])
        return local.view(local.shape[0], 3, 4, *local.shape[2:])
    if q.shape[-1] == 1:  # (k, 16, t) @ (k, t, 1), the homogeneous matrices with their constant last row
        return torch.bmm(_pose_matrix_rows(model, bodies, homogeneous=True), terms).view(-1, 4, 4)
    local = const_lmatmul(_pose_matrix_rows(model, bodies), terms, fuse)  # (k, 12, B)
    return local.view(local.shape[0], 3, 4, *local.shape[2:])


def _pose_terms(topo, q: torch.Tensor) -> torch.Tensor:
    """(k, t, B) the terms ``(1, sin q, cos q[, q])`` of :func:`_joint_pose_matrix` at ``q`` (k, B)."""
    terms = [torch.ones_like(q)]
    if topo.has_revolute:
        terms += [torch.sin(q), torch.cos(q)]
    if topo.has_prismatic:
        terms.append(q)
    return torch.stack(terms, 1)


def _compose(Xp: torch.Tensor, L: torch.Tensor) -> torch.Tensor:
    """[Rp | pp] (k, 3, 4, B) followed by [R | p] (k, 3, 4, B): [Rp R | Rp p + pp].

    With gradients (eager): ``_Compose``, whose backward is two batch-last products
    (see :func:`~.batchlast.bilinear_function`)."""
    if with_rules(Xp, L):
        return _Compose.apply(Xp, L)
    return _compose_values(Xp, L)


def _compose_values(Xp: torch.Tensor, L: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    cols, rows = pieces(Xp, 2), pieces(L, 1)
    if torch.compiler.is_compiling() and out is None:
        # one pointwise expression, ``Rp [R | p] + pp e_4^T``, which inductor writes
        # straight into its consumer (an in-place update of the last column would be
        # stored, then copied with that column replaced)
        last = torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=Xp.dtype, device=Xp.device).view(4, *[1] * (Xp.dim() - 3))
        return cols[0] * rows[0] + cols[1] * rows[1] + cols[2] * rows[2] + cols[3] * last
    X = torch.mul(cols[0], rows[0], out=out).addcmul_(cols[1], rows[1]).addcmul_(cols[2], rows[2])
    X[:, :, 3:].add_(cols[3])  # + pp, in place (`X[...] += ` would also copy the slice back)
    return X


_Compose = bilinear_function(
    "_Compose", _compose_values,
    lambda G, Xp, L: torch.cat([matmul(G, transpose(L)), G[:, :, 3:]], 2),
    lambda G, Xp, L: matmul(transpose(Xp[:, :, :3]), G),
    tangent_right=lambda Xp, dL: matmul(Xp[:, :, :3], dL),  # Rp [dR | dp]: pp is constant in L
    doc="""Batch-last :func:`_compose`: ``grad Xp = [G L^T | G_p]`` (``L`` as a 3x4
    matrix, ``G_p`` the gradient's last column) and ``grad L = Rp^T G``.""",
)


def _base_pose_rows(base_R: torch.Tensor, base_p: torch.Tensor) -> torch.Tensor:
    """(3, 4, B) the base pose's rows ``[R | p]`` from ``base_R`` (3, 3, B), ``base_p`` (3, B)."""
    return torch.cat([base_R, base_p[:, None]], 1)


def _level_rows(topo, x: torch.Tensor):
    """The rows of ``x`` (nb, ...) of each tree level. When the levels are consecutive
    runs (see :class:`~.topology.Topology`) one ``split`` cuts them all: its backward is
    one ``cat``, where each indexed level would zero-fill a copy of all of ``x``."""
    if all(isinstance(lvl, slice) for lvl in topo.levels):
        return x.split_with_sizes([1] + [lvl.stop - lvl.start for lvl in topo.levels])[1:]
    return [x[lvl] for lvl in topo.levels]


def body_poses(model: Model, base_R: torch.Tensor, base_p: torch.Tensor, q: torch.Tensor):
    """World poses (nb, 3, 3, B), (nb, 3, B) of all bodies; one batched step per tree level.

    ``base_R`` (3, 3, B), ``base_p`` (3, B), ``q`` (n, B). Poses are composed as
    3x4 matrices ``[R | p]`` (:func:`body_pose_rows`).
    """
    return _split_pose_rows(body_pose_rows(model, base_R, base_p, q))


def body_pose_rows(model: Model, base_R: torch.Tensor, base_p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """(nb, 3, 4, B) world poses ``[R | p]`` of all bodies (see :func:`body_poses`)."""
    topo = topology(model)
    local = _local_transforms(model, per_body(model, q))
    X0 = _base_pose_rows(base_R, base_p)[None]
    if one_configuration(X0):  # local: (nb, 4, 4) homogeneous
        return _pose_rows_by_jumps(model, X0[..., 0], local).unsqueeze(-1)
    if X0.shape[-1] < DENSE_BELOW and writes_into_buffers(X0, local):
        return _pose_rows_by_jumps(model, X0, local)
    if topo.unsort is None and _in_place(X0, local):  # levels stored as consecutive runs
        return _body_pose_rows_in_place(topo, X0, local)
    rules = with_rules(X0, local) and plain(X0) and plain(local) and not has_tangent(X0, local)
    if rules and X0.shape[-1] < DENSE_BELOW:
        return _ShortPoseRows.apply(X0, local, model)
    if rules and topo.unsort is None:
        return _PoseRows.apply(X0, local, topo)
    return _pose_rows_graph(topo, X0, local)


def _pose_rows_graph(topo, X0: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
    """:func:`body_pose_rows` by autograd's operators, level by level (model order)."""
    X = _compose_levels(topo, X0, local, _compose)
    return X if topo.unsort is None else X[topo.unsort]


def _pose_rows_by_jumps(model: Model, X0: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
    """World poses of a short batch by pointer jumping: with ``T_i`` body i's pose
    relative to its ``2^k``-th ancestor, ``T_i <- T_anc(i) T_i`` doubles the span, so
    ``ceil(log2(depth + 1))`` steps of one gather and one composition of every pose
    (three for iCub's seven levels) replace a step per level: fewer operators for
    three times the arithmetic, which short batches can afford.

    A batch of one: ``X0`` (1, 3, 4) the base pose, ``local`` (nb, 4, 4) homogeneous,
    one ``bmm`` per step, (nb, 3, 4) returned. Longer: ``X0`` (1, 3, 4, B), ``local``
    (nb, 3, 4, B) rows ``[R | p]``, composed by multiply-adds (no autograd), (nb, 3, 4, B)
    returned. Row 0 of ``local`` (the base's) is not used."""
    jumps, eye = _pose_jumps(model)
    if X0.dim() == 3:
        T = torch.cat([torch.cat([X0, eye[:1, 3:]], 1), local[1:], eye])  # + an identity row: "above the base"
        for ancestors in jumps:
            T = torch.bmm(T.index_select(0, ancestors), T)
        return T[:-1, :3]
    T = torch.cat([X0, local[1:], eye[:, :3, :, None].expand(1, 3, 4, X0.shape[-1])])
    for ancestors in jumps:
        T = _compose_values(T.index_select(0, ancestors), T)
    return T[:-1]


def _pose_jumps(model: Model):
    """What :func:`_pose_rows_by_jumps` needs: per step, the (nb+1,) index of each
    row's ``2^k``-th ancestor (the identity row, index nb, past the base and for
    itself), and that (1, 4, 4) identity."""
    def make():
        parent = [int(p) for p in model.body_parent]
        nb = len(parent)
        up = [nb] + parent[1:] + [nb]
        steps = []
        while any(a != nb for a in up):
            steps.append(torch.tensor(up, device=model.body_rot.device))
            up = [up[a] for a in up]
        return steps, torch.eye(4, dtype=model.body_rot.dtype, device=model.body_rot.device)[None]
    return model_cached(model, "_pose_jumps", make)


def _compose_levels(topo, X0: torch.Tensor, local: torch.Tensor, step) -> torch.Tensor:
    """The poses of all bodies, level by level (``step`` composes a parent's pose with
    a local transform), concatenated in the levels' order."""
    X = [X0]
    for L, par in zip(_level_rows(topo, local), topo.level_parent_pos):  # parents all sit on the previous level
        X.append(step(X[-1][par], L))
    return torch.cat(X, 0)


def _split_pose_rows(X: torch.Tensor):
    R, p = X.split_with_sizes([3, 1], 2)
    return R, p[:, :, 0]


def _in_place(X0: torch.Tensor, local: torch.Tensor) -> bool:
    """Whether poses compose straight into one buffer (``out=``, no final ``cat``): a
    long batch, see :func:`~.batchlast.writes_into_buffers`."""
    return X0.dim() == 4 and writes_into_buffers(X0, local)


def _body_pose_rows_in_place(topo, X0: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
    """:func:`body_pose_rows` writing each level's poses into its rows of one
    (nb, 3, 4, B) buffer (``out=``): the same operators, less the concatenation of the
    levels."""
    X = X0.new_empty(local.shape[0], *X0.shape[1:])
    X[0] = X0[0]
    prev = X[:1]
    for L, rows, par in zip(_level_rows(topo, local), topo.levels, topo.level_parent_pos):
        prev = _compose_values(prev[par], L, out=X[rows])
    return X


class _PoseRows(torch.autograd.Function):
    """:func:`body_pose_rows` of a long batch with gradients: the forward composes into
    one buffer as without them; the backward is the reverse sweep, leaves to root. With
    ``G_i`` the total cotangent of body i's pose (its own plus what its children passed
    up), ``X_i = X_parent o L_i`` gives ``Lbar_i = R_parent^T G_i`` and passes
    ``G_i [L_i; e_4]^T = [G_R R_i^T + G_p p_i^T | G_p]`` to the parent: per level two
    products and one addition into the parents' rows, where autograd would also
    zero-fill and scatter each level's parent rows and concatenate the levels."""

    @staticmethod
    def forward(ctx, X0, local, topo):
        X = _body_pose_rows_in_place(topo, X0, local)
        ctx.topo = topo
        ctx.save_for_backward(X0, local, X)
        return X

    @staticmethod
    def backward(ctx, G):
        X0, local, X = ctx.saved_tensors
        topo = ctx.topo
        if torch.is_grad_enabled():  # double backward: the loop of compositions inside the graph
            def again():
                return _compose_levels(topo, X0, local, _compose)
            return (*differentiated_again(again, (X0, local), ctx.needs_input_grad[:2], G), None)
        total = G.clone()
        # (local's shape; made from G so that batched backwards batch it). Every level
        # writes its rows: only the base's, which no level holds, is zeroed
        local_bar = torch.empty_like(G)
        local_bar[0] = 0
        prev = [slice(0, 1)] + list(topo.levels[:-1])
        for rows, par, above in reversed(list(zip(topo.levels, topo.level_parent_pos, prev))):
            g, parents = total[rows], X[above][par]
            local_bar[rows] = matmul(transpose(parents[:, :, :3]), g)  # R_parent^T G
            up = matmul(g[:, :, :3], transpose(local[rows][:, :, :3]))  # G_R R^T
            up = up.addcmul_(g[:, :, 3:], transpose(local[rows][:, :, 3:]))  # + G_p p^T
            add_to_parents(total[above], par, torch.cat([up, g[:, :, 3:]], 2))
        return total[:1], local_bar, None


class _ShortPoseRows(torch.autograd.Function):
    """:func:`body_pose_rows` of a short batch (eager, 2 to ``DENSE_BELOW - 1``
    configurations) with gradients, in a few operators whatever the tree's depth.

    The forward composes the poses relative to the base, ``Y_i`` (rigid), by pointer
    jumping, then ``X_i = X_0 Y_i``. The backward needs no sweep: body j in the subtree
    of body i has ``Y_j = Y_i T_ij``, so the total cotangent of ``Y_i`` (its own and its
    descendants') is ``(sum_{j in subtree(i)} Ybar_j Y_j^T) Y_i^-T`` (4x4 homogeneous
    forms, 3x4 cotangents), one product with the subtree mask between two pointwise
    products; with ``Y_i^-T = [R_i, 0; -p_i^T R_i, 1]`` that is ``[(S_R - S_p p_i^T) R_i | S_p]``.
    Then ``Lbar_i = R_parent^T Ytot_i`` as in :class:`_PoseRows`, ``Ybar = A_0^T G``
    and ``X0bar = sum_i G_i Y_i^T`` (``X_0 = [A_0 | t_0]``, any matrix). Base-relative
    poses keep the products free of the base's distance to the origin. iCub, B = 8:
    about 40 operators forward and 44 backward, where :class:`_PoseRows` took 69 and 220."""

    @staticmethod
    def forward(ctx, X0, local, model):
        _, eye = _pose_jumps(model)
        Y = _pose_rows_by_jumps(model, eye[:, :3, :, None].expand(1, 3, 4, X0.shape[-1]), local)
        ctx.model = model
        ctx.save_for_backward(X0, local, Y)
        return _compose_values(X0, Y)

    @staticmethod
    def backward(ctx, G):
        X0, local, Y = ctx.saved_tensors
        model = ctx.model
        if torch.is_grad_enabled():  # double backward: the compositions inside the graph
            def again():
                return _pose_rows_graph(topology(model), X0, local)
            return (*differentiated_again(again, (X0, local), ctx.needs_input_grad[:2], G), None)
        R, p = Y[:, :, :3], Y[:, :, 3:]  # (nb, 3, 3, B), (nb, 3, 1, B)
        pt = transpose(p)  # (nb, 1, 3, B)
        QR = matmul(G[:, :, :3], transpose(R)).addcmul_(G[:, :, 3:], pt)  # G Y^T: [G_R R^T + G_p p^T | G_p]
        Q = torch.cat([QR, G[:, :, 3:]], 2)
        X0bar = Q.sum(0, keepdim=True) if ctx.needs_input_grad[0] else None
        if not ctx.needs_input_grad[1]:
            return X0bar, None, None
        S = mask_sum(topology(model).ancestor.t(), matmul(transpose(X0[:, :, :3]), Q))  # subtree sums of Ybar Y^T
        Sp = S[:, :, 3:]
        Ytot = torch.cat([matmul(S[:, :, :3].addcmul(Sp, pt, value=-1), R), Sp], 2)
        Lbar = matmul(transpose(R.index_select(0, _parent_rows(model))), Ytot)
        Lbar[0] = 0  # the base's row of ``local`` is not used
        return X0bar, Lbar, None


def _parent_rows(model: Model) -> torch.Tensor:
    """(nb,) each body's parent index (the base's: itself). Cached on the model."""
    def make():
        return torch.tensor([0] + [int(p) for p in model.body_parent[1:]], device=model.body_rot.device)
    return model_cached(model, "_parent_rows", make)


def _axis_terms(model: Model) -> torch.Tensor:
    """(nb, 3, 1 or 2) each body's joint axis in its own frame as the column of
    revolute motion, then (with prismatic joints) that of prismatic motion; zero
    columns for the other kind. Cached unless the axes need grad."""
    def make():
        topo = topology(model)
        kinds = [topo.is_revolute] + ([topo.is_prismatic] if topo.has_prismatic else [])
        return torch.stack([model.joint_axis * k[:, None] for k in kinds], -1)
    return model_cached(model, "_axis_terms", make, depends_on=(model.joint_axis,))


def motion_subspaces(model: Model, R: torch.Tensor, p: torch.Tensor, bodies=slice(None),
                     origin: torch.Tensor | None = None) -> torch.Tensor:
    """(k, 6, B) world-origin joint twists per unit joint velocity (see :class:`Kinematics`)
    of ``bodies`` (default all) posed by ``R`` (k, 3, 3, B), ``p`` (k, 3, B); with
    ``origin`` (3, B), the same twists about that point (world axes): ``[(o - origin) x s; s]``
    for a revolute joint at o."""
    topo = topology(model)
    s = const_matmul(R, _axis_terms(model)[bodies])  # world axes (k, 3, 1 or 2, B)
    s_rev = s[:, :, 0]
    lin = cross(p if origin is None else p - origin, s_rev)
    if topo.has_prismatic:
        lin = lin + s[:, :, 1]
    return torch.cat([lin, s_rev], dim=1)


CHAIN_PRODUCTS_BELOW = (128, 384)
"""A frame's chain of fewer configurations than this (eager; without, with gradients)
composes its poses by one ``bmm`` of 4x4 matrices per joint (:func:`_chain_poses_short`),
longer ones by batch-last multiply-adds. iCub's l_sole Jacobian, in-process A/Bs of the
two against each other: without gradients 0.89x the time at B = 64, 0.94x at 96, 1.01x
at 128, 1.07x at 192; forward+backward 0.75x at 64, 0.82x at 128, 0.86x at 192, 0.95x
at 320, 1.2x at 512."""


def chain_forward(model: Model, base_R: torch.Tensor, base_p: torch.Tensor, q: torch.Tensor, body: int,
                  subspaces: bool = True, every: bool = True) -> Kinematics:
    """Kinematics of only the bodies on the path from the base to ``body``, what one
    frame's pose and Jacobian need (:func:`frame_pose` accepts it; the Jacobian's nonzero
    columns are ``chain.columns``): ``R``, ``p`` have one row per body of ``chain`` (the base alone when
    ``body`` is the base), the last one ``body``'s (only that one unless ``every``);
    ``S`` (k, 6, B) one per coordinate of ``chain.dofs`` (None unless ``subspaces``,
    which needs ``every``).

    The chain is composed one body after the other; the local transforms of all its
    joints are evaluated together first.
    """
    path = chain(model, body)
    subspaces = subspaces and every
    if not len(path):
        S = q.new_zeros(0, 6, q.shape[-1]) if subspaces else None
        return Kinematics(base_R[None], base_p[None], S, path)
    B, q = q.shape[-1], q.index_select(0, path.dofs)
    if B == 1 or (B < CHAIN_PRODUCTS_BELOW[with_rules(base_R, base_p, q)] and not torch.compiler.is_compiling()):
        X = _chain_poses_short(model, base_R, base_p, q, path.bodies, every)
    else:
        local = _local_transforms(model, q, path.bodies, fuse=False)
        X = _base_pose_rows(base_R, base_p)[None]
        if every and _in_place(X, local):
            poses = X.new_empty(local.shape[0], *X.shape[1:])
            for i, L in enumerate(pieces(local, 0)):
                X = _compose_values(X, L, out=poses[i:i + 1])
            X = poses
        else:
            poses = []
            for L in pieces(local, 0):
                X = _compose(X, L)
                poses.append(X)
            X = torch.cat(poses, 0) if every else X
    R, p = _split_pose_rows(X)
    S = motion_subspaces(model, R, p, path.bodies) if subspaces else None
    return Kinematics(R=R, p=p, S=S, chain=path)


def _chain_poses_short(model: Model, base_R: torch.Tensor, base_p: torch.Tensor, q: torch.Tensor,
                       bodies, every: bool = True) -> torch.Tensor:
    """(k, 3, 4, B) rows ``[R | p]`` of the world poses of a chain's bodies (``every``;
    else (1, 3, 4, B), the last body's) for batches below ``CHAIN_PRODUCTS_BELOW`` in
    eager mode, and for a batch of one also compiled (a frame's compiled methods keep
    library products, see :func:`~.batchlast.const_lmatmul`): one ``bmm`` per joint on
    batch-first matrices (see :func:`_homogeneous_locals`), where long batches compose
    by several multiply-adds per joint (iCub's l_sole Jacobian at B = 16: 131 -> 75
    operators).
    ``q`` (k, B) the chain's coordinates."""
    X = _base_pose_rows(base_R, base_p).permute(2, 0, 1)  # (B, 3, 4)
    poses = []
    for L in _homogeneous_locals(model, q, bodies):
        X = torch.bmm(X, L)
        poses.append(X)
    return torch.stack(poses if every else poses[-1:], 3).permute(3, 1, 2, 0).contiguous()  # (k, 3, 4, B)


def chain_rows(model: Model, kin: Kinematics, body: int) -> Kinematics:
    """The rows of full kinematics ``kin`` on the path from the base to ``body``, laid out
    as :func:`chain_forward` returns them (when the whole tree is already computed)."""
    path = chain(model, body)
    if not len(path):
        return Kinematics(kin.R[:1], kin.p[:1], kin.S[:0], path)
    return Kinematics(kin.R[path.bodies], kin.p[path.bodies], kin.S[path.bodies], path)


def forward(model: Model, base_R: torch.Tensor, base_p: torch.Tensor, q: torch.Tensor,
            subspaces: bool = True) -> Kinematics:
    """Whole-tree kinematics: the bodies' poses, and their motion subspaces unless
    ``subspaces`` is False (``S`` None: what needs poses only, CoM and link poses, skips
    their products)."""
    X = body_pose_rows(model, base_R, base_p, q)
    R, p = _split_pose_rows(X)
    return Kinematics(R=R, p=p, S=motion_subspaces(model, R, p) if subspaces else None, X=X)


def dof_subspaces(model: Model, kin: Kinematics) -> torch.Tensor:
    """``kin.S_dof`` (n, 6, B) of whole-tree kinematics (:func:`forward`): gathered once,
    then shared by every algorithm that runs on ``kin``."""
    if kin.S_dof is None:
        kin.S_dof = kin.S.index_select(0, topology(model).body_of_dof)
    return kin.S_dof


def link_poses(model: Model, kin: Kinematics):
    """World poses of every link: (nlink, 3, 3, B), (nlink, 3, B)."""
    lb = topology(model).link_body
    Rb, pb = kin.R[lb], kin.p[lb]
    return mm(Rb, model.link_rot[..., None]), pb + mv(Rb, model.link_pos[..., None])


def frame_transforms(model: Model, H: torch.Tensor, q: torch.Tensor, frame: str) -> torch.Tensor:
    """world_H_frame (B, 4, 4) in eager mode and of compiled long batches, ``H`` (B, 4, 4)
    world_H_base and ``q`` (B, n): the base pose, the chain's transforms and the frame's
    placement multiplied, where :func:`chain_forward` and :func:`frame_pose` compose one
    joint after the other and assemble the rows. ``H``'s last row is not read.

    * one configuration: one ``linalg.multi_dot`` of 4x4 matrices (iCub's l_sole: 57 ->
      26 operators);
    * short batches (below ``DENSE_BELOW``): one ``bmm`` of 4x4 matrices per joint
      (90 -> 27 operators);
    * long batches: the chain's transform group by group of :data:`CHAIN_GROUP` joints,
      each one product of constant coefficients with the group's monomials
      (:func:`_chain_group_coefficients`, the placement folded into the last group), the
      groups' batch-last rows ``[R | p]`` composed after the base pose's, then one copy
      to batch-first 4x4."""
    path, last, placement = _frame_constants(model, frame)
    B = H.shape[0]
    if B >= DENSE_BELOW and len(path):
        C = _chain_group_coefficients(model, frame, path, placement)  # (g, 12, t^m)
        monomials = _chain_monomials(topology(model), q.t().index_select(0, path.dofs))  # (g, t^m, B)
        Y = const_lmatmul(C, monomials, fuse=False).view(C.shape[0], 1, 3, 4, B)  # the groups' rows [R | p]
        X = Y[-1]
        for Yg in reversed(Y[:-1].unbind(0)):
            X = _compose(Yg, X)
        X = _compose(H[:, :3].permute(1, 2, 0).contiguous()[None], X)[0]
        return torch.cat([X.permute(2, 0, 1), last.expand(B, 1, 4)], 1)
    if B == 1:
        base = torch.cat([H[0, :3], last])
        if not len(path):
            return (base @ placement)[None]
        local = _local_transforms(model, q[0].index_select(0, path.dofs)[:, None], path.bodies, fuse=False)  # (k, 4, 4)
        return torch.linalg.multi_dot([base, *local.unbind(0), placement])[None]
    base = torch.cat([H[:, :3], last.expand(B, 1, 4)], 1)
    if not len(path):
        return base @ placement
    X = base
    for L in _homogeneous_locals(model, q.t().index_select(0, path.dofs), path.bodies):
        X = torch.bmm(X, L)
    return X @ placement


def _frame_constants(model: Model, frame: str):
    """(chain to the frame's body, the last row (1, 4) of a homogeneous matrix,
    body_H_frame (4, 4)): what :func:`frame_transforms` reads of the model for ``frame``."""
    body, rot, pos = model.frame(frame)
    last = model_cached(model, "_homogeneous_last_row", lambda: torch.eye(4, dtype=rot.dtype, device=rot.device)[3:])
    return chain(model, body), last, _frame_placement(model, frame, rot, pos, last)


def prepare_frames(model: Model) -> None:
    """Make and keep every frame's constants of :func:`frame_transforms` (its placement
    and its chain's group coefficients): compiled code then reads them, where a frame
    first met while tracing would have them made in every call (iCub's l_sole: three
    library products and their copies, about a fifth of the compiled
    ``forward_kinematics`` at B = 1024). iCub's 213 frames: about 40 ms, 1.5 MB."""
    for frame in model.frame_names():
        path, _, placement = _frame_constants(model, frame)
        if len(path):
            _chain_group_coefficients(model, frame, path, placement)


CHAIN_GROUP = 3
"""Joints per group in :func:`frame_transforms`. A group's transform is linear in the
products of its joints' terms ``(1, sin q, cos q)`` (27 of them for three revolute
joints), so one batched product with constant coefficients makes it, where composing
the joints one by one takes a few operators each. iCub's l_sole (six joints, two
groups), in-process A/B against the chain by pairs (``benchmarks/ab.py --only FK``):
``forward_kinematics`` 0.86x the time at B = 1024 (float32 too), 0.83x at 4096, 0.92x at
96, compiled 0.94x at 1024. Larger groups would make t^m products per configuration (729
for six joints), more bytes than the compositions they save. Short batches keep one
product per joint: the groups' matrices batch-first took 1.1-1.2x the time at B = 4,
1.0x at 16 and 0.88x at 32-64."""


def _chain_group_coefficients(model: Model, frame: str, path: Chain, placement: torch.Tensor) -> torch.Tensor:
    """(g, 12, t^m) the coefficients of the rows ``[R | p]`` of each group of ``m =
    CHAIN_GROUP`` joints of the frame's chain: the group's transform ``L_1 L_2 ... L_m``
    (each ``L_j = sum_a C_j[a] terms_j[a]``, :func:`_joint_pose_matrix`) is ``sum C_1[a]
    C_2[b] ... terms_1[a] terms_2[b] ...``, over the products of terms in
    :func:`_chain_monomials`'s order. The frame's ``placement`` (4, 4) is folded into the
    last group; a chain whose length is not a multiple of m ends with identity joints.
    Kept on the model per frame unless a placement needs grad."""
    def make():
        C, identity = _grouped_local_coefficients(model, path)
        G = _group_products(C, identity, CHAIN_GROUP)
        G = torch.cat([G[:-1], (G[-1:] @ placement)])
        return G[:, :, :3].flatten(2).transpose(1, 2).contiguous()
    # (the placement needs grad exactly when the frame's rot or pos do, see _frame_placement)
    return model_cached_entry(model, "_chain_group_coefficients", frame, make,
                              depends_on=_placements(model) + (placement,))


def _grouped_local_coefficients(model: Model, path: Chain):
    """((g, m, t, 4, 4), (t, 4, 4)): the coefficients of the local transforms of the
    chain's joints in the terms ``(1, sin q, cos q[, q])`` (:func:`_joint_pose_matrix`),
    in groups of ``m = CHAIN_GROUP``, and those of a joint whose transform is 1 whatever
    its terms (which completes the last group)."""
    C = _joint_pose_matrix(model, homogeneous=True)[path.bodies]  # (k, 16, t)
    C = C.unflatten(1, (4, 4)).permute(0, 3, 1, 2)  # (k, t, 4, 4)
    identity = torch.zeros_like(C[0])
    identity[0] = torch.eye(4, dtype=C.dtype, device=C.device)
    return _in_groups(C, identity), identity


def _group_products(C: torch.Tensor, identity: torch.Tensor, joints: int) -> torch.Tensor:
    """(g, t^m, 4, 4) the coefficients, over :func:`_chain_monomials`'s products, of the
    product of the first ``joints`` local transforms of each group (``C`` (g, m, t, 4, 4),
    :func:`_grouped_local_coefficients`); the group's later joints count as identities."""
    G = C[:, 0]
    for j in range(1, C.shape[1]):
        Cj = C[:, j] if j < joints else identity.expand_as(C[:, j])
        G = (G[:, :, None] @ Cj[:, None]).flatten(1, 2)  # (g, t^(j+1), 4, 4)
    return G


def _in_groups(x: torch.Tensor, filler) -> torch.Tensor:
    """(g, m, ...) the rows of ``x`` (k, ...) in groups of ``m = CHAIN_GROUP``, the last
    group completed with copies of ``filler``: one row, or a number (nothing is made
    when k is a multiple of m)."""
    pad = -x.shape[0] % CHAIN_GROUP
    if pad:
        rows = (pad, *x.shape[1:])
        x = torch.cat([x, filler.expand(rows) if isinstance(filler, torch.Tensor) else x.new_full(rows, filler)])
    return x.view(x.shape[0] // CHAIN_GROUP, CHAIN_GROUP, *x.shape[1:])


def _chain_monomials(topo, q: torch.Tensor) -> torch.Tensor:
    """(g, t^m, B) the products of one term of each joint of a group, for the chain's
    coordinates ``q`` (k, B) in groups of ``m = CHAIN_GROUP`` (:func:`_pose_terms`'s
    terms; the padding joints of :func:`_chain_group_coefficients` take ones)."""
    T = _pose_terms(topo, q)  # (k, t, B)
    T = _in_groups(T, 1.0)  # (g, m, t, B)
    M = T[:, 0]
    for j in range(1, CHAIN_GROUP):
        M = (M[:, :, None] * T[:, j, None]).flatten(1, 2)  # (g, t^(j+1), B)
    return M


def _frame_placement(model: Model, frame: str, rot: torch.Tensor, pos: torch.Tensor, last: torch.Tensor):
    """(4, 4) body_H_frame from ``model.frame(frame)``'s ``rot``, ``pos`` and the last row
    ``last`` (1, 4), kept on the model per frame unless they need grad (three operators
    fewer per call; see :func:`~.topology.model_cached_entry`)."""
    return model_cached_entry(model, "_frame_placements", frame,
                              lambda: torch.cat([torch.cat([rot, pos[:, None]], 1), last]), depends_on=(rot, pos))


def _homogeneous_locals(model: Model, q: torch.Tensor, bodies):
    """The local transforms of ``bodies`` at their coordinates ``q`` (k, B) as k
    batch-first (B, 4, 4) homogeneous matrices: one ``bmm`` of their coefficients with
    the terms, one transposing copy."""
    local = torch.bmm(_pose_matrix_rows(model, bodies, homogeneous=True), _pose_terms(topology(model), q))
    return local.permute(2, 0, 1).reshape(q.shape[-1], local.shape[0], 4, 4).unbind(1)


def frame_pose(model: Model, kin: Kinematics, frame: str, rotation: bool = True):
    """World pose of one frame: body index, (3, 3, B) (None unless ``rotation``), (3, B).
    ``kin`` may be a :func:`chain_forward` to the frame's body."""
    body, rot, pos = model.frame(frame)
    row = body if kin.chain is None else -1
    Rb, pb = kin.R[row], kin.p[row]
    return body, mm(Rb, rot[..., None]) if rotation else None, pb + mv(Rb, pos[..., None])
