"""Long CPU batches in cache-sized chunks.

The eager algorithms keep a few dozen numbers per configuration and body in flight.
Past a few thousand configurations these no longer fit in the CPU's caches and the
throughput falls: iCub (24 bodies, float64, 2 cores) at B = 65536 took 1.43 s for
``aba`` in one call and 0.43 s in chunks of 4096 (``mass_matrix`` 1.02 s and 0.39 s).
So a public method of :class:`~torchrbd.KinDynComputations` called with a long batch
on the CPU, without autograd, runs chunk by chunk and writes each chunk's results
into one output. (Not the methods of one frame, ``forward_kinematics``, ``jacobian``
and ``jacobian_dot``: they keep little in flight, and chunks did not pay reliably: iCub
at B = 65536, forward kinematics 16.6 ms in one call and 24.7 ms in two; the Jacobian
1.16x to 0.68x the time in chunks of 16384, run to run.)

It runs in one call when anything needs a gradient (inputs or model parameters), under
``torch.compile``, inside ``torch.func`` transforms or forward-mode AD, and on other
devices (a GPU wants the whole batch at once).
"""

from __future__ import annotations

import functools
import inspect
import math

import torch

from .algorithms.batchlast import has_tangent, plain
from .inference import result_buffer

# Configurations x bodies x bytes per number of one chunk: iCub's whole tree (24 bodies)
# in chunks of 4096 configurations in float64, 8192 in float32. (iCub at B = 16384 and
# 65536 on this project's 2-core machine: chunks of 2048-4096 were the fastest in
# float64, 4096-8192 in float32.)
CHUNK_BYTES = 4096 * 24 * 8
_MIN_CHUNK = 256


def chunk_size(bodies: int, itemsize: int) -> int:
    """Configurations per chunk for a sweep over ``bodies`` bodies in numbers of
    ``itemsize`` bytes."""
    return max(_MIN_CHUNK, CHUNK_BYTES // (max(bodies, 1) * itemsize))


def in_chunks(specs: dict):
    """Decorator of a public method of ``KinDynComputations`` whose arguments named in
    ``specs`` (name -> trailing shape, ``"n"`` the number of joint coordinates) and
    ``external_wrenches`` (frame -> (..., 6)) carry the batch, and whose results are
    tensors (or a tuple of tensors) with the batch dimensions first. The method sweeps
    the whole tree (the chunk size scales with the number of bodies)."""

    def decorate(method):
        names = list(inspect.signature(method).parameters)[1:]  # after self
        batched = [(k, len(specs[k]), math.prod(1 if s == "n" else s for s in specs[k]), "n" in specs[k])
                   for k in names if k in specs]

        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            if torch.compiler.is_compiling():
                return method(self, *args, **kwargs)
            named = dict(zip(names, args), **kwargs)
            B, itemsize, tensors = _cpu_batch(self, batched, named)
            if B <= _MIN_CHUNK:  # (the common case, decided cheaply)
                return method(self, *args, **kwargs)
            size = chunk_size(self._model.nbody, itemsize)
            if B <= size or needs_grad(self, tensors):
                return method(self, *args, **kwargs)
            return _run_in_chunks(self, method, specs, named, size)

        return wrapper

    return decorate


def _cpu_batch(self, batched: list, named: dict):
    """(number of configurations, bytes per number, the batched tensors) of the tensor
    arguments ``batched`` (name, number of trailing dimensions, their size without and
    whether times the number of coordinates) and external wrenches, when all are on the
    CPU; a number of 0 otherwise (also when a shape is wrong: the method's own checks
    then raise)."""
    n = self._model.n
    B, itemsize, tensors = 0, 0, []
    wrenches = named.get("external_wrenches") or {}
    for value, ndim, size, times_n in [(named.get(k), *spec) for k, *spec in batched] + \
            [(w, 1, 6, False) for w in wrenches.values()]:
        if not isinstance(value, torch.Tensor):
            continue
        size = size * n if times_n else size
        if value.device.type != "cpu" or value.dim() < ndim or size == 0:
            return 0, 0, []
        B, itemsize = max(B, value.numel() // size), value.element_size()
        tensors.append(value)
    return B, itemsize, tensors


def needs_grad(self, tensors) -> bool:
    """Whether a result needs a gradient or a tangent: an input or a model parameter
    that requires one (with grad mode on), a ``torch.func`` transform, forward-mode AD."""
    if torch.is_grad_enabled():
        model = self._model
        if any(t.requires_grad for t in tensors) or any(getattr(model, f).requires_grad for f in model.tensor_fields()):
            return True
    return not all(plain(t) for t in tensors) or has_tangent(*tensors)


def _run_in_chunks(self, method, specs: dict, named: dict, size: int):
    """``method`` on consecutive, nearly equal chunks of at most ``size`` configurations
    of the flattened batch; each chunk's results are copied into the outputs."""
    batched = {k: v for k, v in named.items() if k in specs}
    model, batch_shape, flat = self._inputs(**batched)
    B = math.prod(batch_shape)
    wrenches = None
    if named.get("external_wrenches"):
        wrenches = self._wrenches(named["external_wrenches"], batch_shape, model, flat["joint_positions"])
    count = -(-B // size)
    bounds = [B * i // count for i in range(count + 1)]
    outputs = None
    for start, stop in zip(bounds[:-1], bounds[1:]):
        chunk = dict(named, **{k: v[start:stop] for k, v in flat.items()})
        if wrenches is not None:
            chunk["external_wrenches"] = {f: w[:, start:stop].transpose(0, 1) for f, w in wrenches.items()}
        results = method(self, **chunk)
        single = isinstance(results, torch.Tensor)
        results = (results,) if single else results
        if outputs is None:
            outputs = [_empty(r, B, *r.shape[1:]) for r in results]
        for out, r in zip(outputs, results):
            out[start:stop] = r
    outputs = [out.view(*batch_shape, *out.shape[1:]) for out in outputs]
    return outputs[0] if single else tuple(outputs)


def _empty(like: torch.Tensor, *shape: int) -> torch.Tensor:
    """An empty output for the chunks' results, a normal tensor where
    :func:`~torchrbd.inference.result_buffer` makes one."""
    out = result_buffer(like, *shape)
    return like.new_empty(shape) if out is None else out
