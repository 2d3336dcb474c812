"""Contact detection between collision shapes: batched, fixed-size, differentiable.

Two steps, MJX style:

* :meth:`ContactPlan.build` runs **once** (plain Python/numpy) on a list of
  :class:`CollisionGeom`. It filters the candidate pairs (contype/conaffinity,
  exclusions, same body, same entity, parent/child), groups them by kernel, and
  precomputes every index tensor and every shape constant (box corners, mesh hull
  vertices and face planes, ...). It also fixes ``K``, the number of contacts.
* :func:`detect` is a pure tensor function of the slot poses. It returns exactly
  ``K`` candidate contacts whatever the configuration (far-apart ones simply have a
  negative depth), so it batches over environments and has no data-dependent shapes.

Conventions
-----------
* **slot**: index of a body in the pose tensors given to :func:`detect`,
  ``R (..., S, 3, 3) = world_R_body`` and ``p (..., S, 3) = world_p_body``.
  Slot ``-1`` is the static world: such a geom's pose is constant.
* A geom's placement ``rot, pos`` is ``slot_H_geom`` (``world_H_geom`` for slot -1).
* In a pair ``(A, B)``, **B is the geom with the smaller** :class:`GeomType` value,
  so a plane is always B. ``normal`` is a world unit vector pointing **from B to A**
  (the direction that pushes A out of B); ``depth`` is the penetration along it
  (> 0 penetrating, < 0 separated by ``-depth``); ``pos`` is the world point midway
  between the two surfaces.
* Every shape is in its geom frame: PLANE is the halfspace ``z <= 0`` (normal +z),
  CAPSULE and CYLINDER have their axis along z with half length ``size[1]``,
  BOX has half extents ``size``, MESH collides through its convex hull
  (``size``, when 3 numbers, is a scale applied to the vertices, as URDF does).

Supported pairs (A, B), contacts per pair and method
----------------------------------------------------
Three feature tests, all against the exact *signed distance* (SDF) of the other shape
(sphere, capsule, box, cylinder; for a mesh hull: the max over its face planes inside,
the distance to its triangles outside):

* **points** with a radius: sphere centre, capsule end centres, box corners, cylinder
  rim samples, hull vertices;
* **segments**, whose deepest point inside the other shape (or closest point outside)
  is found by a nested grid search of the convex SDF along them: capsule axes (with
  the capsule radius), box edges, cylinder side lines;
* two closed forms: segment-segment closest points and the cylinder-plane rim points.

Each pair gives a fixed number of contacts, the deepest ones mattering; the law in
``contact.py`` makes all contacts of one body pair share one constraint, so many
candidates do not stiffen the contact.

The point kernels against a PLANE (sphere, capsule, box and mesh on a floor) run
batch-last inside :func:`detect` (long contiguous rows instead of thousands of 3x3
products); the other kernels run batch-first. Both give the same contacts.

=========  =========  ========  ============================================================
A          B          K/pair    method
=========  =========  ========  ============================================================
SPHERE     PLANE      1         centre (exact)
CAPSULE    PLANE      2         end-cap centres (exact: the deepest point is at an end)
BOX        PLANE      8         corners (exact)
CYLINDER   PLANE      6         per cap: the rim point deepest along the plane normal (exact)
                                and the two rim points at +-120 deg from it, so an upright
                                cylinder stands on a triangle and a lying one rolls smoothly
MESH       PLANE      V         hull vertices, V <= 64 (farthest-point subsampled at plan time)
SPHERE     SPHERE     1         exact
CAPSULE    SPHERE     1         sphere centre vs capsule (exact)
CAPSULE    CAPSULE    1         closest points of the two axes (exact); when they are parallel
                                (sin^2 < 1e-6) the middle of their overlap
BOX        SPHERE     1         centre vs box (exact)
BOX        CAPSULE    3         end caps + the axis' deepest point (exact depth)
BOX        BOX        40        8 + 8 corners vs the other box, 12 + 12 edges' deepest points
                                (edge-edge contacts; depth 0-1.5 mm below MuJoCo's at 5 mm)
CYLINDER   SPHERE     1         centre vs cylinder (exact)
CYLINDER   CAPSULE    3         end caps + the axis' deepest point (exact depth)
CYLINDER   BOX        39        16 rim samples (8 per cap) vs box, 8 corners and 12 edges vs
                                cylinder, and "toward" features: with n the box's SDF normal
                                at the cylinder centre, the rim point of each cap deepest
                                along -n and the side line joining them
CYLINDER   CYLINDER   38        16 + 16 rim samples and the toward features of each
MESH       SPHERE     1         centre vs hull (exact)
MESH       CAPSULE    V + 3     hull vertices vs capsule, end caps and axis vs hull
MESH       BOX        V + 20    hull vertices vs box, 8 corners and 12 edges vs hull
MESH       CYLINDER   V + 19    hull vertices vs cylinder, rim samples and toward features
MESH       MESH       Va + Vb   hull vertices of each vs the other (misses edge-edge)
PLANE      PLANE      --        never a candidate (nor any static-static pair)
=========  =========  ========  ============================================================

Against MuJoCo (``tests/test_collision.py`` checks the exact kernels to 1e-6; on 100
random poses at 5 mm of MuJoCo penetration): BOX-CAPSULE, CYLINDER-CAPSULE,
MESH-SPHERE/CAPSULE match; BOX-BOX and MESH(box)-BOX report 3.5-5 mm (never miss);
CYLINDER-BOX and CYLINDER-CYLINDER miss 1 in 100 and are within 2.5 mm in 90%
(MuJoCo's own convex-convex depth is not exact either).

Gradient safety
---------------
Every norm goes through :func:`_safe_norm` and every normalisation through
:func:`_unit` (the "double where" of MJX's ``math.norm``): below ``_EPS`` (1e-9 m) the
norm is taken as 0 with a zero gradient and the direction is a fixed fallback
(sphere/capsule: +z or +x, capsule-capsule: the common perpendicular of the axes).
So coincident sphere centres, a point on a capsule axis or on a box surface, or two
crossing capsule axes give finite gradients. Divisions by segment lengths or
determinants take a floor. Branch choices (inside/outside a box, the clamps of
closest points) are ``torch.where`` of finite values. Segment searches run without
gradient; the depth's gradient is still exact (see :func:`_segments_vs`), but the
contact position does not move with the searched point (only with the poses).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np
import torch

from ..algorithms.batchlast import mm, mtv, mv
from ..model.model import Geom, GeomType, Model

_EPS = 1e-9  # m: vectors shorter than this are treated as zero (safe norm / fallback)
CYLINDER_RIM_SAMPLES = 8  # rim points per cap of a cylinder against non-plane shapes
MAX_HULL_POINTS = 64  # default cap on the hull vertices used per mesh
_GRID, _GRID_STAGES = 16, 5  # nested grid search of a segment's deepest point: (2/15)^5 = 4e-5 of it
_KINK_DT = 1e-4  # offsets (fraction of the segment) of the two sides of an SDF ridge
_TIE = 1e-12  # m: the search's pull to the middle, to break ties
_PARALLEL = 1e-6  # sin^2 of the angle below which two capsule axes count as parallel


# ----------------------------------------------------------------- the shapes


@dataclass(frozen=True)
class CollisionGeom:
    """A collision shape placed on a slot (a body of the scene) or in the world.

    ``slot``: index into the poses given to :func:`detect`, or -1 for a static geom.
    ``rot (3, 3)``, ``pos (3,)``: ``slot_H_geom`` (``world_H_geom`` when static);
    ``None`` takes ``geom.rot``/``geom.pos`` (i.e. the link frame is the slot frame).
    ``entity``: id of the scene entity owning it (for the self-collision filter).
    ``friction``: sliding friction coefficient; ``None`` takes ``geom.friction`` or 1.
    """

    geom: Geom
    slot: int
    rot: torch.Tensor | None = None
    pos: torch.Tensor | None = None
    entity: int = 0
    friction: float | None = None


def geoms_from_model(model: Model, slot_offset: int = 0, entity: int = 0) -> list[CollisionGeom]:
    """The collision geoms of ``model``, body ``i`` going to slot ``slot_offset + i``.

    The placement is composed to ``body_H_geom = body_H_link @ link_H_geom``.
    """
    out = []
    for g in model.geoms:
        k = model._link_index[g.link]
        Rl, pl = model.link_rot[k], model.link_pos[k]
        rot = Rl @ g.rot.to(Rl)
        pos = Rl @ g.pos.to(Rl) + pl
        out.append(CollisionGeom(g, slot_offset + model.link_body[k], rot, pos, entity))
    return out


def model_slot_parent(model: Model, slot_offset: int = 0) -> list[int]:
    """Parent slot of each body of ``model`` (-1 for the base), for ``slot_parent``."""
    return [par + slot_offset if par >= 0 else -1 for par in model.body_parent]


def ground_plane(height: float = 0.0, friction: float = 1.0, entity: int = -1) -> CollisionGeom:
    """A static plane ``z = height`` with normal +z (world), as a :class:`CollisionGeom`."""
    eye = torch.eye(3, dtype=torch.float64)
    pos = torch.tensor([0.0, 0.0, height], dtype=torch.float64)
    geom = Geom("ground", "world", GeomType.PLANE, (), eye, pos, friction=friction)
    return CollisionGeom(geom, -1, eye, pos, entity, friction)


# ------------------------------------------------------------ the plan (once)


@dataclass(frozen=True)
class _PairGroup:
    """Pairs that share one kernel and one number of points per shape.

    ``geom_a, geom_b (P,)`` geom indices; ``size_* (P, 3)``; ``points_* (P, N, 3)``
    local points with radius ``radius_* (P,)``; ``planes_* (P, F, 4)`` hull planes
    ``(n, d)`` with ``n . x <= d`` inside and ``triangles_* (P, T, 3, 3)`` hull faces
    (F = T = 0 unless the shape is a mesh).
    """

    type_a: GeomType
    type_b: GeomType
    parts: tuple  # names of the kernel parts, see _PARTS
    geom_a: torch.Tensor
    geom_b: torch.Tensor
    size_a: torch.Tensor
    size_b: torch.Tensor
    points_a: torch.Tensor
    points_b: torch.Tensor
    radius_a: torch.Tensor
    radius_b: torch.Tensor
    planes_a: torch.Tensor
    planes_b: torch.Tensor
    triangles_a: torch.Tensor
    triangles_b: torch.Tensor

    @property
    def hull_a(self):
        return self.planes_a, self.triangles_a

    @property
    def hull_b(self):
        return self.planes_b, self.triangles_b

    def per_pair(self) -> int:
        """Number of contacts each pair of this group gives."""
        count = {"a_points": self.points_a.shape[1], "b_points": self.points_b.shape[1]}
        return sum(count.get(part, _PART_SIZE.get(part, 0)) for part in self.parts)

    def to(self, dtype, device) -> "_PairGroup":
        return _tensors_to(self, dtype, device)


@dataclass(frozen=True)
class ContactPlan:
    """Candidate pairs and shape constants of a scene, fixed once (see :meth:`build`).

    Per geom (G): ``geom_slot (G,)`` long, ``geom_rot (G, 3, 3)``, ``geom_pos (G, 3)``
    (``slot_H_geom``, or ``world_H_geom`` for slot -1). Per pair (npair):
    ``pair_geom (npair, 2)`` (geom A, geom B). Per contact (K): ``contact_slot_a``,
    ``contact_slot_b``, ``contact_pair``, ``contact_slot_pair`` (long; the last one
    numbers the unordered slot pairs) and ``contact_friction``.
    """

    geom_names: tuple
    geom_slot: torch.Tensor
    geom_rot: torch.Tensor
    geom_pos: torch.Tensor
    pair_geom: torch.Tensor
    groups: tuple
    contact_slot_a: torch.Tensor
    contact_slot_b: torch.Tensor
    contact_pair: torch.Tensor
    contact_slot_pair: torch.Tensor
    contact_friction: torch.Tensor
    n_slots: int  # poses given to detect need at least this many slots
    on_plane: "_PlanePoints | None" = None  # the points-vs-plane contacts, see _PlanePoints
    order: torch.Tensor | None = None  # K rows of [on_plane, other groups] -> contact order; None: same
    has_static: bool = False  # some geom is static (slot -1)

    @property
    def n_contacts(self) -> int:
        """K, the fixed number of candidate contacts."""
        return int(self.contact_pair.shape[0])

    @property
    def n_pairs(self) -> int:
        return int(self.pair_geom.shape[0])

    def to(self, dtype: torch.dtype | None = None, device=None) -> "ContactPlan":
        """This plan with floating tensors on ``dtype`` and all tensors on ``device``."""
        dtype = dtype or self.geom_rot.dtype
        device = torch.device(device) if device is not None else self.geom_rot.device
        if self.geom_rot.dtype == dtype and self.geom_rot.device == device:
            return self
        plan = _tensors_to(self, dtype, device)
        groups = tuple(g.to(dtype, device) for g in self.groups)
        on_plane = None if self.on_plane is None else _tensors_to(self.on_plane, dtype, device)
        return dataclasses.replace(plan, groups=groups, on_plane=on_plane)

    @classmethod
    def build(
        cls,
        geoms: Sequence[CollisionGeom],
        *,
        exclude=(),
        self_collision: bool = False,
        slot_parent: Sequence[int] | None = None,
        filter_parent: bool = True,
        max_hull_points: int = MAX_HULL_POINTS,
        dtype: torch.dtype = torch.float64,
        device=None,
    ) -> "ContactPlan":
        """Plan the contact tests between ``geoms``.

        A pair (i, j) is a candidate unless: both are static, they sit on the same
        slot, both are planes, ``(contype_i & conaffinity_j) | (contype_j &
        conaffinity_i) == 0`` (MuJoCo's rule), ``(slot_i, slot_j)`` or its reverse is in
        ``exclude``, they belong to the same entity and ``self_collision`` is False, or
        ``filter_parent`` and one slot is the other's parent in ``slot_parent``
        (a sequence giving the parent slot of each slot, -1 for none).
        The friction of a pair is the larger of the two geoms' (MuJoCo's rule).
        """
        shapes = [_shape_constants(cg.geom, max_hull_points) for cg in geoms]
        pairs = _candidate_pairs(geoms, {tuple(e) for e in exclude}, self_collision, slot_parent, filter_parent)
        groups = _group_pairs(geoms, shapes, pairs)
        f64 = dict(dtype=torch.float64)
        c_pair = [torch.as_tensor(ks, dtype=torch.long).repeat_interleave(g.per_pair()) for ks, g in groups]
        c_pair = torch.cat(c_pair) if c_pair else torch.zeros(0, dtype=torch.long)
        pair_geom = torch.as_tensor(pairs, dtype=torch.long).reshape(-1, 2)
        slot = torch.as_tensor([cg.slot for cg in geoms], dtype=torch.long)
        fric = torch.as_tensor([_friction(cg) for cg in geoms], **f64)
        pair_fric = torch.maximum(fric[pair_geom[:, 0]], fric[pair_geom[:, 1]])
        numbered: dict = {}  # unordered slot pair -> index
        slot_pair = [numbered.setdefault(frozenset((geoms[a].slot, geoms[b].slot)), len(numbered)) for a, b in pairs]
        slot_pair = torch.as_tensor(slot_pair, dtype=torch.long)
        rot = [(cg.geom.rot if cg.rot is None else cg.rot).to(**f64) for cg in geoms]
        pos = [(cg.geom.pos if cg.pos is None else cg.pos).to(**f64) for cg in geoms]
        rot = torch.stack(rot) if geoms else torch.zeros(0, 3, 3, **f64)
        pos = torch.stack(pos) if geoms else torch.zeros(0, 3, **f64)
        on_plane = _PlanePoints.build([g for _, g in groups], slot, rot, pos)
        plan = cls(
            geom_names=tuple(cg.geom.name for cg in geoms),
            geom_slot=slot,
            geom_rot=rot,
            geom_pos=pos,
            pair_geom=pair_geom,
            groups=tuple(g for _, g in groups),
            contact_slot_a=slot[pair_geom[c_pair, 0]],
            contact_slot_b=slot[pair_geom[c_pair, 1]],
            contact_pair=c_pair,
            contact_slot_pair=slot_pair[c_pair],
            contact_friction=pair_fric[c_pair],
            n_slots=int(slot.max()) + 1 if geoms else 0,
            on_plane=on_plane,
            order=_contact_order(on_plane, int(c_pair.shape[0])),
            has_static=bool((slot < 0).any()),
        )
        return plan.to(dtype, device)


@dataclass(frozen=True)
class _PlanePoints:
    """The contacts of the groups that test points of A against plane B (sphere,
    capsule, box, mesh on a plane; all A geoms on slots), one per point, evaluated
    together batch-last by :func:`_points_on_planes` (Kp contacts).

    ``groups``: their indices in ``plan.groups``; ``index (Kp,)`` their rows among the
    K contacts; ``slot (Kp,)`` the slot of A; ``point (Kp, 3)`` the point in that slot's
    frame (``slot_H_geom`` applied) with radius ``radius (Kp,)``; ``plane (Kp,)`` which
    of the Pl planes it is tested against: ``plane_slot (Pl,)`` their slots (-1: static),
    ``plane_axis (Pl, 3)`` their normals and ``plane_pos (Pl, 3)`` their origins in those
    slots' frames (world when static).
    """

    groups: tuple
    index: torch.Tensor
    slot: torch.Tensor
    point: torch.Tensor
    radius: torch.Tensor
    plane: torch.Tensor
    plane_slot: torch.Tensor
    plane_axis: torch.Tensor
    plane_pos: torch.Tensor

    @classmethod
    def build(cls, groups, geom_slot, geom_rot, geom_pos) -> "_PlanePoints | None":
        """From the plan's groups and geom placements (float64); None when no group qualifies."""
        first = torch.cumsum(torch.tensor([0] + [g.geom_a.shape[0] * g.per_pair() for g in groups]), 0)
        chosen = [i for i, g in enumerate(groups) if _on_plane(g) and bool((geom_slot[g.geom_a] >= 0).all())]
        if not chosen:
            return None
        index, geom, point, radius, plane = [], [], [], [], []
        for i in chosen:
            g = groups[i]
            P, n = g.points_a.shape[:2]
            index.append(torch.arange(int(first[i]), int(first[i + 1])))
            ga = g.geom_a.repeat_interleave(n)
            geom.append(ga)
            x = g.points_a.reshape(P * n, 3)
            point.append((geom_rot[ga] @ x[:, :, None])[..., 0] + geom_pos[ga])
            radius.append(g.radius_a.repeat_interleave(n))
            plane.append(g.geom_b.repeat_interleave(n))
        planes, plane = torch.unique(torch.cat(plane), return_inverse=True)
        return cls(tuple(chosen), torch.cat(index), geom_slot[torch.cat(geom)], torch.cat(point), torch.cat(radius),
                   plane, geom_slot[planes], geom_rot[planes][:, :, 2], geom_pos[planes])


