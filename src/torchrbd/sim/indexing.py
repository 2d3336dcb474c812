"""Index and value checks of the entity setters, and out-of-place writes.

Writes never modify a tensor in place: a full overwrite builds a fresh tensor
(no link to the old one's graph), a partial one clones and writes the clone.
So tensors handed to the autograd graph (or to a checkpointed rollout) are
never mutated afterwards.
"""

from __future__ import annotations

import torch

from ..errors import InputError
from .tensor import Tensor, plain


def as_index(idx, size: int, what: str, owner: str):
    """None (all), or a (k,) long tensor of valid indices in ``[0, size)``."""
    if idx is None:
        return None
    if isinstance(idx, slice):
        return torch.arange(size)[idx]
    if isinstance(idx, torch.Tensor):
        t = plain(idx).detach().reshape(-1).cpu()
    else:
        try:
            t = torch.as_tensor(idx).reshape(-1)
        except (TypeError, ValueError, RuntimeError):
            raise InputError(f"{owner}: {what} must be integers, got {idx!r}") from None
    if t.is_floating_point() or t.dtype == torch.bool:
        raise InputError(f"{owner}: {what} must be integers, got dtype {t.dtype}")
    t = t.long()
    if t.numel() and (t.min() < -size or t.max() >= size):
        raise InputError(f"{owner}: {what} {t.tolist()} out of range; expected indices in [0, {size})")
    t = torch.where(t < 0, t + size, t)
    if t.unique().numel() != t.numel():
        raise InputError(f"{owner}: {what} {t.tolist()} repeats an index")
    return t


def as_value(value, scene, dtype, device, owner: str, what: str) -> torch.Tensor:
    """A plain tensor (graph kept) of the scene's dtype/device from any array-like."""
    if isinstance(value, Tensor):
        s = value.scene
        if s is not None and s is not scene:
            raise InputError(
                f"{owner}: {what} belongs to scene {s.uid}, not to this entity's scene {scene.uid}; "
                "call .sceneless() or .detach() first"
            )
    if isinstance(value, torch.Tensor):
        t = plain(value)
        if not (t.is_floating_point() or t.dtype in (torch.int32, torch.int64, torch.bool)):
            raise InputError(f"{owner}: {what} must be real numbers, got dtype {t.dtype}")
        return t.to(dtype=dtype, device=device)
    try:
        return torch.as_tensor(value, dtype=dtype, device=device)
    except (TypeError, ValueError, RuntimeError):
        raise InputError(f"{owner}: {what} must be numbers or a tensor, got {type(value).__name__}") from None


def shaped(value: torch.Tensor, batched: bool, n_rows: int, n_cols: int, owner: str, what: str,
           trailing: tuple = ()) -> torch.Tensor:
    """Check and broadcast a setter value to (n_rows, n_cols, *trailing).

    Unbatched scenes expect ``(n_cols, *trailing)``; batched ones
    ``(n_rows, n_cols, *trailing)`` (a value without the env dimension is
    broadcast to every selected env).
    """
    tail = (n_cols, *trailing)
    expected = ((n_rows,) if batched else ()) + tail
    ok = tuple(value.shape) == expected or (batched and tuple(value.shape) == tail)
    if not ok:
        dims = "(envs, dofs...)" if batched else "(dofs...)"
        raise InputError(
            f"{owner}: {what} has shape {tuple(value.shape)}, expected {expected} {dims}"
            + (f" or {tail}" if batched else "")
        )
    return value.expand(n_rows, *tail)


def write(old: torch.Tensor, value: torch.Tensor, rows, cols) -> torch.Tensor:
    """``old`` with ``old[rows][:, cols] = value`` (out of place).

    ``value`` is (len(rows) or B, len(cols) or C, ...). A full overwrite returns a
    fresh tensor that does not depend on ``old``.
    """
    if rows is None and cols is None:
        return value.expand_as(old).clone()
    new = old.clone()
    if cols is None:
        new[rows.to(old.device)] = value
    elif rows is None:
        new[:, cols.to(old.device)] = value
    else:
        new[rows.to(old.device)[:, None], cols.to(old.device)[None, :]] = value
    return new


class WriteLog:
    """A tensor built from a detached default and an ordered log of writes.

    :meth:`rebuild` replays the writes on the default, so that after
    ``scene.reset()`` grad-carrying parameters (gains, masses) enter the new
    rollout's graph afresh instead of through the previous, freed one. Writes to
    the same indices replace each other; a full write clears the log.
    """

    def __init__(self, default: torch.Tensor):
        self.default = default.detach()
        self.log: dict = {}
        self.value = self.default

    def write(self, value: torch.Tensor, rows=None, cols=None) -> torch.Tensor:
        key = (None if rows is None else tuple(rows.tolist()), None if cols is None else tuple(cols.tolist()))
        if rows is None and cols is None:
            self.log.clear()
        self.log.pop(key, None)
        self.log[key] = (value, rows, cols)
        self.value = write(self.value, value, rows, cols)
        return self.value

    def rebuild(self) -> torch.Tensor:
        v = self.default
        for value, rows, cols in self.log.values():
            v = write(v, value, rows, cols)
        self.value = v
        return v
