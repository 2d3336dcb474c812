"""``gs.Tensor``: a ``torch.Tensor`` that remembers the scene it came from.

Getters of a built scene return these; any torch operation on them returns a
``gs.Tensor`` of the same scene (sceneless tensors and plain tensors mix in
freely), and mixing tensors of two different scenes raises :class:`InputError`.

The subclass lives only at the API boundary: the simulator converts inputs to
plain tensors (:func:`plain`) and wraps outputs (:func:`wrap`), so the inner
loop pays nothing for it. Gradients are plain autograd: ``loss.backward()``
flows through ``scene.step()`` because every step is ordinary torch code.
"""

from __future__ import annotations

import torch

from ..errors import InputError, SimulationError


def _scene_of(x):
    return x.__dict__.get("scene") if isinstance(x, Tensor) else None


def _common_scene(args, kwargs):
    """The one scene of the ``gs.Tensor`` arguments (None when all are sceneless)."""
    found = None

    def visit(x):
        nonlocal found
        if isinstance(x, Tensor):
            s = _scene_of(x)
            if s is not None:
                if found is None:
                    found = s
                elif s is not found:
                    raise InputError(
                        f"cannot mix tensors of two scenes (scene {found.uid} and scene {s.uid}) in one "
                        "operation; call .sceneless() or .detach() on one of them first"
                    )
        elif isinstance(x, (list, tuple)):
            for y in x:
                visit(y)
        elif isinstance(x, dict):
            for y in x.values():
                visit(y)

    visit(args)
    if kwargs:
        visit(kwargs)
    return found


class Tensor(torch.Tensor):
    """A ``torch.Tensor`` with a ``scene`` attribute (None for sceneless tensors).

    Build one with :func:`torchrbd.sim.tensor` (or ``gs.zeros`` ...) or get one
    from an entity's getter. ``Tensor(data, scene=None)`` also works and makes a
    leaf tensor of the default float dtype and device.
    """

    @staticmethod
    def __new__(cls, data=(), *, scene=None, dtype=None, device=None, requires_grad=False):
        from .runtime import default_device, float_dtype

        t = torch.as_tensor(data, dtype=dtype or float_dtype(), device=device or default_device())
        obj = torch.Tensor._make_subclass(cls, t.detach(), requires_grad)
        obj.scene = scene
        return obj

    def __init__(self, *args, **kwargs):  # everything happens in __new__
        pass

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        scene = _common_scene(args, kwargs)
        out = super().__torch_function__(func, types, args, kwargs)
        _set_scene(out, scene)
        return out

    # ------------------------------------------------------------------ API
    @property
    def scene(self):
        """The scene this tensor's values came from, or None."""
        return self.__dict__.get("scene")

    @scene.setter
    def scene(self, value):
        self.__dict__["scene"] = value

    def detach(self, *args, sceneless: bool = True, **kwargs) -> "Tensor":
        """A tensor detached from the graph (sharing storage); by default also sceneless."""
        out = super().detach(*args, **kwargs)
        if sceneless:
            out.scene = None
        return out

    def sceneless(self) -> "Tensor":
        """A copy (``clone``, still in the autograd graph) with no scene."""
        out = self.clone()
        out.scene = None
        return out

    def zero_grad(self) -> None:
        """Zero ``.grad`` in place (like ``nn.Module.zero_grad`` without set_to_none)."""
        g = self.grad
        if g is not None:
            if g.grad_fn is not None:
                g.detach_()
            else:
                g.requires_grad_(False)
            g.zero_()

    def assert_contiguous(self) -> None:
        if not self.is_contiguous():
            raise InputError(f"tensor of shape {tuple(self.shape)} is not contiguous; call .contiguous()")

    def assert_sceneless(self) -> None:
        if self.scene is not None:
            raise SimulationError(
                f"tensor belongs to scene {self.scene.uid}; expected a sceneless tensor (call .sceneless())"
            )

    def __repr__(self, *, tensor_contents=None):
        text = repr(self.as_subclass(torch.Tensor))
        if text.startswith("tensor("):
            text = "gs.Tensor(" + text[len("tensor(") :]
        scene = self.scene
        return text if scene is None else f"{text[:-1]}, scene={scene.uid})"

    def __reduce_ex__(self, proto):  # pickle as a plain tensor plus the (dropped) scene
        return (_rebuild, (self.as_subclass(torch.Tensor).detach().clone(), self.requires_grad))


def _rebuild(t, requires_grad):
    out = torch.Tensor._make_subclass(Tensor, t, requires_grad)
    out.scene = None
    return out


def _set_scene(out, scene):
    if isinstance(out, Tensor):
        out.__dict__["scene"] = scene
    elif isinstance(out, (list, tuple)):
        for x in out:
            _set_scene(x, scene)


# ---------------------------------------------------------------- boundary
def wrap(x: torch.Tensor, scene=None) -> Tensor:
    """View a plain tensor as a ``gs.Tensor`` of ``scene`` (stays in the autograd graph)."""
    out = x.as_subclass(Tensor)
    out.__dict__["scene"] = scene
    return out


def plain(x: torch.Tensor) -> torch.Tensor:
    """The same tensor (same graph) as a plain ``torch.Tensor``."""
    return x.as_subclass(torch.Tensor) if isinstance(x, Tensor) else x
