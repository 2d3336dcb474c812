"""Process-wide performance settings that torchrbd never applies on its own."""

from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def tune_cpu_allocator(mmap_threshold: int = 64 << 20, trim_threshold: int = 512 << 20) -> bool:
    """Let glibc's malloc keep freed memory in the process (opt-in; Linux/glibc only).

    By default glibc serves each allocation above ~128 KiB-32 MiB with a fresh
    ``mmap`` and returns freed heap memory to the system, so every large temporary
    tensor (a batch of 1024 mass matrices is 7 MB) is zero pages again: the first
    write to it page-faults, which costs as much as the arithmetic. This raises the
    ``mmap`` threshold and the trim threshold (bytes), so that memory is reused.
    The price: the process keeps up to ``trim_threshold`` of freed memory.
    Equivalent to ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` in the
    environment, or to preloading jemalloc/tcmalloc as PyTorch's CPU tuning guide
    suggests. Returns whether the settings were applied.
    """
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold))) and bool(mallopt(_M_TRIM_THRESHOLD, int(trim_threshold)))