def _contact_order(on_plane: "_PlanePoints | None", K: int) -> torch.Tensor | None:
    """The ``order`` of :class:`ContactPlan`: rows of ``cat([on-plane contacts, the other
    groups' contacts])`` in contact order, None when that is already the order."""
    if on_plane is None:
        return None
    rest = torch.ones(K, dtype=torch.bool)
    rest[on_plane.index] = False
    stacked = torch.cat([on_plane.index, rest.nonzero()[:, 0]])
    if torch.equal(stacked, torch.arange(K)):
        return None
    return torch.argsort(stacked)


def _candidate_pairs(geoms, exclude: set, self_collision: bool, slot_parent, filter_parent: bool) -> list:
    """(A, B) geom index pairs that pass the filters of :meth:`ContactPlan.build`."""
    parent = list(slot_parent) if slot_parent is not None else []

    def is_parent(s, t):
        return t >= 0 and 0 <= s < len(parent) and parent[s] == t

    pairs = []
    for i, gi in enumerate(geoms):
        for j in range(i + 1, len(geoms)):
            gj = geoms[j]
            ti, tj = GeomType(gi.geom.type), GeomType(gj.geom.type)
            if gi.slot == gj.slot or (gi.slot < 0 and gj.slot < 0) or ti == tj == GeomType.PLANE:
                continue
            if not (gi.geom.contype & gj.geom.conaffinity or gj.geom.contype & gi.geom.conaffinity):
                continue
            if (gi.slot, gj.slot) in exclude or (gj.slot, gi.slot) in exclude:
                continue
            if not self_collision and gi.entity == gj.entity:
                continue
            if filter_parent and (is_parent(gi.slot, gj.slot) or is_parent(gj.slot, gi.slot)):
                continue
            pairs.append((i, j) if ti >= tj else (j, i))  # B has the smaller type
    return pairs


