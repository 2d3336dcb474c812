"""Batch-last entries placed into batch-first rows: ``out[b, j] = src[index[j], b]``.

The algorithms keep the batch as the last dimension; results leave batch-first. That
last step is a transpose, often with a gather (the mass matrix places, mirrors and
zeroes its entries by one index). torch's CPU ``gather`` and transposing copies take
about 1 ns per number here, mostly per-element index work. ``torchrbd._placement`` is
a small C loop (no torch headers, built with the package; see ``_placement.c``) that
takes the configurations by whole cache lines of the source: about 3x faster. It is
optional: where it was not built, or with ``TORCHRBD_NATIVE=0`` in the environment,
the same results come from torch's operators.
"""
from __future__ import annotations

import functools
import math
import os

import torch

try:
    from .. import _placement
except ImportError:  # built without a C compiler: torch's operators do the same
    _placement = None

NATIVE = _placement is not None and os.environ.get("TORCHRBD_NATIVE", "1") != "0"
"""Whether :func:`place` may use the C loop (read at import)."""

PARALLEL_FROM = 32768
"""Numbers placed from which the loop runs on torch's threads (below, one: starting the
other threads costs more than they save)."""

PAYS_FROM = 4096
"""Numbers placed from which the loop beats a transposing copy (:func:`applies`): its
call costs about 10 us of Python, a copy about 1 ns per number (29 rows: 20 against 26
us at B = 256, 14 against 11 us at B = 64; 174 rows at B = 64: 22 against 30 us)."""


def place(src: torch.Tensor, index: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """(B, P) ``src[index[j], b]`` for ``src`` (K, B) batch-last (rows may be padded:
    any row stride, unit column stride) and ``index`` (P,) int64 row numbers (not
    checked: they must be below K), into ``out`` (B, P) where given.

    The C loop where it applies (CPU, 4- or 8-byte numbers, nothing to differentiate,
    not traced), else ``torch.gather`` through the transposed view."""
    B, P = src.shape[1], index.shape[0]
    if not _native_applies(src, index, out):
        return torch.gather(src.t(), 1, index.expand(B, P), out=out)
    if out is None:
        out = src.new_empty(B, P)
    _run(src, src.stride(0), index, B, out, out.stride(0))
    return out


def place_zeroed(out: torch.Tensor, parts) -> bool:
    """Zero ``out`` (B, W) (unit column stride) and copy into it each of ``parts``, pairs
    ``(src, columns)`` of rows ``src`` (P, B) batch-last (any row stride, unit column
    stride) and their columns (P,) int64, not checked (they must be below W):
    ``out[b, columns[j]] = src[j, b]``. One pass
    of the C loop, each block of configurations' rows zeroed and filled in the L1 cache
    (at most four parts). Returns whether it ran: False, with nothing done, where the loop
    does not apply (see :func:`place`'s conditions), and the caller zeroes and places."""
    if not (len(parts) <= 4 and _loop_reads(out) and out.dim() == 2 and out.stride(1) == 1):
        return False
    B = out.shape[0]
    for src, columns in parts:  # (each part read as place reads its source, by its index of columns)
        if not (src.dim() == 2 and _native_applies(src, columns) and src.dtype is out.dtype and src.shape[1] == B
                and columns.is_contiguous() and columns.shape[0] == src.shape[0]):
            return False
    threads = torch.get_num_threads() if B * out.shape[1] >= PARALLEL_FROM else 1
    _placement.place_zeroed(out.data_ptr(), out.stride(0), out.shape[1], B, out.element_size(), threads,
                            tuple((src.data_ptr(), src.stride(0), columns.data_ptr(), src.shape[0])
                                  for src, columns in parts))
    return True


def to_batch_first(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor | None:
    """(B, *s) contiguous copy of ``x`` (*s, B), batch-last: contiguous, or a view of
    contiguous memory with its leading dimensions permuted (a transposed result), by
    the C loop (into ``out`` (B, *s), contiguous, where given); None where the loop does
    not apply (the caller then copies as before)."""
    B, numbers = x.shape[-1], x.numel()
    if not (applies(x, numbers) and x.stride(-1) == 1 and not (x.requires_grad and torch.is_grad_enabled())):
        return None
    lead, K = x.shape[:-1], numbers // B
    if x.is_contiguous():
        index = rows(K)
    else:
        order = tuple(sorted(range(len(lead)), key=lambda d: -x.stride(d)))  # (the dimensions in memory order)
        x = x.permute(*order, -1)
        if not x.is_contiguous():
            return None
        index = _permuted_rows(tuple(x.shape[:-1]), order)
    if out is None:
        out = x.new_empty(B, *lead)
    _run(x, B, index, B, out, K)
    return out


@functools.lru_cache(maxsize=64)
def _permuted_rows(shape: tuple, order: tuple) -> torch.Tensor:
    """Row numbers of contiguous (*shape, B) memory in the order of its view whose
    dimension d is the memory's dimension ``order[d]``."""
    inverse = sorted(range(len(order)), key=order.__getitem__)
    with torch.inference_mode(False):
        return torch.arange(math.prod(shape)).view(shape).permute(*inverse).reshape(-1)


@functools.lru_cache(maxsize=64)
def rows(k: int) -> torch.Tensor:
    """``arange(k)`` (int64, CPU), kept."""
    with torch.inference_mode(False):  # (a normal tensor, whatever mode the call is in)
        return torch.arange(k)


def _run(src, ld: int, index, B: int, out, ldo: int) -> None:
    """The C loop on tensors whose layout the caller checked (see ``_placement.c``)."""
    P = index.shape[0]
    threads = torch.get_num_threads() if P * B >= PARALLEL_FROM else 1
    _placement.place(src.data_ptr(), ld, index.data_ptr(), P, B, out.data_ptr(), ldo, src.element_size(), threads)


def applies(like: torch.Tensor, numbers: int) -> bool:
    """Whether the C loop is worth calling to place ``numbers`` numbers like ``like``
    (dtype, device) without gradients outside tracing: for callers whose other way is a
    transposing copy, which is faster for short results (:data:`PAYS_FROM`)."""
    return numbers >= PAYS_FROM and _loop_reads(like)


def _loop_reads(like: torch.Tensor) -> bool:
    """Whether the loop is in use and can copy numbers like ``like`` (CPU, 4 or 8 bytes,
    outside tracing)."""
    return NATIVE and not torch.compiler.is_compiling() and like.is_cpu and like.element_size() in (4, 8)


def _native_applies(src, index, out=None) -> bool:
    # (a few checks of the Python attributes only: this runs in every call of a method)
    if not (_loop_reads(src) and index.is_cpu and index.dtype is torch.int64 and src.stride(1) == 1
            and not (src.requires_grad and torch.is_grad_enabled())):
        return False
    return out is None or (out.dtype is src.dtype and out.is_cpu and out.dim() == 2 and out.stride(1) == 1
                           and out.shape[0] == src.shape[1] and out.shape[1] == index.shape[0])
