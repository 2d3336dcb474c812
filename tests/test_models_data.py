"""The embedded models (torchrbd.models): every file loads in Pinocchio / MuJoCo, has the
designed number of coordinates and mass, and the URDF and MJCF versions of a robot
describe the same kinematics and dynamics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import torchrbd.models as models
from torchrbd.errors import ModelError

pin = pytest.importorskip("pinocchio")
mujoco = pytest.importorskip("mujoco")

G = 9.80665

# name -> formats, (nq, nv) of the URDF in Pinocchio (free flyer for floating bases) and
# of the MJCF in MuJoCo, total mass, floating base, frames that must exist.
SPEC = {
    "pendulum": dict(formats=["urdf", "mjcf"], nq=1, nv=1, mass=1.0, floating=False, frames=["tip"]),
    "double_pendulum": dict(formats=["urdf", "mjcf"], nq=2, nv=2, mass=2.0, floating=False, frames=["tip"]),
    "cartpole": dict(formats=["urdf", "mjcf"], nq=2, nv=2, mass=1.1, floating=False, frames=["pole_tip"]),
    "arm7": dict(formats=["urdf", "mjcf"], nq=7, nv=7, mass=20.5, floating=False, frames=["ee"]),
    "quadruped": dict(
        formats=["urdf", "mjcf"],
        nq=19,
        nv=18,
        mass=19.6,
        floating=True,
        frames=[f"{leg}_foot" for leg in ("FL", "FR", "RL", "RR")],
    ),
    "humanoid": dict(formats=["mjcf"], nq=25, nv=24, mass=31.0, floating=True, frames=["head", "left_hand"]),
}
BOTH = [n for n, s in SPEC.items() if s["formats"] == ["urdf", "mjcf"]]
URDF = [n for n, s in SPEC.items() if "urdf" in s["formats"]]
MJCF = [n for n, s in SPEC.items() if "mjcf" in s["formats"]]


def pin_model(name):
    file = str(models.path(name, "urdf"))
    if SPEC[name]["floating"]:
        model = pin.buildModelFromUrdf(file, pin.JointModelFreeFlyer())
    else:
        model = pin.buildModelFromUrdf(file)
    model.gravity.linear = np.array([0.0, 0.0, -G])
    return model


def mj_model(name):
    return mujoco.MjModel.from_xml_path(str(models.path(name, "mjcf")))


def pin_mass(model):
    # computeTotalMass skips inertia 0, where a fixed base's root link is welded
    return float(sum(I.mass for I in model.inertias))


# ---------------------------------------------------------------- names / path


def test_names_lists_every_model():
    assert models.names() == sorted(SPEC)


@pytest.mark.parametrize("name", sorted(SPEC))
def test_path_and_formats(name):
    assert models.formats(name) == SPEC[name]["formats"]
    for fmt in SPEC[name]["formats"]:
        p = models.path(name, fmt)
        assert isinstance(p, Path) and p.is_file()
        assert p.suffix == {"urdf": ".urdf", "mjcf": ".xml"}[fmt]
        assert p.parent == models.DATA_DIR
    default = models.path(name)
    assert default == models.path(name, SPEC[name]["formats"][0])  # URDF first
    assert models.path(name, "xml") == models.path(name, "MJCF") == models.path(name, "mjcf")


def test_unknown_name_suggests():
    with pytest.raises(ModelError) as err:
        models.path("pendulm")
    msg = str(err.value)
    assert "did you mean 'pendulum'" in msg
    for n in SPEC:
        assert n in msg  # lists the valid names
    with pytest.raises(ModelError, match="quadruped"):
        models.formats("quadrupd")
    with pytest.raises(ModelError, match="valid names"):
        models.load("no_such_robot")  # fails before touching KinDynComputations


def test_bad_or_missing_format():
    with pytest.raises(ModelError, match="'urdf' or 'mjcf'"):
        models.path("pendulum", "sdf")
    with pytest.raises(ModelError, match="no URDF"):
        models.path("humanoid", "urdf")


# ---------------------------------------------------------------- the files load


@pytest.mark.parametrize("name", URDF)
def test_urdf_loads_in_pinocchio(name):
    model = pin_model(name)
    assert (model.nq, model.nv) == (SPEC[name]["nq"], SPEC[name]["nv"])
    assert pin_mass(model) == pytest.approx(SPEC[name]["mass"], abs=1e-9)
    for frame in SPEC[name]["frames"]:
        assert model.existFrame(frame), frame
    for I in model.inertias[1:]:
        check_inertia(I.mass, np.array(I.inertia))


@pytest.mark.parametrize("name", MJCF)
def test_mjcf_compiles_in_mujoco(name):
    m = mj_model(name)
    assert (m.nq, m.nv) == (SPEC[name]["nq"], SPEC[name]["nv"])
    assert float(m.body_mass.sum()) == pytest.approx(SPEC[name]["mass"], abs=1e-9)
    assert m.opt.gravity[2] == pytest.approx(-G)
    free = [j for j in range(m.njnt) if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
    assert len(free) == (1 if SPEC[name]["floating"] else 0)
    for frame in SPEC[name]["frames"]:
        assert mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, frame) >= 0, frame
    for b in range(1, m.nbody):
        if m.body_mass[b] > 0:
            check_inertia(m.body_mass[b], np.diag(m.body_inertia[b]))
        elif m.body_dofnum[b] > 0:
            pytest.fail(f"moving body {b} has no mass")


@pytest.mark.parametrize("name", URDF)
def test_path_works_as_a_file_path_for_torchrbd(name):
    from torchrbd.model import load_urdf

    model = load_urdf(models.path(name))
    assert len(model.joint_names) == SPEC[name]["nv"] - (6 if SPEC[name]["floating"] else 0)
    assert float(model.link_mass.sum()) == pytest.approx(SPEC[name]["mass"], abs=1e-9)


@pytest.mark.parametrize("name", sorted(SPEC))
def test_load_gives_kindyn(name):
    pytest.importorskip("torchrbd.kindyn")
    nj = SPEC[name]["nv"] - (6 if SPEC[name]["floating"] else 0)
    for fmt in SPEC[name]["formats"]:
        kd = models.load(name, format=fmt)
        assert kd.NDoF == nj
        assert float(kd.get_total_mass()) == pytest.approx(SPEC[name]["mass"], abs=1e-9)
        assert set(SPEC[name]["frames"]) <= set(kd.frame_names)
        joints = list(reversed(kd.joints_name_list))[:2]
        assert models.load(name, joints, format=fmt).joints_name_list == joints


def check_inertia(mass, inertia):
    assert mass > 0
    eig = np.linalg.eigvalsh(inertia)
    assert eig.min() > 0, eig
    a, b, c = eig
    assert a + b >= c * (1 - 1e-9), eig  # triangle inequality


# ---------------------------------------------------------------- URDF and MJCF agree


def random_configurations(pm, mm, rng, count=5):
    """(pinocchio q, mujoco qpos) pairs: joints mapped by name, random base pose."""
    out = []
    for _ in range(count):
        q = pin.neutral(pm)
        qpos = mm.qpos0.copy()
        for jid in range(1, pm.njoints):
            jname, joint = pm.names[jid], pm.joints[jid]
            if joint.nq == 7:  # free flyer: pinocchio (x y z qx qy qz qw), mujoco (x y z qw qx qy qz)
                pos = rng.uniform(-1, 1, 3)
                quat = rng.normal(size=4)
                quat /= np.linalg.norm(quat)  # (w, x, y, z)
                q[joint.idx_q : joint.idx_q + 7] = np.r_[pos, quat[1:], quat[0]]
                fid = [j for j in range(mm.njnt) if mm.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE][0]
                adr = mm.jnt_qposadr[fid]
                qpos[adr : adr + 7] = np.r_[pos, quat]
                continue
            lo, hi = pm.lowerPositionLimit[joint.idx_q], pm.upperPositionLimit[joint.idx_q]
            value = rng.uniform(max(lo, -np.pi), min(hi, np.pi))
            q[joint.idx_q] = value
            qpos[mm.joint(jname).qposadr[0]] = value
        out.append((q, qpos))
    return out


def dof_map(pm, mm):
    """(pinocchio v indices, mujoco dof indices) of the 1-DoF joints, matched by name."""
    iv, idof = [], []
    for jid in range(1, pm.njoints):
        if pm.joints[jid].nv == 1:
            iv.append(pm.joints[jid].idx_v)
            idof.append(mm.joint(pm.names[jid]).dofadr[0])
    return np.array(iv), np.array(idof)


@pytest.mark.parametrize("name", BOTH)
def test_urdf_and_mjcf_have_the_same_joints_and_limits(name):
    pm, mm = pin_model(name), mj_model(name)
    pin_joints = {pm.names[j] for j in range(1, pm.njoints) if pm.joints[j].nv == 1}
    mj_joints = {mm.joint(j).name for j in range(mm.njnt) if mm.jnt_type[j] != mujoco.mjtJoint.mjJNT_FREE}
    assert pin_joints == mj_joints
    for jname in pin_joints:
        jid = pm.getJointId(jname)
        iq, iv = pm.joints[jid].idx_q, pm.joints[jid].idx_v
        mj = mm.joint(jname)
        assert mm.jnt_range[mj.id] == pytest.approx([pm.lowerPositionLimit[iq], pm.upperPositionLimit[iq]])
        assert mm.dof_damping[mj.dofadr[0]] == pytest.approx(pm.damping[iv])
        assert mm.jnt_actfrcrange[mj.id][1] == pytest.approx(pm.effortLimit[iv])


@pytest.mark.parametrize("name", BOTH)
def test_urdf_and_mjcf_forward_kinematics_agree(name):
    pm, mm = pin_model(name), mj_model(name)
    pd, md = pm.createData(), mujoco.MjData(mm)
    rng = np.random.default_rng(0)
    # link frames that are MJCF bodies, fixed frames that are MJCF sites
    matched = []
    for f in pm.frames:
        if f.type != pin.FrameType.BODY:
            continue
        if mujoco.mj_name2id(mm, mujoco.mjtObj.mjOBJ_BODY, f.name) >= 0:
            matched.append((f.name, "body"))
        elif mujoco.mj_name2id(mm, mujoco.mjtObj.mjOBJ_SITE, f.name) >= 0:
            matched.append((f.name, "site"))
    names = {n for n, _ in matched}
    assert set(SPEC[name]["frames"]) <= names  # end frames (tip, ee, feet) are compared
    # the last link of the chain, and every MJCF body and site, has a Pinocchio twin
    last_link = [f.name for f in pm.frames if f.type == pin.FrameType.BODY and f.parentJoint == pm.njoints - 1][0]
    assert (last_link, "body") in matched
    assert {mm.body(b).name for b in range(1, mm.nbody)} | {mm.site(i).name for i in range(mm.nsite)} <= names
    for q, qpos in random_configurations(pm, mm, rng):
        pin.framesForwardKinematics(pm, pd, q)
        md.qpos[:] = qpos
        mujoco.mj_kinematics(mm, md)
        for fname, kind in matched:
            oMf = pd.oMf[pm.getFrameId(fname)]
            if kind == "body":
                pos, rot = md.body(fname).xpos, md.body(fname).xmat.reshape(3, 3)
            else:
                pos, rot = md.site(fname).xpos, md.site(fname).xmat.reshape(3, 3)
            np.testing.assert_allclose(oMf.translation, pos, atol=1e-9, err_msg=fname)
            np.testing.assert_allclose(oMf.rotation, rot, atol=1e-9, err_msg=fname)


@pytest.mark.parametrize("name", BOTH)
def test_urdf_and_mjcf_dynamics_agree(name):
    """Same mass, centre of mass, joint-space inertia (joint block) and gravity torques."""
    pm, mm = pin_model(name), mj_model(name)
    pd, md = pm.createData(), mujoco.MjData(mm)
    assert pin_mass(pm) == pytest.approx(float(mm.body_mass.sum()), abs=1e-9)
    iv, idof = dof_map(pm, mm)
    rng = np.random.default_rng(1)
    for q, qpos in random_configurations(pm, mm, rng):
        md.qpos[:] = qpos
        md.qvel[:] = 0
        mujoco.mj_forward(mm, md)
        M_mj = np.zeros((mm.nv, mm.nv))
        mujoco.mj_fullM(mm, md, M_mj)
        M_pin = pin.crba(pm, pd, q)
        M_pin = np.triu(M_pin) + np.triu(M_pin, 1).T
        np.testing.assert_allclose(M_pin[np.ix_(iv, iv)], M_mj[np.ix_(idof, idof)], atol=1e-9)
        g_pin = pin.computeGeneralizedGravity(pm, pd, q)
        np.testing.assert_allclose(g_pin[iv], md.qfrc_bias[idof], atol=1e-8)
        # pinocchio's centre of mass leaves out inertia 0 (a fixed base's welded root link)
        moving = pin.centerOfMass(pm, pd, q) * pd.mass[0]
        root = pm.inertias[0]
        com = (moving + root.mass * root.lever) / (pd.mass[0] + root.mass)
        np.testing.assert_allclose(com, md.subtree_com[0], atol=1e-9)


# ---------------------------------------------------------------- contact-ready models


@pytest.mark.parametrize("name", ["arm7", "quadruped", "humanoid"])
def test_no_self_contact_at_the_initial_pose(name):
    m = mj_model(name)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    pairs = [(m.geom(c.geom1).name, m.geom(c.geom2).name) for c in d.contact[: d.ncon]]
    assert d.ncon == 0, pairs


def test_quadruped_collision_geometry():
    model = pin_model("quadruped")
    geoms = pin.buildGeomFromUrdf(model, str(models.path("quadruped")), pin.GeometryType.COLLISION)
    with_geometry = {model.frames[g.parentFrame].name for g in geoms.geometryObjects}
    links = {f.name for f in model.frames if f.type == pin.FrameType.BODY}
    assert links == with_geometry  # every link has collision geometry
    m = mj_model("quadruped")
    for leg in ("FL", "FR", "RL", "RR"):
        g = m.geom(f"{leg}_foot")
        assert g.type[0] == mujoco.mjtGeom.mjGEOM_SPHERE and g.size[0] == pytest.approx(0.02)
        assert m.body(g.bodyid[0]).name == f"{leg}_calf"
        assert m.joint(f"{leg}_hip_joint").axis == pytest.approx([1, 0, 0])
        assert m.joint(f"{leg}_thigh_joint").axis == pytest.approx([0, 1, 0])
        assert m.joint(f"{leg}_calf_joint").axis == pytest.approx([0, 1, 0])
    assert m.body("trunk").mass[0] == pytest.approx(12.0)


def test_arm7_design():
    pm = pin_model("arm7")
    axes = []
    for jid in range(1, pm.njoints):
        assert pm.joints[jid].shortname() in ("JointModelRZ", "JointModelRY")
        axes.append(pm.joints[jid].shortname()[-1])
    assert "".join(axes) == "ZYZYZYZ"
    pd = pm.createData()
    pin.framesForwardKinematics(pm, pd, pin.neutral(pm))
    reach = pd.oMf[pm.getFrameId("ee")].translation
    assert reach == pytest.approx([0, 0, 1.12])  # straight up at q = 0
    masses = [I.mass for I in pm.inertias[1:]]
    assert all(1.0 <= m <= 4.0 for m in masses)
    assert np.all(pm.effortLimit > 0) and np.all(pm.damping > 0)


def test_humanoid_design():
    m = mj_model("humanoid")
    hinges = [j for j in range(m.njnt) if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE]
    assert len(hinges) == 18
    assert 20 <= m.body_mass.sum() <= 40
    assert np.all(m.jnt_limited[hinges])
    dofs = m.jnt_dofadr[hinges]
    assert np.all(m.dof_damping[dofs] > 0) and np.allclose(m.dof_armature[dofs], 0.01)
    assert np.all(m.dof_damping[:6] == 0) and np.all(m.dof_armature[:6] == 0)  # free joint untouched
    geom_types = {int(t) for t in m.geom_type}
    assert geom_types <= {int(mujoco.mjtGeom.mjGEOM_CAPSULE), int(mujoco.mjtGeom.mjGEOM_SPHERE)}
    # the hip joints of one leg share an anchor
    for side in ("left", "right"):
        bodies = {m.joint(f"{side}_hip_{a}").bodyid[0] for a in "xyz"}
        assert len(bodies) == 1
        assert all(np.allclose(m.joint(f"{side}_hip_{a}").pos, 0) for a in "xyz")


def with_floor(name):
    xml = models.path(name, "mjcf").read_text()
    xml = xml.replace("<worldbody>", '<worldbody>\n    <geom name="floor" type="plane" size="0 0 1"/>', 1)
    return mujoco.MjModel.from_xml_string(xml)


@pytest.mark.parametrize("name", ["quadruped", "humanoid"])
def test_dropped_on_a_floor_settles_in_mujoco(name):
    m = with_floor(name)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    assert d.ncon == 0  # starts above the floor
    # passive joints: the robot collapses, then lies still (about 5 s in MuJoCo)
    for _ in range(int(8.0 / m.opt.timestep)):
        mujoco.mj_step(m, d)
    assert np.all(np.isfinite(d.qpos))
    assert np.abs(d.qvel).max() < 0.05, np.abs(d.qvel).max()
    assert d.ncon > 0 and d.qpos[2] > 0
    floor = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "floor")
    assert any(floor in (c.geom1, c.geom2) for c in d.contact[: d.ncon])
    assert all(c.dist > -0.01 for c in d.contact[: d.ncon])  # no deep penetration
