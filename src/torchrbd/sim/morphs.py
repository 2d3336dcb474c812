"""Morphs (``gs.morphs``): where an entity's model comes from and its initial pose.

File morphs (``URDF``, ``MJCF``) load a robot; primitive morphs (``Box``,
``Sphere``, ``Cylinder``, ``Capsule``) are single free rigid bodies whose mass
and inertia follow from the material's density; ``Plane`` is static.

Poses: ``pos`` (3,) in m; orientation either ``euler`` (3,) in **degrees**,
extrinsic x-y-z (``R = Rz Ry Rx``), or ``quat`` (4,) ``wxyz``; not both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import InputError, ModelError
from ..model.builder import LinkSpec, build_model
from ..model.model import Geom, GeomType, Model
from ..spatial import euler_to_quat, quat_multiply, quat_to_matrix
from .materials import Rigid


@dataclass
class Loaded:
    """What an entity needs from its morph (float64, CPU).

    ``floating``: the base moves freely (6 dofs). ``base_pos``/``base_quat``: the
    initial (or, for a fixed base, permanent) pose of the root link in the world.
    ``joint_q0``: (n,) initial joint positions. ``contact_excludes``: link-name pairs
    whose geoms never collide (MJCF ``<contact><exclude>``; ``"world"`` for the world body).
    """

    model: Model
    floating: bool
    base_pos: torch.Tensor
    base_quat: torch.Tensor
    joint_q0: torch.Tensor
    contact_excludes: frozenset = frozenset()  # MJCF <contact><exclude> link-name pairs


def _f64(x) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x, dtype=np.float64))


class Morph:
    """Base of all morphs: initial pose and flags shared by every kind."""

    def __init__(self, pos=(0.0, 0.0, 0.0), euler=None, quat=None, fixed: bool = False,
                 collision: bool = True, visualization: bool = True):
        name = type(self).__name__
        pos = np.asarray(pos, dtype=np.float64).reshape(-1)
        if pos.shape != (3,) or not np.all(np.isfinite(pos)):
            raise InputError(f"morphs.{name}: pos must be 3 finite numbers (m), got {pos.tolist()}")
        if euler is not None and quat is not None:
            raise InputError(f"morphs.{name}: give either euler (degrees) or quat (wxyz), not both")
        if quat is not None:
            q = np.asarray(quat, dtype=np.float64).reshape(-1)
            if q.shape != (4,) or not np.isfinite(q).all() or np.linalg.norm(q) < 1e-9:
                raise InputError(f"morphs.{name}: quat must be a non-zero wxyz quaternion, got {q.tolist()}")
            q = q / np.linalg.norm(q)
        else:
            e = np.asarray(euler if euler is not None else (0.0, 0.0, 0.0), dtype=np.float64).reshape(-1)
            if e.shape != (3,):
                raise InputError(f"morphs.{name}: euler must be 3 angles in degrees, got {e.tolist()}")
            q = euler_to_quat(_f64(e)).numpy()
        self.pos = tuple(pos.tolist())
        self.quat = tuple(q.tolist())
        self.euler = None if euler is None else tuple(float(a) for a in euler)
        self.fixed = bool(fixed)
        self.collision = bool(collision)
        self.visualization = bool(visualization)

    def __repr__(self):
        return f"{type(self).__name__}(pos={self.pos}, quat={self.quat}, fixed={self.fixed})"

    def _pose(self, inner_pos=(0.0, 0.0, 0.0), inner_quat=(1.0, 0.0, 0.0, 0.0)):
        """world pose of the root = morph pose composed with the file's own root pose."""
        q = quat_multiply(_f64(self.quat), _f64(inner_quat)).numpy()
        p = np.array(self.pos) + quat_to_matrix(_f64(self.quat)).numpy() @ np.asarray(inner_pos, dtype=np.float64)
        return torch.as_tensor(p), torch.as_tensor(q / np.linalg.norm(q))

    def _drop_geoms(self, model: Model) -> Model:
        return model if self.collision else model.replace(geoms=())

    def load(self, material: Rigid) -> Loaded:  # pragma: no cover - abstract
        raise NotImplementedError


class FileMorph(Morph):
    _kind = "model"
    _suffixes: tuple = ()

    def __init__(self, file, pos=(0.0, 0.0, 0.0), euler=None, quat=None, fixed=False, scale: float = 1.0,
                 collision: bool = True, visualization: bool = True, **ignored):
        super().__init__(pos, euler, quat, fixed, collision, visualization)
        path = Path(file)
        if not path.is_file():
            raise ModelError(
                f"morphs.{type(self).__name__}: {self._kind} file not found: {str(path)!r} "
                f"(expected a path to an existing {'/'.join(self._suffixes)} file)"
            )
        if scale != 1.0:
            raise InputError(f"morphs.{type(self).__name__}: only scale=1.0 is supported, got {scale!r}")
        self.file = str(path)
        self.scale = 1.0


