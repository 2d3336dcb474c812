"""The methods and the simulator's steps run on whatever device their inputs are on:
every operator of a call sees only tensors on that device, and nothing is read back.

No GPU is needed: the inputs are meta tensors (shapes, dtypes and a device, no values),
so a constant left on the CPU (an index tensor, a model parameter, a tensor made without
``device=``) raises or shows up in the audit below, as it would break or slow down a
CUDA call (a host-to-device copy per call), and reading a value (``.item()``, ``bool``,
``nonzero``: a synchronisation on a GPU) raises. A test of values on a GPU is
``benchmarks/gpu_check.py``, for a machine that has one.
"""

import collections

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import torchrbd
import torchrbd.models
from conftest import SEED_JOINTS, icub_path

META = torch.device("meta")


class OperatorAudit(TorchDispatchMode):
    """Counts the operators dispatched while active, and records those that were given
    a tensor on another device than ``device`` (operator, device, shape)."""

    def __init__(self, device: torch.device):
        super().__init__()
        self.device, self.operators, self.strays = device, 0, collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.operators += 1
        for t in tree_flatten((args, kwargs))[0]:
            if isinstance(t, torch.Tensor) and t.device != self.device:
                self.strays[(str(func), str(t.device), tuple(t.shape))] += 1
        return func(*args, **kwargs)


def _kindyns():
    """(id, KinDynComputations, frame): a floating base from a URDF (iCub, the seed's
    joints), a fixed base from MJCF, and a model with armature (MJCF)."""
    return [
        ("icub", torchrbd.KinDynComputations(icub_path(), SEED_JOINTS), "l_sole"),
        ("arm7_mjcf_fixed", torchrbd.models.load("arm7", format="mjcf"), "ee"),
        ("humanoid_mjcf_armature", torchrbd.models.load("humanoid"), "right_hand"),
    ]


def _calls(kd, frame, H, q, nu, qd, tau):
    """{method: call} for every public method of ``kd`` that computes."""
    w = {frame: torch.zeros(*H.shape[:-2], 6, dtype=H.dtype, device=H.device)}
    return {
        "forward_kinematics": lambda: kd.forward_kinematics(frame, H, q),
        "link_poses": lambda: kd.link_poses(H, q),
        "link_velocities": lambda: kd.link_velocities(H, q, nu, qd),
        "jacobian": lambda: kd.jacobian(frame, H, q),
        "relative_jacobian": lambda: kd.relative_jacobian(frame, q),
        "jacobian_dot": lambda: kd.jacobian_dot(frame, H, q, nu, qd),
        "CoM_position": lambda: kd.CoM_position(H, q),
        "CoM_jacobian": lambda: kd.CoM_jacobian(H, q),
        "mass_matrix": lambda: kd.mass_matrix(H, q),
        "centroidal_momentum_matrix": lambda: kd.centroidal_momentum_matrix(H, q),
        "bias_force": lambda: kd.bias_force(H, q, nu, qd),
        "mass_matrix_and_bias_force": lambda: kd.mass_matrix_and_bias_force(H, q, nu, qd),
        "coriolis_term": lambda: kd.coriolis_term(H, q, nu, qd),
        "gravity_term": lambda: kd.gravity_term(H, q),
        "rnea": lambda: kd.rnea(H, q, nu, qd, nu, qd, external_wrenches=w),
        "aba": lambda: kd.aba(H, q, nu, qd, tau, external_wrenches=w),
    }


def _meta_inputs(n: int, batch: tuple, dtype, grad: bool):
    def empty(*shape):
        return torch.empty(*batch, *shape, dtype=dtype, device=META, requires_grad=grad)

    return empty(4, 4), empty(n), empty(6), empty(n), empty(n)


# unbatched, one configuration, a short batch, a long one (past the articulated-body
# sweep's threshold), and in one case two batch dimensions
BATCHES = [(), (1,), (16,), (300,)]


def _cases(name: str):
    """(representation, dtype, batch shape) for model ``name``: the default
    representation in float64 at every batch size; for iCub also the other
    representations, float32 and two batch dimensions."""
    mixed = torchrbd.Representations.MIXED_REPRESENTATION
    yield from ((mixed, torch.float64, batch) for batch in BATCHES)
    if name == "icub":
        for rep in (torchrbd.Representations.BODY_FIXED_REPRESENTATION, torchrbd.Representations.INERTIAL_FIXED_REPRESENTATION):
            yield from ((rep, torch.float64, batch) for batch in BATCHES)
        yield from ((mixed, torch.float32, batch) for batch in BATCHES)
        yield mixed, torch.float64, (2, 3)


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_every_operator_stays_on_the_inputs_device(grad):
    """Each method without and with gradients (then also its backward), in the cases
    of :func:`_cases`: the result is on the inputs' device with their dtype and batch
    shape, and no operator of the second call (the first converts and caches the model
    for the device) is given a tensor from another device."""
    for name, kd, frame in _kindyns():
        for rep, dtype, batch in _cases(name):
            kd.set_frame_velocity_representation(rep)
            inputs = _meta_inputs(kd.NDoF, batch, dtype, grad)
            for method, call in _calls(kd, frame, *inputs).items():
                case = f"{name} {rep.name} {dtype} batch {batch} {method}"
                call()
                audit = OperatorAudit(META)
                with audit:
                    out = call()
                    results = out if isinstance(out, tuple) else (out,)
                    if grad:
                        torch.autograd.grad(sum(r.sum() for r in results), inputs, allow_unused=True)
                assert audit.operators > 0, case
                assert not audit.strays, f"{case}: {dict(audit.strays)}"
                for r in results:
                    assert r.device == META and r.dtype == dtype, case
                    assert r.shape[:len(batch)] == batch, case
                    assert r.requires_grad == grad, case


