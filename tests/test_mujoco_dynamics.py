"""Dynamics of MJCF models against MuJoCo itself: CRBA (``mj_fullM``), bias forces
(``qfrc_bias``) and forward dynamics (``qacc``), float64, random states.

Coordinates. torchrbd's generalized velocity is ``[nu (6); qd (n)]`` with joints in
``kd.joints_name_list`` order; MuJoCo's ``qvel`` follows ``jnt_dofadr``. We write
MuJoCo's velocity as a linear function of ours, ``qvel = A nu_all``, so that

    M_ours = A^T M_mj A,      h_ours = A^T (h_mj + M_mj Adot nu_all)

(from ``M_mj qacc + h_mj = f`` with ``qacc = A nudot + Adot nu`` and the power
``f . qvel = f_ours . nu_all``). For the joints A is a permutation (Adot = 0).

Free joint. MuJoCo's ``qvel[0:6]`` is ``[v, w_l]``: ``v`` the velocity of the body
origin in world axes, ``w_l`` the angular velocity in body axes. torchrbd's MIXED
base velocity is ``[v, w]`` with ``w = R w_l`` in world axes, so the base block of A
is ``diag(1, R^T)``. Its derivative along the motion is ``diag(0, -[w_l]x R^T)``
(``Rdot = R [w_l]x``), and ``Adot nu = [0; -w_l x (R^T w)] = [0; -w_l x w_l] = 0``:
in MIXED the bias forces need no extra term, which is why MIXED is the main
comparison. BODY (``[R^T v; w_l]``, base block ``diag(R, 1)``) does get one,
``Adot nu = [R (w_l x v_b); 0]``; it is checked as well.
"""

import numpy as np
import pytest
import torch

mujoco = pytest.importorskip("mujoco")

import torchrbd  # noqa: E402

RTOL = 1e-9

# Fixed base: hinges with skewed axes and anchors, a slide, armature, nonzero refs,
# a body with two hinges at different anchors, explicit full inertias and geom inertias.
ARM = """
<mujoco model="arm">
  <compiler angle="radian"/>
  <option gravity="0.3 -0.2 -9.7"><flag contact="disable"/></option>
  <worldbody>
    <body name="base_link" pos="0.1 -0.05 0.4" euler="0.2 -0.1 0.3">
      <joint name="yaw" axis="0 0 1" pos="0.01 0.02 0" armature="0.02"/>
      <inertial pos="0.01 0.02 0.05" quat="0.9 0.1 0.2 -0.1" mass="2.0" diaginertia="0.02 0.03 0.025"/>
      <body name="upper" pos="0 0.05 0.2" quat="0.95 0.2 -0.1 0.05">
        <joint name="shoulder" axis="0.3 1 0.2" pos="0.05 -0.1 0.02" armature="0.1" ref="0.4"/>
        <geom type="capsule" fromto="0 0 0 0.3 0.02 0" size="0.04" mass="1.5"/>
        <body name="fore" pos="0.3 0 0" euler="0.3 -0.2 0.1">
          <joint name="elbow_a" axis="0 0 1" pos="0.02 0.01 0" armature="0.05"/>
          <joint name="elbow_b" axis="1 0.2 0" pos="-0.03 0.04 0.02" ref="-0.3"/>
          <inertial pos="0.1 0.01 -0.01" mass="1.0" fullinertia="0.004 0.006 0.005 0.0005 -0.0003 0.0002"/>
          <body name="hand" pos="0.2 0 0">
            <joint name="slider" type="slide" axis="1 0 1" pos="0.1 0 0" ref="0.02" armature="0.3"/>
            <geom type="box" size="0.03 0.02 0.05" pos="0.02 0.03 0.01" euler="0.1 0.2 0.3" mass="0.5"/>
            <body name="finger" pos="0.05 0 0.02">
              <joint name="finger" axis="0 1 0" pos="0 0 0.01"/>
              <geom type="sphere" size="0.02" pos="0.03 0 0" mass="0.1"/>
            </body>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>
"""

