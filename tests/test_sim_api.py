"""Scene / entity plumbing: errors, morphs, state layout, getters and setters,
control modes, joint limits, reset and n_envs batching."""

import math

import numpy as np
import pytest
import torch

import torchrbd.sim as gs
from torchrbd.errors import FrameNotFoundError, InputError, JointNotFoundError, ModelError, SimulationError

ROBOT = """<?xml version="1.0"?>
<robot name="robot">
  <link name="base">
    <inertial><origin xyz="0 0 0.05"/><mass value="2.0"/>
      <inertia ixx="0.02" ixy="0" ixz="0" iyy="0.03" iyz="0" izz="0.04"/></inertial>
    <collision><geometry><box size="0.3 0.2 0.1"/></geometry></collision>
  </link>
  <link name="arm">
    <inertial><origin xyz="0.2 0 0"/><mass value="0.5"/>
      <inertia ixx="0.001" ixy="0" ixz="0" iyy="0.004" iyz="0" izz="0.004"/></inertial>
  </link>
  <link name="hand">
    <inertial><origin xyz="0 0 -0.1"/><mass value="0.3"/>
      <inertia ixx="0.002" ixy="0" ixz="0" iyy="0.002" iyz="0" izz="0.001"/></inertial>
  </link>
  <joint name="shoulder" type="revolute">
    <parent link="base"/><child link="arm"/><origin xyz="0.1 0 0.1" rpy="0 0 0"/>
    <axis xyz="0 1 0"/><limit lower="-1.0" upper="1.0" effort="5" velocity="10"/>
    <dynamics damping="0.2"/>
  </joint>
  <joint name="wrist" type="continuous">
    <parent link="arm"/><child link="hand"/><origin xyz="0.4 0 0" rpy="0 0 0.3"/>
    <axis xyz="1 0 0"/>
  </joint>
</robot>
"""


pytestmark = pytest.mark.usefixtures("sim_float64_one_thread")


@pytest.fixture
def urdf(tmp_path):
    f = tmp_path / "robot.urdf"
    f.write_text(ROBOT)
    return str(f)


def _scene(urdf=None, n_envs=0, requires_grad=False, integrator=None, fixed=False, **rigid):
    scene = gs.Scene(
        sim_options=gs.options.SimOptions(dt=0.01, requires_grad=requires_grad),
        rigid_options=gs.options.RigidOptions(integrator=integrator or gs.integrator.Euler, **rigid),
    )
    robot = scene.add_entity(gs.morphs.URDF(file=urdf, pos=(0.1, 0.2, 0.3), euler=(0, 0, 90), fixed=fixed)) if urdf else None
    return scene, robot


# ------------------------------------------------------------------ errors
def test_errors_name_what_was_expected(urdf, tmp_path):
    scene, robot = _scene(urdf)
    with pytest.raises(SimulationError, match="build"):
        scene.step()
    with pytest.raises(SimulationError, match="built scene"):
        robot.get_qpos()
    scene.build()
    with pytest.raises(SimulationError, match="after scene.build"):
        scene.add_entity(gs.morphs.Sphere(radius=0.1))
    with pytest.raises(SimulationError, match="twice"):
        scene.build()
    with pytest.raises(InputError, match=r"shape \(3,\), expected \(8,\)"):
        robot.set_dofs_velocity([1.0, 2.0, 3.0])
    with pytest.raises(InputError, match=r"expected \(2,\)"):
        robot.set_dofs_velocity([1.0, 2.0, 3.0], dofs_idx_local=[6, 7])
    with pytest.raises(InputError, match=r"out of range.*\[0, 8\)"):
        robot.set_dofs_kp([1.0], dofs_idx_local=[8])
    with pytest.raises(InputError, match="n_envs=0"):
        robot.get_qpos(envs_idx=[0])
    with pytest.raises(InputError, match=r"expected \(1, 3, 3\)"):
        robot.set_links_inertia(torch.zeros(3), links_idx_local=[0])
    with pytest.raises(FrameNotFoundError, match="did you mean 'hand'"):
        robot.get_link("hnd")
    with pytest.raises(JointNotFoundError, match="shoulder"):
        robot.get_joint("shoulderr")
    with pytest.raises(ModelError, match=r"URDF file not found.*\.urdf"):
        gs.morphs.URDF(file=str(tmp_path / "missing.urdf"))
    with pytest.raises(ModelError, match="MJCF file not found"):
        gs.morphs.MJCF(file=str(tmp_path / "missing.xml"))
    with pytest.raises(InputError, match="not both"):
        gs.morphs.Box(euler=(0, 0, 1), quat=(1, 0, 0, 0))
    with pytest.raises(InputError, match="add_entity expects"):
        gs.Scene().add_entity("robot.urdf")
    with pytest.raises(InputError, match="integrator"):
        gs.options.RigidOptions(integrator="Verlet")
    with pytest.raises(InputError, match="dt"):
        gs.options.SimOptions(dt=0)