def test_gradients_of_the_inertial_parameters_stay_on_the_device():
    """With the model's masses, CoMs and inertias requiring grad (and on the inputs'
    device), the mass matrix and aba and their backward to those parameters touch no
    tensor of another device."""
    kd = torchrbd.KinDynComputations(icub_path(), SEED_JOINTS)
    params = {k: v.to(META).requires_grad_(True) for k, v in kd.get_inertial_parameters().items()}
    kd.set_inertial_parameters(**params)
    H, q, nu, qd, tau = _meta_inputs(kd.NDoF, (300,), torch.float64, grad=False)
    for call in (lambda: kd.mass_matrix(H, q), lambda: kd.aba(H, q, nu, qd, tau)):
        call()
        audit = OperatorAudit(META)
        with audit:
            out = call()
            grads = torch.autograd.grad(out.sum(), list(params.values()))
        assert audit.operators > 0 and not audit.strays, dict(audit.strays)
        assert all(g.device == META for g in grads)


@pytest.fixture
def meta_scenes(monkeypatch):
    """``torchrbd.sim`` making its scenes on the meta device (float64), as ``gs.init``
    makes them on a GPU; the settings are restored after the test."""
    import torchrbd.sim as gs
    from torchrbd.sim import runtime

    monkeypatch.setattr(runtime, "_SETTINGS", dict(runtime._SETTINGS))
    gs.init(backend=gs.cpu, precision="64")
    runtime._SETTINGS["device"] = META
    return gs


@pytest.mark.parametrize("model, fixed, floor", [("double_pendulum", True, False), ("quadruped", False, False),
                                                 ("quadruped", False, True)], ids=["fixed", "floating", "on_a_plane"])
@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("integrator", ["Euler", "RK4"])
def test_simulator_steps_stay_on_the_device(meta_scenes, model, fixed, floor, requires_grad, integrator):
    """A scene of four environments (joint limits on; a fixed base, a floating one, and
    a floating one on a plane with collisions): the state that ``scene.step()`` returns
    is on the scene's device, and no operator of a step, of the getters or of the
    backward of a loss on the state is given a tensor from another device. Meta tensors
    have no values, so this also shows that a step reads none back to the host."""
    gs = meta_scenes
    scene = gs.Scene(sim_options=gs.options.SimOptions(dt=0.01, requires_grad=requires_grad),
                     rigid_options=gs.options.RigidOptions(enable_collision=floor,
                                                           integrator=getattr(gs.integrator, integrator)))
    if floor:
        scene.add_entity(gs.morphs.Plane())
    robot = scene.add_entity(gs.morphs.URDF(file=str(torchrbd.models.path(model)), fixed=fixed))
    scene.build(n_envs=4)
    torque = torch.empty(4, robot.n_dofs, dtype=torch.float64, device=META, requires_grad=requires_grad)
    robot.control_dofs_force(torque)
    scene.step()
    audit = OperatorAudit(META)
    with audit:
        robot.control_dofs_force(torque)
        scene.step()
        q, v = robot.get_dofs_position(), robot.get_dofs_velocity()
        if requires_grad:
            (q.sum() + v.sum()).backward()
    assert audit.operators > 0 and not audit.strays, dict(audit.strays)
    assert q.device == META and q.shape == v.shape == (4, robot.n_dofs)
    if requires_grad:
        assert torque.grad is not None and torque.grad.device == META


def test_contact_plan_is_made_on_the_cpu_and_moved_to_the_device(meta_scenes):
    """A floating robot on a plane, collisions on: ``scene.build()`` plans the contacts
    from the model as loaded (on the CPU, where the plan's indices are read) and moves
    every tensor of the plan to the scene's device. (Before, the plan mixed the links'
    placements on the scene's device with its own CPU tensors, and the build failed.)"""
    gs = meta_scenes
    scene = gs.Scene(rigid_options=gs.options.RigidOptions(enable_collision=True))
    scene.add_entity(gs.morphs.Plane())
    scene.add_entity(gs.morphs.URDF(file=str(torchrbd.models.path("quadruped"))))
    scene.build(n_envs=2)
    stage = scene._contact_stage
    assert stage is not None and stage.n_contacts > 0
    tensors = [v for v in tree_flatten(stage.plan.__dict__)[0] if isinstance(v, torch.Tensor)]
    tensors += [t for g in stage.plan.groups for t in tree_flatten(g.__dict__)[0] if isinstance(t, torch.Tensor)]
    if stage.plan.on_plane is not None:
        tensors += [t for t in tree_flatten(stage.plan.on_plane.__dict__)[0] if isinstance(t, torch.Tensor)]
    tensors += [stage.entity_a, stage.entity_b] + [t for m in stage.members for t in (m.contact, m.sign, m.support)]
    assert tensors and all(t.device == META for t in tensors), {t.device for t in tensors}