# Floating base: a free joint, two branches, a body with two hinges at different
# anchors, a slide, a welded body, armature and refs.
WALKER = """
<mujoco model="walker">
  <compiler angle="radian"/>
  <option gravity="0 0 -9.81"><flag contact="disable"/></option>
  <worldbody>
    <body name="torso" pos="0 0 1">
      <freejoint name="root"/>
      <inertial pos="0.02 -0.01 0.03" quat="0.8 0.3 -0.2 0.1" mass="5" diaginertia="0.1 0.08 0.05"/>
      <body name="thigh" pos="0.1 -0.05 -0.05" euler="0.1 0 0.2">
        <joint name="hip_y" axis="0 1 0" pos="0 0 0.05" armature="0.03" ref="0.2"/>
        <joint name="hip_x" axis="1 0 0.3" pos="0.01 0.02 0.04"/>
        <geom type="capsule" fromto="0 0 0 0.02 0 -0.3" size="0.03" mass="1"/>
        <body name="shin" pos="0 0 -0.3">
          <joint name="knee" axis="0 1 0" armature="0.01"/>
          <geom type="box" size="0.02 0.03 0.12" pos="0.01 0 -0.1" euler="0.2 0.1 0" mass="0.6"/>
          <body name="foot" pos="0.02 0 -0.25" euler="0 0.3 0">
            <geom type="box" size="0.08 0.04 0.01" mass="0.3"/>
          </body>
        </body>
      </body>
      <body name="arm" pos="-0.1 0.12 0.15">
        <joint name="shoulder" axis="0.2 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0.05 -0.2" size="0.025" mass="0.4"/>
        <body name="forearm" pos="0 0.05 -0.2">
          <joint name="extend" type="slide" axis="0 0 -1" ref="0.05" armature="0.2"/>
          <inertial pos="0.01 0 -0.05" mass="0.3" fullinertia="0.002 0.0025 0.001 0.0001 0.0002 -0.0001"/>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def close(a, b, rtol=RTOL):
    a = a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    scale = max(1.0, np.abs(b).max())
    err = np.abs(a - b).max()
    assert err <= rtol * scale, f"max error {err:.3e} (scale {scale:.3e})"
    return err / scale


def _quat_to_rot(q):
    w, x, y, z = q / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


class Twin:
    """A MuJoCo model, its torchrbd KinDynComputations and the coordinate maps."""

    def __init__(self, xml):
        self.m = mujoco.MjModel.from_xml_string(xml)
        self.d = mujoco.MjData(self.m)
        self.kd = torchrbd.KinDynComputations.from_mujoco_model(self.m)
        self.floating = self.kd.model.floating
        self.n = self.kd.NDoF
        ids = [mujoco.mj_name2id(self.m, mujoco.mjtObj.mjOBJ_JOINT, name) for name in self.kd.joints_name_list]
        assert min(ids) >= 0
        self.qadr = [int(self.m.jnt_qposadr[j]) for j in ids]
        self.dadr = [int(self.m.jnt_dofadr[j]) for j in ids]
        assert self.m.nv == self.n + (6 if self.floating else 0)

    def random_state(self, rng):
        """(H (4, 4), q (n,), qpos, qvel) with torchrbd's q equal to MuJoCo's qpos entries."""
        qpos = np.zeros(self.m.nq)
        H = np.eye(4)
        if self.floating:
            quat = rng.normal(size=4)
            quat /= np.linalg.norm(quat)
            qpos[:3], qpos[3:7] = rng.normal(size=3), quat
            H[:3, :3], H[:3, 3] = _quat_to_rot(quat), qpos[:3]
        q = rng.uniform(-1.5, 1.5, size=self.n)
        qpos[self.qadr] = q
        qvel = rng.normal(size=self.m.nv)
        return H, q, qpos, qvel

    def A(self, R=None, rep=torchrbd.Representations.MIXED_REPRESENTATION):
        """(nv, 6 + n) qvel = A [nu; qd] (base columns zero for fixed-base models)."""
        A = np.zeros((self.m.nv, 6 + self.n))
        A[self.dadr, 6 + np.arange(self.n)] = 1.0
        if self.floating:
            if rep is torchrbd.Representations.MIXED_REPRESENTATION:
                A[:3, :3], A[3:6, 3:6] = np.eye(3), R.T
            else:  # BODY
                A[:3, :3], A[3:6, 3:6] = R, np.eye(3)
        return A

    def ours_velocity(self, qvel, R=None, rep=torchrbd.Representations.MIXED_REPRESENTATION):
        """[nu (6); qd (n)] from MuJoCo's qvel."""
        nu = np.zeros(6)
        if self.floating:
            v, w_l = qvel[:3], qvel[3:6]
            nu = np.concatenate([v, R @ w_l]) if rep is torchrbd.Representations.MIXED_REPRESENTATION \
                else np.concatenate([R.T @ v, w_l])
        return nu, qvel[self.dadr]

    def aba_case(self, rng):
        """A random floating-base state ``(H, q, nu, qd, tau)`` (MIXED) and MuJoCo's
        forward dynamics there as ``[nudot; qdd]``: nudot = K qacc_mj with
        K = diag(1, R, 1) (Kdot qvel = [0; R [w_l]x w_l] = 0)."""
        H, q, qpos, qvel = self.random_state(rng)
        R = H[:3, :3]
        tau = rng.normal(size=self.n)
        _, _, qacc = self.mujoco(qpos, qvel, self.A(R)[:, 6:] @ tau)
        nu, qd = self.ours_velocity(qvel, R)
        return (H, q, nu, qd, tau), np.concatenate([qacc[:3], R @ qacc[3:6], qacc[self.dadr]])

    def mujoco(self, qpos, qvel, qfrc_applied=None):
        """(M, qfrc_bias, qacc) of MuJoCo at the state."""
        d = self.d
        d.qpos[:], d.qvel[:] = qpos, qvel
        d.qfrc_applied[:] = 0 if qfrc_applied is None else qfrc_applied
        mujoco.mj_forward(self.m, d)
        M = np.zeros((self.m.nv, self.m.nv))
        mujoco.mj_fullM(self.m, d, M)
        return M, d.qfrc_bias.copy(), d.qacc.copy()