# ------------------------------------------------------------------ layout
def test_floating_base_layout_and_getters(urdf):
    scene, robot = _scene(urdf)
    scene.build()
    assert (robot.n_dofs, robot.n_qs, robot.n_links) == (8, 9, 3)
    assert robot.get_joint("wrist").dof_idx_local == 7 and robot.get_joint("wrist").q_idx_local == 8
    assert robot.get_joint("root_joint").dofs_idx_local == list(range(6))
    qpos = robot.get_qpos()
    c, s = math.cos(math.pi / 4), math.sin(math.pi / 4)  # yaw 90 deg
    np.testing.assert_allclose(qpos.numpy(), [0.1, 0.2, 0.3, c, 0, 0, s, 0, 0], atol=1e-12)
    np.testing.assert_allclose(robot.get_pos().numpy(), [0.1, 0.2, 0.3])
    np.testing.assert_allclose(robot.get_quat().numpy(), [c, 0, 0, s], atol=1e-12)
    np.testing.assert_allclose(robot.get_dofs_position().numpy()[3:6], [0, 0, math.pi / 2], atol=1e-12)
    # model properties
    np.testing.assert_allclose(robot.get_dofs_damping().numpy(), [0] * 6 + [0.2, 0])
    lo, hi = robot.get_dofs_limit()
    assert hi[6] == 1.0 and lo[6] == -1.0 and math.isinf(hi[7]) and math.isinf(hi[0])
    flo, fhi = robot.get_dofs_force_range()
    assert fhi[6] == 5.0 and math.isinf(fhi[7])  # URDF effort; a missing/0 effort is unbounded
    np.testing.assert_allclose(robot.get_links_inertial_mass().numpy(), [2.0, 0.5, 0.3])
    # velocities: [v of base origin, w (world), qd]; link velocities follow
    v = torch.tensor([0.3, -0.2, 0.1, 0.5, -1.0, 2.0, 0.7, -0.4], dtype=torch.float64)
    robot.set_dofs_velocity(v)
    np.testing.assert_allclose(robot.get_vel().numpy(), v[:3].numpy())
    np.testing.assert_allclose(robot.get_ang().numpy(), v[3:6].numpy())
    J = robot.get_jacobian("hand")
    assert J.shape == (6, 8)
    np.testing.assert_allclose(robot.get_links_vel()[2].numpy(), (J @ v)[:3].numpy(), atol=1e-12)
    np.testing.assert_allclose(robot.get_links_ang()[2].numpy(), (J @ v)[3:].numpy(), atol=1e-12)
    M = robot.get_mass_mat()
    assert M.shape == (8, 8) and torch.allclose(M, M.T) and bool((torch.linalg.eigvalsh(M) > 0).all())
    np.testing.assert_allclose(M[:3, :3].numpy(), 2.8 * np.eye(3), atol=1e-12)  # total mass
    # quaternion getters are unit and consistent with the positions
    quat = robot.get_links_quat()
    np.testing.assert_allclose(quat.norm(dim=-1).numpy(), 1.0, atol=1e-12)
    np.testing.assert_allclose(quat[0].numpy(), robot.get_quat().numpy(), atol=1e-12)


