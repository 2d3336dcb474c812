"""A guard against a race in oneMKL's vector math (VML) that ``import torchrbd`` applies.

On CPU, PyTorch computes ``sin``, ``cos``, ``sqrt``, ``exp``, ``log``... of contiguous
float32/float64 tensors with MKL's VML, each intra-op thread calling it on its own
chunk of at least 2048 elements. MKL picks each function's kernel on its first call.
When that first call runs on several threads at once, one thread can run a
low-accuracy kernel for its whole chunk of that one call. Later calls are exact. See
pytorch/pytorch#188792: oneMKL 2024.2, which the torch 2.x wheels bundle.

This machine shows it: 2 threads, torch 2.13.0. A fresh process's first ``torch.sin``
of (24, 256) float64 values was off by up to 6.8e-9 on the second thread's half in
7 of 40 processes. The kinematics' first call takes such values: iCub's first mass
matrix at B = 256 then differed from every later call by 5e-9. After one call on a
single element, 0 of 40 processes were off.

:func:`warm_up` calls each such function once on one element of each floating dtype,
on the calling thread, before anything runs in parallel.
"""

from __future__ import annotations

import torch

_FUNCTIONS = ("sin", "cos", "tan", "asin", "acos", "atan", "tanh", "sqrt", "exp", "expm1",
              "log", "log1p", "log2", "log10", "erf", "erfc")
"""The unary functions PyTorch computes with MKL's VML (``aten/src/ATen/cpu/vml.h``)."""


def warm_up() -> bool:
    """Call each VML function once, single-threaded, in float32 and float64, so that
    MKL has chosen its kernels before any parallel call. Returns False where torch was
    built without MKL (nothing to do). Costs about 0.1 ms, once per process."""
    if not torch.backends.mkl.is_available():
        return False
    with torch.no_grad():
        for dtype in (torch.float32, torch.float64):
            x = torch.full((1,), 0.5, dtype=dtype)
            for name in _FUNCTIONS:
                getattr(torch, name)(x)
    return True
