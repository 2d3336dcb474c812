"""MJCF / MjModel -> Model: structure, parameters, errors, and placements against MuJoCo."""

import numpy as np
import pytest
import torch

mujoco = pytest.importorskip("mujoco")

from torchrbd.errors import JointNotFoundError, ModelError  # noqa: E402
from torchrbd.model import GeomType, JointType, from_mujoco_model, load_mjcf  # noqa: E402
from torchrbd.model.mjcf import mujoco_contact_excludes  # noqa: E402

ARM = """
<mujoco model="arm">
  <compiler angle="radian"/>
  <option gravity="0 0 -9.5"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="upper" pos="0 0 0.5" quat="0.9 0.1 0.3 0.2">
      <joint name="shoulder" axis="0.3 1 0.2" pos="0.05 -0.1 0.2" range="-1.5 1.5" armature="0.1"
             damping="0.5" stiffness="2" ref="0.4"/>
      <geom name="upper_geom" type="capsule" fromto="0 0 0 0.3 0 0" size="0.04" mass="1.5"/>
      <body name="fore" pos="0.3 0 0" euler="0.3 -0.2 0.1">
        <joint name="elbow" axis="0 0 1" pos="0.02 0.01 0" armature="0.05"/>
        <geom type="box" size="0.1 0.03 0.02" pos="0.1 0 0" mass="1.0"/>
        <body name="hand" pos="0.2 0 0">
          <joint name="slider" type="slide" axis="1 0 1" pos="0.1 0 0" range="0 0.1" ref="0.02"/>
          <geom type="sphere" size="0.05" pos="0.02 0.03 0.01" mass="0.5"/>
          <site name="tip" pos="0.05 0 0.01" euler="0.1 0.2 0.3"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor joint="shoulder" gear="3" ctrlrange="-2 1"/>
    <motor joint="elbow" forcerange="-4 4" forcelimited="true"/>
  </actuator>
</mujoco>
"""

TWO_HINGES = """
<mujoco model="two_hinges">
  <compiler angle="radian"/>
  <worldbody>
    <body name="b" pos="0.1 0.2 0.3" euler="0.2 0.1 -0.3">
      <joint name="j0" axis="1 0 0" pos="0.1 0 0.2"/>
      <joint name="j1" axis="0 1 0.5" pos="-0.2 0.3 0" ref="0.3"/>
      <geom type="cylinder" size="0.02 0.1" pos="0 0 -0.1" mass="0.7"/>
      <site name="s" pos="0.1 0.1 0.1"/>
    </body>
  </worldbody>
</mujoco>
"""

FLOATING = """
<mujoco model="walker">
  <compiler angle="radian"/>
  <asset>
    <mesh name="tet" vertex="1 1 1  2 1 1  1 2 1  1 1 2" scale="0.1 0.1 0.1"/>
  </asset>
  <worldbody>
    <geom name="floor" type="plane" size="0 0 0.1"/>
    <body name="table" pos="2 0 0">
      <geom name="table_top" type="box" size="0.5 0.5 0.02" pos="0 0 0.8"/>
    </body>
    <body name="torso" pos="0 0 1">
      <freejoint name="root"/>
      <geom type="box" size="0.2 0.1 0.05" mass="5"/>
      <site name="imu" pos="0.05 0 0.02"/>
      <body name="thigh" pos="0.1 0 -0.05">
        <joint name="hip_y" axis="0 1 0" pos="0 0 0.05"/>
        <joint name="hip_x" axis="1 0 0" pos="0 0.02 0.05"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.03" mass="1"/>
        <body name="shin" pos="0 0 -0.3">
          <joint name="knee" axis="0 1 0"/>
          <geom name="shin_mesh" type="mesh" mesh="tet" pos="0 0 -0.1" mass="0.5"/>
        </body>
      </body>
      <body name="arm" pos="-0.1 0 0.05">
        <joint name="shoulder" axis="0 1 0"/>
        <geom type="sphere" size="0.05" pos="0 0 -0.1" mass="0.3"/>
      </body>
    </body>
  </worldbody>
  <contact>
    <exclude body1="torso" body2="shin"/>
    <exclude body1="table" body2="arm"/>
  </contact>
</mujoco>
"""