def test_link_velocity_is_the_derivative_of_link_position(urdf):
    scene, robot = _scene(urdf, integrator=gs.integrator.RK4, enable_joint_limit=False)
    scene.build()
    rng = np.random.default_rng(1)
    robot.set_dofs_velocity(rng.normal(size=8))
    robot.set_dofs_position([0.2, 0.4], dofs_idx_local=[6, 7], zero_velocity=False)
    scene.sim_options.dt = 1e-5
    p0, v0 = robot.get_links_pos(), robot.get_links_vel()
    scene.step()
    np.testing.assert_allclose(((robot.get_links_pos() - p0) / 1e-5).numpy(), v0.numpy(), atol=1e-3)


def test_setters_write_the_selected_entries(urdf):
    scene, robot = _scene(urdf)
    scene.build()
    robot.set_dofs_velocity([1.0, 2.0, 3.0, 0.1, 0.2, 0.3, 4.0, 5.0])
    robot.set_dofs_position([0.5], dofs_idx_local=[7], zero_velocity=False)
    assert robot.get_qpos()[8] == 0.5 and robot.get_dofs_velocity()[7] == 5.0
    robot.set_dofs_position([0.25], dofs_idx_local=[6])  # zero_velocity=True by default
    assert robot.get_dofs_position(dofs_idx_local=[6, 7]).tolist() == [0.25, 0.5]
    assert robot.get_dofs_velocity().abs().sum() == 0
    rot = torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64)
    robot.set_dofs_position(rot, dofs_idx_local=[3, 4, 5])
    np.testing.assert_allclose(robot.get_dofs_position()[3:6].numpy(), rot.numpy(), atol=1e-12)
    assert robot.get_qpos()[8] == 0.5
    robot.set_pos([1.0, 2.0, 3.0])
    robot.set_quat([0.0, 1.0, 0.0, 0.0])
    np.testing.assert_allclose(robot.get_qpos()[:7].numpy(), [1, 2, 3, 0, 1, 0, 0])
    robot.set_pos([0.0, 0.0, 1.0], relative=True)
    assert robot.get_pos()[2] == 4.0
    robot.set_qpos([0.3, 0.4], qs_idx_local=[7, 8])
    assert robot.get_dofs_position(dofs_idx_local=[6, 7]).tolist() == [0.3, 0.4]
    robot.set_dofs_kp([1.0, 2.0], dofs_idx_local=[6, 7])
    robot.set_dofs_kv(3.0 * torch.ones(8))
    assert robot.get_dofs_kp()[6:].tolist() == [1.0, 2.0] and robot.get_dofs_kp()[0] == 100.0
    assert robot.get_dofs_kv().tolist() == [3.0] * 8
    # a fixed base can be moved too
    scene_f, fixed = _scene(urdf, fixed=True)
    scene_f.build()
    assert fixed.n_dofs == 2 and fixed.n_qs == 2
    fixed.set_pos([0.0, 0.0, 2.0])
    assert fixed.get_pos().tolist() == [0.0, 0.0, 2.0] and fixed.get_vel().abs().sum() == 0
    assert fixed.get_jacobian("hand").shape == (6, 2) and fixed.get_mass_mat().shape == (2, 2)


