"""Every link's world pose, as batch-first 4x4 matrices, by matrix products with
constants.

A link is fixed to a body: ``world_H_link = world_H_body body_H_link``. Its rows
``[R | p]`` and its last row ``(0, 0, 0, 1)`` are linear in the 12 numbers of its
body's rows ``[R_b | p_b]`` and a constant 1 (p_b the world position). So for a run of
consecutive links (in ``model.link_names`` order) on one body, their 16 numbers each are
one matrix product: the body's 13 numbers per configuration, (B, 13), times a constant
(13, 16 per link), written straight into the run's columns of the (B, nlink * 16)
result. URDF files usually list a body's links together (iCub: 213 links on 24 bodies
in 25 runs), so a few products make the whole result, batch-first, where gathering each
link's body pose (nlink, 3, 4, B), composing it batch-last and transposing the result
moved the (B, nlink, 4, 4) numbers several times (iCub, B = 1024: 28 MB).

Links' velocities likewise: in each representation a link's velocity is linear in a few
numbers of its body's (:func:`link_velocities`).
"""

from __future__ import annotations

import torch

from ..inference import result_buffer
from ..model.model import Model
from .batchlast import cross, has_tangent, mtv, plain
from .representation import INERTIAL, MIXED, twists_to_rep
from .topology import model_cached, model_cached_entry

FROM = 128
"""Batches from this length on take :func:`link_transforms` and :func:`link_velocities`
(see :func:`applies`). iCub (213 links), without gradients, against gathering each
link's body pose, composing (and converting the twists) batch-last and transposing the
result (what ``link_poses`` and ``link_velocities`` do below this length):

* poses, float64: B = 64 1.02x the time, 96 0.94x, 128 0.72x, 256 0.48x, 1024 0.26x,
  2048 0.13x; float32 B = 128 1.01x, 256 0.58x, 1024 0.22x;
* velocities, float64, MIXED / BODY_FIXED / INERTIAL_FIXED: B = 96 1.02x / 0.81x /
  0.93x, 128 0.96x / 0.83x / 0.91x, 256 0.86x / 0.71x / 0.82x, 1024 0.40x / 0.31x /
  0.29x; float32 B = 1024 0.39x / 0.34x / 0.35x;
* with gradients, forward and backward (w.r.t. q, and qd for the velocities; the
  backward :class:`_RunProducts`), float64: poses B = 128 0.78x, 256 0.61x, 1024 0.40x
  (28.1 -> 11.3 ms); MIXED velocities 0.99x, 0.75x, 0.64x; float32 B = 1024 0.39x,
  0.65x."""


def applies(model: Model, *tensors) -> bool:
    """Whether :func:`link_transforms` and :func:`link_velocities` serve inputs made of
    ``tensors`` (..., B): a batch of at least :data:`FROM`, eager, plain tensors (not in a
    ``torch.func`` transform), no forward-mode tangent, and links' placements that need
    no gradient (the weights are constants of the products' backward)."""
    return (tensors[0].shape[-1] >= FROM and not torch.compiler.is_compiling()
            and all(plain(t) for t in tensors) and not has_tangent(*tensors)
            and not (torch.is_grad_enabled() and (model.link_rot.requires_grad or model.link_pos.requires_grad)))


def link_transforms(model: Model, X: torch.Tensor, pB: torch.Tensor) -> torch.Tensor:
    """world_H_link (B, nlink, 4, 4) in ``model.link_names`` order, contiguous, from the
    bodies' pose rows ``X`` (nb, 3, 4, B) (positions relative to the base, as whole-tree
    :func:`~.kinematics.forward` makes them) and the base position ``pB`` (3, B)."""
    nb, B = X.shape[0], X.shape[-1]
    rows = torch.cat([X.reshape(nb, 12, B), X.new_ones(1, 1, B).expand(nb, 1, B)], 1)  # (nb, 13, B)
    rows[:, 3:12:4] += pB  # world positions
    return _products(model, rows, link_weights(model)).view(B, model.nlink, 4, 4)