TWO_TOP = """
<mujoco model="two_top">
  <worldbody>
    <body name="left" pos="0 0.5 0">
      <joint name="l" axis="0 0 1"/>
      <geom type="sphere" size="0.1" pos="0.1 0 0" mass="1"/>
    </body>
    <body name="post" pos="1 0 0">
      <geom type="box" size="0.1 0.1 0.1" mass="2"/>
      <body name="flag" pos="0 0 0.5"><joint name="f" type="slide"/><geom size="0.05" mass="0.1"/></body>
    </body>
  </worldbody>
</mujoco>
"""


def compile_(xml):
    return mujoco.MjModel.from_xml_string(xml)


# ------------------------------------------------------------------ reference FK
def _rodrigues(axis, angle):
    K = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


def _link_poses(model, world_H_base, q):
    """({link: world_H_link}, [world_H_body]), by a plain loop over the model's placements."""
    body_T = []
    for i in range(model.nbody):
        if i == 0:
            body_T.append(world_H_base)
            continue
        X = np.eye(4)
        X[:3, :3], X[:3, 3] = model.body_rot[i].numpy(), model.body_pos[i].numpy()
        M, qi, axis = np.eye(4), q[model.body_dof[i]], model.joint_axis[i].numpy()
        if model.joint_type[i] == JointType.REVOLUTE:
            M[:3, :3] = _rodrigues(axis, qi)
        else:
            M[:3, 3] = axis * qi
        body_T.append(body_T[model.body_parent[i]] @ X @ M)
    out = {}
    for k, name in enumerate(model.link_names):
        L = np.eye(4)
        L[:3, :3], L[:3, 3] = model.link_rot[k].numpy(), model.link_pos[k].numpy()
        out[name] = body_T[model.link_body[k]] @ L
    return out, body_T


def _random_state(m, model, rng):
    """(mujoco data after mj_kinematics, world_H_base, q in model.joint_names order)."""
    d = mujoco.MjData(m)
    d.qpos[:] = rng.normal(size=m.nq)
    world_H_base = np.eye(4)
    for j in range(m.njnt):
        a = m.jnt_qposadr[j]
        if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
            d.qpos[a + 3 : a + 7] /= np.linalg.norm(d.qpos[a + 3 : a + 7])
            mat = np.zeros(9)
            mujoco.mju_quat2Mat(mat, d.qpos[a + 3 : a + 7])
            world_H_base[:3, :3], world_H_base[:3, 3] = mat.reshape(3, 3), d.qpos[a : a + 3]
        elif mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j) not in model.joint_names:
            d.qpos[a] = 0.0  # locked joints sit at qpos = 0
    mujoco.mj_kinematics(m, d)
    q = np.array([d.qpos[m.jnt_qposadr[m.joint(n).id]] for n in model.joint_names])
    return d, world_H_base, q


@pytest.mark.parametrize("xml", [ARM, TWO_HINGES, FLOATING, TWO_TOP])
@pytest.mark.parametrize("joints", [None, "subset"])
def test_placements_match_mujoco(xml, joints):
    m = compile_(xml)
    names = None
    if joints == "subset":
        movable = from_mujoco_model(m).joint_names
        names = list(reversed(movable[::2]))
    model = from_mujoco_model(m, names)
    rng = np.random.default_rng(0)
    for _ in range(5):
        d, world_H_base, q = _random_state(m, model, rng)
        poses, body_poses = _link_poses(model, world_H_base, q)
        for b in range(1, m.nbody):
            name = m.body(b).name
            if name not in poses:  # static scenery of a floating model
                assert model.floating and name == "table"
                continue
            np.testing.assert_allclose(poses[name][:3, 3], d.xpos[b], atol=1e-12)
            np.testing.assert_allclose(poses[name][:3, :3], d.xmat[b].reshape(3, 3), atol=1e-12)
        for s in range(m.nsite):
            body, R, p = model.frame(m.site(s).name)
            W = body_poses[body]
            np.testing.assert_allclose(W[:3, :3] @ p.numpy() + W[:3, 3], d.site_xpos[s], atol=1e-12)
            np.testing.assert_allclose(W[:3, :3] @ R.numpy(), d.site_xmat[s].reshape(3, 3), atol=1e-12)
        geom_id = {m.geom(g).name or f"{m.body(m.geom_bodyid[g]).name}_geom{g}": g for g in range(m.ngeom)}
        for geom in model.geoms:
            g = geom_id[geom.name]
            W = poses.get(geom.link, np.eye(4))  # "world" geoms of a floating model are in the world frame
            np.testing.assert_allclose(W[:3, :3] @ geom.pos.numpy() + W[:3, 3], d.geom_xpos[g], atol=1e-12)
            np.testing.assert_allclose(W[:3, :3] @ geom.rot.numpy(), d.geom_xmat[g].reshape(3, 3), atol=1e-12)
        # centre of mass of the model's links = MuJoCo's over the same bodies
        bodies = [b for b in range(1, m.nbody) if m.body(b).name in poses]
        mass = model.link_mass.numpy()
        com = np.array([poses[n][:3, :3] @ model.link_com[k].numpy() + poses[n][:3, 3]
                        for k, n in enumerate(model.link_names)])
        expected = (m.body_mass[bodies, None] * d.xipos[bodies]).sum(0) / m.body_mass[bodies].sum()
        np.testing.assert_allclose((mass[:, None] * com).sum(0) / mass.sum(), expected, atol=1e-12)


