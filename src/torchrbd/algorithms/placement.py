"""Batch-last entries placed into batch-first rows: ``out[b, j] = src[index[j], b]``.

The algorithms keep the batch as the last dimension; results leave batch-first. That
last step is a transpose, often with a gather (the mass matrix places, mirrors and
zeroes its entries by one index). torch's CPU ``gather`` does it at about 1 ns per
number here, mostly per-element index work. ``torchrbd._placement`` is a small C loop
(no torch headers, built with the package; see ``_placement.c``) that takes the
configurations by whole cache lines of the source, 3-4x faster. It is optional: where
it was not built, or with ``TORCHRBD_NATIVE=0`` in the environment, the same result
comes from ``torch.gather``.
"""
from __future__ import annotations

import os

import torch

try:
    from .. import _placement
except ImportError:  # built without a C compiler: torch.gather does the same
    _placement = None

NATIVE = _placement is not None and os.environ.get("TORCHRBD_NATIVE", "1") != "0"
"""Whether :func:`place` may use the C loop (read at import)."""


def place(src: torch.Tensor, index: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """(B, P) ``src[index[j], b]`` for ``src`` (K, B) batch-last (rows may be padded:
    any row stride, unit column stride) and ``index`` (P,) int64 row numbers, into
    ``out`` (B, P) where given. The C loop where it applies (CPU, 4- or 8-byte numbers,
    nothing to differentiate, not traced), else ``torch.gather`` through the transposed
    view."""
    B, P = src.shape[1], index.shape[0]
    if not _native_applies(src, index, out):
        return torch.gather(src.t(), 1, index.expand(B, P), out=out)
    if out is None:
        out = src.new_empty(B, P)
    _placement.place(src.data_ptr(), src.stride(0), index.data_ptr(), P, B, out.data_ptr(),
                     src.element_size(), torch.get_num_threads())
    return out


def _native_applies(src, index, out) -> bool:
    return (NATIVE and src.device.type == "cpu" and index.device.type == "cpu" and src.stride(1) == 1
            and src.element_size() in (4, 8) and index.dtype == torch.int64 and index.is_contiguous()
            and not (src.requires_grad and torch.is_grad_enabled()) and not torch.compiler.is_compiling()
            and (out is None or (out.is_contiguous() and out.dtype == src.dtype and out.device == src.device)))
