"""Gradients through scene.step(): against central finite differences (float64) for
initial states, per-step torques, PD gains and link masses; retain_graph, reset,
checkpointed rollouts and getters' connection to the graph."""

import numpy as np
import pytest
import torch

import torchrbd.sim as gs
from conftest import load_example

ROBOT = """<?xml version="1.0"?>
<robot name="robot">
  <link name="base">
    <inertial><origin xyz="0.02 0 0.05"/><mass value="2.0"/>
      <inertia ixx="0.02" ixy="0.001" ixz="0" iyy="0.03" iyz="0" izz="0.04"/></inertial>
  </link>
  <link name="arm">
    <inertial><origin xyz="0.2 0 0"/><mass value="0.5"/>
      <inertia ixx="0.001" ixy="0" ixz="0" iyy="0.004" iyz="0" izz="0.004"/></inertial>
  </link>
  <link name="hand">
    <inertial><origin xyz="0 0.05 -0.1"/><mass value="0.3"/>
      <inertia ixx="0.002" ixy="0" ixz="0" iyy="0.002" iyz="0" izz="0.001"/></inertial>
  </link>
  <joint name="shoulder" type="revolute">
    <parent link="base"/><child link="arm"/><origin xyz="0.1 0 0.1" rpy="0.2 0 0"/>
    <axis xyz="0 1 0"/><limit lower="-3" upper="3" effort="50" velocity="10"/>
    <dynamics damping="0.2"/>
  </joint>
  <joint name="wrist" type="continuous">
    <parent link="arm"/><child link="hand"/><origin xyz="0.4 0 0" rpy="0 0 0.3"/>
    <axis xyz="1 0 0"/><dynamics damping="0.05"/>
  </joint>
</robot>
"""


pytestmark = pytest.mark.usefixtures("sim_float64_one_thread")


@pytest.fixture(scope="module")
def urdf(tmp_path_factory):
    f = tmp_path_factory.mktemp("sim_grad") / "robot.urdf"
    f.write_text(ROBOT)
    return str(f)


def _scene(urdf, fixed, integrator, n_envs=0):
    scene = gs.Scene(
        sim_options=gs.options.SimOptions(dt=0.01, requires_grad=True),
        rigid_options=gs.options.RigidOptions(integrator=integrator),
    )
    robot = scene.add_entity(gs.morphs.URDF(file=urdf, pos=(0.0, 0.1, 0.5), fixed=fixed))
    scene.build(n_envs=n_envs)
    return scene, robot


def _loss(robot):
    """A loss that reads many getters."""
    return (
        robot.get_links_pos().pow(2).sum()
        + 0.3 * robot.get_dofs_velocity().pow(2).sum()
        + robot.get_links_vel()[-1].sum()
        + robot.get_quat().sum()
        + 0.1 * robot.get_dofs_position().sin().sum()
    )


def _drive(scene, robot, q0, v0, tau, before=lambda: None):
    """Reset, call ``before``, set the initial state, apply one row of ``tau`` as
    joint forces per step; returns :func:`_loss` at the end."""
    scene.reset()
    before()
    robot.set_dofs_position(q0)
    robot.set_dofs_velocity(v0)
    for row in tau:
        robot.control_dofs_force(row)
        scene.step()
    return _loss(robot)


def _check_fd(run, params: dict, eps=1e-6, seed=0):
    """Compare autograd with central differences along a random direction per group."""
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    loss = run(**leaves)
    loss.backward()
    gen = torch.Generator().manual_seed(seed)
    report = {}
    for name, value in params.items():
        assert value.dtype == torch.float64
        d = torch.randn(value.shape, generator=gen, dtype=value.dtype)
        with torch.no_grad():
            plus = run(**{**params, name: value + eps * d}).item()
            minus = run(**{**params, name: value - eps * d}).item()
        fd = (plus - minus) / (2 * eps)
        ad = (leaves[name].grad * d).sum().item()
        report[name] = (ad, fd)
        assert ad == pytest.approx(fd, rel=1e-6, abs=1e-8), (name, ad, fd)
    return report


@pytest.mark.parametrize(
    "fixed,integrator,T",
    [(False, gs.integrator.Euler, 8), (False, gs.integrator.RK4, 3), (True, gs.integrator.RK4, 4)],
    ids=["floating-euler", "floating-rk4", "fixed-rk4"],
)
def test_gradients_of_initial_state_torques_and_inertial_parameters_match_finite_differences(urdf, fixed, integrator, T):
    scene, robot = _scene(urdf, fixed, integrator)
    nv = robot.n_dofs
    rng = np.random.default_rng(3)

    def run(q0, v0, tau, mass, com):
        def inertial():
            robot.set_links_inertial_mass(mass)
            robot.set_links_com(com, links_idx_local=[1, 2])

        return _drive(scene, robot, q0, v0, tau, inertial)

    q0 = torch.tensor(rng.normal(size=nv) * 0.3)
    if not fixed:
        q0[:3] += torch.tensor([0.0, 0.1, 0.5])
    params = dict(
        q0=q0,
        v0=torch.tensor(rng.normal(size=nv)),
        tau=torch.tensor(rng.normal(size=(T, nv))),
        mass=torch.tensor([2.0, 0.5, 0.3], dtype=torch.float64),
        com=torch.tensor([[0.2, 0.0, 0.0], [0.0, 0.05, -0.1]], dtype=torch.float64),
    )
    _check_fd(run, params)


