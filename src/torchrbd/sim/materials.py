"""Materials (``gs.materials``): physical properties that are not in the model file."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError


@dataclass(frozen=True)
class Rigid:
    """A rigid material.

    Args:
        rho: density, kg/m^3; gives the mass of primitive morphs (``Box``,
            ``Sphere`` ...). Model files carry their own masses.
        friction: Coulomb friction coefficient of the entity's geoms for the contact
            stage; None keeps the model's value (or the contact stage's default).
    """

    rho: float = 1000.0
    friction: float | None = None

    def __post_init__(self):
        if not self.rho > 0:
            raise InputError(f"materials.Rigid: rho must be a positive density in kg/m^3, got {self.rho!r}")
        if self.friction is not None and not self.friction >= 0:
            raise InputError(f"materials.Rigid: friction must be >= 0, got {self.friction!r}")


__all__ = ["Rigid"]
