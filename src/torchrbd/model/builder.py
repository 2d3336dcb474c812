"""Turn a parsed link/joint graph (from any format) into a :class:`Model`.

Parsers (URDF, MJCF) fill :class:`LinkSpec` / :class:`JointSpec` records; this
module checks the graph (one root, no cycles, known links), orders it depth first,
merges links welded by fixed or locked joints into bodies, and orders the joint
coordinates as the user asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import JointNotFoundError, ModelError, _suggest
from .model import JointType, Model


@dataclass
class LinkSpec:
    name: str
    mass: float = 0.0
    com: np.ndarray = field(default_factory=lambda: np.zeros(3))  # link frame
    inertia: np.ndarray = field(default_factory=lambda: np.zeros((3, 3)))  # about CoM, link axes
    geoms: list = field(default_factory=list)  # Geom records (link-relative poses)


@dataclass
class JointSpec:
    name: str
    kind: str  # "revolute" | "prismatic" | "fixed"
    parent: str
    child: str
    origin: np.ndarray  # (4, 4) parent_link_H_joint at q = 0
    axis: np.ndarray = field(default_factory=lambda: np.array([0.0, 0.0, 1.0]))
    lower: float = -np.inf
    upper: float = np.inf
    effort: float = np.inf
    damping: float = 0.0
    stiffness: float = 0.0
    armature: float = 0.0
    # The child frame in the joint frame (MJCF joints sit at an anchor inside the body).
    child_in_joint: np.ndarray | None = None


def _check_inertia(link: LinkSpec, where: str):
    if not np.isfinite(link.mass) or link.mass < 0:
        raise ModelError(f"{where}: link {link.name!r} has invalid mass {link.mass} (must be >= 0)")
    if not np.all(np.isfinite(np.asarray(link.com, dtype=float))):
        raise ModelError(f"{where}: link {link.name!r} has a non-finite centre of mass {list(link.com)}")
    inertia = np.asarray(link.inertia, dtype=float)
    if not np.all(np.isfinite(inertia)) or not np.allclose(inertia, inertia.T, atol=1e-9):
        raise ModelError(f"{where}: link {link.name!r} has a non-symmetric or non-finite inertia")
    eig = np.linalg.eigvalsh(inertia)
    # Tolerance: published models (e.g. TIAGo's antenna links) carry round-off
    # violations around 1e-8 kg m^2 that Pinocchio and MuJoCo accept.
    if eig.min() < -(1e-6 + 1e-6 * abs(eig).max()):
        raise ModelError(
            f"{where}: link {link.name!r} inertia is not positive semi-definite "
            f"(eigenvalues {np.round(eig, 9).tolist()})"
        )


def build_model(
    name: str,
    links: list[LinkSpec],
    joints: list[JointSpec],
    joints_name_list=None,
    *,
    source: str | None = None,
    root: str | None = None,
    floating: bool = True,
    gravity=(0.0, 0.0, -9.80665),
    extra_frames: dict | None = None,
) -> Model:
    """Check the graph and build the model (float64, CPU). ``root`` forces the base link.

    ``extra_frames`` maps a frame name to ``(link name, link_R_frame, link_p_frame)``.
    """
    where = source or name
    link_by_name = {}
    for link in links:
        if link.name in link_by_name:
            raise ModelError(f"{where}: link {link.name!r} is defined twice")
        _check_inertia(link, where)
        link_by_name[link.name] = link
    if not link_by_name:
        raise ModelError(f"{where}: the model has no links")

    children: dict[str, list[JointSpec]] = {n: [] for n in link_by_name}
    parent_joint: dict[str, JointSpec] = {}
    joint_names = set()
    for j in joints:
        if j.name in joint_names:
            raise ModelError(f"{where}: joint {j.name!r} is defined twice")
        joint_names.add(j.name)
        for role, lk in (("parent", j.parent), ("child", j.child)):
            if lk not in link_by_name:
                raise ModelError(
                    f"{where}: joint {j.name!r} names a missing {role} link {lk!r}{_suggest(lk, link_by_name)}"
                )
        for what, value in (("origin", j.origin), ("child placement", j.child_in_joint)):
            if value is not None and not np.all(np.isfinite(np.asarray(value, dtype=float))):
                raise ModelError(f"{where}: joint {j.name!r} has a non-finite {what}")
        if j.child in parent_joint:
            raise ModelError(
                f"{where}: link {j.child!r} has two parent joints "
                f"({parent_joint[j.child].name!r} and {j.name!r}); kinematic loops are not supported"
            )
        if j.kind not in ("revolute", "prismatic", "fixed"):
            raise ModelError(f"{where}: joint {j.name!r} has unsupported type {j.kind!r}")
        parent_joint[j.child] = j
        children[j.parent].append(j)

    roots = [n for n in link_by_name if n not in parent_joint]
    if root is not None and root not in link_by_name:
        raise ModelError(f"{where}: root link {root!r} is not a link of the model{_suggest(root, link_by_name)}")
    if root is None:
        if len(roots) != 1:
            if not roots:
                raise ModelError(f"{where}: every link has a parent joint, so the joints form a cycle")
            raise ModelError(f"{where}: the model has several root links {roots}; expected one tree")
        root = roots[0]

    # depth-first order of links, children in declaration order
    order, stack, seen = [], [root], set()
    while stack:
        ln = stack.pop()
        if ln in seen:
            raise ModelError(f"{where}: the joints form a cycle through link {ln!r}")
        seen.add(ln)
        order.append(ln)
        stack.extend(j.child for j in reversed(children[ln]))
    if len(order) != len(link_by_name):
        missing = sorted(set(link_by_name) - seen)
        raise ModelError(f"{where}: links {missing} are not connected to the root {root!r} (cycle or second tree)")

    movable = [parent_joint[ln] for ln in order[1:] if parent_joint[ln].kind != "fixed"]
    movable_names = [j.name for j in movable]
    if joints_name_list is None:
        coords = movable_names
    else:
        coords = [str(n) for n in joints_name_list]
        fixed_names = {j.name for j in joints if j.kind == "fixed"}
        for n in coords:
            if n in fixed_names:
                raise ModelError(f"{where}: joint {n!r} in joints_name_list is a fixed joint")
            if n not in movable_names:
                raise JointNotFoundError(n, movable_names, where)
        if len(set(coords)) != len(coords):
            raise ModelError(f"{where}: joints_name_list repeats a joint")
    coord_of = {n: k for k, n in enumerate(coords)}

    # bodies: a link starts a body when its parent joint is an active coordinate
    body_names, body_parent, body_dof, jtypes = [root], [-1], [-1], [JointType.ROOT]
    body_T, axes = [np.eye(4)], [np.zeros(3)]
    link_body, link_T = {}, {}  # link -> body index, body_H_link
    link_body[root], link_T[root] = 0, np.eye(4)
    dof_props = {}
    for ln in order[1:]:
        j = parent_joint[ln]
        pb, pT = link_body[j.parent], link_T[j.parent]
        after = j.child_in_joint if j.child_in_joint is not None else np.eye(4)
        if j.name in coord_of:
            axis = np.asarray(j.axis, dtype=float)
            norm = np.linalg.norm(axis)
            if axis.shape != (3,) or not np.isfinite(norm) or norm < 1e-12:
                raise ModelError(f"{where}: joint {j.name!r} has a zero or invalid axis {axis.tolist()}")
            body_names.append(ln)
            body_parent.append(pb)
            body_dof.append(coord_of[j.name])
            jtypes.append(JointType.REVOLUTE if j.kind == "revolute" else JointType.PRISMATIC)
            body_T.append(pT @ j.origin)
            axes.append(axis / norm)
            link_body[ln], link_T[ln] = len(body_names) - 1, after
            dof_props[j.name] = j
        else:  # fixed or locked at 0: weld the link into the parent body
            link_body[ln], link_T[ln] = pb, pT @ j.origin @ after

    # Store bodies level by level (depth-first within a level): every tree level
    # is then a contiguous block, which the algorithms' sweeps rely on for speed.
    depth = [0] * len(body_names)
    for i in range(1, len(body_names)):
        depth[i] = depth[body_parent[i]] + 1
    perm = sorted(range(len(body_names)), key=lambda i: (depth[i], i))
    new_index = {old: new for new, old in enumerate(perm)}
    body_names, body_dof, jtypes, body_T, axes = (
        [seq[i] for i in perm] for seq in (body_names, body_dof, jtypes, body_T, axes)
    )
    body_parent = [-1 if body_parent[i] < 0 else new_index[body_parent[i]] for i in perm]
    link_body = {ln: new_index[b] for ln, b in link_body.items()}

    def t(x):
        return torch.as_tensor(np.asarray(x, dtype=np.float64))

    link_names = tuple(order)
    props = [dof_props[n] for n in coords]
    geoms = []
    for ln in order:
        geoms.extend(link_by_name[ln].geoms)
    return Model(
        name=name,
        body_names=tuple(body_names),
        body_parent=tuple(body_parent),
        body_dof=tuple(body_dof),
        joint_names=tuple(coords),
        joint_type=tuple(jtypes),
        body_rot=t([T[:3, :3] for T in body_T]),
        body_pos=t([T[:3, 3] for T in body_T]),
        joint_axis=t(axes),
        link_names=link_names,
        link_body=tuple(link_body[ln] for ln in order),
        link_rot=t([link_T[ln][:3, :3] for ln in order]),
        link_pos=t([link_T[ln][:3, 3] for ln in order]),
        link_mass=t([link_by_name[ln].mass for ln in order]),
        link_com=t([link_by_name[ln].com for ln in order]).reshape(-1, 3),
        link_inertia=t([link_by_name[ln].inertia for ln in order]).reshape(-1, 3, 3),
        extra_frames={
            n: (link_names.index(ln), t(R), t(p)) for n, (ln, R, p) in (extra_frames or {}).items()
        },
        armature=t([p.armature for p in props]).reshape(-1),
        damping=t([p.damping for p in props]).reshape(-1),
        stiffness=t([p.stiffness for p in props]).reshape(-1),
        lower=t([p.lower for p in props]).reshape(-1),
        upper=t([p.upper for p in props]).reshape(-1),
        effort=t([p.effort for p in props]).reshape(-1),
        gravity=t(gravity),
        floating=floating,
        geoms=tuple(geoms),
        source=source,
    )