# ------------------------------------------------------------------ structure
def test_fixed_arm_structure():
    m = compile_(ARM)
    model = from_mujoco_model(m)
    assert not model.floating
    assert model.root == "world"
    assert model.link_names == ("world", "upper", "fore", "hand")
    assert model.body_names == ("world", "upper", "fore", "hand")
    assert model.joint_names == ("shoulder", "elbow", "slider")
    assert model.joint_type[1:] == (JointType.REVOLUTE, JointType.REVOLUTE, JointType.PRISMATIC)
    assert model.body_parent == (-1, 0, 1, 2)
    assert model.link_mass.dtype == torch.float64
    torch.testing.assert_close(model.link_mass, torch.tensor([0.0, 1.5, 1.0, 0.5], dtype=torch.float64))
    torch.testing.assert_close(model.gravity, torch.tensor([0.0, 0.0, -9.5], dtype=torch.float64))
    torch.testing.assert_close(model.armature, torch.tensor([0.1, 0.05, 0.0], dtype=torch.float64))
    torch.testing.assert_close(model.damping, torch.tensor([0.5, 0.0, 0.0], dtype=torch.float64))
    torch.testing.assert_close(model.stiffness, torch.tensor([2.0, 0.0, 0.0], dtype=torch.float64))
    inf = float("inf")
    torch.testing.assert_close(model.lower, torch.tensor([-1.5, -inf, 0.0], dtype=torch.float64))
    torch.testing.assert_close(model.upper, torch.tensor([1.5, inf, 0.1], dtype=torch.float64))
    # motor: |gear| * |gain| * max|ctrlrange| = 3 * 2; forcelimited: |gear| * max|forcerange| = 4
    torch.testing.assert_close(model.effort, torch.tensor([6.0, 4.0, inf], dtype=torch.float64))
    assert set(model.extra_frames) == {"tip"}
    assert model.link_names[model.extra_frames["tip"][0]] == "hand"
    assert {g.name: g.link for g in model.geoms}["floor"] == "world"  # world geoms on the world link


def test_two_hinges_make_a_virtual_link():
    model = from_mujoco_model(compile_(TWO_HINGES))
    assert model.link_names == ("world", "b__jnt0", "b")
    assert model.body_names == ("world", "b__jnt0", "b")
    assert model.joint_names == ("j0", "j1")
    assert model.link_mass[1] == 0 and model.link_mass[2] == pytest.approx(0.7)
    assert model.frame_names() == ["world", "b__jnt0", "b", "s"]


def test_locking_the_first_of_two_hinges_welds_the_virtual_link():
    model = from_mujoco_model(compile_(TWO_HINGES), ["j1"])
    assert model.body_names == ("world", "b")
    assert model.link_body == (0, 0, 1)


def test_floating_base_structure():
    m = compile_(FLOATING)
    model = from_mujoco_model(m)
    assert model.floating
    assert model.root == "torso"
    assert model.link_names == ("torso", "thigh__jnt0", "thigh", "shin", "arm")
    assert model.joint_names == ("hip_y", "hip_x", "knee", "shoulder")
    assert model.n == 4 and model.nbody == 5
    assert model.link_mass.sum().item() == pytest.approx(5 + 1 + 0.5 + 0.3)
    torch.testing.assert_close(model.gravity, torch.tensor([0.0, 0.0, -9.81], dtype=torch.float64))
    assert model.link_names[model.extra_frames["imu"][0]] == "torso"
    links = {g.name: g.link for g in model.geoms}
    assert links["floor"] == "world" and links["table_top"] == "world"  # static scenery
    assert "table" not in model.link_names
    assert mujoco_contact_excludes(m) == {("shin", "torso"), ("arm", "world")}


