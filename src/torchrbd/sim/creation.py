"""Sceneless ``gs.Tensor`` factories: ``gs.tensor``, ``gs.zeros``, ``gs.rand`` ...

Like their torch namesakes, on the device chosen by :func:`~torchrbd.sim.init`;
floating results use the precision chosen there. ``dtype=float`` / ``dtype=int``
select that precision's float / the int64 type. The results are leaf tensors
(``requires_grad`` as asked) with ``scene = None``.
"""

from __future__ import annotations

import numpy as np
import torch

from .runtime import default_device, float_dtype, int_dtype
from .tensor import Tensor, plain, wrap


def _dtype(dtype, like_float: bool = True):
    if dtype is None:
        return float_dtype() if like_float else int_dtype()
    if dtype is float:
        return float_dtype()
    if dtype is int:
        return int_dtype()
    if dtype is bool:
        return torch.bool
    return dtype


def _leaf(t: torch.Tensor, requires_grad: bool) -> Tensor:
    out = wrap(t.detach(), None)
    if requires_grad:
        out.requires_grad_(True)
    return out


def tensor(data, dtype=None, requires_grad: bool = False) -> Tensor:
    """A sceneless leaf tensor from data (lists, numbers, numpy arrays, tensors).

    Floating data gets the ``gs.init`` precision, integer data int64, booleans stay bool.
    """
    if isinstance(data, torch.Tensor):
        src = plain(data).detach()
    else:
        src = torch.as_tensor(np.asarray(data) if isinstance(data, (list, tuple)) else data)
    if dtype is None:
        if src.dtype == torch.bool:
            dtype = torch.bool
        else:
            dtype = _dtype(None, like_float=src.is_floating_point() or src.is_complex())
    t = src.to(device=default_device(), dtype=_dtype(dtype)).clone()
    return _leaf(t, requires_grad)


def from_numpy(array, dtype=None, requires_grad: bool = False) -> Tensor:
    return tensor(np.asarray(array), dtype=dtype, requires_grad=requires_grad)


def from_torch(t: torch.Tensor, dtype=None, requires_grad: bool = False, detach: bool = True, scene=None) -> Tensor:
    """A ``gs.Tensor`` from a torch tensor; ``detach=False`` keeps its graph."""
    src = plain(t)
    if detach:
        src = src.detach()
    src = src.to(device=default_device(), dtype=_dtype(dtype, src.is_floating_point()))
    out = wrap(src, scene)
    if requires_grad and not out.requires_grad:
        out.requires_grad_(True)
    return out


def _factory(fn, *size, dtype=None, requires_grad=False, **kwargs):
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    if "size" in kwargs:
        size = tuple(kwargs.pop("size"))
    t = fn(size, dtype=_dtype(dtype), device=default_device(), **kwargs)
    return _leaf(t, requires_grad)


def zeros(*size, dtype=None, requires_grad: bool = False, **kw) -> Tensor:
    return _factory(torch.zeros, *size, dtype=dtype, requires_grad=requires_grad, **kw)


def ones(*size, dtype=None, requires_grad: bool = False, **kw) -> Tensor:
    return _factory(torch.ones, *size, dtype=dtype, requires_grad=requires_grad, **kw)


def rand(*size, dtype=None, requires_grad: bool = False, **kw) -> Tensor:
    return _factory(torch.rand, *size, dtype=dtype, requires_grad=requires_grad, **kw)


def randn(*size, dtype=None, requires_grad: bool = False, **kw) -> Tensor:
    return _factory(torch.randn, *size, dtype=dtype, requires_grad=requires_grad, **kw)


def empty(*size, dtype=None, requires_grad: bool = False, **kw) -> Tensor:
    return _factory(torch.empty, *size, dtype=dtype, requires_grad=requires_grad, **kw)


def full(size, fill_value, dtype=None, requires_grad: bool = False) -> Tensor:
    t = torch.full(tuple(size), fill_value, dtype=_dtype(dtype), device=default_device())
    return _leaf(t, requires_grad)


def eye(n, m=None, dtype=None, requires_grad: bool = False) -> Tensor:
    t = torch.eye(n, m if m is not None else n, dtype=_dtype(dtype), device=default_device())
    return _leaf(t, requires_grad)


def arange(*args, dtype=None, requires_grad: bool = False) -> Tensor:
    floating = any(isinstance(a, float) for a in args)
    t = torch.arange(*args, dtype=_dtype(dtype, floating), device=default_device())
    return _leaf(t, requires_grad)


def linspace(start, end, steps, dtype=None, requires_grad: bool = False) -> Tensor:
    t = torch.linspace(start, end, steps, dtype=_dtype(dtype), device=default_device())
    return _leaf(t, requires_grad)


def _like(fn, other, dtype=None, requires_grad=False):
    ref = plain(other)
    t = fn(ref, dtype=dtype if dtype is not None else ref.dtype, device=default_device())
    return _leaf(t, requires_grad)


def zeros_like(other, dtype=None, requires_grad: bool = False) -> Tensor:
    return _like(torch.zeros_like, other, _dtype(dtype) if dtype is not None else None, requires_grad)


def ones_like(other, dtype=None, requires_grad: bool = False) -> Tensor:
    return _like(torch.ones_like, other, _dtype(dtype) if dtype is not None else None, requires_grad)


def rand_like(other, dtype=None, requires_grad: bool = False) -> Tensor:
    return _like(torch.rand_like, other, _dtype(dtype) if dtype is not None else None, requires_grad)


def randn_like(other, dtype=None, requires_grad: bool = False) -> Tensor:
    return _like(torch.randn_like, other, _dtype(dtype) if dtype is not None else None, requires_grad)


__all__ = [
    "tensor", "from_numpy", "from_torch", "zeros", "ones", "rand", "randn", "empty", "full", "eye",
    "arange", "linspace", "zeros_like", "ones_like", "rand_like", "randn_like",
]
