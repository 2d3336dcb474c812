"""MJCF loading: compile with MuJoCo, then read the *compiled* ``mujoco.MjModel``.

Reading the compiled model (not the XML) means defaults, ``<include>``, angle
units, ``fromto``, inertias inferred from geoms and mesh recentring are already
resolved by MuJoCo itself. ``mujoco`` is imported only inside the functions.

Mapping (MuJoCo -> :class:`Model`):

* every MJCF body except the world body (id 0) is a link, named by the body
  name (``body{i}`` when unnamed); its frame is the MuJoCo body frame.
* hinge -> revolute, slide -> prismatic. A body with ``k`` joints becomes a chain
  of ``k - 1`` massless virtual links ``<body>__jnt<i>`` (frame = the body frame
  after joints ``0..i``) ending in the real link. Each joint frame sits at the
  joint anchor ``jnt_pos`` with the body's axes, and the link sits at
  ``-jnt_pos`` in it, so the body rotates about the axis through the anchor.
* the joint reference ``ref`` (``qpos0``) is folded into the joint placement, so
  the coordinates are MuJoCo's ``qpos`` entries themselves (limits match too).
* a free joint on a top-level body makes that body the floating base
  (``floating=True``; base_transform = world_H_body = ``qpos[0:3]``,
  ``qpos[3:7]`` wxyz). Otherwise the root is a massless virtual link ``world``
  and top-level bodies hang from it (by fixed joints when they have no joint).
* geoms become :class:`Geom` records on their body's link; world-body geoms
  get ``link="world"`` (a real link of fixed-base models; the simulator treats
  it as static in floating models). Sites become ``extra_frames``.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from pathlib import Path

import numpy as np
import torch

from ..errors import ModelError
from .builder import JointSpec, LinkSpec, build_model
from .model import Geom, GeomType, Model

WORLD = "world"

# MuJoCo enum values (mjtJoint, mjtGeom, mjtTrn, mjtGain, mjtBias, mjtDyn), fixed by its ABI.
_FREE, _BALL, _SLIDE, _HINGE = 0, 1, 2, 3
_GEOM_TYPES = {0: GeomType.PLANE, 2: GeomType.SPHERE, 3: GeomType.CAPSULE, 5: GeomType.CYLINDER,
               6: GeomType.BOX, 7: GeomType.MESH}
_GEOM_NAMES = {1: "hfield", 4: "ellipsoid", 8: "sdf"}
_TRN_JOINT, _GAIN_FIXED, _BIAS_NONE, _DYN_NONE = 0, 0, 0, 0


# ------------------------------------------------------------------ small math
def _quat_to_rot(q) -> np.ndarray:
    """(3, 3) rotation of a unit quaternion ``(w, x, y, z)``."""
    w, x, y, z = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _axis_angle(axis, angle: float) -> np.ndarray:
    """(3, 3) rotation by ``angle`` about the unit ``axis`` (Rodrigues)."""
    u = np.asarray(axis, dtype=np.float64)
    u = u / np.linalg.norm(u)
    K = np.array([[0, -u[2], u[1]], [u[2], 0, -u[0]], [-u[1], u[0], 0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


def _transform(rot=None, pos=None) -> np.ndarray:
    T = np.eye(4)
    if rot is not None:
        T[:3, :3] = rot
    if pos is not None:
        T[:3, 3] = pos
    return T


# ------------------------------------------------------------------ names
def _name(mj_model, obj, i: int, default: str) -> str:
    import mujoco

    try:
        return mujoco.mj_id2name(mj_model, obj, i) or default
    except UnicodeDecodeError:
        raise ModelError(f"the name of {obj.name.lower()[5:]} {i} is not valid UTF-8") from None


def _link_names(mj_model) -> list[str]:
    """Link name of every MuJoCo body (index 0, the world body, is ``"world"``)."""
    import mujoco

    return [WORLD] + [_name(mj_model, mujoco.mjtObj.mjOBJ_BODY, i, f"body{i}") for i in range(1, mj_model.nbody)]


def _model_name(mj_model) -> str:
    # the compiled names buffer starts with the model name
    name = bytes(mj_model.names).split(b"\0", 1)[0].decode(errors="replace")
    return name or "mujoco_model"


def _top_level(mj_model) -> np.ndarray:
    """(nbody,) the top-level ancestor of each body (0 for the world body)."""
    root_of = np.zeros(mj_model.nbody, dtype=int)
    for b in range(1, mj_model.nbody):
        p = int(mj_model.body_parentid[b])
        root_of[b] = b if p == 0 else root_of[p]
    return root_of


def _scenery(mj_model) -> tuple[list[int], list[int], np.ndarray]:
    """(free bodies, top-level bodies with joints besides the first free body, scenery mask).

    Scenery: with a free body, the other top-level subtrees that have no joint at
    all; they are static, so their geoms belong to the world.
    """
    top_of = _top_level(mj_model)
    free_bodies = [int(mj_model.jnt_bodyid[j]) for j in range(mj_model.njnt) if mj_model.jnt_type[j] == _FREE]
    scenery = np.zeros(mj_model.nbody, dtype=bool)
    if not free_bodies:
        return free_bodies, [], scenery
    jointed = {int(top_of[int(mj_model.jnt_bodyid[j])]) for j in range(mj_model.njnt)}
    base = free_bodies[0]
    top = [b for b in range(1, mj_model.nbody) if mj_model.body_parentid[b] == 0 and b != base]
    moving = [b for b in top if b in jointed]
    scenery[1:] = [top_of[b] != base and top_of[b] not in jointed for b in range(1, mj_model.nbody)]
    return free_bodies, moving, scenery


def _world_of(mj_model, b: int) -> np.ndarray:
    """world_H_body at qpos0 for a body in a static subtree (no joints on the path)."""
    T = np.eye(4)
    while b != 0:
        T = _transform(_quat_to_rot(mj_model.body_quat[b]), mj_model.body_pos[b]) @ T
        b = int(mj_model.body_parentid[b])
    return T


# ------------------------------------------------------------------ records
def _geom(mj_model, g: int, body: str, link: str, body_H_link: np.ndarray) -> Geom | None:
    """The Geom of MuJoCo geom ``g`` (on ``body``) with its pose given in ``link``'s frame.

    Unnamed geoms are called ``<body>_geom<g>``; unsupported types warn and give None.
    """
    import mujoco

    kind = int(mj_model.geom_type[g])
    name = _name(mj_model, mujoco.mjtObj.mjOBJ_GEOM, g, f"{body}_geom{g}")
    if kind not in _GEOM_TYPES:
        warnings.warn(
            f"MJCF geom {name!r} of type {_GEOM_NAMES.get(kind, kind)!r} is not supported and is skipped",
            stacklevel=3,
        )
        return None
    gtype = _GEOM_TYPES[kind]
    s = [float(x) for x in mj_model.geom_size[g]]
    size = {
        GeomType.PLANE: tuple(s),  # MuJoCo half extents (0 = infinite); the plane is infinite for contact
        GeomType.SPHERE: (s[0],),
        GeomType.CAPSULE: (s[0], s[1]),
        GeomType.CYLINDER: (s[0], s[1]),
        GeomType.BOX: tuple(s),
        GeomType.MESH: (1.0, 1.0, 1.0),  # the compiled vertices are already scaled
    }[gtype]
    vertices = mesh_file = None
    if gtype == GeomType.MESH:
        m = int(mj_model.geom_dataid[g])
        adr, num = int(mj_model.mesh_vertadr[m]), int(mj_model.mesh_vertnum[m])
        # compiled vertices are in the (recentred) mesh frame, which is the compiled geom frame
        vertices = torch.as_tensor(np.array(mj_model.mesh_vert[adr : adr + num], dtype=np.float64))
        pathadr = int(mj_model.mesh_pathadr[m]) if len(mj_model.mesh_pathadr) else -1
        if pathadr >= 0:
            mesh_file = bytes(mj_model.paths[pathadr:]).split(b"\0", 1)[0].decode(errors="replace") or None
    T = np.linalg.inv(body_H_link) @ _transform(_quat_to_rot(mj_model.geom_quat[g]), mj_model.geom_pos[g])
    return Geom(
        name=name,
        link=link,
        type=gtype,
        size=size,
        rot=torch.as_tensor(T[:3, :3].copy()),
        pos=torch.as_tensor(T[:3, 3].copy()),
        friction=float(mj_model.geom_friction[g, 0]),
        contype=int(mj_model.geom_contype[g]),
        conaffinity=int(mj_model.geom_conaffinity[g]),
        vertices=vertices,
        mesh_file=mesh_file,
    )


def _effort(mj_model, j: int) -> float:
    """|generalized force| limit of joint ``j`` from its actuators, inf when unclear.

    Uses the joint's ``actuatorfrcrange`` when set; otherwise a single actuator
    with a joint transmission: ``|gear| * min(max|forcerange|, |gain| max|ctrlrange|)``
    (the ctrl bound only for plain motors: fixed gain, no bias, no dynamics).
    """
    if mj_model.jnt_actfrclimited[j]:
        return float(np.abs(mj_model.jnt_actfrcrange[j]).max())
    acts = [
        a
        for a in range(mj_model.nu)
        if mj_model.actuator_trntype[a] == _TRN_JOINT and mj_model.actuator_trnid[a, 0] == j
    ]
    if len(acts) != 1:
        return float("inf")
    a = acts[0]
    bound = float("inf")
    if mj_model.actuator_forcelimited[a]:
        bound = float(np.abs(mj_model.actuator_forcerange[a]).max())
    plain_motor = (
        mj_model.actuator_gaintype[a] == _GAIN_FIXED
        and mj_model.actuator_biastype[a] == _BIAS_NONE
        and mj_model.actuator_dyntype[a] == _DYN_NONE
    )
    if plain_motor and mj_model.actuator_ctrllimited[a]:
        gain = abs(float(mj_model.actuator_gainprm[a, 0]))
        bound = min(bound, gain * float(np.abs(mj_model.actuator_ctrlrange[a]).max()))
    return abs(float(mj_model.actuator_gear[a, 0])) * bound


def _joint_specs(mj_model, b: int, parent: str, link: str, where: str) -> tuple[list, list]:
    """(virtual LinkSpecs, JointSpecs) that attach body ``b``'s link to ``parent``.

    Joint ``k`` of the body (anchor ``a_k``, axis ``u_k``, both in the body frame
    as moved by joints ``0..k-1``): its parent frame is the body frame after
    joint ``k - 1`` (or the parent link for ``k = 0``, placed by ``body_pos/quat``),
    ``origin = [parent_H_body] @ T(a_k) @ ref_k^-1``, ``child_in_joint = T(-a_k)``.
    """
    import mujoco

    parent_H_body = _transform(_quat_to_rot(mj_model.body_quat[b]), mj_model.body_pos[b])
    adr, num = int(mj_model.body_jntadr[b]), int(mj_model.body_jntnum[b])
    if num == 0:
        return [], [JointSpec(f"{link}__fixed", "fixed", parent, link, parent_H_body)]
    virtual, specs = [], []
    for k, j in enumerate(range(adr, adr + num)):
        jname = _name(mj_model, mujoco.mjtObj.mjOBJ_JOINT, j, f"joint{j}")
        kind = int(mj_model.jnt_type[j])
        if kind == _BALL:
            raise ModelError(f"{where}: ball joint {jname!r} (body {link!r}) is not supported; use three hinges")
        if kind == _FREE:
            raise ModelError(
                f"{where}: free joint {jname!r} on body {link!r} is not supported here; only a single "
                "free joint on one top-level body (the floating base) is"
            )
        child = link if k == num - 1 else f"{link}__jnt{k}"
        if child != link:
            virtual.append(LinkSpec(child))
        a = np.array(mj_model.jnt_pos[j], dtype=np.float64)
        axis = np.array(mj_model.jnt_axis[j], dtype=np.float64)
        ref = float(mj_model.qpos0[mj_model.jnt_qposadr[j]])
        # fold the reference position in, so that coordinate q == qpos (MuJoCo moves by qpos - qpos0)
        if kind == _HINGE:
            ref_inv = _transform(rot=_axis_angle(axis, -ref)) if ref else np.eye(4)
        else:
            ref_inv = _transform(pos=-ref * axis / np.linalg.norm(axis))
        origin = (parent_H_body if k == 0 else np.eye(4)) @ _transform(pos=a) @ ref_inv
        lower, upper = -np.inf, np.inf
        if mj_model.jnt_limited[j]:
            lower, upper = float(mj_model.jnt_range[j, 0]), float(mj_model.jnt_range[j, 1])
        stiffness = float(mj_model.jnt_stiffness[j])
        spring_ref = float(mj_model.qpos_spring[mj_model.jnt_qposadr[j]])
        if stiffness and spring_ref:
            warnings.warn(
                f"{where}: joint {jname!r} has springref {spring_ref}; torchrbd springs pull towards q = 0",
                stacklevel=3,
            )
        dof = int(mj_model.jnt_dofadr[j])
        specs.append(
            JointSpec(
                name=jname,
                kind="revolute" if kind == _HINGE else "prismatic",
                parent=parent,
                child=child,
                origin=origin,
                axis=axis,
                lower=lower,
                upper=upper,
                effort=_effort(mj_model, j),
                damping=float(mj_model.dof_damping[dof]),
                stiffness=stiffness,
                armature=float(mj_model.dof_armature[dof]),
                child_in_joint=_transform(pos=-a),
            )
        )
        parent = child
    return virtual, specs


# ------------------------------------------------------------------ public API
def from_mujoco_model(mj_model, joints_name_list=None, *, source: str | None = None) -> Model:
    """Build a :class:`Model` from a compiled ``mujoco.MjModel``.

    ``joints_name_list``: the hinge/slide joints that become coordinates, in that
    order (None: all, in depth-first tree order); the others are locked at
    ``qpos = 0``. Raises :class:`ModelError` for ball joints, a free joint that is
    not on a top-level body, several free bodies, or top-level bodies with
    joints alongside a free body. Top-level bodies whose whole subtree has no
    joint, next to a free body, are static scenery: their geoms become world
    geoms (``link="world"``) and they are not links.

    Sites on the world body or on scenery of a floating model (no ``world`` link
    there) are skipped, as are sites named like a link (with a warning), and
    unsupported geoms (hfield, ellipsoid, sdf; with a warning). Mocap bodies are
    treated as welded at their ``body_pos``/``body_quat``.
    """
    import mujoco

    where = source or _model_name(mj_model)
    names = _link_names(mj_model)
    if len(set(names)) != len(names):
        raise ModelError(f"{where}: body names clash with generated names {names}")
    free_bodies, moving, in_static = _scenery(mj_model)
    for j in range(mj_model.njnt):
        if mj_model.jnt_type[j] != _FREE:
            continue
        b = int(mj_model.jnt_bodyid[j])
        jname = _name(mj_model, mujoco.mjtObj.mjOBJ_JOINT, j, f"joint{j}")
        if mj_model.body_parentid[b] != 0:
            raise ModelError(
                f"{where}: free joint {jname!r} is on body {names[b]!r}, which is not a child of the world"
            )
        if mj_model.body_jntnum[b] != 1:
            raise ModelError(
                f"{where}: body {names[b]!r} has free joint {jname!r} and other joints; not supported"
            )
    if len(free_bodies) > 1:
        raise ModelError(
            f"{where}: more than one free body ({[names[b] for b in free_bodies]}); "
            "only one floating base is supported"
        )

    floating = bool(free_bodies)
    if moving:
        raise ModelError(
            f"{where}: top-level bodies {[names[b] for b in moving]} have joints alongside the "
            f"free body {names[free_bodies[0]]!r}; only one tree is supported"
        )

    # links (one per non-static body, plus the virtual world root of fixed-base models)
    links: dict[str, LinkSpec] = {}
    if not floating:
        links[WORLD] = LinkSpec(WORLD)
    joints: list[JointSpec] = []
    for b in range(1, mj_model.nbody):
        if in_static[b]:
            continue
        R_i = _quat_to_rot(mj_model.body_iquat[b])
        links[names[b]] = LinkSpec(
            names[b],
            mass=float(mj_model.body_mass[b]),
            com=np.array(mj_model.body_ipos[b], dtype=np.float64),
            inertia=R_i @ np.diag(np.asarray(mj_model.body_inertia[b], dtype=np.float64)) @ R_i.T,
        )
        if floating and b == free_bodies[0]:
            continue
        virtual, specs = _joint_specs(mj_model, b, names[int(mj_model.body_parentid[b])], names[b], where)
        for v in virtual:
            links[v.name] = v
        joints.extend(specs)

    # geoms: on their link, or world geoms (world body and static scenery)
    world_geoms = []
    for g in range(mj_model.ngeom):
        b = int(mj_model.geom_bodyid[g])
        if b == 0 or in_static[b]:
            geom = _geom(mj_model, g, names[b], WORLD, np.linalg.inv(_world_of(mj_model, b)) if b else np.eye(4))
            if geom is not None:
                world_geoms.append(geom)
        else:
            geom = _geom(mj_model, g, names[b], names[b], np.eye(4))
            if geom is not None:
                links[names[b]].geoms.append(geom)
    if not floating:
        links[WORLD].geoms.extend(world_geoms)

    extra_frames = {}
    for s in range(mj_model.nsite):
        b = int(mj_model.site_bodyid[s])
        sname = _name(mj_model, mujoco.mjtObj.mjOBJ_SITE, s, f"site{s}")
        if in_static[b] or (b == 0 and floating):
            continue  # no link to attach to
        if sname in links:
            warnings.warn(f"{where}: site {sname!r} has the name of a link and is skipped", stacklevel=2)
            continue
        extra_frames[sname] = (
            names[b],
            _quat_to_rot(mj_model.site_quat[s]),
            np.array(mj_model.site_pos[s], dtype=np.float64),
        )

    model = build_model(
        _model_name(mj_model),
        list(links.values()),
        joints,
        joints_name_list,
        source=source,
        root=WORLD if not floating else names[free_bodies[0]],
        floating=floating,
        gravity=tuple(float(x) for x in mj_model.opt.gravity),
        extra_frames=extra_frames,
    )
    if floating and world_geoms:
        model = dataclasses.replace(model, geoms=tuple(world_geoms) + model.geoms)
    return model


def load_mjcf(path, joints_name_list=None) -> Model:
    """Compile an MJCF file (or XML string) with MuJoCo and build its :class:`Model`.

    Raises :class:`ModelError` naming the file and MuJoCo's message when the file
    is missing or does not compile. See :func:`from_mujoco_model` for the mapping.
    """
    import mujoco

    if isinstance(path, str) and path.lstrip().startswith("<"):
        where = "<MJCF string>"
        try:
            mj_model = mujoco.MjModel.from_xml_string(path)
        except Exception as e:  # MuJoCo raises ValueError with the compiler's message
            raise ModelError(f"{where}: MuJoCo could not compile the model: {e}") from None
        return from_mujoco_model(mj_model, joints_name_list, source=where)
    if not isinstance(path, (str, os.PathLike)):
        raise ModelError(f"expected an MJCF path or XML string, got {type(path).__name__}")
    p = Path(path)
    try:
        found = p.is_file()
    except OSError as e:  # e.g. a name longer than the file system allows
        raise ModelError(f"cannot read MJCF path {str(p)[:80]!r}...: {e.strerror}") from None
    if not found:
        raise ModelError(f"MJCF file not found: {str(p)!r}")
    try:
        mj_model = mujoco.MjModel.from_xml_path(str(p))
    except Exception as e:
        raise ModelError(f"{p}: MuJoCo could not compile the model: {e}") from None
    return from_mujoco_model(mj_model, joints_name_list, source=str(p))


def mujoco_contact_excludes(mj_model) -> set:
    """Link pairs of the MJCF ``<contact><exclude>`` elements, each pair sorted by name.

    Bodies map to their link names; the world body and the static scenery of a
    floating model (whose geoms are world geoms) map to ``"world"``. MuJoCo's
    implicit parent-child exclusion is not included.
    """
    names = _link_names(mj_model)
    _, _, scenery = _scenery(mj_model)
    names = [WORLD if scenery[b] else n for b, n in enumerate(names)]
    out = set()
    for sig in np.asarray(mj_model.exclude_signature[: mj_model.nexclude]).tolist():
        a, b = names[int(sig) >> 16], names[int(sig) & 0xFFFF]
        out.add(tuple(sorted((a, b))))
    return out