def test_two_top_level_bodies_hang_from_a_world_root():
    model = from_mujoco_model(compile_(TWO_TOP))
    assert not model.floating
    assert model.link_names == ("world", "left", "post", "flag")
    assert model.body_names == ("world", "left", "flag")
    assert model.link_body == (0, 1, 0, 2)  # post is welded to the world
    assert model.joint_names == ("l", "f")
    assert model.joint_type[1:] == (JointType.REVOLUTE, JointType.PRISMATIC)


def test_inertia_is_rotated_back_from_principal_axes():
    full = np.array([[0.3, 0.02, -0.01], [0.02, 0.2, 0.03], [-0.01, 0.03, 0.25]])
    xml = """<mujoco><worldbody><body name="b"><joint/>
      <inertial pos="0.1 0.2 0.3" mass="2" fullinertia="0.3 0.2 0.25 0.02 -0.01 0.03"/>
    </body></worldbody></mujoco>"""
    model = from_mujoco_model(compile_(xml))
    k = model.link_names.index("b")
    assert model.link_mass[k].item() == pytest.approx(2.0)
    np.testing.assert_allclose(model.link_com[k].numpy(), [0.1, 0.2, 0.3], atol=1e-12)
    np.testing.assert_allclose(model.link_inertia[k].numpy(), full, atol=1e-9)


def test_geoms_map_mujoco_sizes():
    model = from_mujoco_model(compile_(FLOATING))
    by_link = {}
    for g in model.geoms:
        by_link.setdefault(g.link, []).append(g)
    (torso,) = by_link["torso"]
    assert torso.type == GeomType.BOX and torso.size == pytest.approx((0.2, 0.1, 0.05))
    (thigh,) = by_link["thigh"]
    assert thigh.type == GeomType.CAPSULE and thigh.size == pytest.approx((0.03, 0.15))
    (arm,) = by_link["arm"]
    assert arm.type == GeomType.SPHERE and arm.size == pytest.approx((0.05,))
    assert arm.friction == pytest.approx(1.0) and arm.contype == 1 and arm.conaffinity == 1
    (shin,) = by_link["shin"]
    assert shin.type == GeomType.MESH and shin.vertices.dtype == torch.float64
    # the compiled vertices in the compiled geom frame are the written ones (scaled), placed at pos
    verts = shin.vertices.numpy() @ shin.rot.numpy().T + shin.pos.numpy()
    written = 0.1 * np.array([[1, 1, 1], [2, 1, 1], [1, 2, 1], [1, 1, 2]]) + [0, 0, -0.1]
    np.testing.assert_allclose(np.sort(verts, axis=0), np.sort(written, axis=0), atol=1e-6)  # float32 storage
    cyl = from_mujoco_model(compile_(TWO_HINGES)).geoms[0]
    assert cyl.type == GeomType.CYLINDER and cyl.size == pytest.approx((0.02, 0.1))
    plane = [g for g in model.geoms if g.name == "floor"][0]
    assert plane.type == GeomType.PLANE


def test_unsupported_geom_warns_and_is_skipped():
    xml = """<mujoco><worldbody><body name="b"><joint/>
      <geom name="egg" type="ellipsoid" size="0.1 0.2 0.3"/>
    </body></worldbody></mujoco>"""
    with pytest.warns(UserWarning, match="egg"):
        model = from_mujoco_model(compile_(xml))
    assert model.geoms == ()


def test_unnamed_bodies_and_joints_get_generated_names():
    xml = """<mujoco><worldbody><body><joint/><geom size="0.1"/>
      <body><joint type="slide"/><geom size="0.1"/></body>
    </body></worldbody></mujoco>"""
    model = from_mujoco_model(compile_(xml))
    assert model.link_names == ("world", "body1", "body2")
    assert model.joint_names == ("joint0", "joint1")


# ------------------------------------------------------------------ joints_name_list
def test_joints_name_list_orders_and_locks():
    model = from_mujoco_model(compile_(ARM), ["slider", "shoulder"])
    assert model.joint_names == ("slider", "shoulder")
    assert model.body_names == ("world", "upper", "hand")  # elbow locked: fore welded to upper
    torch.testing.assert_close(model.armature, torch.tensor([0.0, 0.1], dtype=torch.float64))