class URDF(FileMorph):
    """A robot from a URDF file. ``fixed=True`` welds the root link at the morph pose;
    otherwise the root link is a free-floating base.

    Joint damping and limits come from ``<dynamics damping>`` and ``<limit>``
    (``effort`` bounds the control force; 0 or missing means unbounded).
    """

    _kind, _suffixes = "URDF", (".urdf",)

    def load(self, material: Rigid) -> Loaded:
        from ..model import load_urdf

        model = self._drop_geoms(load_urdf(self.file))
        model = _effort_zero_is_unbounded(model)
        pos, quat = self._pose()
        return Loaded(model, not self.fixed, pos, quat, torch.zeros(model.n, dtype=torch.float64))


class MJCF(FileMorph):
    """A robot from an MJCF file. The base floats when the file gives its top-level
    body a free joint (unless ``fixed=True``); the morph pose is composed with the
    free joint's initial pose. Joints start at MuJoCo's ``qpos0``; damping,
    stiffness, armature and ranges come from the joint attributes."""

    _kind, _suffixes = "MJCF", (".xml",)

    def __init__(self, file, pos=(0.0, 0.0, 0.0), euler=None, quat=None, fixed=False, **kw):
        super().__init__(file, pos, euler, quat, fixed, **kw)

    def load(self, material: Rigid) -> Loaded:
        import mujoco

        from ..model.mjcf import from_mujoco_model, mujoco_contact_excludes

        try:
            mj = mujoco.MjModel.from_xml_path(self.file)
        except Exception as e:
            raise ModelError(f"{self.file}: MuJoCo could not compile the model: {e}") from None
        model = self._drop_geoms(from_mujoco_model(mj, source=self.file))
        inner_pos, inner_quat = (0.0, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0)
        qpos0 = np.asarray(mj.qpos0, dtype=np.float64)
        if model.floating:
            free = [j for j in range(mj.njnt) if mj.jnt_type[j] == 0][0]
            adr = int(mj.jnt_qposadr[free])
            inner_pos, inner_quat = qpos0[adr : adr + 3], qpos0[adr + 3 : adr + 7]
        q0 = []
        for name in model.joint_names:
            j = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_JOINT, name)
            q0.append(qpos0[mj.jnt_qposadr[j]] if j >= 0 else 0.0)
        pos, quat = self._pose(inner_pos, inner_quat)
        return Loaded(model, model.floating and not self.fixed, pos, quat, torch.as_tensor(q0, dtype=torch.float64),
                      frozenset(mujoco_contact_excludes(mj)))


def _effort_zero_is_unbounded(model: Model) -> Model:
    if model.effort is None or model.n == 0:
        return model
    eff = torch.where(model.effort > 0, model.effort, torch.full_like(model.effort, math.inf))
    return model.replace(effort=eff)


# ------------------------------------------------------------------ primitives
class Primitive(Morph):
    """A single rigid body with one collision geom; free unless ``fixed=True``."""

    _geom_type: GeomType

    def _size(self) -> tuple:
        raise NotImplementedError

    def _volume_inertia(self) -> tuple[float, np.ndarray]:
        """(volume m^3, inertia about the CoM per unit mass (3, 3))."""
        raise NotImplementedError

    def load(self, material: Rigid) -> Loaded:
        name = type(self).__name__.lower()
        volume, unit_inertia = self._volume_inertia()
        mass = material.rho * volume
        geom = Geom(
            name=f"{name}_geom",
            link=name,
            type=self._geom_type,
            size=self._size(),
            rot=torch.eye(3, dtype=torch.float64),
            pos=torch.zeros(3, dtype=torch.float64),
            friction=material.friction,
        )
        spec = LinkSpec(name, mass=mass, inertia=mass * unit_inertia, geoms=[geom] if self.collision else [])
        model = build_model(name, [spec], [], source=f"morphs.{type(self).__name__}", floating=not self.fixed)
        pos, quat = self._pose()
        return Loaded(model, not self.fixed, pos, quat, torch.zeros(0, dtype=torch.float64))


def _positive(name, **values):
    for k, v in values.items():
        if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
            raise InputError(f"morphs.{name}: {k} must be a positive length in m, got {v!r}")


class Box(Primitive):
    """A box of full extents ``size`` (3,), or spanning ``lower``..``upper`` (world
    coordinates of its corners; then its centre is the position)."""

    _geom_type = GeomType.BOX

    def __init__(self, size=None, pos=(0.0, 0.0, 0.0), euler=None, quat=None, fixed=False,
                 lower=None, upper=None, **kw):
        if size is None and lower is not None and upper is not None:
            lo, hi = np.asarray(lower, float), np.asarray(upper, float)
            size, pos = tuple((hi - lo).tolist()), tuple(((hi + lo) / 2).tolist())
        size = tuple(float(s) for s in (size if size is not None else (1.0, 1.0, 1.0)))
        if len(size) != 3:
            raise InputError(f"morphs.Box: size must be 3 full extents (m), got {size}")
        _positive("Box", **{f"size[{i}]": s for i, s in enumerate(size)})
        super().__init__(pos, euler, quat, fixed, **kw)
        self.size = size

    def _size(self):
        return tuple(s / 2 for s in self.size)  # Geom: half extents

    def _volume_inertia(self):
        a, b, c = self.size
        return a * b * c, np.diag([b * b + c * c, a * a + c * c, a * a + b * b]) / 12.0


