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
"""

from __future__ import annotations

import torch

from ..model.model import Model
from .topology import model_cached, model_cached_entry

FROM = 128
"""Batches from this length on take :func:`link_transforms` where nothing is
differentiated. iCub (213 links), against gathering each link's body pose, composing
batch-last and transposing the result (``link_poses`` below this length, and with
gradients): float64 B = 64 1.02x the time, 96 0.94x, 128 0.72x, 256 0.48x, 1024
0.26x, 2048 0.13x; float32 B = 128 1.01x, 256 0.58x, 1024 0.22x. With gradients the
products and their concatenation took 1.1-1.4x the time of that path's forward and
backward (B = 4-2048), so it keeps it."""


def link_transforms(model: Model, X: torch.Tensor, pB: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """world_H_link (B, nlink, 4, 4) in ``model.link_names`` order, written into ``out``
    (B, nlink, 4, 4), contiguous, from the bodies' pose rows ``X`` (nb, 3, 4, B)
    (positions relative to the base, as whole-tree :func:`~.kinematics.forward` makes
    them) and the base position ``pB`` (3, B). Nothing may be differentiated (the
    products write into ``out``)."""
    nb, B = X.shape[0], X.shape[-1]
    rows = torch.cat([X.reshape(nb, 12, B), X.new_ones(1, 1, B).expand(nb, 1, B)], 1)  # (nb, 13, B)
    rows[:, 3:12:4] += pB  # world positions
    per_config = rows.permute(2, 0, 1)  # (B, nb, 13), a view: each body's (B, 13) is a transposed matrix
    W, flat = link_weights(model), out.view(B, -1)  # (13, nlink * 16), (B, nlink * 16)
    for body, first, count in link_runs(model):
        cols = slice(16 * first, 16 * (first + count))
        torch.mm(per_config[:, body], W[:, cols], out=flat[:, cols])
    return out


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
