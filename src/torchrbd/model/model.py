"""The immutable robot model that every algorithm reads.

Glossary (used across torchrbd):

* **link**: a rigid body as written in the model file (URDF ``<link>``, MJCF ``<body>``).
* **body**: a node of the kinematic tree after merging links welded by fixed (or
  locked) joints. Body 0 is the floating base (the root link); every other body
  is moved by exactly one 1-DoF joint (revolute or prismatic) from its parent.
  ``body_parent[i] < i`` always holds.
* **dof**: a joint coordinate. ``joint_names[k]`` is the joint of coordinate ``k``;
  coordinates follow the user's ``joints_name_list`` order.
* **frame**: any named link (or MJCF site), rigidly attached to one body.

Frames in names: ``X_rot`` / ``X_pos`` give the pose of the child frame in its
parent (``parent_H_child``). ``body_rot[i], body_pos[i]`` is the joint frame of
body ``i`` in its parent body when the joint is at 0; the joint then moves about
(or along) ``joint_axis[i]`` expressed in that joint frame, which *is* the body frame.

All physical parameters are tensors (float64, CPU by default); use
:meth:`Model.to` for another dtype/device (cached) and
:meth:`Model.replace` to swap parameters, e.g. masses that require grad.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import IntEnum

import torch

from ..inference import normal_tensors


class JointType(IntEnum):
    """Motion of a body relative to its parent."""

    ROOT = 0  #: the floating base (body 0 only)
    REVOLUTE = 1  #: rotation about ``joint_axis`` (URDF revolute/continuous, MJCF hinge)
    PRISMATIC = 2  #: translation along ``joint_axis`` (URDF prismatic, MJCF slide)


class GeomType(IntEnum):
    """Collision shape kinds (sizes in :class:`Geom`)."""

    PLANE = 0  #: size unused; normal is the geom's +z
    SPHERE = 1  #: size[0] = radius
    CAPSULE = 2  #: size[0] = radius, size[1] = half length along the geom's z
    BOX = 3  #: size = half extents (x, y, z)
    CYLINDER = 4  #: size[0] = radius, size[1] = half length along z
    MESH = 5  #: vertices of the mesh (convex hull used for contact)


@dataclass(frozen=True)
class Geom:
    """A collision shape rigidly attached to a link (and through it to a body).

    ``rot``/``pos`` give link_H_geom. ``vertices`` (V, 3) in the geom frame for meshes.
    """

    name: str
    link: str
    type: GeomType
    size: tuple
    rot: torch.Tensor  # (3, 3)
    pos: torch.Tensor  # (3,)
    friction: float | None = None
    contype: int = 1
    conaffinity: int = 1
    vertices: torch.Tensor | None = None
    mesh_file: str | None = None


@dataclass(frozen=True)
class Model:
    """Kinematic tree, inertial parameters and named frames of one robot.

    Shapes use ``nbody`` (bodies incl. the base), ``nlink`` (links), ``n`` (dofs).
    """

    name: str
    # --- topology (plain Python / long tensors, fixed at load time) ---
    body_names: tuple  # (nbody,) name of the link at the root of each body
    body_parent: tuple  # (nbody,) parent body index, -1 for the base
    body_dof: tuple  # (nbody,) coordinate index of the body's joint, -1 for the base
    joint_names: tuple  # (n,) joint of each coordinate
    joint_type: tuple  # (nbody,) JointType of each body's joint
    # --- joint placements (tensors) ---
    body_rot: torch.Tensor  # (nbody, 3, 3) parent_R_joint at q = 0
    body_pos: torch.Tensor  # (nbody, 3) parent_p_joint
    joint_axis: torch.Tensor  # (nbody, 3) unit axis in the joint (= body) frame
    # --- links: inertial parameters and placement in their body ---
    link_names: tuple  # (nlink,)
    link_body: tuple  # (nlink,) body index of each link
    link_rot: torch.Tensor  # (nlink, 3, 3) body_R_link
    link_pos: torch.Tensor  # (nlink, 3) body_p_link
    link_mass: torch.Tensor  # (nlink,) kg
    link_com: torch.Tensor  # (nlink, 3) centre of mass in the link frame, m
    link_inertia: torch.Tensor  # (nlink, 3, 3) rotational inertia about the CoM, link axes, kg m^2
    # --- extra frames (MJCF sites, ...) besides the links: name -> (link index, rot, pos) ---
    extra_frames: dict = field(default_factory=dict)
    # --- per-dof joint properties (used by the simulator) ---
    armature: torch.Tensor | None = None  # (n,) rotor inertia added to diag(M), MuJoCo style
    damping: torch.Tensor | None = None  # (n,) viscous damping, N m s/rad or N s/m
    stiffness: torch.Tensor | None = None  # (n,) spring stiffness towards 0
    lower: torch.Tensor | None = None  # (n,) position limits (-inf/inf when none)
    upper: torch.Tensor | None = None
    effort: torch.Tensor | None = None  # (n,) |tau| limit (inf when none)
    gravity: torch.Tensor | None = None  # (3,) m/s^2
    floating: bool = True  # False: the base is welded to the world (MJCF without free joint)
    geoms: tuple = ()  # collision shapes (Geom)
    source: str | None = None  # file the model came from

    def __post_init__(self):
        arm = self.armature
        # a plain flag, so that algorithms skip the armature without a data-dependent branch
        if torch.compiler.is_compiling():
            # a compiled method converting the model to its inputs' dtype: no tensor
            # test while tracing (a graph break); Model.to carries the flag over
            has = arm is not None and arm.numel() > 0
        else:
            has = arm is not None and bool(arm.numel()) and bool((arm != 0).any())
        object.__setattr__(self, "has_armature", has)

    # ------------------------------------------------------------------ sizes
    @property
    def nbody(self) -> int:
        return len(self.body_names)

    @property
    def n(self) -> int:
        """Number of joint coordinates (NDoF)."""
        return len(self.joint_names)

    @property
    def nlink(self) -> int:
        return len(self.link_names)

    @property
    def root(self) -> str:
        return self.body_names[0]

    # -------------------------------------------------------------- frames
    def frame_names(self) -> list[str]:
        return list(self.link_names) + list(self.extra_frames)

    def frame(self, name: str):
        """(body index, body_R_frame (3, 3), body_p_frame (3,)) of a link or extra frame.

        Kept per name once looked up (a frame's Jacobian looks it up three times per
        call), unless the link placements need a gradient or ``torch.compile`` traces."""
        from ..errors import FrameNotFoundError

        found = self.__dict__.get("_frame_cache", {}).get(name)
        if found is not None:
            return found
        if name not in self._link_index and name not in self.extra_frames:
            raise FrameNotFoundError(name, self.frame_names(), self.name)
        found = normal_tensors(self._frame_values)(name)
        if not (self.link_rot.requires_grad or self.link_pos.requires_grad or torch.compiler.is_compiling()):
            if "_frame_cache" not in self.__dict__:
                object.__setattr__(self, "_frame_cache", {})
            self.__dict__["_frame_cache"][name] = found
        return found

    def _frame_values(self, name: str):
        """:meth:`frame` of a known frame, computed."""
        if name in self._link_index:
            k = self._link_index[name]
            return self.link_body[k], self.link_rot[k], self.link_pos[k]
        k, rot, pos = self.extra_frames[name]
        R = self.link_rot[k] @ rot.to(self.link_rot)
        p = self.link_rot[k] @ pos.to(self.link_rot) + self.link_pos[k]
        return self.link_body[k], R, p

    @property
    def _link_index(self) -> dict:
        idx = self.__dict__.get("_link_index_cache")
        if idx is None:
            idx = {n: i for i, n in enumerate(self.link_names)}
            object.__setattr__(self, "_link_index_cache", idx)
        return idx

    # ------------------------------------------------------- tensors / copies
    def tensor_fields(self) -> list[str]:
        """The names of the fields that hold tensors (kept once listed: every call of a
        method checks whether one of them requires grad)."""
        names = self.__dict__.get("_tensor_fields")
        if names is None:
            names = [f.name for f in dataclasses.fields(self) if isinstance(getattr(self, f.name), torch.Tensor)]
            if not torch.compiler.is_compiling():  # (storing while tracing would break the graph)
                object.__setattr__(self, "_tensor_fields", names)
        return names

    def replace(self, **changes) -> "Model":
        """A new model with some fields replaced (e.g. ``link_mass`` requiring grad).
        The armature flag is carried over unless the armature is replaced."""
        if "armature" in changes:
            return dataclasses.replace(self, **changes)
        return self.with_fields(self.has_armature, **changes)

    def to(self, dtype: torch.dtype | None = None, device=None) -> "Model":
        """This model with every floating tensor on ``dtype``/``device``.

        Returns ``self`` when nothing changes. Gradients flow through the copy.
        """
        ref = self.body_rot
        dtype = dtype or ref.dtype
        device = torch.device(device) if device is not None else ref.device
        if ref.dtype == dtype and ref.device == device:
            return self
        changes = {
            name: getattr(self, name).to(dtype=dtype, device=device) for name in self.tensor_fields()
        }
        return self.with_fields(self.has_armature, **changes)

    def with_fields(self, has_armature: bool, **changes) -> "Model":
        """A copy with some fields replaced and the armature flag given, made without
        reading any tensor's values (the constructor tests the armature's: a device
        synchronisation on a GPU, an error on meta tensors). Nothing this model has
        cached is carried over."""
        copy = object.__new__(type(self))
        for f in dataclasses.fields(self):
            object.__setattr__(copy, f.name, changes.pop(f.name, getattr(self, f.name)))
        if changes:
            raise TypeError(f"Model has no field {', '.join(map(repr, changes))}")
        object.__setattr__(copy, "has_armature", has_armature)
        return copy

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other
