"""URDF loading through `yourdfpy` (a maintained URDF parser that keeps the XML
faithful, resolves ``package://`` mesh paths and needs no ROS install)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import torch

from ..errors import ModelError, _suggest
from .builder import JointSpec, LinkSpec, build_model
from .model import Geom, GeomType

_JOINT_KINDS = {"revolute": "revolute", "continuous": "revolute", "prismatic": "prismatic", "fixed": "fixed"}


def _is_xml_string(text: str) -> bool:
    return text.lstrip().startswith("<")


def _read(source):
    """(yourdfpy URDF, name for messages, directory for relative meshes)."""
    import yourdfpy
    from lxml import etree

    if isinstance(source, (str, os.PathLike)) and not (isinstance(source, str) and _is_xml_string(source)):
        path = Path(source)
        try:
            found = path.is_file()
        except OSError:  # e.g. a name too long for the file system
            found = False
        if not found:
            raise ModelError(f"URDF file not found: {str(path)!r}")
        where, directory, stream = str(path), str(path.parent), str(path)
    elif isinstance(source, str):
        where, directory, stream = "<URDF string>", os.getcwd(), io.BytesIO(source.encode())
    else:
        raise ModelError(f"expected a URDF path or XML string, got {type(source).__name__}")
    try:
        tree = etree.parse(stream)
    except etree.XMLSyntaxError as e:
        raise ModelError(f"{where}: malformed XML at line {e.lineno}: {e.msg}") from None
    except OSError as e:  # unreadable file
        raise ModelError(f"{where}: cannot read the file ({e})") from None
    root = tree.getroot()
    if root.tag != "robot":
        raise ModelError(f"{where}: the root element is <{root.tag}>, expected <robot>")
    _check_elements(root, where)
    _check_joint_elements(root, where)
    try:
        urdf = yourdfpy.URDF(
            robot=yourdfpy.URDF._parse_robot(root),
            build_scene_graph=False,
            load_meshes=False,
            mesh_dir=directory,
        )
    except Exception as e:  # the parser's own exceptions vary by version
        raise ModelError(f"{where}: invalid URDF ({type(e).__name__}: {e})") from None
    return urdf, where, directory


# number of values of the numeric attributes the parser reads (under <link> and <joint>)
_NUMBERS = {
    "origin": {"xyz": (3,), "rpy": (3,)},
    "axis": {"xyz": (3,)},
    "mass": {"value": (1,)},
    "inertia": dict.fromkeys(("ixx", "ixy", "ixz", "iyy", "iyz", "izz"), (1,)),
    "limit": dict.fromkeys(("lower", "upper", "effort", "velocity"), (1,)),
    "dynamics": dict.fromkeys(("damping", "friction"), (1,)),
    "box": {"size": (3,)},
    "sphere": {"radius": (1,)},
    "cylinder": {"radius": (1,), "length": (1,)},
    "mesh": {"scale": (1, 3)},
}
_SHAPES = ("box", "sphere", "cylinder", "mesh")
_REQUIRED = {"link": ("name",), "joint": ("name",), "box": ("size",), "sphere": ("radius",),
             "cylinder": ("radius", "length"), "mesh": ("filename",)}


def _check_elements(root, where: str):
    """Line-numbered errors for missing names and malformed numbers, which the
    parser would report without a location (or not at all)."""
    if not root.get("name"):
        raise ModelError(f"{where}, line {root.sourceline}: <robot> has no name attribute")
    for top in root:
        if top.tag not in ("link", "joint"):
            continue
        for el in top.iter():
            if not isinstance(el.tag, str):
                continue  # comments, processing instructions
            for attr in _REQUIRED.get(el.tag, ()):
                if el.get(attr) is None:
                    raise ModelError(f"{where}, line {el.sourceline}: <{el.tag}> has no {attr} attribute")
            for attr, counts in _NUMBERS.get(el.tag, {}).items():
                text = el.get(attr)
                if text is None:
                    continue
                try:
                    values = [float(x) for x in text.split()]
                except ValueError:
                    values = None
                if values is None or len(values) not in counts:
                    expected = " or ".join(map(str, counts))
                    raise ModelError(
                        f"{where}, line {el.sourceline}: <{el.tag} {attr}={text!r}> must be {expected} number(s)"
                    )
            if el.tag in ("visual", "collision") and el.find("geometry") is None:
                raise ModelError(f"{where}, line {el.sourceline}: <{el.tag}> has no <geometry>")
            if el.tag == "geometry" and (len(el) == 0 or el[0].tag not in _SHAPES):
                raise ModelError(f"{where}, line {el.sourceline}: <geometry> must hold one of {', '.join(_SHAPES)}")


def _check_joint_elements(root, where: str):
    """Errors that name the line for constructs the parser would silently accept."""
    links = [el.get("name") for el in root.findall("link")]
    for el in root.iter("joint"):
        if el.getparent() is not root:
            continue  # e.g. <transmission><joint>
        name, kind = el.get("name"), el.get("type")
        if kind not in _JOINT_KINDS:
            hint = " (floating bases come from base_transform)" if kind == "floating" else ""
            raise ModelError(f"{where}, line {el.sourceline}: joint {name!r} has unsupported type {kind!r}{hint}")
        for tag in ("parent", "child"):
            sub = el.find(tag)
            if sub is None or not sub.get("link"):
                raise ModelError(f"{where}, line {el.sourceline}: joint {name!r} has no <{tag} link=...>")
            link = sub.get("link")
            if link not in links:
                raise ModelError(
                    f"{where}, line {sub.sourceline}: joint {name!r} names a missing {tag} link "
                    f"{link!r}{_suggest(link, links)}"
                )


def _float(x, default):
    try:
        return float(x) if x is not None else default
    except (TypeError, ValueError):
        return default


def _resolve_mesh(filename: str, directory: str) -> str:
    if filename.startswith("package://"):
        rel = filename[len("package://") :]
        base = Path(directory)
        # try the URDF folder and its parents, with and without the package name
        for up in [base, *base.parents]:
            for cand in (up / rel, up / rel.split("/", 1)[-1]):
                if cand.is_file():
                    return str(cand)
        return str(base / rel.split("/", 1)[-1])
    if filename.startswith("file://"):
        filename = filename[len("file://") :]
    p = Path(filename)
    return str(p if p.is_absolute() else Path(directory) / p)


def _geoms(link, directory: str) -> list:
    out = []
    for k, col in enumerate(link.collisions or []):
        T = col.origin if col.origin is not None else np.eye(4)
        g = col.geometry
        name = col.name or f"{link.name}_collision_{k}"
        mesh_file = None
        if g.box is not None:
            kind, size = GeomType.BOX, tuple(np.asarray(g.box.size, float) / 2)
        elif g.sphere is not None:
            kind, size = GeomType.SPHERE, (float(g.sphere.radius),)
        elif g.cylinder is not None:
            kind, size = GeomType.CYLINDER, (float(g.cylinder.radius), float(g.cylinder.length) / 2)
        elif g.mesh is not None:
            kind = GeomType.MESH
            scale = g.mesh.scale if g.mesh.scale is not None else 1.0
            size = tuple(np.broadcast_to(np.asarray(scale, float), (3,)))
            mesh_file = _resolve_mesh(g.mesh.filename, directory)
        else:
            continue
        out.append(
            Geom(
                name=name,
                link=link.name,
                type=kind,
                size=size,
                rot=torch.as_tensor(T[:3, :3], dtype=torch.float64),
                pos=torch.as_tensor(T[:3, 3], dtype=torch.float64),
                mesh_file=mesh_file,
            )
        )
    return out


def load_urdf(source, joints_name_list=None, *, root_link: str | None = None, gravity=None):
    """Build a :class:`Model` from a URDF path or XML string.

    Revolute, continuous and prismatic joints move; fixed joints and movable joints
    missing from ``joints_name_list`` are welded (locked at 0). ``<mimic>`` is ignored.
    """
    urdf, where, directory = _read(source)
    robot = urdf.robot
    links = []
    for link in robot.links:
        spec = LinkSpec(link.name, geoms=_geoms(link, directory))
        inertial = link.inertial
        if inertial is not None:
            T = inertial.origin if inertial.origin is not None else np.eye(4)
            spec.mass = _float(inertial.mass, 0.0)
            inertia = np.asarray(inertial.inertia if inertial.inertia is not None else np.zeros((3, 3)), float)
            spec.com = T[:3, 3].copy()
            spec.inertia = T[:3, :3] @ inertia @ T[:3, :3].T
        links.append(spec)
    joints = []
    for j in robot.joints:
        limit, dyn = j.limit, j.dynamics
        kind = _JOINT_KINDS[j.type]
        bounded = j.type in ("revolute", "prismatic") and limit is not None
        joints.append(
            JointSpec(
                name=j.name,
                kind=kind,
                parent=j.parent,
                child=j.child,
                origin=np.asarray(j.origin if j.origin is not None else np.eye(4), float),
                axis=np.asarray(j.axis if j.axis is not None else [1.0, 0.0, 0.0], float),
                lower=_float(limit.lower, -np.inf) if bounded else -np.inf,
                upper=_float(limit.upper, np.inf) if bounded else np.inf,
                effort=_float(limit.effort, np.inf) if limit is not None else np.inf,
                damping=_float(dyn.damping, 0.0) if dyn is not None else 0.0,
            )
        )
    g = (0.0, 0.0, -9.80665) if gravity is None else gravity
    return build_model(robot.name or "robot", links, joints, joints_name_list, source=where, root=root_link, gravity=g)
