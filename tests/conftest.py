"""Shared fixtures: robots from pip packages (icub-models) and from
example-robot-data files copied into tests/data, each with its Pinocchio twin."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

DATA = Path(__file__).parent / "data"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ERD = DATA / "example-robot-data"

SEED_JOINTS = [
    "torso_pitch", "torso_roll", "torso_yaw", "l_shoulder_pitch", "l_shoulder_roll", "l_shoulder_yaw",
    "l_elbow", "r_shoulder_pitch", "r_shoulder_roll", "r_shoulder_yaw", "r_elbow", "l_hip_pitch",
    "l_hip_roll", "l_hip_yaw", "l_knee", "l_ankle_pitch", "l_ankle_roll", "r_hip_pitch", "r_hip_roll",
    "r_hip_yaw", "r_knee", "r_ankle_pitch", "r_ankle_roll",
]


# A floating base with a massless link on a revolute joint: M is singular.
MASSLESS_JOINT_URDF = (
    '<robot name="r"><link name="base"><inertial><mass value="1"/>'
    '<inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/></inertial></link><link name="tip"/>'
    '<joint name="spin" type="revolute"><parent link="base"/><child link="tip"/><axis xyz="0 0 1"/>'
    '<limit lower="-1" upper="1" effort="1" velocity="1"/></joint></robot>'
)


def icub_path(name="iCubGazeboV2_5"):
    import icub_models

    return icub_models.get_model_file(name)


# (id, urdf path factory, joints list or None, frames to check)
ROBOTS = [
    ("icub_seed_joints", lambda: icub_path(), SEED_JOINTS, ["l_sole", "r_hand", "head", "root_link"]),
    ("icub_genova04_all", lambda: icub_path("iCubGenova04"), None, ["r_sole", "l_hand"]),
    ("tiago", lambda: ERD / "tiago_no_hand.urdf", None, ["arm_7_link", "wheel_right_link", "torso_lift_link"]),
    ("panda", lambda: ERD / "panda.urdf", None, ["panda_leftfinger", "panda_hand"]),
    ("double_pendulum_continuous", lambda: ERD / "double_pendulum_continuous.urdf", None, ["link2"]),
    ("solo12", lambda: ERD / "solo12.urdf", None, ["FL_FOOT", "HR_LOWER_LEG"]),
]


class Robot:
    def __init__(self, name, path, joints, frames):
        import torchrbd
        from pin_reference import PinRobot

        self.name, self.path, self.frames = name, str(path), frames
        self.kd = torchrbd.KinDynComputations(self.path, joints)
        self.pin = PinRobot(self.path, self.kd.joints_name_list)
        self.n = self.kd.NDoF


_cache = {}


@pytest.fixture(params=ROBOTS, ids=[r[0] for r in ROBOTS], scope="session")
def robot(request):
    name, path, joints, frames = request.param
    if name not in _cache:
        _cache[name] = Robot(name, path(), joints, frames)
    return _cache[name]


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="module")
def sim_float64_one_thread():
    """The simulator in float64 on the CPU, with torch on one thread for the module
    (many tiny ops: a second thread only adds synchronisation)."""
    import torch

    import torchrbd.sim as gs

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    gs.init(backend=gs.cpu, precision="64")
    yield
    torch.set_num_threads(threads)


def load_example(name: str) -> dict:
    """The globals of ``examples/<name>.py`` run as a module (its ``main`` not called)."""
    import runpy

    return runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name=name)


def sweep_at_every_batch(monkeypatch) -> list:
    """Let ``aba`` take the articulated-body sweep at every batch size, with and without
    gradients (by default only from ``articulated.sweep_from(model, gradients)``
    configurations on); returns the list into which each sweep appends its batch."""
    from torchrbd.algorithms import articulated

    calls, original = [], articulated.sweep
    for name in ("FROM", "CHAIN_FROM", "CHAIN_GRADIENTS_FROM"):
        monkeypatch.setattr(articulated, name, 1)
    monkeypatch.setattr(articulated, "sweep", lambda *args: calls.append(args[-1].shape[-1]) or original(*args))
    return calls


def graph_names(t) -> set:
    """Names of the autograd nodes behind the tensor ``t``."""
    names, stack, seen = set(), [t.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        stack.extend(f for f, _ in node.next_functions)
    return names