def test_primitive_morphs_and_plane():
    scene = gs.Scene(sim_options=gs.options.SimOptions(dt=0.01))
    mat = gs.materials.Rigid(rho=500.0, friction=0.7)
    box = scene.add_entity(gs.morphs.Box(size=(0.2, 0.4, 0.6), pos=(0, 0, 2)), material=mat)
    sph = scene.add_entity(gs.morphs.Sphere(radius=0.1, pos=(1, 0, 2)))
    cyl = scene.add_entity(gs.morphs.Cylinder(radius=0.1, height=0.5, pos=(2, 0, 2)))
    cap = scene.add_entity(gs.morphs.Capsule(radius=0.1, height=0.3, pos=(3, 0, 2)))
    plane = scene.add_entity(gs.morphs.Plane())
    scene.build()
    m_box = 500 * 0.2 * 0.4 * 0.6
    assert box.get_mass().item() == pytest.approx(m_box)
    assert sph.get_mass().item() == pytest.approx(1000 * 4 / 3 * math.pi * 0.1**3)
    assert cyl.get_mass().item() == pytest.approx(1000 * math.pi * 0.01 * 0.5)
    assert cap.get_mass().item() == pytest.approx(1000 * (math.pi * 0.01 * 0.3 + 4 / 3 * math.pi * 0.001))
    M = box.get_mass_mat()
    np.testing.assert_allclose(torch.diagonal(M)[3:].numpy(), m_box / 12 * np.array([0.16 + 0.36, 0.04 + 0.36, 0.04 + 0.16]))
    geom = box._kd.model.geoms[0]
    assert geom.friction == 0.7 and geom.size == pytest.approx((0.1, 0.2, 0.3))
    assert plane.n_dofs == 0 and plane.get_pos().tolist() == [0, 0, 0]
    assert all(e.n_dofs == 6 and e.n_qs == 7 for e in (box, sph, cyl, cap))
    # free fall: z(t) = z0 - g t^2 / 2 exactly under semi-implicit Euler at t = k dt: z0 - g dt^2 k(k+1)/2
    for _ in range(10):
        scene.step()
    assert sph.get_pos()[2].item() == pytest.approx(2 - 9.81 * 0.01**2 * 55, abs=1e-12)
    assert scene.t == 10 and scene.cur_t == pytest.approx(0.1)
    assert plane.get_pos().tolist() == [0, 0, 0]


# ------------------------------------------------------------------ control
def test_control_modes_follow_genesis_semantics(urdf):
    scene, robot = _scene(urdf, fixed=True, enable_joint_limit=False)
    scene.build()
    robot.set_dofs_position([0.3, -0.2])
    robot.set_dofs_velocity([0.5, 1.0])
    robot.set_dofs_kp([10.0, 20.0])
    robot.set_dofs_kv([1.0, 2.0])
    robot.control_dofs_position([0.5, 0.1])
    expect = torch.tensor([10 * 0.2 - 0.5, 20 * 0.3 - 2 * 1.0], dtype=torch.float64)
    expect[0] = expect[0].clamp(-5, 5)
    torch.testing.assert_close(robot.get_dofs_control_force().as_subclass(torch.Tensor), expect)
    robot.control_dofs_velocity([2.0], dofs_idx_local=[1])  # mixes modes per dof
    torch.testing.assert_close(robot.get_dofs_control_force()[1].item(), 2.0 * (2.0 - 1.0))
    robot.set_dofs_force_range([-0.5, -0.5], [0.5, 0.5])
    robot.control_dofs_force([3.0, -3.0])
    assert robot.get_dofs_control_force().tolist() == [0.5, -0.5]
    # position control converges (gravity compensated by a stiff gain)
    robot.set_dofs_force_range([-1e3, -1e3], [1e3, 1e3])
    robot.set_dofs_kp([400.0, 400.0])
    robot.set_dofs_kv([40.0, 40.0])
    robot.control_dofs_position([0.4, -0.6])
    for _ in range(150):
        scene.step()
    np.testing.assert_allclose(robot.get_dofs_position().numpy(), [0.4, -0.6], atol=0.03)


def test_joint_limits_hold_and_can_be_disabled(urdf):
    results = {}
    for enabled in (True, False):
        scene, robot = _scene(urdf, fixed=True, enable_joint_limit=enabled)
        scene.build()
        robot.control_dofs_force([4.0, 0.0])  # pushes the shoulder past its upper limit of 1 rad
        qs = []
        for _ in range(150):
            scene.step()
            qs.append(robot.get_dofs_position()[0].item())
        results[enabled] = qs
    assert max(results[False]) > 1.5
    assert max(results[True]) < 1.05 and results[True][-1] > 0.95


def test_multiple_entities_are_independent_without_contacts(urdf):
    scene, robot = _scene(urdf, fixed=True)
    ball = scene.add_entity(gs.morphs.Sphere(radius=0.1, pos=(0, 0, 1)))
    scene.build()
    alone, robot_alone = _scene(urdf, fixed=True)
    alone.build()
    for s, r in ((scene, robot), (alone, robot_alone)):
        r.control_dofs_force([0.3, -0.2])
        for _ in range(5):
            s.step()
    torch.testing.assert_close(robot.get_qpos().as_subclass(torch.Tensor), robot_alone.get_qpos().as_subclass(torch.Tensor))
    assert ball.get_pos()[2] < 1.0


