"""Smooth dynamics against MuJoCo: RK4 and (implicit-damping) Euler trajectories of
MJCF robots with contacts and limits off, and energy conservation under RK4."""

import math

import numpy as np
import pytest
import torch

import torchrbd.sim as gs

mujoco = pytest.importorskip("mujoco")

OPTION = '<option integrator="{integrator}" timestep="0.002" gravity="0 0 -9.81"><flag contact="disable" limit="disable"/></option>'

# fixed base: tilted hinge axes, joint anchors off the body origin, a slide joint with
# a reference position, two joints in one body, armature, damping and a spring
ARM = """
<mujoco model="arm">
  {option}
  <worldbody>
    <body name="upper" pos="0 0 0.5" quat="0.9 0.1 0.3 0.2">
      <joint name="shoulder" axis="0.3 1 0.2" pos="0.05 -0.1 0.2" armature="0.1" damping="0.5" stiffness="2"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04" mass="1.5"/>
      <body name="fore" pos="0.3 0 0" euler="0.3 -0.2 0.1">
        <joint name="elbow" axis="0 0 1" pos="0.02 0.01 0" armature="0.05" damping="0.1"/>
        <geom type="box" size="0.1 0.03 0.02" pos="0.1 0 0" mass="1.0"/>
        <body name="hand" pos="0.2 0 0">
          <joint name="slider" type="slide" axis="1 0 1" pos="0.1 0 0" ref="0.02" damping="0.3"/>
          <joint name="wrist" axis="0 1 0"/>
          <geom type="sphere" size="0.05" pos="0.02 0.03 0.01" mass="0.5"/>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>
"""

# floating base: free joint with an initial pose, hinges and a slide below it
FLOATER = """
<mujoco model="floater">
  {option}
  <worldbody>
    <body name="torso" pos="0.1 -0.2 1.0" quat="0.8 0.2 -0.3 0.1">
      <freejoint name="root"/>
      <geom type="box" size="0.2 0.1 0.05" mass="3"/>
      <body name="leg" pos="0.1 0.05 -0.05" euler="0.2 0.1 0">
        <joint name="hip" axis="1 0.2 0" pos="0 0 0.02" damping="0.2" armature="0.02"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.03" mass="0.8"/>
        <body name="shin" pos="0 0 -0.3">
          <joint name="knee" axis="0 1 0" stiffness="1.5" range="-0.1 0.1"/>
          <geom type="capsule" fromto="0 0 0 0.05 0 -0.3" size="0.025" mass="0.5"/>
        </body>
      </body>
      <body name="arm" pos="-0.15 0 0.05">
        <joint name="sh" type="slide" axis="0 0 1" damping="1"/>
        <geom type="sphere" size="0.05" mass="0.4"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""

N_ENVS = 2  # random initial velocities simulated side by side
STEPS = 200  # 0.4 s at 2 ms


pytestmark = pytest.mark.usefixtures("sim_float64_one_thread")


def _quat_mat(q):
    R = np.zeros(9)
    mujoco.mju_quat2Mat(R, q)
    return R.reshape(3, 3)


def _compare(tmp_path, xml, integrator, steps=STEPS, seed=0):
    """Max |qpos error| and |qvel error| of torchrbd.sim against MuJoCo, per env."""
    f = tmp_path / "model.xml"
    f.write_text(xml.format(option=OPTION.format(integrator=integrator)))
    m = mujoco.MjModel.from_xml_path(str(f))
    datas = [mujoco.MjData(m) for _ in range(N_ENVS)]
    rng = np.random.default_rng(seed)
    scene = gs.Scene(
        sim_options=gs.options.SimOptions(dt=0.002, gravity=(0, 0, -9.81)),
        rigid_options=gs.options.RigidOptions(
            integrator=getattr(gs.integrator, integrator), enable_joint_limit=False, enable_collision=False
        ),
    )
    ent = scene.add_entity(gs.morphs.MJCF(file=str(f)))
    scene.build(n_envs=N_ENVS)
    assert ent.n_dofs == m.nv and ent.n_qs == m.nq
    free = m.jnt_type[0] == mujoco.mjtJoint.mjJNT_FREE

    def to_sim_vel(d):  # MuJoCo's free joint: [world linear, LOCAL angular]
        v = d.qvel.copy()
        if free:
            v[3:6] = _quat_mat(d.qpos[3:7]) @ v[3:6]
        return v

    for d in datas:
        d.qvel[:] = rng.normal(size=m.nv)
    np.testing.assert_allclose(ent.get_qpos().numpy(), np.stack([d.qpos for d in datas]), atol=1e-12)
    ent.set_dofs_velocity(np.stack([to_sim_vel(d) for d in datas]))
    err_q = err_v = 0.0
    for _ in range(steps):
        for d in datas:
            mujoco.mj_step(m, d)
        scene.step()
        qpos, vel = ent.get_qpos().numpy(), ent.get_dofs_velocity().numpy()
        for k, d in enumerate(datas):
            q_mj = d.qpos.copy()
            if free and np.dot(q_mj[3:7], qpos[k, 3:7]) < 0:
                q_mj[3:7] *= -1
            err_q = max(err_q, np.abs(qpos[k] - q_mj).max())
            err_v = max(err_v, np.abs(vel[k] - to_sim_vel(d)).max())
    return err_q, err_v


@pytest.mark.parametrize("xml", [ARM, FLOATER], ids=["fixed_arm", "floating"])
def test_rk4_matches_mujoco_rk4(tmp_path, xml):
    err_q, err_v = _compare(tmp_path, xml, "RK4")
    assert err_q < 1e-8 and err_v < 1e-8, (err_q, err_v)  # the spec asks 1e-5; observed ~1e-13


@pytest.mark.parametrize("xml", [ARM, FLOATER], ids=["fixed_arm", "floating"])
def test_euler_with_implicit_damping_matches_mujoco_euler(tmp_path, xml):
    err_q, err_v = _compare(tmp_path, xml, "Euler", steps=100)
    assert err_q < 1e-8 and err_v < 1e-8, (err_q, err_v)


PENDULUM = """
<mujoco model="pendulum">
  <worldbody>
    <body name="bob">
      <joint name="hinge" axis="0 1 0"/>
      <geom type="sphere" size="0.05" pos="0 0 -1" mass="1"/>
    </body>
  </worldbody>
</mujoco>
"""


def test_undamped_pendulum_conserves_energy_under_rk4(tmp_path):
    f = tmp_path / "pendulum.xml"
    f.write_text(PENDULUM)
    dt, seconds = 0.01, 10.0
    scene = gs.Scene(
        sim_options=gs.options.SimOptions(dt=dt, gravity=(0, 0, -9.81)),
        rigid_options=gs.options.RigidOptions(integrator=gs.integrator.RK4),
    )
    pend = scene.add_entity(gs.morphs.MJCF(file=str(f)))
    scene.build(n_envs=3)  # three amplitudes at once
    pend.set_dofs_position([[0.5], [1.5], [2.5]])

    def energy():  # 1 kg bob 1 m below the hinge; M includes the sphere's own inertia
        q, qd = pend.get_dofs_position()[:, 0], pend.get_dofs_velocity()[:, 0]
        return 0.5 * pend.get_mass_mat()[:, 0, 0] * qd**2 - 9.81 * torch.cos(q)

    e0 = energy()
    for _ in range(round(seconds / dt)):
        scene.step()
    drift = (energy() - e0).abs().max().item()
    assert drift < 1e-6, drift
    assert not math.isclose(pend.get_dofs_position()[0, 0].item(), 0.5)  # it did swing