def test_gradients_of_pd_gains_match_finite_differences(urdf):
    scene, robot = _scene(urdf, False, gs.integrator.Euler)
    joints = [6, 7]

    def run(kp, kv, target, v0):
        scene.reset()
        robot.set_dofs_kp(kp, dofs_idx_local=joints)
        robot.set_dofs_kv(kv, dofs_idx_local=joints)
        robot.set_dofs_velocity(v0)
        robot.control_dofs_position(target, dofs_idx_local=joints)
        for _ in range(8):
            scene.step()
        return _loss(robot)

    params = dict(
        kp=torch.tensor([30.0, 12.0], dtype=torch.float64),
        kv=torch.tensor([2.0, 0.7], dtype=torch.float64),
        target=torch.tensor([0.5, -0.4], dtype=torch.float64),
        v0=torch.tensor(np.random.default_rng(4).normal(size=8)),
    )
    _check_fd(run, params)


def test_every_getter_is_connected_to_the_graph(urdf):
    scene, robot = _scene(urdf, False, gs.integrator.Euler)
    mass = torch.tensor([2.0, 0.5, 0.3], dtype=torch.float64, requires_grad=True)
    v0 = torch.ones(8, dtype=torch.float64, requires_grad=True)
    robot.set_links_inertial_mass(mass)
    robot.set_dofs_velocity(v0)
    robot.control_dofs_force(torch.ones(8, dtype=torch.float64))
    scene.step()
    scene.step()
    getters = [
        robot.get_pos(), robot.get_quat(), robot.get_vel(), robot.get_ang(), robot.get_qpos(),
        robot.get_dofs_position(), robot.get_dofs_velocity(), robot.get_links_pos(), robot.get_links_quat(),
        robot.get_links_vel(), robot.get_links_ang(), robot.get_mass_mat(), robot.get_jacobian("hand"),
        robot.get_dofs_control_force(),
    ]
    for x in getters:
        assert isinstance(x, gs.Tensor) and x.scene is scene and x.requires_grad
        g_mass, g_v0 = torch.autograd.grad(x.sum(), [mass, v0], allow_unused=True, retain_graph=True)
        assert g_mass is not None or g_v0 is not None


def test_backward_twice_with_retain_graph_and_a_new_graph_after_reset(urdf):
    scene, robot = _scene(urdf, False, gs.integrator.Euler)
    tau = torch.full((5, 8), 0.3, dtype=torch.float64, requires_grad=True)

    def rollout():
        scene.reset()
        for t in range(5):
            robot.control_dofs_force(tau[t])
            scene.step()
        return _loss(robot)

    loss = rollout()
    loss.backward(retain_graph=True)
    g1 = tau.grad.clone()
    loss.backward()  # a second backward of the same rollout
    torch.testing.assert_close(tau.grad, 2 * g1)
    with pytest.raises(RuntimeError):
        loss.backward()  # the graph is freed now
    tau.grad = None
    rollout().backward()  # after reset(): a fresh graph, no "backward twice" error
    torch.testing.assert_close(tau.grad, g1)
    # a loss from intermediate getters at several steps
    scene.reset()
    total = 0
    for t in range(5):
        robot.control_dofs_force(tau[t])
        scene.step()
        total = total + robot.get_pos().pow(2).sum()
    tau.grad = None
    total.backward()
    assert tau.grad.abs().sum() > 0 and torch.isfinite(tau.grad).all()


def test_checkpointed_rollout_gives_the_same_values_and_gradients(urdf):
    scene, robot = _scene(urdf, False, gs.integrator.Euler, n_envs=2)
    T = 7
    tau = torch.tensor(np.random.default_rng(5).normal(size=(T, 2, 8)), requires_grad=True)
    mass = torch.tensor([2.0, 0.5, 0.3], dtype=torch.float64, requires_grad=True)
    results = []
    for mode in ("steps", None, 3):
        scene.reset()
        robot.set_links_inertial_mass(mass)
        if mode == "steps":
            qs = []
            for t in range(T):
                robot.control_dofs_force(tau[t])
                scene.step()
                qs.append(robot.get_qpos())
            qpos = torch.stack(qs)
        else:
            qpos, vel = scene.rollout(tau, checkpoint_every=mode)
            assert qpos.shape == (T, 2, 9) and vel.shape == (T, 2, 8) and isinstance(qpos, gs.Tensor)
        assert scene.t == T
        loss = qpos.pow(2).sum() + _loss(robot)
        g_tau, g_mass = torch.autograd.grad(loss, [tau, mass])
        results.append((qpos.detach(), g_tau, g_mass))
    for other in results[1:]:
        for a, b in zip(results[0], other):
            torch.testing.assert_close(a.as_subclass(torch.Tensor), b.as_subclass(torch.Tensor))


def test_checkpointing_keeps_far_fewer_tensors_alive(urdf):
    scene, robot = _scene(urdf, False, gs.integrator.Euler)
    saved_bytes = load_example("sim_memory")["saved_bytes"]  # the example's measurement
    plain, ckpt = saved_bytes(scene, robot, 20, None), saved_bytes(scene, robot, 20, 5)
    assert ckpt < 0.1 * plain, (plain, ckpt)