# ------------------------------------------------------------------ reset / batching
def test_reset_restores_the_build_state_and_keeps_gains(urdf):
    scene, robot = _scene(urdf)
    scene.build()
    q0 = robot.get_qpos()
    robot.set_dofs_kp(torch.full((8,), 7.0))
    robot.control_dofs_force(torch.ones(8))
    for _ in range(3):
        scene.step()
    state = scene.get_state()
    snap = robot.get_qpos()
    scene.step()
    scene.reset()
    assert scene.t == 0 and torch.equal(robot.get_qpos(), q0)
    assert robot.get_dofs_control_force().abs().sum() == 0  # controls cleared
    assert robot.get_dofs_kp()[0] == 7.0  # gains kept
    scene.reset(state)
    assert scene.t == 3 and torch.equal(robot.get_qpos(), snap)


def test_n_envs_batching_matches_single_env_runs(urdf):
    rng = np.random.default_rng(7)
    v0 = rng.normal(size=(3, 8))
    u = rng.normal(size=(3, 8)) * 0.5
    kp = rng.uniform(0.5, 2.0, size=(3, 2))  # soft gains: RK4 treats PD gains explicitly
    target = rng.normal(size=(3, 2)) * 0.3
    for integ in (gs.integrator.Euler, gs.integrator.RK4):
        scene, robot = _scene(urdf, n_envs=3, integrator=integ)
        scene.build(n_envs=3)
        assert robot.get_qpos().shape == (3, 9)
        robot.set_dofs_velocity(v0)
        robot.control_dofs_force(u[:, :6], dofs_idx_local=range(6))
        robot.set_dofs_kp(kp, dofs_idx_local=[6, 7])
        robot.set_dofs_kv(0.02 * torch.ones(3, 2), dofs_idx_local=[6, 7])
        robot.control_dofs_position(target, dofs_idx_local=[6, 7])
        for _ in range(8):
            scene.step()
        for k in range(3):
            single, r = _scene(urdf, integrator=integ)
            single.build()
            r.set_dofs_velocity(v0[k])
            r.control_dofs_force(u[k, :6], dofs_idx_local=range(6))
            r.set_dofs_kp(kp[k], dofs_idx_local=[6, 7])
            r.set_dofs_kv(0.02 * torch.ones(2), dofs_idx_local=[6, 7])
            r.control_dofs_position(target[k], dofs_idx_local=[6, 7])
            for _ in range(8):
                single.step()
            assert torch.isfinite(r.get_qpos()).all()
            np.testing.assert_allclose(robot.get_qpos(envs_idx=[k])[0].numpy(), r.get_qpos().numpy(), atol=1e-12)
            np.testing.assert_allclose(robot.get_dofs_velocity()[k].numpy(), r.get_dofs_velocity().numpy(), atol=1e-12)
    # env-selective setters touch only the chosen envs
    before = robot.get_qpos()
    robot.set_dofs_position([[0.1, 0.2]], dofs_idx_local=[6, 7], envs_idx=[1])
    after = robot.get_qpos()
    assert torch.equal(after[0], before[0]) and torch.equal(after[2], before[2])
    assert after[1, 7:].tolist() == [0.1, 0.2]
    # a value without the env dimension is broadcast to the selected envs
    robot.set_dofs_velocity(torch.ones(8), envs_idx=[0, 2])
    assert robot.get_dofs_velocity()[[0, 2]].eq(1).all() and robot.get_dofs_velocity()[1].abs().sum() == 0


