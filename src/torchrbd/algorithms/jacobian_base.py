"""A frame Jacobian's rows over the six base columns, (6, 6, B) batch-last, kept as the
few values its entries are.

In each representation the block has a fixed pattern:

* INERTIAL_FIXED: the identity (:func:`identity`);
* MIXED: ``[[1, -[r_F]x], [0, 1]]``, from the frame origin ``r_F`` (:func:`mixed`);
* BODY_FIXED: ``[[Q, P], [0, Q]]``, from the 18 numbers of Q's and P's columns (:func:`body`);
* their rates: zero (INERTIAL_FIXED, :func:`zeros`), ``[[0, -[r_F']x], [0, 0]]``
  (:func:`mixed_rate`), BODY_FIXED's the same pattern as its block (:func:`body`).

Where the C loop writes a Jacobian (``placement.place_zeroed``), it places these values
straight into the result's rows, a row of values into every entry that holds it
(:meth:`BaseRows.parts`); the other paths make the block whole first
(:meth:`BaseRows.block`). So the block is not gathered into 36 rows only to be copied
again.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..inference import tensor_cache
from .topology import _uncached


def _block(rows) -> list:
    return [e for row in rows for e in row]


# Where each entry of MIXED's block ``[[1, -[r]x], [0, 1]]`` sits in ``(0, 1, r, -r)``
# (36, row-major; ``-[r]x = [[0, r_z, -r_y], [-r_z, 0, r_x], [r_y, -r_x, 0]]``).
_RX, _RY, _RZ, _NX, _NY, _NZ = 2, 3, 4, 5, 6, 7
_MIXED_LAYOUT = _block([
    [1, 0, 0, 0, _RZ, _NY],
    [0, 1, 0, _NZ, 0, _RX],
    [0, 0, 1, _RY, _NX, 0],
    [0, 0, 0, 1, 0, 0],
    [0, 0, 0, 0, 1, 0],
    [0, 0, 0, 0, 0, 1],
])


def _body_layout() -> list:
    """Where each entry of BODY_FIXED's block ``[[Q, P], [0, Q]]`` sits in ``(0, V)``, V
    (6, 3) the columns of Q and then of P (36, row-major)."""
    rows = [[0] * 6 for _ in range(6)]
    for i in range(3):
        for j in range(3):
            rows[i][j] = rows[3 + i][3 + j] = 1 + 3 * j + i  # Q[i, j] = V[j, i]
            rows[i][3 + j] = 10 + 3 * j + i  # P[i, j] = V[3 + j, i]
    return _block(rows)


_BODY_LAYOUT = _body_layout()


def _positions(layout: list, values, occurrence: int = 0) -> tuple:
    """The positions in a block (row-major, 0-35) of the ``occurrence``-th entry
    holding each of ``values`` in ``layout``."""
    return tuple([k for k, e in enumerate(layout) if e == v][occurrence] for v in values)


# where the values of each part go in the block
_DIAGONAL = tuple(7 * i for i in range(6))
_MIXED_R = _positions(_MIXED_LAYOUT, (_RX, _RY, _RZ))
_MIXED_NEG_R = _positions(_MIXED_LAYOUT, (_NX, _NY, _NZ))
_BODY_Q = _positions(_BODY_LAYOUT, range(1, 10))  # Q's nine numbers (V's first nine), each twice
_BODY_Q_AGAIN = _positions(_BODY_LAYOUT, range(1, 10), occurrence=1)
_BODY_P = _positions(_BODY_LAYOUT, range(10, 19))


class BaseRows:
    """A Jacobian's base block as values.

    ``like``: a tensor the values are made of, differentiated and traced exactly when
    the block is (what decides whether results may be written into buffers);
    ``block()``: the (6, 6, B) block; ``parts(width)``: pairs ``(src (P, B), columns
    (P,))`` for ``placement.place_zeroed``, each row of ``src`` and the column of the
    row-major (6, ``width``) Jacobian rows it goes to (the zeros are not placed)."""

    def __init__(self, like: torch.Tensor, block: Callable[[], torch.Tensor], parts: Callable[[int], tuple]):
        self.like, self.block, self.parts = like, block, parts


def zeros(like: torch.Tensor) -> BaseRows:
    """The zero block (an INERTIAL_FIXED Jacobian's rate), of ``like``'s batch (.., B)."""
    return BaseRows(like, lambda: like.new_zeros(6, 6, like.shape[-1]), lambda width: ())


def identity(like: torch.Tensor) -> BaseRows:
    """The identity (an INERTIAL_FIXED Jacobian's block), of ``like``'s batch (.., B):
    one row of ones placed into the six diagonal entries (row stride 0)."""
    B = like.shape[-1]

    def block():
        return torch.eye(6, dtype=like.dtype, device=like.device)[..., None].expand(6, 6, B)

    return BaseRows(like, block, lambda width: (_ones_part(like, width),))


def mixed(r_F: torch.Tensor) -> BaseRows:
    """MIXED's ``[[1, -[r_F]x], [0, 1]]`` for the frame origin ``r_F`` (3, B) relative
    to the base: ones (row stride 0), ``r_F`` and ``-r_F`` placed into their entries,
    or made whole by :func:`mixed_base_rows`."""
    return BaseRows(r_F, lambda: mixed_base_rows(r_F), lambda width: (_ones_part(r_F, width), *_r_parts(r_F, width)))


def mixed_rate(r_rate: torch.Tensor) -> BaseRows:
    """The rate of MIXED's block, ``[[0, -[r_rate]x], [0, 0]]`` for the rate ``r_rate``
    (3, B) of the frame origin relative to the base: ``r_rate`` and ``-r_rate`` placed
    into the entries of :func:`mixed`'s ``r`` and ``-r``, or the block gathered."""
    return BaseRows(r_rate, lambda: _mixed_gather(r_rate, diagonal=0.0), lambda width: _r_parts(r_rate, width))


def _ones_part(like: torch.Tensor, width: int) -> tuple:
    """The part of the ones on the block's diagonal: one row of ones, row stride 0."""
    return like.new_ones(1, like.shape[-1]).expand(6, like.shape[-1]), _columns(_DIAGONAL, width, like.device)


def _r_parts(r: torch.Tensor, width: int) -> tuple:
    """The parts of ``r`` (3, B) and ``-r`` in MIXED's block, placed as ``-[r]x``."""
    return (r, _columns(_MIXED_R, width, r.device)), (r.neg(), _columns(_MIXED_NEG_R, width, r.device))


def body(V: torch.Tensor) -> BaseRows:
    """BODY_FIXED's ``[[Q, P], [0, Q]]`` from ``V`` (6, 3, B), the columns of Q then of
    P: Q's nine numbers placed twice, P's once, or the block gathered from ``(0, V)``."""
    B = V.shape[-1]
    flat = V.reshape(18, B)

    def block():
        values = torch.cat([V.new_zeros(1, B), flat])  # (19, B)
        return values.index_select(0, _uncached(_entries)("body", str(V.device))).view(6, 6, B)

    def parts(width):
        Q, P = flat[:9], flat[9:]
        return ((Q, _columns(_BODY_Q, width, V.device)), (Q, _columns(_BODY_Q_AGAIN, width, V.device)),
                (P, _columns(_BODY_P, width, V.device)))

    return BaseRows(V, block, parts)


def mixed_base_rows(r_F: torch.Tensor) -> torch.Tensor:
    """(6, 6, B) the rows of a frame's MIXED Jacobian over the base columns, ``X`` itself:
    ``[[1, -[r_F]x], [0, 1]]`` for the frame origin ``r_F`` (3, B) relative to the base,
    one gather from the values ``(0, 1, r_F, -r_F)`` (what
    :func:`~.representation.twists_to_rep` makes of the six unit twists, without
    converting them). Also INERTIAL_FIXED's T of the base position
    (:func:`~.representation.base_map`)."""
    return _mixed_gather(r_F, diagonal=1.0)


def _mixed_gather(r: torch.Tensor, diagonal: float) -> torch.Tensor:
    """(6, 6, B) ``[[d, -[r]x], [0, d]]`` for ``r`` (3, B) and the number ``d`` on the
    diagonal: one gather from ``(0, d, r, -r)`` by :data:`_MIXED_LAYOUT`."""
    B = r.shape[-1]
    values = torch.cat([r.new_zeros(1, B), r.new_full((1, B), diagonal), r, r.neg()])  # (8, B)
    return values.index_select(0, _uncached(_entries)("mixed", str(r.device))).view(6, 6, B)


@tensor_cache(8)
def _entries(kind: str, device: str) -> torch.Tensor:
    """(36,) int64, :data:`_MIXED_LAYOUT` or :data:`_BODY_LAYOUT` on ``device``."""
    return torch.tensor(_MIXED_LAYOUT if kind == "mixed" else _BODY_LAYOUT, device=device)


def _columns(positions: tuple, width: int, device) -> torch.Tensor:
    return _uncached(_placed_columns)(positions, width, str(device))


@tensor_cache(32)
def _placed_columns(positions: tuple, width: int, device: str) -> torch.Tensor:
    """(P,) int64: the columns of the row-major (6, ``width``) Jacobian rows where the
    block's ``positions`` sit (the block in the first six columns)."""
    return torch.tensor([k // 6 * width + k % 6 for k in positions], dtype=torch.long, device=device)