def link_velocities(model: Model, rep: str, R: torch.Tensor, p: torch.Tensor, V: torch.Tensor,
                    pB: torch.Tensor) -> torch.Tensor:
    """(B, nlink, 6) every link's velocity in ``rep`` (:func:`~.representation.velocities_to_rep`
    of its body's twist), contiguous, from the bodies' poses ``R`` (nb, 3, 3, B), ``p``
    (nb, 3, B) relative to the base, their twists ``V`` (nb, 6, B) about O (world axes)
    and the base position ``pB`` (3, B).

    With ``v``, ``w`` a body's origin velocity and angular velocity (world axes) and
    ``A = body_H_link`` = ``[R_A | a]``:

    * MIXED: ``(v + w x R a, w)``, linear in ``v``, ``[w]x R`` and ``w`` (15 numbers);
    * BODY_FIXED: ``R_A^T (u + o x a, o)`` with ``u = R^T v``, ``o = R^T w`` (6 numbers);
    * INERTIAL_FIXED: the body's twist about the world origin, the same for its links."""
    v_O, w = V[:, :3], V[:, 3:]
    if rep == INERTIAL:
        features = twists_to_rep(rep, V, None, pB)
    else:
        v = v_O + cross(w, p)  # the body origin's velocity
        if rep == MIXED:
            wR = cross(w[:, None], R.transpose(1, 2))  # (nb, 3, 3, B): column j of [w]x R is w x (column j of R)
            features = torch.cat([v, wR.reshape(-1, 9, v.shape[-1]), w], 1)  # (nb, 15, B)
        else:
            features = mtv(R[:, None], torch.stack([v, w], 1)).reshape(V.shape)  # (u, o) (nb, 6, B)
    return _products(model, features, velocity_weights(model, rep)).view(V.shape[-1], model.nlink, 6)


