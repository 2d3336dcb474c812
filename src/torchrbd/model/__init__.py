"""Robot models: parsing (URDF, MJCF / MjModel) into one immutable :class:`Model`."""

from .model import Geom, GeomType, JointType, Model
from .urdf import load_urdf

__all__ = ["Model", "JointType", "Geom", "GeomType", "load_urdf", "load_mjcf", "from_mujoco_model"]


def load_mjcf(path, joints_name_list=None):
    """Build a :class:`Model` from an MJCF file (needs the ``mujoco`` extra)."""
    from .mjcf import load_mjcf as _load

    return _load(path, joints_name_list)


def from_mujoco_model(mj_model, joints_name_list=None):
    """Build a :class:`Model` from a compiled ``mujoco.MjModel``."""
    from .mjcf import from_mujoco_model as _from

    return _from(mj_model, joints_name_list)