@pytest.fixture(scope="module")
def arm():
    return Twin(ARM)


@pytest.fixture(scope="module")
def walker():
    return Twin(WALKER)


def test_models_load_as_expected(arm, walker):
    assert not arm.floating and arm.n == 6
    assert walker.floating and walker.n == 5
    assert arm.kd.model.armature is not None and float(arm.kd.model.armature.sum()) == pytest.approx(0.47)


def test_fixed_base_mass_bias_aba(arm):
    rng = np.random.default_rng(0)
    t = torch.tensor
    I4, z6 = t(np.eye(4)), t(np.zeros(6))
    for _ in range(4):
        _, q, qpos, qvel = arm.random_state(rng)
        tau = rng.normal(size=arm.n)
        A = arm.A()[:, 6:]
        qfrc = A @ tau  # our torques at MuJoCo's dof addresses
        M_mj, h_mj, qacc = arm.mujoco(qpos, qvel, qfrc)
        _, qd = arm.ours_velocity(qvel)
        M = arm.kd.mass_matrix(I4, t(q))
        h = arm.kd.bias_force(I4, t(q), z6, t(qd))
        close(M[6:, 6:], A.T @ M_mj @ A)  # armature is in both
        close(h[6:], A.T @ h_mj)
        # forward dynamics of the fixed-base arm: solve with the joint block
        qdd = torch.linalg.solve(M[6:, 6:], t(tau) - h[6:])
        close(qdd, A.T @ qacc)


