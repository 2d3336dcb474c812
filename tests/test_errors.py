"""Clear errors for bad input: every failure is one of torchrbd's error types and
its message names the file, line, joint, link, frame, shape or size, and for
unknown names the closest valid ones."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

import torchrbd
from torchrbd import FrameNotFoundError, InputError, JointNotFoundError, ModelError, SimulationError, TorchRBDError
from torchrbd.model import load_mjcf, load_urdf

f64 = torch.float64

INERTIA = '<inertia ixx="0.1" iyy="0.1" izz="0.1" ixy="0" ixz="0" iyz="0"/>'


def link(name, mass="1", inertia=INERTIA):
    return f'<link name="{name}"><inertial><mass value="{mass}"/>{inertia}</inertial></link>'


def joint(name, parent, child, kind="revolute", extra='<axis xyz="0 0 1"/>'):
    limit = '<limit lower="-1" upper="1" effort="1" velocity="1"/>' if kind in ("revolute", "prismatic") else ""
    return (
        f'<joint name="{name}" type="{kind}"><parent link="{parent}"/><child link="{child}"/>'
        f'<origin xyz="0 0 0.1" rpy="0 0 0"/>{extra}{limit}</joint>'
    )


def robot(*parts):
    return '<?xml version="1.0"?>\n<robot name="toy">\n' + "\n".join(parts) + "\n</robot>\n"


# base -> upper_arm (shoulder) -> forearm (elbow) -> hand (wrist, fixed)
ARM = [
    link("base"), link("upper_arm"), link("forearm"), link("hand"),
    joint("shoulder", "base", "upper_arm"), joint("elbow", "upper_arm", "forearm"),
    joint("wrist", "forearm", "hand", "fixed", ""),
]


def raises(exc, *patterns):
    """pytest.raises that also checks every regex pattern occurs in the message."""

    class _Check:
        def __enter__(self):
            self.ctx = pytest.raises(exc)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *a):
            out = self.ctx.__exit__(*a)
            msg = str(self.info.value)
            for p in patterns:
                assert re.search(p, msg), f"{p!r} not in message {msg!r}"
            assert isinstance(self.info.value, TorchRBDError)
            return out

    return _Check()


# ------------------------------------------------------------------ hierarchy
def test_error_hierarchy():
    assert issubclass(ModelError, ValueError) and issubclass(ModelError, TorchRBDError)
    assert issubclass(FrameNotFoundError, KeyError) and issubclass(FrameNotFoundError, TorchRBDError)
    assert issubclass(JointNotFoundError, KeyError) and issubclass(JointNotFoundError, ModelError)
    assert issubclass(InputError, ValueError) and issubclass(InputError, TorchRBDError)
    assert issubclass(SimulationError, RuntimeError) and issubclass(SimulationError, TorchRBDError)
    # KeyError subclasses print their message unquoted
    e = FrameNotFoundError("hnd", ["hand", "base"], "toy")
    assert str(e) == "unknown frame 'hnd' in toy; did you mean 'hand'?"
    assert e.name == "hnd" and e.valid == ["hand", "base"]


# ------------------------------------------------------------------ model files
def test_missing_file(tmp_path):
    missing = tmp_path / "nowhere" / "robot.urdf"
    for load in (load_urdf, torchrbd.KinDynComputations):
        with raises(ModelError, "not found", re.escape(str(missing))):
            load(missing)
    with raises(ModelError, "not found", "robot.xml"):
        load_mjcf(tmp_path / "robot.xml")
    with raises(ModelError, "not found", "robot.xml"):
        torchrbd.KinDynComputations(str(tmp_path / "robot.xml"))


def test_malformed_xml_names_file_and_line(tmp_path):
    path = tmp_path / "broken.urdf"
    text = robot(*ARM).replace('<child link="forearm"/>', '<child link="forearm">', 1)
    path.write_text(text)
    with raises(ModelError, re.escape(str(path)), r"malformed XML at line \d+"):
        load_urdf(path)
    with raises(ModelError, "malformed XML at line 3"):
        load_urdf("<?xml version='1.0'?>\n<robot name='x'>\n<link name='a'></robx>\n")


def test_wrong_root_element():
    with raises(ModelError, "<robot>", "<mujoco>|<sdf>"):
        load_urdf("<sdf><model/></sdf>")


def test_joint_pointing_at_missing_link(tmp_path):
    text = robot(*ARM).replace('<child link="forearm"/>', '<child link="forarm"/>')
    path = tmp_path / "arm.urdf"
    path.write_text(text)
    lineno = next(i for i, s in enumerate(text.splitlines(), 1) if 'child link="forarm"' in s)
    with raises(ModelError, re.escape(str(path)), f"line {lineno}", "'elbow'", "child link 'forarm'",
                "did you mean 'forearm'"):
        load_urdf(path)
    with raises(ModelError, "'shoulder'", "parent link 'bse'", "did you mean 'base'"):
        load_urdf(robot(*ARM).replace('<parent link="base"/>', '<parent link="bse"/>'))


def test_cycle():
    # a -> b -> c -> a: every link has a parent
    parts = [link("a"), link("b"), link("c"), joint("j1", "a", "b"), joint("j2", "b", "c"), joint("j3", "c", "a")]
    with raises(ModelError, "cycle"):
        load_urdf(robot(*parts))
    # base is a root, but a -> b -> a is a loop hanging nowhere
    parts = [link("base"), link("a"), link("b"), joint("j0", "base", "a"), joint("j1", "a", "b"),
             joint("j2", "b", "a")]
    with raises(ModelError, "'a'", "two parent joints|cycle"):
        load_urdf(robot(*parts))


def test_several_roots():
    with raises(ModelError, "several root links", "'base'", "'tool'"):
        load_urdf(robot(*ARM, link("tool")))


def test_duplicate_names():
    with raises(ModelError, "link 'hand' is defined twice"):
        load_urdf(robot(*ARM, link("hand")))
    with raises(ModelError, "joint 'elbow' is defined twice"):
        load_urdf(robot(*ARM, link("extra"), joint("elbow", "hand", "extra")))


@pytest.mark.parametrize("mass", ["-1", "nan", "inf"])
def test_bad_mass(mass):
    with raises(ModelError, "link 'forearm'", "mass"):
        load_urdf(robot(*[link("forearm", mass=mass) if p == link("forearm") else p for p in ARM]))


@pytest.mark.parametrize(
    "inertia, why",
    [
        ('<inertia ixx="-0.1" iyy="0.1" izz="0.1" ixy="0" ixz="0" iyz="0"/>', "positive semi-definite"),
        ('<inertia ixx="0.1" iyy="0.1" izz="0.1" ixy="0.5" ixz="0" iyz="0"/>', "positive semi-definite"),
        ('<inertia ixx="nan" iyy="0.1" izz="0.1" ixy="0" ixz="0" iyz="0"/>', "non-finite"),
    ],
)
def test_bad_inertia(inertia, why):
    with raises(ModelError, "link 'upper_arm'", why):
        load_urdf(robot(*[link("upper_arm", inertia=inertia) if p == link("upper_arm") else p for p in ARM]))


@pytest.mark.parametrize("kind", ["ball", "planar", "floating", "universal", ""])
def test_unknown_joint_type(kind):
    text = robot(*ARM).replace('name="elbow" type="revolute"', f'name="elbow" type="{kind}"')
    lineno = next(i for i, s in enumerate(text.splitlines(), 1) if 'name="elbow"' in s)
    with raises(ModelError, f"line {lineno}", "joint 'elbow'", f"unsupported type '{kind}'"):
        load_urdf(text)


@pytest.mark.parametrize(
    "old, new, pattern",
    [
        ('<origin xyz="0 0 0.1"', '<origin xyz="0 0.1"', r"<origin xyz='0 0.1'> must be 3 number"),
        ('<origin xyz="0 0 0.1"', '<origin xyz="zero 0 0"', r"<origin xyz='zero 0 0'> must be 3 number"),
        ('<axis xyz="0 0 1"/>', '<axis xyz="0 1"/>', r"<axis xyz='0 1'> must be 3 number"),
        ('<mass value="1"/>', '<mass value="heavy"/>', r"<mass value='heavy'>"),
        ('lower="-1"', 'lower="low"', r"<limit lower='low'>"),
        ('<link name="hand">', "<link>", r"<link> has no name"),
    ],
)
def test_malformed_numbers_and_names_give_line(old, new, pattern):
    text = robot(*ARM).replace(old, new, 1)
    lineno = next(i for i, s in enumerate(text.splitlines(), 1) if new in s)
    with raises(ModelError, f"line {lineno}", pattern):
        load_urdf(text)


def test_non_finite_placement_and_zero_axis():
    with raises(ModelError, "joint 'shoulder'", "non-finite origin"):
        load_urdf(robot(*ARM).replace('<origin xyz="0 0 0.1"', '<origin xyz="0 nan 0.1"', 1))
    with raises(ModelError, "joint 'shoulder'", "zero or invalid axis"):
        load_urdf(robot(*ARM).replace('<axis xyz="0 0 1"/>', '<axis xyz="0 0 0"/>', 1))


def test_geometry_errors():
    vis = '<visual><geometry><box size="1 2"/></geometry></visual>'
    text = robot(*ARM).replace('<link name="hand">', f'<link name="hand">{vis}')
    with raises(ModelError, r"<box size='1 2'> must be 3 number"):
        load_urdf(text)
    text = robot(*ARM).replace('<link name="hand">', '<link name="hand"><collision><origin/></collision>')
    with raises(ModelError, "<collision> has no <geometry>"):
        load_urdf(text)


def test_unknown_root_link():
    with raises(ModelError, "root link 'bas'", "did you mean 'base'"):
        load_urdf(robot(*ARM), root_link="bas")


def test_joints_name_list_errors():
    with raises(JointNotFoundError, "unknown joint 'elbw'", "did you mean 'elbow'") as info:
        torchrbd.KinDynComputations(robot(*ARM), ["shoulder", "elbw"])
    assert isinstance(info.value, KeyError) and isinstance(info.value, ModelError)
    assert info.value.name == "elbw" and set(info.value.valid) == {"shoulder", "elbow"}
    with raises(ModelError, "'wrist'", "fixed joint"):
        torchrbd.KinDynComputations(robot(*ARM), ["shoulder", "wrist"])
    with raises(ModelError, "repeats"):
        torchrbd.KinDynComputations(robot(*ARM), ["elbow", "elbow"])
    kd = torchrbd.KinDynComputations(robot(*ARM), ["elbow"])
    with raises(ModelError, "cannot reorder"):
        torchrbd.KinDynComputations(kd.model, ["shoulder", "elbow"])


def test_unsupported_model_objects():
    with raises(ModelError, "cannot build a model from int"):
        torchrbd.KinDynComputations(42)
    with raises(ModelError, "MJCF string", "from_mjcf"):
        torchrbd.KinDynComputations("<mujoco><worldbody/></mujoco>")
    with raises(ModelError, "expected a URDF path or XML string, got bytes"):
        load_urdf(b"<robot/>")


# ------------------------------------------------------------------ MJCF
MJCF = """<mujoco model="m"><worldbody>
  <body name="torso" pos="0 0 1"><freejoint/><geom type="sphere" size="0.1"/>
    <body name="thigh"><joint name="hip" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.4" size="0.05"/>
    </body>
  </body>