def _group_pairs(geoms, shapes, pairs) -> list:
    """``[(pair indices, _PairGroup)]``: pairs grouped by kernel and point counts."""
    keyed: dict = {}
    for k, (a, b) in enumerate(pairs):
        key = (GeomType(geoms[a].geom.type), GeomType(geoms[b].geom.type), len(shapes[a].points), len(shapes[b].points))
        keyed.setdefault(key, []).append(k)

    def stack(idx, field):
        arrays = [getattr(shapes[i], field) for i in idx]
        if field in ("planes", "triangles") and len(arrays[0]):  # pad by repeating the last row:
            # the max over planes and the min over triangles are unchanged
            F = max(len(x) for x in arrays)
            arrays = [np.concatenate([x, np.repeat(x[-1:], F - len(x), 0)]) for x in arrays]
        return torch.as_tensor(np.stack(arrays), dtype=torch.float64)

    out = []
    for (ta, tb, _, _), ks in keyed.items():
        ia, ib = [pairs[k][0] for k in ks], [pairs[k][1] for k in ks]
        fields = {f"{name}_{side}": stack(idx, name) for side, idx in (("a", ia), ("b", ib)) for name in _Shape._fields}
        g = _PairGroup(ta, tb, _KERNELS[(ta, tb)], torch.as_tensor(ia), torch.as_tensor(ib), **fields)
        out.append((ks, g))
    return out


def _friction(cg: CollisionGeom) -> float:
    if cg.friction is not None:
        return float(cg.friction)
    return float(cg.geom.friction) if cg.geom.friction is not None else 1.0


def _tensors_to(obj, dtype, device):
    changes = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, torch.Tensor):
            changes[f.name] = v.to(device=device, dtype=dtype if v.is_floating_point() else v.dtype)
    return dataclasses.replace(obj, **changes)


# ----------------------------------------------- shape constants (plan time)


class _Shape(NamedTuple):
    """Constants of one geom, numpy float64, in the geom frame."""

    size: np.ndarray  # (3,) see GeomType
    points: np.ndarray  # (N, 3) points tested against other shapes' SDF
    radius: float  # radius of those points (sphere, capsule), else 0
    planes: np.ndarray  # (F, 4) hull face planes (n, d), n . x <= d inside; meshes only
    triangles: np.ndarray  # (T, 3, 3) hull faces; meshes only


def _shape_constants(geom: Geom, max_hull_points: int) -> _Shape:
    """The :class:`_Shape` of a geom."""
    t = GeomType(geom.type)
    s = [float(x) for x in geom.size] + [0.0] * 3
    size = np.array(s[:3])
    no_planes = np.zeros((0, 4)), np.zeros((0, 3, 3))
    if t == GeomType.PLANE:
        return _Shape(np.zeros(3), np.zeros((0, 3)), 0.0, *no_planes)
    if t == GeomType.SPHERE:
        return _Shape(size, np.zeros((1, 3)), s[0], *no_planes)
    if t == GeomType.CAPSULE:
        return _Shape(size, np.array([[0.0, 0.0, -s[1]], [0.0, 0.0, s[1]]]), s[0], *no_planes)
    if t == GeomType.BOX:
        signs = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float)
        return _Shape(size, signs * size, 0.0, *no_planes)
    if t == GeomType.CYLINDER:
        return _Shape(size, _rim_points(s[0], s[1], CYLINDER_RIM_SAMPLES), 0.0, *no_planes)
    if t == GeomType.MESH:
        return _Shape(np.zeros(3), *_hull(geom, max_hull_points))
    raise ValueError(f"geom {geom.name!r}: unsupported GeomType {geom.type!r}")