class Sphere(Primitive):
    _geom_type = GeomType.SPHERE

    def __init__(self, radius=0.5, pos=(0.0, 0.0, 0.0), euler=None, quat=None, fixed=False, **kw):
        _positive("Sphere", radius=radius)
        super().__init__(pos, euler, quat, fixed, **kw)
        self.radius = float(radius)

    def _size(self):
        return (self.radius,)

    def _volume_inertia(self):
        r = self.radius
        return 4.0 / 3.0 * math.pi * r**3, np.eye(3) * 0.4 * r * r


class _AlongZ(Primitive):
    """A primitive along its local z axis, given by ``radius`` and ``height``."""

    def __init__(self, radius, height, pos, euler, quat, fixed, **kw):
        _positive(type(self).__name__, radius=radius, height=height)
        super().__init__(pos, euler, quat, fixed, **kw)
        self.radius, self.height = float(radius), float(height)

    def _size(self):
        return (self.radius, self.height / 2)


class Cylinder(_AlongZ):
    """A solid cylinder along its local z axis (``height`` is the full length)."""

    _geom_type = GeomType.CYLINDER

    def __init__(self, radius=0.5, height=1.0, pos=(0.0, 0.0, 0.0), euler=None, quat=None, fixed=False, **kw):
        super().__init__(radius, height, pos, euler, quat, fixed, **kw)

    def _volume_inertia(self):
        r, h = self.radius, self.height
        return math.pi * r * r * h, np.diag([(3 * r * r + h * h) / 12, (3 * r * r + h * h) / 12, r * r / 2])


class Capsule(_AlongZ):
    """A capsule along its local z axis: a cylinder of length ``height`` (the segment
    between the two hemisphere centres) capped by hemispheres of ``radius``."""

    _geom_type = GeomType.CAPSULE

    def __init__(self, radius=0.25, height=1.0, pos=(0.0, 0.0, 0.0), euler=None, quat=None, fixed=False, **kw):
        super().__init__(radius, height, pos, euler, quat, fixed, **kw)

    def _volume_inertia(self):
        r, h = self.radius, self.height
        v_cyl, v_sph = math.pi * r * r * h, 4.0 / 3.0 * math.pi * r**3
        v = v_cyl + v_sph
        # cylinder plus two hemispheres (their centroids 3r/8 from the flat faces)
        ixx = v_cyl * (3 * r * r + h * h) / 12 + v_sph * (0.4 * r * r + h * h / 4 + 3 * h * r / 8)
        izz = v_cyl * r * r / 2 + v_sph * 0.4 * r * r
        return v, np.diag([ixx, ixx, izz]) / v


class Plane(Morph):
    """A static infinite plane through ``pos`` with unit ``normal`` (default +z)."""

    def __init__(self, pos=(0.0, 0.0, 0.0), normal=(0.0, 0.0, 1.0), euler=None, quat=None, **kw):
        kw.pop("fixed", None)
        n = np.asarray(normal, dtype=np.float64).reshape(-1)
        if n.shape != (3,) or np.linalg.norm(n) < 1e-9:
            raise InputError(f"morphs.Plane: normal must be a non-zero 3-vector, got {n.tolist()}")
        super().__init__(pos, euler, quat, True, **kw)
        self.normal = tuple((n / np.linalg.norm(n)).tolist())

    def load(self, material: Rigid) -> Loaded:
        z = np.array([0.0, 0.0, 1.0])
        n = np.array(self.normal)
        axis = np.cross(z, n)
        s, c = np.linalg.norm(axis), float(z @ n)
        if s < 1e-12:
            R = np.eye(3) if c > 0 else np.diag([1.0, -1.0, -1.0])
        else:
            k = axis / s
            K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
            R = np.eye(3) + s * K + (1 - c) * K @ K
        geom = Geom("plane_geom", "plane", GeomType.PLANE, (0.0, 0.0, 0.0),
                    torch.as_tensor(R), torch.zeros(3, dtype=torch.float64), friction=material.friction)
        spec = LinkSpec("plane", geoms=[geom] if self.collision else [])
        model = build_model("plane", [spec], [], source="morphs.Plane", floating=False)
        pos, quat = self._pose()
        return Loaded(model, False, pos, quat, torch.zeros(0, dtype=torch.float64))


__all__ = ["Morph", "URDF", "MJCF", "Box", "Sphere", "Cylinder", "Capsule", "Plane"]
