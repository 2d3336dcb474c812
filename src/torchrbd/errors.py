"""Errors raised by torchrbd. Every message names what was wrong and what was expected."""

from __future__ import annotations

import difflib


def closest(name: str, candidates, n: int = 3) -> list[str]:
    """The valid names closest to a mistyped one (for error messages)."""
    return difflib.get_close_matches(str(name), [str(c) for c in candidates], n=n, cutoff=0.5)


def checkable(x) -> bool:
    """Whether the values of tensor ``x`` can be tested (for an error or a flag): False
    for meta and fake tensors, which carry only shapes, dtypes and devices (a value
    test there raises instead of answering)."""
    from torch._subclasses.fake_tensor import is_fake

    return x.device.type != "meta" and not is_fake(x)


def _suggest(name, candidates) -> str:
    near = closest(name, candidates)
    return f"; did you mean {', '.join(repr(c) for c in near)}?" if near else ""


class TorchRBDError(Exception):
    """Base class of torchrbd's own errors."""


class ModelError(TorchRBDError, ValueError):
    """A model file or model object that cannot be turned into a valid tree."""


class _UnknownName:
    """Mixin: an unknown name, with the valid ones kept and the closest suggested."""

    kind = "name"

    def __init__(self, name, valid, model_name: str = "model"):
        self.name = name
        self.valid = list(valid)
        super().__init__(f"unknown {self.kind} {name!r} in {model_name}{_suggest(name, self.valid)}")

    def __str__(self):  # KeyError would quote the message
        return self.args[0]


class FrameNotFoundError(_UnknownName, TorchRBDError, KeyError):
    """A frame (link or site) name that the model does not have."""

    kind = "frame"


class JointNotFoundError(_UnknownName, ModelError, KeyError):
    """A joint name (e.g. in ``joints_name_list``) that the model does not have."""

    kind = "joint"


class InputError(TorchRBDError, ValueError):
    """A tensor argument of the wrong shape, dtype or device."""


class SimulationError(TorchRBDError, RuntimeError):
    """A simulator used out of order (e.g. stepping before ``build()``)."""
