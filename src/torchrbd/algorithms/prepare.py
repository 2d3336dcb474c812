"""Computing a model's derived constants ahead of ``torch.compile``.

Index tensors, merged body inertias, joint-pose coefficients, chains and factorisation
plans are computed on first use and kept on the model. While ``torch.compile`` traces,
nothing can be stored; a constant found missing is computed inside the graph, so the
compiled code recomputes it on every call. :func:`prepare` computes them all first,
and compiled code then reads them as inputs. ``KinDynComputations`` calls it in its
constructor (about 9 ms for iCub) and for its compiled copies.
"""

from __future__ import annotations

from ..model.model import Model
from .inertia import pseudo_inertias
from .kinematics import _axis_terms, _joint_pose_matrix, prepare_frames
from .rnea import gravity_twist
from .topology import chain, topology
from .tree_cholesky import tree_plan


def prepare(model: Model) -> Model:
    """Fill ``model``'s caches (in eager mode; a no-op for what is already there) and
    return it. Constants that depend on a parameter requiring grad stay uncached (they
    are part of each call's graph)."""
    topology(model)
    pseudo_inertias(model)  # and the merged body parameters
    _joint_pose_matrix(model)  # and the pose terms
    _joint_pose_matrix(model, homogeneous=True)
    _axis_terms(model)
    gravity_twist(model)
    for body in range(model.nbody):
        chain(model, body)
    prepare_frames(model)  # and the frame lookups
    for floating in (True, False):
        tree_plan(model, floating)
    return model
