"""Pure functions ``(model, tensors) -> tensors``: kinematics, CRBA, RNEA, Jacobians.

All work on a flattened batch ``B`` and in the world frame (quantities about
the world origin, world axes). :mod:`torchrbd.algorithms.representation` converts
to the adam / iDynTree velocity representations.
"""

from .crba import composite_inertias, mass_matrix_inertial
from .inertia import body_parameters, center_of_mass, world_inertias
from .jacobians import jacobian_dot_inertial, jacobian_inertial, support_mask
from .kinematics import Kinematics, body_poses, forward, frame_pose, link_poses
from .representation import Representations
from .rnea import rnea_inertial
from .topology import Topology, topology

__all__ = [
    "Kinematics", "Representations", "Topology", "body_parameters", "body_poses", "center_of_mass",
    "composite_inertias", "forward", "frame_pose", "jacobian_dot_inertial", "jacobian_inertial",
    "link_poses", "mass_matrix_inertial", "rnea_inertial", "support_mask", "topology", "world_inertias",
]
