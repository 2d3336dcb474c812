"""Global settings chosen by :func:`init`: backend (device), float precision, seed."""

from __future__ import annotations

import enum

import torch

from ..errors import InputError, SimulationError


class Backend(enum.Enum):
    """Where scenes run: ``gs.cpu`` or ``gs.gpu`` (CUDA)."""

    cpu = "cpu"
    gpu = "gpu"


_SETTINGS = {
    "initialized": False,
    "backend": Backend.cpu,
    "device": torch.device("cpu"),
    "float": torch.float32,
    "int": torch.int64,
    "seed": None,
}

_PRECISIONS = {"32": torch.float32, "64": torch.float64}


def init(backend: "Backend | None" = None, precision: str = "32", seed: int | None = None, **ignored) -> None:
    """Choose the device, the float precision and the random seed of later scenes.

    Args:
        backend: ``gs.cpu`` or ``gs.gpu``; None picks ``gs.gpu`` when CUDA is
            available, else ``gs.cpu``. ``gs.gpu`` without CUDA raises
            :class:`SimulationError`.
        precision: ``"32"`` (float32, the default, as Genesis) or ``"64"``.
        seed: seeds ``torch`` (and thereby ``gs.rand``/``gs.randn``).

    May be called again to change the settings; scenes already created keep theirs.
    Other Genesis keyword arguments (``logging_level``, ``theme``, ``debug`` ...) are
    accepted and ignored.
    """
    cls = Backend
    if backend is None:
        backend = cls.gpu if torch.cuda.is_available() else cls.cpu
    if isinstance(backend, str):
        try:
            backend = cls(backend.lower())
        except ValueError:
            raise InputError(f"unknown backend {backend!r}; expected gs.cpu or gs.gpu") from None
    if not isinstance(backend, cls):
        raise InputError(f"unknown backend {backend!r}; expected gs.cpu or gs.gpu")
    if backend is cls.gpu:
        if not torch.cuda.is_available():
            raise SimulationError("gs.init(backend=gs.gpu): torch.cuda.is_available() is False; use gs.cpu")
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    precision = str(precision)
    if precision not in _PRECISIONS:
        raise InputError(f"precision must be '32' or '64', got {precision!r}")
    if seed is not None:
        torch.manual_seed(int(seed))
    _SETTINGS.update(initialized=True, backend=backend, device=device, float=_PRECISIONS[precision], seed=seed)


def ensure_initialized() -> None:
    """Initialise with the defaults (CPU unless CUDA is available, float32) if needed."""
    if not _SETTINGS["initialized"]:
        init()


def is_initialized() -> bool:
    return _SETTINGS["initialized"]


def default_device() -> torch.device:
    ensure_initialized()
    return _SETTINGS["device"]


def float_dtype() -> torch.dtype:
    ensure_initialized()
    return _SETTINGS["float"]


def int_dtype() -> torch.dtype:
    return _SETTINGS["int"]


def current_backend():
    ensure_initialized()
    return _SETTINGS["backend"]