@pytest.mark.parametrize("rep", ["MIXED", "BODY"])
def test_floating_mass_bias(walker, rep):
    rep = {"MIXED": torchrbd.Representations.MIXED_REPRESENTATION,
           "BODY": torchrbd.Representations.BODY_FIXED_REPRESENTATION}[rep]
    walker.kd.set_frame_velocity_representation(rep)
    rng = np.random.default_rng(1)
    t = torch.tensor
    try:
        for _ in range(4):
            H, q, qpos, qvel = walker.random_state(rng)
            R = H[:3, :3]
            M_mj, h_mj, _ = walker.mujoco(qpos, qvel)
            nu, qd = walker.ours_velocity(qvel, R, rep)
            A = walker.A(R, rep)
            Adot_nu = np.zeros(walker.m.nv)  # MIXED: zero (module docstring)
            if rep is torchrbd.Representations.BODY_FIXED_REPRESENTATION:
                Adot_nu[:3] = R @ np.cross(qvel[3:6], nu[:3])
            M = walker.kd.mass_matrix(t(H), t(q))
            h = walker.kd.bias_force(t(H), t(q), t(nu), t(qd))
            close(M, A.T @ M_mj @ A)
            close(h, A.T @ (h_mj + M_mj @ Adot_nu))
    finally:
        walker.kd.set_frame_velocity_representation(torchrbd.Representations.MIXED_REPRESENTATION)


def test_floating_aba(walker):
    rng = np.random.default_rng(2)
    t = torch.tensor
    for _ in range(4):
        (H, q, nu, qd, tau), expected = walker.aba_case(rng)
        close(walker.kd.aba(t(H), t(q), t(nu), t(qd), t(tau)), expected)


def test_batched_matches_mujoco(walker):
    """One batched call over several MuJoCo states."""
    rng = np.random.default_rng(3)
    states = [walker.random_state(rng) for _ in range(3)]
    H = torch.tensor(np.stack([s[0] for s in states]))
    q = torch.tensor(np.stack([s[1] for s in states]))
    vel = [walker.ours_velocity(s[3], s[0][:3, :3]) for s in states]
    nu = torch.tensor(np.stack([v[0] for v in vel]))
    qd = torch.tensor(np.stack([v[1] for v in vel]))
    M = walker.kd.mass_matrix(H, q)
    h = walker.kd.bias_force(H, q, nu, qd)
    for b, (Hb, _, qpos, qvel) in enumerate(states):
        M_mj, h_mj, _ = walker.mujoco(qpos, qvel)
        A = walker.A(Hb[:3, :3])
        close(M[b], A.T @ M_mj @ A)
        close(h[b], A.T @ h_mj)


def test_long_batch_mass_matrix_with_armature_matches_mujoco(walker):
    """A batch of ``batchlast.DENSE_BELOW`` without gradients takes the eager
    mass matrix that works in the bodies' order (``crba.mass_matrix``); the walker's
    bodies are not in its coordinates' order and its armatures differ, so each lands
    where MuJoCo has it only if the placement undoes that order."""
    from torchrbd.algorithms.batchlast import DENSE_BELOW

    order = walker.kd.model.body_dof[1:]
    assert list(order) != sorted(order)
    rng = np.random.default_rng(4)
    states = [walker.random_state(rng) for _ in range(DENSE_BELOW)]
    H, q = (torch.tensor(np.stack([s[i] for s in states])) for i in (0, 1))
    with torch.no_grad():
        M = walker.kd.mass_matrix(H, q)
    for b in (0, DENSE_BELOW // 2, DENSE_BELOW - 1):
        Hb, _, qpos, qvel = states[b]
        M_mj, _, _ = walker.mujoco(qpos, qvel)
        A = walker.A(Hb[:3, :3])
        close(M[b], A.T @ M_mj @ A)