def test_unknown_joint_name_raises():
    with pytest.raises(JointNotFoundError, match="elbo"):
        from_mujoco_model(compile_(ARM), ["elbo"])


# ------------------------------------------------------------------ errors
def test_ball_joint_raises_naming_the_joint():
    xml = """<mujoco><worldbody>
      <body name="b"><joint name="wrist" type="ball"/><geom size="0.1"/></body>
    </worldbody></mujoco>"""
    with pytest.raises(ModelError, match="ball joint 'wrist'"):
        from_mujoco_model(compile_(xml))


def test_two_free_bodies_raise_naming_them():
    xml = """<mujoco><worldbody>
      <body name="robot"><freejoint/><geom size="0.1"/></body>
      <body name="ball"><freejoint/><geom size="0.1"/></body>
    </worldbody></mujoco>"""
    with pytest.raises(ModelError, match="more than one free body.*'robot'.*'ball'"):
        from_mujoco_model(compile_(xml))


def test_jointed_top_level_body_next_to_a_free_body_raises():
    xml = """<mujoco><worldbody>
      <body name="robot"><freejoint/><geom size="0.1"/></body>
      <body name="door" pos="1 0 0"><joint name="hinge"/><geom size="0.1"/></body>
    </worldbody></mujoco>"""
    with pytest.raises(ModelError, match="'door'.*alongside the free body 'robot'"):
        from_mujoco_model(compile_(xml))


def test_missing_file_raises(tmp_path):
    path = tmp_path / "nope.xml"
    with pytest.raises(ModelError, match="nope.xml"):
        load_mjcf(path)


def test_compile_error_names_file_and_mujoco_message(tmp_path):
    path = tmp_path / "bad.xml"
    path.write_text('<mujoco><worldbody><body name="b"><joint type="twist"/></body></worldbody></mujoco>')
    with pytest.raises(ModelError, match=r"bad\.xml.*MuJoCo") as info:
        load_mjcf(path)
    assert "twist" in str(info.value)


def test_load_mjcf_from_file_matches_from_mujoco_model(tmp_path):
    path = tmp_path / "arm.xml"
    path.write_text(ARM)
    model = load_mjcf(path)
    assert model.source == str(path)
    assert model.name == "arm"
    ref = from_mujoco_model(compile_(ARM))
    assert model.link_names == ref.link_names
    torch.testing.assert_close(model.body_pos, ref.body_pos)
    torch.testing.assert_close(model.body_rot, ref.body_rot)


# ------------------------------------------------------------------ against torchrbd's kinematics
@pytest.mark.parametrize("xml", [ARM, TWO_HINGES, FLOATING, TWO_TOP])
@pytest.mark.parametrize("joints", [None, "subset"])
def test_kindyn_matches_mujoco_poses_and_com(xml, joints):
    from torchrbd import KinDynComputations

    m = compile_(xml)
    names = None
    if joints == "subset":
        names = list(reversed(from_mujoco_model(m).joint_names[::2]))
    kd = KinDynComputations.from_mujoco_model(m, names)
    model = kd.model
    rng = np.random.default_rng(1)
    for _ in range(5):
        d, world_H_base, q = _random_state(m, model, rng)
        mujoco.mj_comPos(m, d)
        H, qt = torch.as_tensor(world_H_base), torch.as_tensor(q)
        for b in range(1, m.nbody):
            name = m.body(b).name
            if name not in model.link_names:  # static scenery of a floating model
                continue
            T = kd.forward_kinematics(name, H, qt).numpy()
            np.testing.assert_allclose(T[:3, 3], d.xpos[b], atol=1e-9, err_msg=name)
            np.testing.assert_allclose(T[:3, :3], d.xmat[b].reshape(3, 3), atol=1e-9, err_msg=name)
        for s in range(m.nsite):
            T = kd.forward_kinematics(m.site(s).name, H, qt).numpy()
            np.testing.assert_allclose(T[:3, 3], d.site_xpos[s], atol=1e-9)
            np.testing.assert_allclose(T[:3, :3], d.site_xmat[s].reshape(3, 3), atol=1e-9)
        # the whole robot: the base's subtree (floating) or the world's (fixed base)
        root = m.body(model.root).id if model.floating else 0
        np.testing.assert_allclose(kd.CoM_position(H, qt).numpy(), d.subtree_com[root], atol=1e-9)
