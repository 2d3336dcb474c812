"""Pure functions ``(model, tensors) -> tensors``: kinematics, CRBA, RNEA, ABA, Jacobians.

They work with world axes and about one reference origin O, the origin of the
frame the kinematics were computed in, on batch-last tensors (see :mod:`.batchlast`); :mod:`.representation` converts
to the adam / iDynTree velocity representations and :mod:`torchrbd.kindyn`
turns everything back to the batch-first user layout.
"""

from .crba import assemble, mass_matrix, mass_matrix_top
from .inertia import (
    SpatialInertia, body_parameters, center_of_mass, linear_momentum_rows, subtree_moments, world_first_moments,
    world_inertias,
)
from .jacobians import chain_column_rates
from .kinematics import (
    Kinematics, body_poses, chain_forward, chain_rows, dof_subspaces, forward, frame_pose, frame_transforms,
    link_poses, motion_subspaces, per_body,
)
from .prepare import prepare
from .representation import Representations
from .rnea import body_velocities, generalized_gravity, gravity_twist, rnea_mixed
from .topology import Topology, topology

__all__ = [
    "assemble", "body_parameters", "body_poses", "body_velocities", "center_of_mass", "chain_column_rates",
    "chain_forward", "chain_rows", "dof_subspaces", "forward", "frame_pose", "frame_transforms",
    "generalized_gravity", "gravity_twist", "Kinematics", "linear_momentum_rows", "link_poses", "mass_matrix", "mass_matrix_top",
    "motion_subspaces", "per_body", "prepare", "Representations", "rnea_mixed", "SpatialInertia", "subtree_moments",
    "Topology", "topology", "world_first_moments", "world_inertias",
]
