"""Robot models shipped with torchrbd, addressable by name.

>>> import torchrbd.models
>>> torchrbd.models.names()
['arm7', 'cartpole', 'double_pendulum', 'humanoid', 'pendulum', 'quadruped']
>>> urdf_file = torchrbd.models.path("pendulum")          # a pathlib.Path
>>> mjcf_file = torchrbd.models.path("pendulum", "mjcf")
>>> kindyn = torchrbd.models.load("arm7")                  # KinDynComputations

:func:`path` returns an ordinary :class:`pathlib.Path`, so it can be passed anywhere
torchrbd (or Pinocchio, MuJoCo, ...) expects a model file.

The models (SI units; every inertia is diagonal about the link's centre of mass,
positive definite and satisfies the triangle inequality):

``pendulum`` (URDF, MJCF)
    Fixed base ``base``, one revolute joint ``joint1`` about y at the origin, 1 kg
    point-like bob 1 m below the pivot (hangs along -z at q = 0), frame ``tip`` at the bob.
``double_pendulum`` (URDF, MJCF)
    Revolute ``joint1``, ``joint2`` about y; links ``link1``, ``link2`` of 1 m each with a
    1 kg point-like mass at each link's end; frame ``tip``. Hangs along -z at q = 0.
``cartpole`` (URDF, MJCF)
    Prismatic ``slider`` along x (|x| <= 2.4 m, cart 1 kg) and revolute ``hinge`` about y
    (uniform 1 m pole, 0.1 kg, upright along +z at q = 0); frame ``pole_tip``.
``arm7`` (URDF, MJCF)
    7-DoF arm, axes z y z y z y z (``joint1`` .. ``joint7``), fixed base ``link0``,
    end-effector frame ``ee`` (URDF link on a fixed joint, MJCF site); 20.5 kg in total.
``quadruped`` (URDF, MJCF)
    Floating base ``trunk`` (12 kg box), legs ``FL FR RL RR`` with ``<leg>_hip_joint`` (x),
    ``<leg>_thigh_joint`` (y), ``<leg>_calf_joint`` (y); foot frames ``<leg>_foot`` carry
    0.02 m contact spheres; 19.6 kg in total.
``humanoid`` (MJCF only)
    Free joint ``root`` on ``torso``, 18 hinges (legs: hip x/y/z, knee, ankle y/x; arms:
    shoulder x/y, elbow), capsule and sphere geoms, 31 kg; no floor included.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ModelError, closest

__all__ = ["names", "formats", "path", "load", "DATA_DIR"]

#: Folder holding the model files (package data).
DATA_DIR = Path(__file__).resolve().parent / "data"

_SUFFIX = {"urdf": ".urdf", "mjcf": ".xml"}
_FORMAT_ALIASES = {"urdf": "urdf", "mjcf": "mjcf", "xml": "mjcf", "mujoco": "mjcf"}


def _files() -> dict[str, dict[str, Path]]:
    out: dict[str, dict[str, Path]] = {}
    for fmt, suffix in _SUFFIX.items():
        for p in DATA_DIR.glob(f"*{suffix}"):
            if p.is_file():
                out.setdefault(p.stem, {})[fmt] = p
    return out


def names() -> list[str]:
    """Names of the embedded models, sorted."""
    return sorted(_files())


def _entry(name) -> dict[str, Path]:
    files = _files()
    key = str(name)
    if key not in files:
        near = closest(key, files)
        hint = f"; did you mean {', '.join(repr(n) for n in near)}?" if near else ""
        raise ModelError(f"unknown embedded model {key!r}{hint} (valid names: {', '.join(sorted(files))})")
    return files[key]


def formats(name: str) -> list[str]:
    """The formats (``"urdf"``, ``"mjcf"``) in which model ``name`` ships, URDF first."""
    entry = _entry(name)
    return [fmt for fmt in _SUFFIX if fmt in entry]


def path(name: str, format: str | None = None) -> Path:
    """The file of embedded model ``name``.

    ``format`` is ``"urdf"`` or ``"mjcf"`` (``"xml"`` is accepted for MJCF); ``None``
    picks the URDF when there is one, else the MJCF.
    """
    entry = _entry(name)
    if format is None:
        return next(entry[fmt] for fmt in _SUFFIX if fmt in entry)
    fmt = _FORMAT_ALIASES.get(str(format).lower())
    if fmt is None:
        raise ModelError(f"unknown model format {format!r}; expected 'urdf' or 'mjcf'")
    if fmt not in entry:
        have = " and ".join(repr(f) for f in _SUFFIX if f in entry)
        raise ModelError(f"embedded model {name!r} has no {fmt.upper()} file (available: {have})")
    return entry[fmt]


def load(name: str, joints_name_list=None, *, format: str | None = None, **kw):
    """A :class:`torchrbd.KinDynComputations` for embedded model ``name``.

    ``joints_name_list`` and the other keyword arguments go to the constructor;
    ``format`` chooses the file as in :func:`path`.
    """
    file = path(name, format)
    from torchrbd.kindyn import KinDynComputations

    return KinDynComputations(file, joints_name_list=joints_name_list, **kw)