# ------------------------------------------------------------------ the seed's example
SEED = """
import torchrbd.sim as gs
import torch

gs.init()

scene = gs.Scene(
    sim_options=gs.options.SimOptions(
        requires_grad=True,
    ),
)

robot = scene.add_entity(gs.morphs.URDF(file="robot.urdf"))
scene.build()

# These return genesis.grad.Tensor
pos = robot.get_pos()       # Genesis World Tensor
vel = robot.get_vel()       # Genesis World Tensor
qpos = robot.get_qpos()     # Genesis World Tensor

# Forward pass
scene.step()
pos = robot.get_pos()

# Compute loss
target = torch.tensor([1.0, 0.0, 0.5], device=gs.device)
loss = (pos - target).pow(2).sum()

# Backward pass - flows through simulation
loss.backward()

# Detach and remove scene tracking
pos_detached = pos.detach(sceneless=True)

# Or explicitly
pos_sceneless = pos.sceneless()

# Check if tensor is associated with a scene
if pos.scene is not None:
    print(f"Tensor from scene: {pos.scene.uid}")
"""


def test_the_seed_example_runs_with_only_the_import_changed(tmp_path, monkeypatch, capsys):
    (tmp_path / "robot.urdf").write_text(ROBOT)
    monkeypatch.chdir(tmp_path)
    namespace = {}
    try:
        exec(compile(SEED, "seed_example.py", "exec"), namespace)
    finally:
        gs.init(backend=gs.cpu, precision="64")
    pos, scene = namespace["pos"], namespace["scene"]
    assert isinstance(pos, gs.Tensor) and pos.scene is scene and pos.dtype == torch.float32
    for name in ("vel", "qpos", "loss"):
        assert isinstance(namespace[name], gs.Tensor)
    assert namespace["pos_detached"].scene is None and not namespace["pos_detached"].requires_grad
    assert namespace["pos_sceneless"].scene is None
    assert f"Tensor from scene: {scene.uid}" in capsys.readouterr().out
    assert pos[2] < 0  # fell under gravity for one step


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_backend_matches_cpu(urdf):
    results = []
    for backend in (gs.cpu, gs.gpu):
        gs.init(backend=backend, precision="64")
        try:
            scene, robot = _scene(urdf, n_envs=2, requires_grad=True)
            scene.build(n_envs=2)
            tau = torch.full((4, 2, 8), 0.2, dtype=torch.float64, device=gs.device, requires_grad=True)
            robot.set_dofs_velocity(torch.ones(2, 8), envs_idx=[0, 1])
            robot.set_dofs_kp([5.0], dofs_idx_local=[6], envs_idx=[1])
            for t in range(2):
                robot.control_dofs_force(tau[t])
                scene.step()
            qpos, _ = scene.rollout(tau[2:], checkpoint_every=1)
            loss = qpos.pow(2).sum() + robot.get_links_pos().sum()
            loss.backward()
            assert robot.get_qpos().device.type == gs.device.type
            results.append((robot.get_qpos().detach().cpu(), tau.grad.cpu()))
        finally:
            gs.init(backend=gs.cpu, precision="64")
    for a, b in zip(*results):
        torch.testing.assert_close(a.as_subclass(torch.Tensor), b.as_subclass(torch.Tensor))


def test_morph_euler_is_extrinsic_xyz_in_degrees():
    """euler=(a, b, c) in degrees means R = Rz(c) Ry(b) Rx(a), as in Genesis."""
    a, b, c = (math.radians(x) for x in (30.0, -50.0, 120.0))
    Rx = np.array([[1, 0, 0], [0, math.cos(a), -math.sin(a)], [0, math.sin(a), math.cos(a)]])
    Ry = np.array([[math.cos(b), 0, math.sin(b)], [0, 1, 0], [-math.sin(b), 0, math.cos(b)]])
    Rz = np.array([[math.cos(c), -math.sin(c), 0], [math.sin(c), math.cos(c), 0], [0, 0, 1]])
    R = Rz @ Ry @ Rx
    scene = gs.Scene()
    box = scene.add_entity(gs.morphs.Box(size=(0.1, 0.2, 0.3), pos=(0, 0, 1), euler=(30.0, -50.0, 120.0)))
    scene.build()
    w, x, y, z = box.get_quat().detach().numpy()
    from_quat = np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])
    np.testing.assert_allclose(from_quat, R, atol=1e-12)
