"""torchrbd.sim: a differentiable rigid-body simulator with a Genesis-style API.

``import torchrbd.sim as gs`` stands in for ``import genesis as gs`` in scripts
that use the rigid solver::

    import torchrbd.sim as gs

    gs.init(backend=gs.cpu, precision="64")
    scene = gs.Scene(sim_options=gs.options.SimOptions(dt=0.01, requires_grad=True))
    robot = scene.add_entity(gs.morphs.URDF(file="robot.urdf", fixed=True))
    scene.build()
    scene.step()
    loss = robot.get_qpos().pow(2).sum()
    loss.backward()          # flows through scene.step()

Getters return :class:`gs.Tensor` (a ``torch.Tensor`` that knows its scene).
The simulator is plain autograd on top of torchrbd's dynamics; see
``docs/simulator.md`` for the state layout, integrators, gradients and
checkpointed rollouts (:meth:`Scene.rollout`).
"""

from . import materials, morphs, options
from .creation import (
    arange, empty, eye, from_numpy, from_torch, full, linspace, ones, ones_like, rand, rand_like, randn,
    randn_like, tensor, zeros, zeros_like,
)
from .entity import RigidEntity, RigidJoint, RigidLink
from .options import integrator
from .runtime import Backend, init, is_initialized
from .scene import Scene, SimState
from .tensor import Tensor

cpu = Backend.cpu
gpu = Backend.gpu


def __getattr__(name):
    """``gs.device``, ``gs.tc_float``, ``gs.tc_int``, ``gs.backend``: the current settings."""
    from . import runtime

    if name == "device":
        return runtime.default_device()
    if name == "tc_float":
        return runtime.float_dtype()
    if name == "tc_int":
        return runtime.int_dtype()
    if name == "backend":
        return runtime.current_backend()
    raise AttributeError(f"module 'torchrbd.sim' has no attribute {name!r}")


__all__ = [
    "init", "is_initialized", "cpu", "gpu", "Backend", "Tensor", "Scene", "SimState", "RigidEntity", "RigidLink",
    "RigidJoint", "options", "morphs", "materials", "integrator", "tensor", "from_numpy", "from_torch", "zeros",
    "ones", "rand", "randn", "empty", "full", "eye", "arange", "linspace", "zeros_like", "ones_like", "rand_like",
    "randn_like",
]