def _rim_points(radius: float, half_length: float, n: int) -> np.ndarray:
    """(2 n, 3) points evenly spaced on the two cap rims of a cylinder (cap -z first)."""
    ang = 2 * np.pi * np.arange(n) / n
    ring = np.stack([radius * np.cos(ang), radius * np.sin(ang), np.zeros(n)], 1)
    return np.concatenate([ring - [0, 0, half_length], ring + [0, 0, half_length]])


def _mesh_vertices(geom: Geom) -> np.ndarray:
    if geom.vertices is not None:
        v = np.asarray(torch.as_tensor(geom.vertices).detach().cpu(), dtype=float).reshape(-1, 3)
    elif geom.mesh_file is not None:
        import trimesh

        v = np.asarray(trimesh.load(geom.mesh_file, force="mesh").vertices, dtype=float)
    else:
        raise ValueError(f"mesh geom {geom.name!r} has neither vertices nor a mesh_file")
    if len(geom.size) == 3:  # URDF mesh scale
        v = v * np.asarray(geom.size, float)
    return v


def _hull(geom: Geom, max_points: int):
    """(points, radius 0, planes, triangles) of a mesh's convex hull (see :class:`_Shape`).

    Points: the hull vertices, farthest-point subsampled to ``max_points``; planes and
    triangles: those of the hull of the kept points, so points and SDF agree. Without
    trimesh, or for a flat hull: the points and their bounding box.
    """
    v = _mesh_vertices(geom)
    try:
        import trimesh

        hull_v = np.asarray(trimesh.convex.convex_hull(v).vertices, float)
    except ImportError:
        warnings.warn(f"trimesh not installed: mesh {geom.name!r} collides through its vertices and bounding box")
        trimesh, hull_v = None, np.unique(v, axis=0)
    except Exception:  # qhull fails on flat or collinear vertex sets
        hull_v = np.unique(v, axis=0)
    pts = _farthest_points(hull_v, max_points)
    tris = None
    if trimesh is not None and len(pts) >= 4:
        try:
            tris = np.asarray(trimesh.convex.convex_hull(pts).triangles, float)
        except Exception:
            tris = None
    if tris is None:
        lo, hi = pts.min(0), pts.max(0)
        tris = (lo + (hi - lo) * _BOX_TRIANGLES)
    n = np.cross(tris[:, 1] - tris[:, 0], tris[:, 2] - tris[:, 0])
    area = np.linalg.norm(n, axis=1)
    keep = area > 1e-12 * max(1.0, area.max())
    tris, n = tris[keep], n[keep] / area[keep, None]
    d = np.einsum("fi,fi->f", n, tris[:, 0])
    planes = np.unique(np.round(np.concatenate([n, d[:, None]], 1), 12), axis=0)
    return pts, 0.0, planes, tris


# the 12 outward-wound triangles of the unit box [0, 1]^3
_BOX_TRIANGLES = np.array(
    [[[0, 0, 0], [0, 1, 0], [1, 1, 0]], [[0, 0, 0], [1, 1, 0], [1, 0, 0]], [[0, 0, 1], [1, 0, 1], [1, 1, 1]],
     [[0, 0, 1], [1, 1, 1], [0, 1, 1]], [[0, 0, 0], [1, 0, 0], [1, 0, 1]], [[0, 0, 0], [1, 0, 1], [0, 0, 1]],
     [[0, 1, 0], [0, 1, 1], [1, 1, 1]], [[0, 1, 0], [1, 1, 1], [1, 1, 0]], [[0, 0, 0], [0, 0, 1], [0, 1, 1]],
     [[0, 0, 0], [0, 1, 1], [0, 1, 0]], [[1, 0, 0], [1, 1, 0], [1, 1, 1]], [[1, 0, 0], [1, 1, 1], [1, 0, 1]]],
    dtype=float,
)


def _farthest_points(x: np.ndarray, n: int) -> np.ndarray:
    """Up to ``n`` rows of ``x``, greedily farthest from those already kept (deterministic)."""
    if len(x) <= n:
        return x
    keep = [int(np.argmax(np.linalg.norm(x - x.mean(0), axis=1)))]
    dist = np.linalg.norm(x - x[keep[0]], axis=1)
    for _ in range(n - 1):
        keep.append(int(np.argmax(dist)))
        dist = np.minimum(dist, np.linalg.norm(x - x[keep[-1]], axis=1))
    return x[keep]


# ------------------------------------------------------- safe vector helpers


def _safe_norm(v: torch.Tensor):
    """(|v|, nonzero) over the last axis; |v| = 0 with a zero gradient when |v| <= _EPS.

    The inner ``where`` keeps ``sqrt`` away from 0, so neither value nor gradient is NaN.
    """
    n2 = (v * v).sum(-1)
    ok = n2 > _EPS * _EPS
    n = torch.sqrt(torch.where(ok, n2, torch.ones_like(n2)))
    return torch.where(ok, n, torch.zeros_like(n)), ok


