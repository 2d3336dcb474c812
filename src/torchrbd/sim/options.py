"""Scene options (``gs.options``) and the integrator choice (``gs.integrator``)."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from ..errors import InputError
from .contact import ContactParams


class integrator(enum.Enum):
    """Time integration of the rigid solver.

    * ``Euler``: semi-implicit Euler (velocity first, then positions with the new
      velocity), joint damping implicit: ``(M + dt D) a = f - D v``, exactly as
      MuJoCo's ``Euler`` integrator.
    * ``RK4``: classic 4-stage Runge-Kutta on the configuration manifold, as
      MuJoCo's ``RK4`` (damping explicit).
    """

    Euler = "Euler"
    RK4 = "RK4"


@dataclass
class SimOptions:
    """Global simulation settings.

    Args:
        dt: time of one ``scene.step()``, s.
        substeps: integration steps per ``scene.step()`` (each of ``dt / substeps``).
        gravity: (3,) m/s^2, replaces the models' own gravity.
        requires_grad: record the autograd graph of every step (getters are then
            connected to it); False runs steps under ``torch.no_grad()``.
    """

    dt: float = 0.01
    substeps: int = 1
    gravity: tuple = (0.0, 0.0, -9.81)
    requires_grad: bool = False

    def __post_init__(self):
        if not (isinstance(self.dt, (int, float)) and math.isfinite(self.dt) and self.dt > 0):
            raise InputError(f"SimOptions.dt must be a positive number of seconds, got {self.dt!r}")
        if int(self.substeps) != self.substeps or self.substeps < 1:
            raise InputError(f"SimOptions.substeps must be an integer >= 1, got {self.substeps!r}")
        self.substeps = int(self.substeps)
        g = tuple(float(x) for x in self.gravity)
        if len(g) != 3:
            raise InputError(f"SimOptions.gravity must have 3 components, got {self.gravity!r}")
        self.gravity = g
        self.requires_grad = bool(self.requires_grad)


@dataclass
class RigidOptions:
    """Rigid-body solver settings.

    Args:
        integrator: ``gs.integrator.Euler`` (default) or ``gs.integrator.RK4``.
        enable_collision: run the contact stage (collision geoms of the entities,
            see ``docs/simulator.md``).
        enable_self_collision: contacts between non-adjacent bodies of one entity
            (off by default).
        enable_joint_limit: keep joints inside their ``[lower, upper]`` limits with a
            one-sided soft constraint (see ``docs/simulator.md``).
        joint_limit_timeconst: time constant (s) of the limit constraint, MuJoCo's
            ``solref[0]``; the effective value is ``max(joint_limit_timeconst, 2 * dt)``.
        joint_limit_dampratio: damping ratio of the limit constraint (``solref[1]``).
        contact_timeconst: time constant (s) of the soft contact constraint
            (``ContactParams.timeconst``, MuJoCo's ``solref[0]``); the effective value is
            ``max(contact_timeconst, 2 * dt)``.
        contact_dampratio: its damping ratio (``solref[1]``).
        dt: optional rigid-solver step, overriding ``SimOptions.dt`` when set.
    """

    integrator: integrator = integrator.Euler
    enable_collision: bool = True
    enable_self_collision: bool = False
    enable_joint_limit: bool = True
    joint_limit_timeconst: float = 0.02
    joint_limit_dampratio: float = 1.0
    contact_timeconst: float = ContactParams.timeconst
    contact_dampratio: float = ContactParams.dampratio
    dt: float | None = None

    def __post_init__(self):
        if isinstance(self.integrator, str):
            try:
                self.integrator = integrator(self.integrator)
            except ValueError:
                self.integrator = None
        if not isinstance(self.integrator, integrator):
            raise InputError(
                f"RigidOptions.integrator must be gs.integrator.Euler or gs.integrator.RK4, got {self.integrator!r}"
            )
        if self.joint_limit_timeconst <= 0 or self.joint_limit_dampratio <= 0:
            raise InputError("RigidOptions.joint_limit_timeconst and joint_limit_dampratio must be positive")
        if not (self.contact_timeconst > 0 and self.contact_dampratio > 0):
            raise InputError("RigidOptions.contact_timeconst and contact_dampratio must be positive")
        if self.dt is not None and not (self.dt > 0):
            raise InputError(f"RigidOptions.dt must be positive, got {self.dt!r}")


class ViewerOptions:
    """Accepted (and stored) for Genesis compatibility; torchrbd has no viewer."""

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class VisOptions(ViewerOptions):
    """Accepted (and stored) for Genesis compatibility; torchrbd has no renderer."""


__all__ = ["SimOptions", "RigidOptions", "ViewerOptions", "VisOptions", "integrator"]