</worldbody></mujoco>"""


def test_mjcf_compile_errors_surface_as_model_error(tmp_path):
    path = tmp_path / "bad.xml"
    path.write_text(MJCF.replace('size="0.1"', 'size="-0.1"'))
    with raises(ModelError, re.escape(str(path)), "MuJoCo could not compile", "size"):
        load_mjcf(path)
    with raises(ModelError, "MuJoCo could not compile", "[Ll]ine"):
        load_mjcf(MJCF.replace("</body>\n  </body>", "</body>"))  # malformed XML
    with raises(ModelError, "MuJoCo could not compile", "unrecognized|Schema"):
        load_mjcf(MJCF.replace('type="hinge"', 'type="hinge" stiffnes="1"'))


def test_mjcf_model_errors():
    with raises(ModelError, "ball joint 'hip'", "thigh"):
        load_mjcf(MJCF.replace('type="hinge"', 'type="ball"'))
    with raises(JointNotFoundError, "unknown joint 'hipp'", "did you mean 'hip'"):
        load_mjcf(MJCF, ["hipp"])
    load_mjcf(MJCF)  # the unmodified model loads


# ------------------------------------------------------------------ call arguments
@pytest.fixture(scope="module")
def kd():
    return torchrbd.KinDynComputations(robot(*ARM))  # 2 dofs: shoulder, elbow


def args(n=2, B=()):
    H = torch.eye(4, dtype=f64).expand(*B, 4, 4)
    return H, torch.zeros(*B, n, dtype=f64), torch.zeros(*B, 6, dtype=f64), torch.zeros(*B, n, dtype=f64)


FRAME_CALLS = {
    "forward_kinematics": lambda kd, f: kd.forward_kinematics(f, *args()[:2]),
    "jacobian": lambda kd, f: kd.jacobian(f, *args()[:2]),
    "relative_jacobian": lambda kd, f: kd.relative_jacobian(f, args()[1]),
    "jacobian_dot": lambda kd, f: kd.jacobian_dot(f, *args()),
    "aba_wrench": lambda kd, f: kd.aba(*args(), torch.zeros(2, dtype=f64),
                                       external_wrenches={f: torch.zeros(6, dtype=f64)}),
    "rnea_wrench": lambda kd, f: kd.rnea(*args(), torch.zeros(6, dtype=f64), torch.zeros(2, dtype=f64),
                                         external_wrenches={f: torch.zeros(6, dtype=f64)}),
}


@pytest.mark.parametrize("call", FRAME_CALLS, ids=list(FRAME_CALLS))
def test_unknown_frame(kd, call):
    with raises(FrameNotFoundError, "unknown frame 'forarm'", "did you mean 'forearm'") as info:
        FRAME_CALLS[call](kd, "forarm")
    assert isinstance(info.value, KeyError)
    assert set(info.value.valid) >= {"base", "upper_arm", "forearm", "hand"}
    with raises(FrameNotFoundError, "unknown frame 'zzz'"):  # nothing close: no suggestion
        FRAME_CALLS[call](kd, "zzz")


def test_wrong_joint_vector_length(kd):
    H, q, nu, qd = args()
    with raises(InputError, "joint_positions", r"\(\.\.\., 2\)", r"got \(3,\)", "2 joint coordinates"):
        kd.mass_matrix(H, torch.zeros(3, dtype=f64))
    with raises(InputError, "joint_positions", r"got \(\)"):
        kd.mass_matrix(H, torch.tensor(0.0, dtype=f64))
    with raises(InputError, "joint_velocities", r"got \(1,\)", "2 joint coordinates"):
        kd.bias_force(H, q, nu, torch.zeros(1, dtype=f64))
    with raises(InputError, "joint_torques", r"got \(4,\)"):
        kd.aba(H, q, nu, qd, torch.zeros(4, dtype=f64))
    with raises(InputError, "joint_accelerations", r"got \(5, 3\)"):
        kd.rnea(H, q, nu, qd, nu, torch.zeros(5, 3, dtype=f64))


def test_wrong_velocity_size(kd):
    H, q, nu, qd = args()
    with raises(InputError, "base_velocity", r"\(\.\.\., 6\)", r"got \(7,\)"):
        kd.bias_force(H, q, torch.zeros(7, dtype=f64), qd)
    with raises(InputError, "base_velocity", r"got \(3,\)"):
        kd.jacobian_dot("hand", H, q, torch.zeros(3, dtype=f64), qd)
    with raises(InputError, "base_acceleration", r"got \(2, 5\)"):
        kd.rnea(H, q, nu, qd, torch.zeros(2, 5, dtype=f64), qd)


@pytest.mark.parametrize("shape", [(3, 3), (4,), (4, 3), (2, 3, 4), (16,)])
def test_wrong_base_transform_shape(kd, shape):
    with raises(InputError, "base_transform", r"\(\.\.\., 4, 4\)", re.escape(str(shape))):
        kd.forward_kinematics("hand", torch.zeros(shape, dtype=f64), torch.zeros(2, dtype=f64))


def test_batch_shapes_that_do_not_broadcast(kd):
    H, q, nu, qd = args(B=(3,))
    with raises(InputError, "do not broadcast", r"base_transform: \(3,\)", r"joint_positions: \(2,\)"):
        kd.mass_matrix(H, torch.zeros(2, 2, dtype=f64))
    with raises(InputError, "do not broadcast", r"base_velocity: \(4,\)"):
        kd.bias_force(H, q, torch.zeros(4, 6, dtype=f64), qd)
    with raises(InputError, "external_wrenches\\['hand'\\]", "does not broadcast"):
        kd.aba(H, q, nu, qd, torch.zeros(3, 2, dtype=f64), external_wrenches={"hand": torch.zeros(5, 6, dtype=f64)})
    # broadcasting itself works: (3,) x () -> (3,), (2, 1) x (3,) -> (2, 3)
    assert kd.mass_matrix(H, torch.zeros(2, dtype=f64)).shape == (3, 8, 8)
    assert kd.mass_matrix(torch.eye(4, dtype=f64).expand(2, 1, 4, 4), q).shape == (2, 3, 8, 8)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex128, torch.complex64])
def test_integer_and_complex_tensors(kd, dtype):
    H, q, nu, qd = args()
    with raises(InputError, "joint_positions", "floating-point", str(dtype)):
        kd.mass_matrix(H, torch.zeros(2, dtype=dtype))
    with raises(InputError, "base_transform", "floating-point", str(dtype)):
        kd.mass_matrix(torch.eye(4, dtype=dtype), q)
    with raises(InputError, "external_wrenches\\['hand'\\]", str(dtype)):
        kd.aba(H, q, nu, qd, qd, external_wrenches={"hand": torch.zeros(6, dtype=dtype)})


def test_mixed_dtypes_are_not_cast_silently(kd):
    H, q, nu, qd = args()
    with raises(InputError, "joint_positions", "float32", "float64", "convert explicitly"):
        kd.mass_matrix(H, q.float())
    with raises(InputError, "external_wrenches", "float32", "convert explicitly"):
        kd.aba(H, q, nu, qd, qd, external_wrenches={"hand": torch.zeros(6)})


def test_non_numeric_arguments(kd):
    H, q, nu, qd = args()
    for bad in ("zero", None, {"a": 1}, [[0.0, 1.0], [2.0]]):
        with raises(InputError, "joint_positions", "cannot convert"):
            kd.mass_matrix(H, bad)
    with raises(InputError, "external_wrenches\\['hand'\\]", "cannot convert"):
        kd.aba(H, q, nu, qd, qd, external_wrenches={"hand": "push"})
    # lists and numpy arrays of floats are accepted
    assert kd.mass_matrix(np.eye(4), [0.1, 0.2]).shape == (8, 8)


def test_settings_errors():
    kd = torchrbd.KinDynComputations(robot(*ARM))
    with raises(InputError, "Representations", "'mixed'"):
        kd.set_frame_velocity_representation("mixed")
    with raises(InputError, "mass", r"\(4,\)", r"\(3,\)"):
        kd.set_inertial_parameters(mass=torch.ones(3, dtype=f64))
    with raises(InputError, "inertia", r"\(4, 3, 3\)"):
        kd.set_inertial_parameters(inertia=torch.ones(4, 3, dtype=f64))
    with raises(InputError, "gravity", "3 real numbers", r"\(2,\)"):
        kd.gravity = [0.0, -9.81]
    with raises(InputError, "gravity"):
        torchrbd.KinDynComputations(robot(*ARM), gravity=[0, 0, 0, -9.81])
    kd.gravity = [0.0, 0.0, -9.81]
    assert kd.gravity.dtype == f64 and kd.gravity[2] == -9.81


# ------------------------------------------------------------------ simulator
@pytest.fixture()
def gs():
    import torchrbd.sim as gs

    gs.init(backend=gs.cpu, precision="64")
    return gs


DATA = Path(torchrbd.__file__).parent / "models" / "data"


def arm_scene(gs, build=True, n_envs=0):
    scene = gs.Scene()
    arm = scene.add_entity(gs.morphs.URDF(file=str(DATA / "arm7.urdf"), fixed=True))
    if build:
        scene.build(n_envs=n_envs)
    return scene, arm


def test_sim_out_of_order(gs):
    scene, arm = arm_scene(gs, build=False)
    with raises(SimulationError, "step", "build"):
        scene.step()
    with raises(SimulationError, "get_qpos", "build"):
        arm.get_qpos()
    with raises(SimulationError, "set_dofs_position", "build"):
        arm.set_dofs_position(torch.zeros(7, dtype=f64))
    scene.build()
    with raises(SimulationError, "add_entity after scene.build"):
        scene.add_entity(gs.morphs.URDF(file=str(DATA / "arm7.urdf"), fixed=True))
    with raises(SimulationError, "build.*twice"):
        scene.build()
    scene.step()  # and now it runs


def test_sim_setters_wrong_size(gs):
    _, arm = arm_scene(gs)
    z = lambda *s: torch.zeros(*s, dtype=f64)  # noqa: E731
    with raises(InputError, "set_qpos", r"\(6,\)", r"\(7,\)"):
        arm.set_qpos(z(6))
    with raises(InputError, "set_dofs_position", r"\(8,\)", r"\(7,\)"):
        arm.set_dofs_position(z(8))
    with raises(InputError, "set_dofs_position", r"\(2,\)", r"\(3,\)"):
        arm.set_dofs_position(z(2), [0, 1, 2])
    with raises(InputError, "set_dofs_position", "out of range", r"\[0, 7\)"):
        arm.set_dofs_position(z(2), [0, 9])
    with raises(InputError, "set_dofs_velocity", r"\(3,\)"):
        arm.set_dofs_velocity(z(3))
    with raises(InputError, "set_dofs_kp", r"\(3,\)"):
        arm.set_dofs_kp(torch.ones(3, dtype=f64))
    with raises(InputError, "control_dofs_force", r"\(8,\)"):
        arm.control_dofs_force(z(8))
    with raises(InputError, "set_pos", r"\(2,\)", r"\(3,\)"):
        arm.set_pos(z(2))
    with raises(InputError, "set_quat", r"\(3,\)", r"\(4,\)"):
        arm.set_quat(z(3))
    with raises(InputError, "envs_idx", "n_envs=0"):
        arm.set_dofs_position(z(7), envs_idx=[0])


def test_sim_batched_setters_wrong_size(gs):
    _, arm = arm_scene(gs, n_envs=3)
    with raises(InputError, "set_dofs_position", r"\(2, 7\)", r"\(3, 7\)"):
        arm.set_dofs_position(torch.zeros(2, 7, dtype=f64))
    with raises(InputError, "envs_idx", "out of range", r"\[0, 3\)"):
        arm.set_dofs_position(torch.zeros(1, 7, dtype=f64), envs_idx=[5])
    arm.set_dofs_position(torch.zeros(3, 7, dtype=f64))


def test_sim_unknown_names(gs):
    _, arm = arm_scene(gs)
    with raises(FrameNotFoundError, "unknown frame 'link77'", "did you mean 'link7'"):
        arm.get_link("link77")
    with raises(JointNotFoundError, "unknown joint 'joint77'", "did you mean 'joint7'"):
        arm.get_joint("joint77")


def test_sim_missing_model_files(gs, tmp_path):
    with raises(ModelError, "URDF file not found", "robot.urdf"):
        gs.morphs.URDF(file=str(tmp_path / "robot.urdf"))
    with raises(ModelError, "MJCF file not found", "robot.xml"):
        gs.morphs.MJCF(file=str(tmp_path / "robot.xml"))
    with raises(InputError, "gs.morphs"):
        gs.Scene().add_entity(str(DATA / "arm7.urdf"))


def test_sim_missing_mesh_mjcf(gs, tmp_path):
    path = tmp_path / "m.xml"
    path.write_text(
        '<mujoco><asset><mesh name="m" file="missing.stl"/></asset><worldbody><body>'
        '<joint type="hinge"/><geom type="mesh" mesh="m"/></body></worldbody></mujoco>'
    )
    scene = gs.Scene()
    with raises(ModelError, re.escape(str(path)), "missing.stl"):
        scene.add_entity(gs.morphs.MJCF(file=str(path)))
        scene.build()


def test_sim_missing_mesh_urdf(gs, tmp_path):
    text = (DATA / "arm7.urdf").read_text()
    old = '<geometry><cylinder radius="0.045" length="0.03"/></geometry>\n    </collision>'
    assert old in text
    path = tmp_path / "arm.urdf"
    path.write_text(text.replace(old, '<geometry><mesh filename="meshes/missing.stl"/></geometry></collision>', 1))
    scene = gs.Scene()
    with raises(ModelError, "missing.stl"):
        scene.add_entity(gs.morphs.URDF(file=str(path), fixed=True))
        scene.build()
        scene.step()


def test_singular_mass_matrix_is_an_error_not_nan():
    """A movable joint that carries no mass makes M singular: ABA must raise, not return NaN."""
    text = robot(link("base"), '<link name="tip"/>', joint("spin", "base", "tip"))
    kd = torchrbd.KinDynComputations(text)
    H, q, nu, qd = args(n=1)
    assert torch.isfinite(kd.mass_matrix(H, q)).all()
    with raises(ModelError, "not positive definite"):
        kd.aba(H, q, nu, qd, torch.ones(1, dtype=f64))