def _products(model: Model, features: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """(B, nlink k): each run's links (their columns of ``W`` (f, nlink k)) from its
    body's ``features`` (nb, f, B), written into the method's result where it has one
    (:func:`~torchrbd.inference.result_buffer`); with gradients :class:`_RunProducts`."""
    runs, bodies = _column_runs(model, W.shape[1] // model.nlink)
    if torch.is_grad_enabled() and features.requires_grad:
        return _RunProducts.apply(features, W, runs, bodies)
    B = features.shape[-1]
    out = result_buffer(features, B, W.shape[1])
    return _products_into(features, W, runs, features.new_empty(B, W.shape[1]) if out is None else out)


def _products_into(features, W, runs, out):
    per_config = features.permute(2, 0, 1)  # (B, nb, f), a view: each body's (B, f) is a transposed matrix
    for body, cols in runs:
        torch.mm(per_config[:, body], W[:, cols], out=out[:, cols])
    return out


class _RunProducts(torch.autograd.Function):
    """:func:`_products` with gradients: the forward writes the products into a fresh
    result; the backward is the transposed products, run by run (``G_run W_run^T``, (B,
    f) each), added into their bodies' rows. Its operators are differentiable, so
    second derivatives work (the weights are constants)."""

    @staticmethod
    def forward(ctx, features, W, runs, bodies):
        ctx.save_for_backward(W, bodies)
        ctx.runs, ctx.nb = runs, features.shape[0]
        return _products_into(features, W, runs, features.new_empty(features.shape[-1], W.shape[1]))

    @staticmethod
    def backward(ctx, G):
        W, bodies = ctx.saved_tensors
        parts = torch.stack([G[:, cols] @ W[:, cols].t() for _, cols in ctx.runs], 1)  # (B, runs, f)
        grad = parts.new_zeros(G.shape[0], ctx.nb, W.shape[0]).index_add(1, bodies, parts)
        return grad.permute(1, 2, 0), None, None, None


def _column_runs(model: Model, k: int) -> tuple:
    """``(body, columns)`` of each run of :func:`link_runs` in a (B, nlink k) result,
    and the runs' bodies as an index tensor on the model's device."""
    def make():
        runs = tuple((body, slice(k * first, k * (first + count))) for body, first, count in link_runs(model))
        return runs, torch.tensor([body for body, _ in runs], device=model.link_rot.device)
    return model_cached_entry(model, "_link_column_runs", k, make)


def link_runs(model: Model) -> tuple:
    """``(body, first link, count)`` for each run of consecutive links on one body."""
    def make():
        runs, bodies = [], model.link_body
        for link, body in enumerate(bodies):
            if runs and runs[-1][0] == body:
                runs[-1][2] += 1
            else:
                runs.append([body, link, 1])
        return tuple(tuple(r) for r in runs)
    return model_cached(model, "_link_runs", make)


def link_weights(model: Model) -> torch.Tensor:
    """(13, nlink * 16): column ``16 l + 4 i + k`` makes entry (i, k) of link l's 4x4
    pose from its body's ``[R_b | p_b]`` (row ``4 i + j``: entry (i, j)) and a 1 (row
    12): ``(X A)[i, k] = sum_j X[i, j] A[j, k]`` with ``A = body_H_link`` (its last row
    ``(0, 0, 0, 1)`` takes p_b), and the pose's last row from the 1. Kept on the model
    (see :func:`~.topology.model_cached_entry`)."""
    rot, pos = model.link_rot, model.link_pos

    def make():
        n = rot.shape[0]
        last = torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=rot.dtype, device=rot.device).expand(n, 1, 4)
        A = torch.cat([torch.cat([rot, pos[:, :, None]], 2), last], 1)  # (nlink, 4, 4) body_H_link
        W = rot.new_zeros(13, n, 4, 4)
        for i in range(3):
            W[4 * i:4 * i + 4, :, i, :] = A.transpose(0, 1)  # (j, link, k)
        W[12, :, 3, 3] = 1
        return W.reshape(13, n * 16)
    return model_cached_entry(model, "_link_weights", None, make, depends_on=(rot, pos))


def velocity_weights(model: Model, rep: str) -> torch.Tensor:
    """(f, nlink * 6) column ``6 l + r`` makes entry r of link l's velocity in ``rep``
    from its body's features of :func:`link_velocities` (f = 15 in MIXED, 6 otherwise).
    Kept on the model per representation."""
    rot, pos = model.link_rot, model.link_pos

    def make():
        n = rot.shape[0]
        if rep == INERTIAL:
            return torch.eye(6, dtype=rot.dtype, device=rot.device).repeat(1, n)
        if rep == MIXED:  # v + [w]x R a: entry (i, j) of [w]x R (feature 3 + 3 j + i) times a_j
            W = rot.new_zeros(15, n, 6)
            for i in range(3):
                W[i, :, i] = 1  # v
                W[12 + i, :, 3 + i] = 1  # w
                for j in range(3):
                    W[3 + 3 * j + i, :, i] = pos[:, j]
            return W.reshape(15, n * 6)
        # BODY_FIXED: [[R_A^T, -R_A^T [a]x], [0, R_A^T]] (u, o)
        RT = rot.transpose(1, 2)
        K = rot.new_zeros(n, 6, 6)
        K[:, :3, :3] = RT
        K[:, :3, 3:] = -RT @ _skew(pos)
        K[:, 3:, 3:] = RT
        return K.permute(2, 0, 1).reshape(6, n * 6)  # W[c, 6 l + r] = K_l[r, c]
    return model_cached_entry(model, "_link_velocity_weights", rep, make, depends_on=(rot, pos))


def _skew(a: torch.Tensor) -> torch.Tensor:
    """(n, 3, 3) ``[a]x`` of (n, 3) vectors."""
    z = torch.zeros_like(a[:, 0])
    return torch.stack([
        torch.stack([z, -a[:, 2], a[:, 1]], 1),
        torch.stack([a[:, 2], z, -a[:, 0]], 1),
        torch.stack([-a[:, 1], a[:, 0], z], 1),
    ], 1)