def _unit(v: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """v / |v|, or ``fallback`` (a unit vector, broadcastable) when |v| <= _EPS."""
    n, ok = _safe_norm(v)
    safe = torch.where(ok, n, torch.ones_like(n))
    return torch.where(ok[..., None], v / safe[..., None], fallback.expand_as(v))


def _axis(k: int, like: torch.Tensor) -> torch.Tensor:
    e = torch.zeros(3, dtype=like.dtype, device=like.device)
    e[k] = 1.0
    return e


def _perpendicular(u: torch.Tensor) -> torch.Tensor:
    """A unit vector perpendicular to ``u`` (..., 3) (any, when u = 0)."""
    ex, ey = _axis(0, u), _axis(1, u)
    use_x = u[..., :1].abs() <= u[..., 1:2].abs()
    w = torch.linalg.cross(u, torch.where(use_x, ex, ey).expand_as(u))
    return _unit(w, _axis(2, u))


def _to_world(R, p, x):
    """world points of local points ``x (..., P, N, 3)`` of frames ``R (..., P, 3, 3), p (..., P, 3)``."""
    return x @ R.transpose(-1, -2) + p[..., None, :]


def _to_local(R, p, x):
    """local coordinates of world points ``x (..., P, N, 3)`` in frames ``R, p`` (..., P, ...)."""
    return (x - p[..., None, :]) @ R


# -------------------------------------------------- signed distances (local)
# Each takes local points x (..., P, N, 3), size (P, 1, 3) and hull = (planes, triangles) and
# returns (distance (..., P, N), outward unit normal (..., P, N, 3)) in the geom frame.


def _sdf_plane(x, size, hull):
    return x[..., 2], _axis(2, x).expand_as(x)


def _sdf_sphere(x, size, hull):
    n, _ = _safe_norm(x)
    return n - size[..., 0], _unit(x, _axis(2, x))


def _sdf_capsule(x, size, hull):
    r, h = size[..., 0], size[..., 1]
    z = torch.minimum(torch.maximum(x[..., 2], -h), h)
    d = x - torch.stack([torch.zeros_like(z), torch.zeros_like(z), z], -1)
    n, _ = _safe_norm(d)
    return n - r, _unit(d, _axis(0, x))


def _sdf_box(x, size, hull):
    h = size
    d = x - torch.minimum(torch.maximum(x, -h), h)
    out, outside = _safe_norm(d)  # distance from outside
    pen = h - x.abs()  # (..., 3) depth below each face pair, all > 0 inside
    depth, k = pen.min(-1)
    sign = torch.where(x >= 0, 1.0, -1.0).to(x)
    n_in = torch.nn.functional.one_hot(k, 3).to(x) * sign
    dist = torch.where(outside, out, -depth)
    return dist, torch.where(outside[..., None], _unit(d, _axis(2, x)), n_in)


def _sdf_cylinder(x, size, hull):
    r, h = size[..., 0], size[..., 1]
    xy = torch.cat([x[..., :2], torch.zeros_like(x[..., 2:])], -1)
    rho, _ = _safe_norm(xy)
    radial = _unit(xy, _axis(0, x))
    z = x[..., 2]
    q_xy = torch.where((rho > r)[..., None], radial * r[..., None], xy)
    q = q_xy + torch.minimum(torch.maximum(z, -h), h)[..., None] * _axis(2, x)
    d = x - q
    out, outside = _safe_norm(d)
    dr, dz = rho - r, z.abs() - h
    n_cap = torch.where(z >= 0, 1.0, -1.0).to(x)[..., None] * _axis(2, x)
    n_in = torch.where((dr > dz)[..., None], radial, n_cap)
    dist = torch.where(outside, out, torch.maximum(dr, dz))
    return dist, torch.where(outside[..., None], _unit(d, _axis(2, x)), n_in)


def _sdf_hull(x, size, hull):
    """Convex hull: max over face planes inside, exact distance to the faces outside."""
    planes, tris = hull
    n, d = planes[..., :3], planes[..., 3]  # (P, F, 3), (P, F)
    s = x @ n.transpose(-1, -2) - d[:, None, :]  # (..., P, N, F)
    inside, k = s.max(-1)
    n_in = n[torch.arange(n.shape[0], device=x.device)[:, None], k]
    v = x - _closest_on_triangles(x, tris)
    out, _ = _safe_norm(v)
    outside = inside > 0
    return torch.where(outside, out, inside), torch.where(outside[..., None], _unit(v, n_in), n_in)


def _closest_on_triangles(x, tris):
    """The point closest to ``x (..., P, N, 3)`` over the triangles ``tris (P, T, 3, 3)``."""
    a, b, c = (tris[:, None, :, i, :] for i in range(3))  # (P, 1, T, 3)
    p = x[..., None, :]  # (..., P, N, 1, 3)
    nrm = _unit(torch.linalg.cross(b - a, c - a), _axis(2, x))
    q = p - ((p - a) * nrm).sum(-1, keepdim=True) * nrm  # projection on the face plane
    inside = torch.ones_like(q[..., 0], dtype=torch.bool)
    for u, w in ((a, b), (b, c), (c, a)):
        inside = inside & ((torch.linalg.cross((w - u).expand_as(q), q - u) * nrm).sum(-1) >= 0)

    def on_edge(u, w):
        e = w - u
        t = (((p - u) * e).sum(-1) / (e * e).sum(-1).clamp(min=_EPS * _EPS)).clamp(0, 1)
        return u + t[..., None] * e

    cand = torch.stack([q, on_edge(a, b), on_edge(b, c), on_edge(c, a)], -2)  # (..., P, N, T, 4, 3)
    d2 = ((p[..., None, :] - cand) ** 2).sum(-1)
    d2 = torch.cat([torch.where(inside, d2[..., 0], torch.full_like(d2[..., 0], float("inf")))[..., None], d2[..., 1:]], -1)
    k = d2.flatten(-2).argmin(-1)  # (..., P, N)
    cand = cand.flatten(-3, -2)
    return torch.take_along_dim(cand, k[..., None, None].expand(k.shape + (1, 3)), dim=-2)[..., 0, :]


# value-only versions for the segment search (no normals)


def _box_value(x, size, hull):
    d = x - torch.minimum(torch.maximum(x, -size), size)
    return torch.where((d * d).sum(-1) > 0, torch.linalg.vector_norm(d, dim=-1), (x.abs() - size).max(-1)[0]), None


def _cylinder_value(x, size, hull):
    r, h = size[..., 0], size[..., 1]
    dr, dz = torch.linalg.vector_norm(x[..., :2], dim=-1) - r, x[..., 2].abs() - h
    outside = torch.sqrt(dr.clamp(min=0) ** 2 + dz.clamp(min=0) ** 2)
    return torch.where((dr > 0) | (dz > 0), outside, torch.maximum(dr, dz)), None


def _hull_planes_value(x, size, hull):
    """Max over the hull's face planes (the SDF inside, a lower bound outside)."""
    planes = hull[0]
    return (x @ planes[..., :3].transpose(-1, -2) - planes[:, None, :, 3]).max(-1)[0], None


_SDF = {
    GeomType.PLANE: _sdf_plane,
    GeomType.SPHERE: _sdf_sphere,
    GeomType.CAPSULE: _sdf_capsule,
    GeomType.BOX: _sdf_box,
    GeomType.CYLINDER: _sdf_cylinder,
    GeomType.MESH: _sdf_hull,
}
_SEARCH_SDF = {GeomType.BOX: _box_value, GeomType.CYLINDER: _cylinder_value, GeomType.MESH: _hull_planes_value}


# ---------------------------------------------------------------- kernels


def _points_vs(x_local, radius, RX, pX, type_y, size_y, hull_y, RY, pY):
    """Points of shape X (local ``x_local``, radius (P,) or (..., P)) vs the SDF of Y.

    Returns world (pos, normal from Y to X, depth), shapes (..., P, N, 3|3|-).
    """
    xw = _to_world(RX, pX, x_local)
    dist, n_local = _SDF[type_y](_to_local(RY, pY, xw), size_y[:, None, :], hull_y)
    n = n_local @ RY.transpose(-1, -2)
    radius = radius[..., None]
    pos = xw - n * ((radius + dist) / 2)[..., None]
    return pos, n, radius - dist


def _part_points(g: _PairGroup, side: str, Ra, pa, Rb, pb):
    if side == "a":  # points of A vs B: the normal already points from B to A
        return _points_vs(g.points_a, g.radius_a, Ra, pa, g.type_b, g.size_b, g.hull_b, Rb, pb)
    pos, n, depth = _points_vs(g.points_b, g.radius_b, Rb, pb, g.type_a, g.size_a, g.hull_a, Ra, pa)
    return pos, -n, depth


def _part_cylinder_plane(g: _PairGroup, Ra, pa, Rb, pb):
    """Per cap of cylinder A, the rim point deepest below plane B and two at +-120 deg."""
    n_local = (Rb[..., :, 2][..., None, :] @ Ra)[..., 0, :]  # plane normal in A's frame
    down = torch.cat([-n_local[..., :2], torch.zeros_like(n_local[..., 2:])], -1)
    u = _unit(down, _axis(0, down))  # (..., P, 3), in the cap plane
    c, s = -0.5, 3**0.5 / 2
    ux, uy, uz = u.unbind(-1)
    rim = torch.stack(
        [u, torch.stack([c * ux - s * uy, s * ux + c * uy, uz], -1), torch.stack([c * ux + s * uy, -s * ux + c * uy, uz], -1)],
        -2,
    )  # (..., P, 3, 3)
    r, h = g.size_a[:, 0], g.size_a[:, 1]
    ring = rim * r[:, None, None]
    ez = _axis(2, u) * h[:, None, None]
    x = torch.cat([ring - ez, ring + ez], -2)  # (..., P, 6, 3)
    return _points_vs(x, torch.zeros_like(r), Ra, pa, GeomType.PLANE, g.size_b, g.hull_b, Rb, pb)


def _segment(R, p, half):
    """World end points (..., P, 3) of the z-axis segment of half length ``half (P,)``."""
    axis = R[..., :, 2] * half[:, None]
    return p - axis, p + axis


def _part_segment_segment(g: _PairGroup, Ra, pa, Rb, pb):
    """Closest points of capsule A's and capsule B's segments (one contact)."""
    p1, q1 = _segment(Ra, pa, g.size_a[:, 1])
    p2, q2 = _segment(Rb, pb, g.size_b[:, 1])
    d1, d2, r = q1 - p1, q2 - p2, p1 - p2
    a, e = (d1 * d1).sum(-1), (d2 * d2).sum(-1)
    b, c, f = (d1 * d2).sum(-1), (d1 * r).sum(-1), (d2 * r).sum(-1)
    tiny = _EPS * _EPS
    a_s, e_s = a.clamp(min=tiny), e.clamp(min=tiny)
    denom = a * e - b * b
    parallel = denom <= _PARALLEL * a * e + tiny
    s_gen = ((b * f - c * e) / torch.where(parallel, torch.ones_like(denom), denom)).clamp(0, 1)
    # parallel: the middle of the overlap of A's projection on B, back onto A
    t_mid = ((f / e_s).clamp(0, 1) + ((b + f) / e_s).clamp(0, 1)) / 2
    s_par = ((b * t_mid - c) / a_s).clamp(0, 1)
    s = torch.where(parallel, s_par, s_gen)
    t = (b * s + f) / e_s
    s = torch.where(t < 0, (-c / a_s).clamp(0, 1), torch.where(t > 1, ((b - c) / a_s).clamp(0, 1), s))
    t = t.clamp(0, 1)
    ca, cb = p1 + s[..., None] * d1, p2 + t[..., None] * d2
    v = ca - cb
    fallback = _unit(torch.linalg.cross(d1, d2), _perpendicular(d1))
    n = _unit(v, fallback)
    dist, _ = _safe_norm(v)
    ra, rb = g.size_a[:, 0], g.size_b[:, 0]
    depth = ra + rb - dist
    pos = (ca + cb) / 2 + n * ((rb - ra) / 2)[..., None]
    return pos[..., None, :], n[..., None, :], depth[..., None]


def _deepest_t(s0, d, ty, size, hull):
    """``t (..., P, N)`` in [0, 1] minimising the SDF of Y along ``s0 + t d`` (Y's frame).

    The SDF of a convex shape is convex in ``t``, so a nested grid search finds the
    deepest point of each segment inside Y (or its closest point outside): each stage
    evaluates ``_GRID`` points and keeps the two cells around the best one. A tiny
    pull towards the middle of the interval breaks ties, so on flat stretches (a box
    edge lying on a face) the middle is kept. For a hull the search uses the max over
    face planes (also convex, equal to the SDF inside, cheaper than the triangles).
    No gradient: see :func:`_segments_vs`.
    """
    s0, d = s0.detach(), d.detach()
    lo = torch.zeros_like(s0[..., 0])
    width = torch.ones_like(lo)
    grid = torch.linspace(0.0, 1.0, _GRID, dtype=s0.dtype, device=s0.device)
    for _ in range(_GRID_STAGES):
        t = lo[..., None] + width[..., None] * grid  # (..., P, N, G)
        x = s0[..., None, :] + t[..., None] * d[..., None, :]
        f = _SEARCH_SDF[ty](x.flatten(-3, -2), size, hull)[0].unflatten(-1, (-1, _GRID))
        k = (f + _TIE * (grid - 0.5) ** 2).argmin(-1)
        step = width / (_GRID - 1)
        lo = (lo + (k - 1).clamp(min=0) * step).clamp(0.0, 1.0)
        width = 2 * step
        lo = torch.minimum(lo, 1.0 - width)
    return lo + width / 2


def _segments_vs(e0, e1, radius, RY, pY, ty, sy, hull):
    """The deepest point of each world segment ``e0 -> e1 (..., P, N, 3)`` (a capsule
    axis, a box edge, a cylinder side line) inside Y, as a sphere of ``radius (P,)``.

    Gradients: the searched ``t*`` is constant, which is exact for the depth where the
    SDF is smooth at ``t*`` (envelope theorem; always so outside Y) or ``t*`` is an end.
    Where ``t*`` is inside Y on a ridge of the SDF (inside a box or hull, where two
    faces are equally near: an edge crossing an edge), the two sides are linearised at ``t* -+ dt``
    from their values and slopes ``n . d`` and the depth is taken at their crossing:
    exact for planar faces and differentiable, and the normal is the mix of the two
    face normals that is perpendicular to the segment (the edge-edge normal).
    Returns world (pos, normal from Y to the segment, depth) (..., P, N, ...).
    """
    s0, s1 = _to_local(RY, pY, e0), _to_local(RY, pY, e1)
    d, size = s1 - s0, sy[:, None, :]
    t = _deepest_t(s0, d, ty, size, hull)
    tl, tr = (t - _KINK_DT).clamp(min=0.0), (t + _KINK_DT).clamp(max=1.0)
    x3 = torch.stack([s0 + u[..., None] * d for u in (t, tl, tr)], -2)  # (..., P, N, 3, 3)
    f, n = _SDF[ty](x3.flatten(-3, -2), size, hull)
    (f, fl, fr), (n, nl, nr) = f.unflatten(-1, (-1, 3)).unbind(-1), n.unflatten(-2, (-1, 3)).unbind(-2)
    sl, sr = (nl * d).sum(-1), (nr * d).sum(-1)  # slopes df/dt of the two sides
    den = sr - sl
    ridge = (f < 0) & (sl < 0) & (sr > 0) & (den > 1e-6 * _safe_norm(d)[0]) & (t > _KINK_DT) & (t < 1 - _KINK_DT)
    den = torch.where(ridge, den, torch.ones_like(den))
    tc = (fl - fr + sr * tr - sl * tl) / den  # where the two linearised sides cross
    lam = (sr / den)[..., None]
    f = torch.where(ridge, fl + sl * (tc - tl), f)
    n = torch.where(ridge[..., None], _unit(lam * nl + (1 - lam) * nr, n), n)
    x = s0 + torch.where(ridge, tc, t)[..., None] * d  # Y's frame
    n = n @ RY.transpose(-1, -2)
    r = radius[..., None]
    pos = _to_world(RY, pY, x) - n * ((r + f) / 2)[..., None]
    return pos, n, r - f


def _sides(g: _PairGroup, side: str, Ra, pa, Rb, pb):
    """(X pose, X size, Y type, Y pose, Y size, Y hull) with X the shape on ``side``."""
    if side == "a":
        return Ra, pa, g.size_a, g.type_b, Rb, pb, g.size_b, g.hull_b
    return Rb, pb, g.size_b, g.type_a, Ra, pa, g.size_a, g.hull_a


def _part_segments(g: _PairGroup, side: str, what: str, Ra, pa, Rb, pb):
    """The capsule axis (``what='axis'``) or the 12 box edges (``'edges'``) of the shape
    on ``side``: the deepest point of each inside the other shape."""
    RX, pX, sx, ty, RY, pY, sy, hull = _sides(g, side, Ra, pa, Rb, pb)
    if what == "axis":
        e0, e1 = _segment(RX, pX, sx[:, 1])
        e0, e1, radius = e0[..., None, :], e1[..., None, :], sx[:, 0]
    else:
        ends = _BOX_EDGES.to(sx) * sx[:, None, None, :]  # (P, 12, 2, 3) local
        e0, e1, radius = _to_world(RX, pX, ends[:, :, 0]), _to_world(RX, pX, ends[:, :, 1]), torch.zeros_like(sx[:, 0])
    pos, n, depth = _segments_vs(e0, e1, radius, RY, pY, ty, sy, hull)
    return pos, (n if side == "a" else -n), depth


def _part_cylinder_toward(g: _PairGroup, side: str, Ra, pa, Rb, pb):
    """Cylinder X (on ``side``) vs Y: with ``n`` Y's SDF normal at X's centre, the two
    rim points deepest along ``-n`` and the side line between them (deepest point)."""
    RX, pX, sx, ty, RY, pY, sy, hull = _sides(g, side, Ra, pa, Rb, pb)
    _, n_y = _SDF[ty](_to_local(RY, pY, pX[..., None, :]), sy[:, None, :], hull)
    n_x = (n_y @ RY.transpose(-1, -2)) @ RX  # (..., P, 1, 3) in X's frame
    down = torch.cat([-n_x[..., :2], torch.zeros_like(n_x[..., 2:])], -1)
    ring = _unit(down, _axis(0, down)) * sx[:, None, None, 0]  # (..., P, 1, 3)
    ez = _axis(2, ring) * sx[:, None, None, 1]
    rim = torch.cat([ring - ez, ring + ez], -2)  # (..., P, 2, 3) in X's frame
    zero = torch.zeros_like(sx[:, 0])
    pos, n, depth = _points_vs(rim, zero, RX, pX, ty, sy, hull, RY, pY)
    rim = _to_world(RX, pX, rim)
    pos_s, n_s, depth_s = _segments_vs(rim[..., :1, :], rim[..., 1:, :], zero, RY, pY, ty, sy, hull)
    pos, n, depth = torch.cat([pos, pos_s], -2), torch.cat([n, n_s], -2), torch.cat([depth, depth_s], -1)
    return pos, (n if side == "a" else -n), depth


def _unit_box_edges() -> torch.Tensor:
    """(12, 2, 3) the edges of the box [-1, 1]^3 as (start, end) corners."""
    edges = []
    for axis in range(3):
        u, v = [k for k in range(3) if k != axis]
        for su in (-1.0, 1.0):
            for sv in (-1.0, 1.0):
                a = [0.0] * 3
                a[u], a[v], a[axis] = su, sv, -1.0
                b = list(a)
                b[axis] = 1.0
                edges.append([a, b])
    return torch.tensor(edges, dtype=torch.float64)


_BOX_EDGES = _unit_box_edges()


_PARTS = {
    "a_points": lambda g, *P: _part_points(g, "a", *P),
    "b_points": lambda g, *P: _part_points(g, "b", *P),
    "cylinder_plane": _part_cylinder_plane,
    "segment_segment": _part_segment_segment,
    "b_axis": lambda g, *P: _part_segments(g, "b", "axis", *P),
    "a_edges": lambda g, *P: _part_segments(g, "a", "edges", *P),
    "b_edges": lambda g, *P: _part_segments(g, "b", "edges", *P),
    "a_toward": lambda g, *P: _part_cylinder_toward(g, "a", *P),
    "b_toward": lambda g, *P: _part_cylinder_toward(g, "b", *P),
}
_PART_SIZE = {"cylinder_plane": 6, "segment_segment": 1, "b_axis": 1, "a_edges": 12, "b_edges": 12, "a_toward": 3, "b_toward": 3}

_G = GeomType
_KERNELS = {
    (_G.SPHERE, _G.PLANE): ("a_points",),
    (_G.CAPSULE, _G.PLANE): ("a_points",),
    (_G.BOX, _G.PLANE): ("a_points",),
    (_G.CYLINDER, _G.PLANE): ("cylinder_plane",),
    (_G.MESH, _G.PLANE): ("a_points",),
    (_G.SPHERE, _G.SPHERE): ("a_points",),
    (_G.CAPSULE, _G.SPHERE): ("b_points",),
    (_G.CAPSULE, _G.CAPSULE): ("segment_segment",),
    (_G.BOX, _G.SPHERE): ("b_points",),
    (_G.BOX, _G.CAPSULE): ("b_points", "b_axis"),
    (_G.BOX, _G.BOX): ("a_points", "b_points", "a_edges", "b_edges"),
    (_G.CYLINDER, _G.SPHERE): ("b_points",),
    (_G.CYLINDER, _G.CAPSULE): ("b_points", "b_axis"),
    (_G.CYLINDER, _G.BOX): ("a_points", "b_points", "b_edges", "a_toward"),
    (_G.CYLINDER, _G.CYLINDER): ("a_points", "b_points", "a_toward", "b_toward"),
    (_G.MESH, _G.SPHERE): ("b_points",),
    (_G.MESH, _G.CAPSULE): ("a_points", "b_points", "b_axis"),
    (_G.MESH, _G.BOX): ("a_points", "b_points", "b_edges"),
    (_G.MESH, _G.CYLINDER): ("a_points", "b_points", "b_toward"),
    (_G.MESH, _G.MESH): ("a_points", "b_points"),
}


# ------------------------------------------------------------- detection


@dataclass(frozen=True)
class Contacts:
    """K candidate contacts (fixed K, see :class:`ContactPlan`); world frame.

    ``pos (..., K, 3)`` midpoint between the surfaces; ``normal (..., K, 3)`` unit,
    from shape B to shape A; ``depth (..., K)`` penetration in m (< 0: separation).
    Static per contact: ``slot_a, slot_b (K,)`` long (-1 = static world),
    ``friction (K,)`` (max of the pair's two), ``pair (K,)`` index into ``plan.pair_geom``,
    ``slot_pair (K,)`` index of the unordered pair of slots (contacts between the same
    two bodies share it).
    """

    pos: torch.Tensor
    normal: torch.Tensor
    depth: torch.Tensor
    slot_a: torch.Tensor
    slot_b: torch.Tensor
    friction: torch.Tensor
    pair: torch.Tensor
    slot_pair: torch.Tensor


def geom_poses(plan: ContactPlan, R: torch.Tensor, p: torch.Tensor):
    """World poses of every geom: ``(R (..., G, 3, 3), p (..., G, 3))``.

    ``R (..., S, 3, 3)``, ``p (..., S, 3)``: world poses of the slots. Batch-first views
    of :func:`_geom_poses_last`.
    """
    batch = torch.broadcast_shapes(R.shape[:-3], p.shape[:-2])
    R_last, p_last = _slots_last(R, p, batch)
    Rg, pg = _geom_poses_last(plan, R_last, p_last)
    G = Rg.shape[0]
    return Rg.movedim(-1, 0).reshape(batch + (G, 3, 3)), pg.movedim(-1, 0).reshape(batch + (G, 3))


def _slots_last(R: torch.Tensor, p: torch.Tensor, batch: tuple):
    """Batch-first slot poses ``R (..., S, 3, 3)``, ``p (..., S, 3)`` broadcast to ``batch``
    and flattened batch-last: ``(S, 3, 3, N)``, ``(S, 3, N)``."""
    N, S = math.prod(batch), R.shape[-3]
    R_last = R.expand(batch + R.shape[-3:]).reshape(N, S, 3, 3).permute(1, 2, 3, 0).contiguous()
    p_last = p.expand(batch + p.shape[-2:]).reshape(N, S, 3).permute(1, 2, 0).contiguous()
    return R_last, p_last


def _on_plane(g: _PairGroup) -> bool:
    """The group's contacts are the points of A against plane B (sphere, capsule, box, mesh)."""
    return g.type_b == GeomType.PLANE and g.parts == ("a_points",)


def _geom_poses_last(plan: ContactPlan, R: torch.Tensor, p: torch.Tensor):
    """World poses of every geom, batch-last: ``(R (G, 3, 3, N), p (G, 3, N))`` from slot
    poses ``R (S, 3, 3, N)``, ``p (S, 3, N)``. Batch-last, every product is a long
    contiguous row (batch-first 3x3 products are thousands of tiny matmuls)."""
    rot, pos = plan.geom_rot, plan.geom_pos
    if R.shape[0] == 0:  # only static geoms
        return rot[..., None].expand(rot.shape + R.shape[-1:]), pos[..., None].expand(pos.shape + R.shape[-1:])
    idx = plan.geom_slot.clamp(min=0)
    Rs, ps = R.index_select(0, idx), p.index_select(0, idx)  # (G, 3, 3, N), (G, 3, N)
    rot, pos = rot[..., None], pos[..., None]
    Rw, pw = mm(Rs, rot), mv(Rs, pos) + ps
    if plan.has_static:
        static = plan.geom_slot < 0
        Rw = torch.where(static[:, None, None, None], rot, Rw)
        pw = torch.where(static[:, None, None], pos, pw)
    return Rw, pw


def _points_on_planes(plan: ContactPlan, R: torch.Tensor, p: torch.Tensor, rows: torch.Tensor | None = None,
                      planes=None):
    """The contacts ``rows (Kp',)`` (default: all) of ``plan.on_plane`` at slot poses
    ``R (S, 3, 3, N)``, ``p (S, 3, N)``: world ``(pos (Kp', 3, N), normal (Kp', 3, N),
    depth (Kp', N))``. Same result as :func:`_points_vs` with the plane's SDF: the height
    along its normal. ``planes``: :func:`_planes` if already computed."""
    pp = plan.on_plane
    pick = (lambda x: x) if rows is None else (lambda x: x.index_select(0, rows))  # noqa: E731
    slot, point, radius, plane = pick(pp.slot), pick(pp.point), pick(pp.radius)[:, None], pick(pp.plane)
    x = _rotate(R.index_select(0, slot), point, p.index_select(0, slot))  # world points (Kp', 3, N)
    normal, origin = _planes(plan, R, p) if planes is None else planes
    if normal.shape[0] > 1:
        normal, origin = normal.index_select(0, plane), origin.index_select(0, plane)
    height = _dot(x - origin, normal)
    pos = torch.addcmul(x, normal, ((radius + height) * -0.5)[:, None])  # halfway between the surfaces
    return pos, normal.expand_as(pos), radius - height


def _plane_depths(plan: ContactPlan, R: torch.Tensor, p: torch.Tensor, planes):
    """(Kp, N) depths of ``plan.on_plane``'s contacts against its single plane, without
    placing the points: ``height = n . (p_s + R_s x - o) = n . p_s + (R_s^T n) . x - n . o``
    with ``R_s^T n`` and ``n . p_s`` once per slot. ``planes``: :func:`_planes`."""
    pp = plan.on_plane
    normal, origin = planes  # (1, 3, N)
    along = _dot(p, normal) - _dot(origin, normal)  # (S, N) height of each slot origin
    local = mtv(R, normal)  # (S, 3, N) R_s^T n, the normal in each slot's frame
    height = along.index_select(0, pp.slot)
    for m_j, x_j in zip(local.index_select(0, pp.slot).unbind(1), pp.point[:, :, None].unbind(1)):
        height = torch.addcmul(height, m_j, x_j)
    return pp.radius[:, None] - height


def _planes(plan: ContactPlan, R, p):
    """World normals and origins ``(Pl, 3, N)`` of ``plan.on_plane``'s planes."""
    pp = plan.on_plane
    idx = pp.plane_slot.clamp(min=0)
    Rs = R.index_select(0, idx)
    normal, origin = _rotate(Rs, pp.plane_axis), _rotate(Rs, pp.plane_pos, p.index_select(0, idx))
    if plan.has_static:
        static = (pp.plane_slot < 0)[:, None, None]
        normal = torch.where(static, pp.plane_axis[..., None], normal)
        origin = torch.where(static, pp.plane_pos[..., None], origin)
    return normal, origin


def _rotate(R, x, add=None):
    """``add + R x`` (k, 3, N) for rotations ``R (k, 3, 3, N)`` and constant vectors ``x (k, 3)``."""
    out = mv(R, x[..., None])
    return out if add is None else out + add


def _dot(a, b):
    """(k, N) dot products of (k, 3, N) vectors, by components (no reduction over a middle dim)."""
    out = None
    for x, y in zip(a.unbind(1), b.unbind(1)):
        out = x * y if out is None else torch.addcmul(out, x, y)
    return out


@dataclass(frozen=True)
class Detection:
    """The K contacts of :func:`detect_last`, batch-last: ``depth (K, N)`` at once, and
    positions and normals of any rows on demand (:meth:`rows`). When every contact is a
    point on a single plane, the depths need no contact position, so only the rows asked
    for are placed; otherwise ``full`` holds all of them."""

    plan: ContactPlan
    R: torch.Tensor
    p: torch.Tensor
    depth: torch.Tensor
    full: tuple | None
    planes: tuple | None = None  # the plane's (normal, origin) when full is None

    def rows(self, index: torch.Tensor | None = None):
        """``(pos (K', 3, N), normal (K', 3, N), depth (K', N))`` of the contacts ``index
        (K',)``, all of them when None."""
        if self.full is not None:
            return self.full if index is None else tuple(x.index_select(0, index) for x in self.full)
        pos, normal, _ = _points_on_planes(self.plan, self.R, self.p, index, self.planes)
        return pos, normal, self.depth if index is None else self.depth.index_select(0, index)


def detect_last(plan: ContactPlan, R: torch.Tensor, p: torch.Tensor) -> Detection:
    """:func:`detect` batch-last: the K contacts (a :class:`Detection`) at slot poses
    ``R (S, 3, 3, N)``, ``p (S, 3, N)`` (the layout of :mod:`torchrbd.algorithms`). The
    points-vs-plane groups run batch-last; the other kernels batch-first, on views of
    the same geom poses."""
    if R.shape[0] < plan.n_slots:
        raise ValueError(f"detect: poses have {R.shape[0]} slots, the plan needs at least {plan.n_slots}")
    plan = plan.to(R.dtype, R.device)
    pp = plan.on_plane
    if pp is not None and len(pp.groups) == len(plan.groups) and pp.plane_slot.numel() == 1:
        planes = _planes(plan, R, p)
        return Detection(plan, R, p, _plane_depths(plan, R, p, planes), None, planes)
    full = _all_contacts(plan, R, p)
    return Detection(plan, R, p, full[2], full)


def _all_contacts(plan: ContactPlan, R: torch.Tensor, p: torch.Tensor):
    """(pos (K, 3, N), normal (K, 3, N), depth (K, N)) of every group, in contact order."""
    N = R.shape[-1]
    parts = [_points_on_planes(plan, R, p)] if plan.on_plane is not None else []
    done = () if plan.on_plane is None else plan.on_plane.groups
    others = [g for i, g in enumerate(plan.groups) if i not in done]
    if others:
        Rg, pg = _geom_poses_last(plan, R, p)
        Rg, pg = Rg.permute(3, 0, 1, 2), pg.permute(2, 0, 1)  # batch-first views (N, G, ...)
    for g in others:
        Ra, pa, Rb, pb = Rg[:, g.geom_a], pg[:, g.geom_a], Rg[:, g.geom_b], pg[:, g.geom_b]
        outs = [_PARTS[part](g, Ra, pa, Rb, pb) for part in g.parts]  # each (N, P, n, 3|3|-)
        k = g.geom_a.shape[0] * g.per_pair()
        parts.append(tuple(torch.cat([o[i] for o in outs], -2 if i < 2 else -1).reshape((N, k, 3) if i < 2 else (N, k))
                           .movedim(0, -1) for i in range(3)))
    if not parts:
        return R.new_zeros(0, 3, N), R.new_zeros(0, 3, N), R.new_zeros(0, N)
    out = parts[0] if len(parts) == 1 else tuple(torch.cat(x, 0) for x in zip(*parts))
    if plan.order is not None:
        out = tuple(x.index_select(0, plan.order) for x in out)
    return out


def detect(plan: ContactPlan, R: torch.Tensor, p: torch.Tensor) -> Contacts:
    """The K candidate contacts of ``plan`` at slot poses ``R (..., S, 3, 3)``, ``p (..., S, 3)``.

    ``R = world_R_slot``, ``p = world_p_slot``; leading dims are environments. The
    plan is moved to ``R``'s dtype/device if needed (call ``plan.to`` once to avoid
    the copy). Differentiable w.r.t. ``R`` and ``p``.
    """
    if R.shape[-3] < plan.n_slots:
        raise ValueError(f"detect: poses have {R.shape[-3]} slots, the plan needs at least {plan.n_slots}")
    batch = torch.broadcast_shapes(R.shape[:-3], p.shape[:-2])
    return contacts_first(plan, *detect_last(plan, *_slots_last(R, p, batch)).rows(), batch)


def contacts_first(plan: ContactPlan, pos, normal, depth, batch=None) -> Contacts:
    """:class:`Contacts` (views, batch-first) of the batch-last output of :func:`detect_last`;
    ``batch``: the leading dims to unflatten N into (default: ``(N,)``)."""
    batch = tuple(depth.shape[-1:] if batch is None else batch)
    return Contacts(
        pos=pos.movedim(-1, 0).reshape(batch + pos.shape[:1] + (3,)),
        normal=normal.movedim(-1, 0).reshape(batch + pos.shape[:1] + (3,)),
        depth=depth.movedim(-1, 0).reshape(batch + depth.shape[:1]),
        slot_a=plan.contact_slot_a,
        slot_b=plan.contact_slot_b,
        friction=plan.contact_friction,
        pair=plan.contact_pair,
        slot_pair=plan.contact_slot_pair,
    )
