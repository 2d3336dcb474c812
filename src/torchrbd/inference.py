"""Eager calls without autograd run under ``torch.inference_mode``; caches hold normal tensors.

A public method of :class:`~torchrbd.KinDynComputations` that needs no gradient (no
input or model parameter requires one, no ``torch.func`` transform, no forward-mode
tangent) runs its algorithms under ``torch.inference_mode``, where each operator skips
autograd's dispatch and the version counters. Its results are then cloned out of
inference mode, so that the caller gets normal tensors, which autograd may save and
which may be updated in place (iCub, in-process A/B against the calls under
``torch.no_grad`` alone: B = 1 mass matrix 0.90x, aba 0.88x the time; B = 1024 bias
force and aba 0.92x, the mass matrix 1.00x, its 6.9 MB result's clone taking what its
operators gain).

A result of at least ``RESULT_BUFFER_BYTES`` is written by its last operator into a normal
tensor (:func:`result_buffer`), which needs no clone after: the mass matrix's placing
gather, the Jacobians' assembly, the batch-first copy of the others and the output of a
batch run in chunks (iCub, float64, in-process against the clone: at B = 1024 the mass
matrix 0.86-0.95x the time, the Jacobian 0.92-0.97x, the centroidal momentum matrix
0.98x; at B = 16384, in chunks, the mass matrix 0.74x). Not the poses: written into a
normal tensor, iCub's link poses at B = 1024 took 1.00x the time of their clone.

Tensors that the library keeps between calls (per-model constants, index tensors,
converted models) must be normal tensors too, since a later call with gradients reads
them: every cache builds its values through :func:`normal_tensors`.
"""

from __future__ import annotations

import functools
import math
import threading

import torch

_ours = threading.local()  # .active: this thread runs a method under the inference mode it entered


def normal_tensors(fn):
    """``fn``, made to create normal tensors when called under ``torch.inference_mode``
    (for what a cache keeps)."""
    @functools.wraps(fn)
    def make(*args, **kwargs):
        if torch.compiler.is_compiling() or not torch.is_inference_mode_enabled():
            return fn(*args, **kwargs)
        with torch.inference_mode(False):
            return fn(*args, **kwargs)
    return make


def tensor_cache(maxsize: int):
    """``functools.lru_cache(maxsize)`` of a function whose results hold tensors, built
    through :func:`normal_tensors`."""
    return lambda fn: functools.lru_cache(maxsize=maxsize)(normal_tensors(fn))


def call_in_inference_mode(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` under ``torch.inference_mode`` entered for it (where
    :func:`result_buffer` allocates normal tensors), its results made normal tensors
    (:func:`out_of_inference_mode`)."""
    before = getattr(_ours, "active", False)
    _ours.active = True
    try:
        with torch.inference_mode():
            result = fn(*args, **kwargs)
    finally:
        _ours.active = before
    return out_of_inference_mode(result)


RESULT_BUFFER_BYTES = 1 << 20
""":func:`result_buffer` makes normal tensors from this size; smaller results are cloned
(a normal tensor made inside inference mode takes 3-5 us more than an inference tensor,
about what the clone of 100 KB costs)."""


ONE_PASS_RESULT_BYTES = 1 << 17
"""The threshold of :func:`result_buffer` (if lower than ``RESULT_BUFFER_BYTES``) for a
result that its last operator writes in full in one pass (a Jacobian zeroed and placed by
``placement.place_zeroed``): from about the size whose clone costs more than making a
normal tensor. (A result that is zero-filled first pays for the extra pass over a normal
tensor's fresh memory what it saves in the clone.)"""


def result_buffer(like: torch.Tensor, *shape: int, one_pass: bool = False) -> torch.Tensor | None:
    """An empty ``shape`` tensor of ``like``'s dtype and device for the last operator of
    a result to write into (``out=``): a normal tensor, which then leaves the method
    without a clone, for a result of at least ``RESULT_BUFFER_BYTES`` (``one_pass``: or
    ``ONE_PASS_RESULT_BYTES``) where the method runs under the inference mode
    :func:`call_in_inference_mode` entered; otherwise None
    (the operator allocates its result as usual: under the caller's own inference mode
    results stay inference tensors)."""
    if (torch.compiler.is_compiling() or not getattr(_ours, "active", False) or not torch.is_inference_mode_enabled()
            or math.prod(shape) * like.element_size() < (
                min(RESULT_BUFFER_BYTES, ONE_PASS_RESULT_BYTES) if one_pass else RESULT_BUFFER_BYTES)):
        return None
    with torch.inference_mode(False):
        return like.new_empty(shape)


def out_of_inference_mode(result):
    """A method's result (a tensor or a tuple of them) as normal tensors: inference
    tensors cloned (outside inference mode, which the caller has left)."""
    if isinstance(result, tuple):
        return tuple(out_of_inference_mode(r) for r in result)
    return result.clone() if isinstance(result, torch.Tensor) and result.is_inference() else result
