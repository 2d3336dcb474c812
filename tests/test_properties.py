"""Property-based tests on random kinematic trees (see random_trees.py).

* against Pinocchio: FK and Jacobians of every link, M, h, ABA, centroidal map;
* identities: M symmetric positive definite, M a + h = tau, RNEA(ABA) = tau,
  centroidal momentum = sum of the links' momenta, Jdot = dJ/dt by finite
  differences along the motion, dE/dt = qd . tau along the ABA motion;
* finite gradients at zero velocity, identity base rotation and joint angles of
  exactly 0 and pi;
* float32 accuracy bounds (docs/accuracy.md).

Hypothesis runs derandomized (reproducible in CI) with few examples and no deadline.
"""

from __future__ import annotations


import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchrbd
from pin_reference import REPRESENTATIONS, pin_robot_of
from random_trees import far, float32_errors, random_state, tree_from_rng, trees
from torchrbd.spatial import skew

BODY, MIXED, INERTIAL = REPRESENTATIONS
SETTINGS = dict(
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
reps = st.sampled_from(REPRESENTATIONS)
seeds = st.integers(0, 2**32 - 1)
f64 = torch.float64


def close(a, b, rtol, what=""):
    a = a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    scale = max(1.0, float(np.abs(b).max(initial=0.0)))
    err = float(np.abs(a - b).max(initial=0.0))
    assert err <= rtol * scale, f"{what}: max error {err:.3e} (scale {scale:.3e})"


def load(tree):
    return torchrbd.KinDynComputations(tree.urdf, tree.joints_name_list)


def state(seed, n):
    """One random state (H, q, nu, qd, tau) as float64 tensors, unbatched."""
    return tuple(x[0] for x in random_state(np.random.default_rng(seed), n, 1))


# ------------------------------------------------------------ against Pinocchio
@settings(max_examples=25, **SETTINGS)
@given(tree=trees(), seed=seeds, at_zero=st.booleans())
def test_random_trees_match_pinocchio(tree, seed, at_zero):
    """``at_zero``: identity base and q = 0, where aligned axes make the Jacobians singular."""
    kd = load(tree)
    pin = pin_robot_of(tree, kd.joints_name_list)
    H, q, nu, qd, tau = state(seed, kd.NDoF)
    if at_zero:
        H, q = torch.eye(4, dtype=f64), torch.zeros_like(q)
    Hn, qn, nun, qdn, taun = (x.numpy() for x in (H, q, nu, qd, tau))
    for link in tree.links:
        close(kd.forward_kinematics(link, H, q), pin.fk(link, Hn, qn), 1e-10, f"FK {link}")
    for rep in REPRESENTATIONS:
        kd.set_frame_velocity_representation(rep)
        for link in tree.links:
            close(kd.jacobian(link, H, q), pin.jacobian(rep, link, Hn, qn), 1e-10, f"J {link} {rep.name}")
        close(kd.mass_matrix(H, q), pin.mass_matrix(rep, Hn, qn), 1e-10, f"M {rep.name}")
        z6, zn = np.zeros(6), np.zeros(kd.NDoF)
        close(kd.bias_force(H, q, nu, qd), pin.rnea(rep, Hn, qn, nun, qdn, z6, zn), 1e-10, f"h {rep.name}")
        close(kd.aba(H, q, nu, qd, tau), pin.aba(rep, Hn, qn, nun, qdn, taun), 1e-8, f"ABA {rep.name}")
        close(kd.centroidal_momentum_matrix(H, q), pin.centroidal(rep, Hn, qn), 1e-10, f"CMM {rep.name}")
    close(kd.CoM_position(H, q), pin.com(Hn, qn), 1e-10, "CoM")


# ------------------------------------------------------------ identities
@settings(max_examples=20, **SETTINGS)
@given(tree=trees(), seed=seeds, rep=reps)
def test_mass_matrix_spd_and_round_trips(tree, seed, rep):
    kd = load(tree)
    kd.set_frame_velocity_representation(rep)
    H, q, nu, qd, tau = state(seed, kd.NDoF)
    M = kd.mass_matrix(H, q)
    close(M, M.T, 1e-12, "M symmetric")
    assert torch.linalg.eigvalsh(M).min() > 0, "M not positive definite"
    a = kd.aba(H, q, nu, qd, tau)
    h = kd.bias_force(H, q, nu, qd)
    rhs = torch.cat([torch.zeros(6, dtype=f64), tau])
    close(M @ a + h, rhs, 1e-9, "M a + h = tau")
    close(kd.rnea(H, q, nu, qd, a[:6], a[6:]), rhs, 1e-9, "RNEA(ABA)")
    # h = C nu + G
    close(kd.coriolis_term(H, q, nu, qd) + kd.gravity_term(H, q), h, 1e-10, "h = C + G")


def link_momenta(kd, H, q, nu_mixed):
    """Total momentum [linear; angular about the CoM] (world axes) summed link by link.

    Each link's twist comes from its MIXED Jacobian (origin velocity, world angular
    velocity); its CoM velocity is ``v + w x (R c)``.
    """
    params = kd.get_inertial_parameters()
    G = kd.CoM_position(H, q)
    lin = torch.zeros(3, dtype=f64)
    ang = torch.zeros(3, dtype=f64)
    for k, link in enumerate(kd.model.link_names):
        m, c, I = params["mass"][k], params["com"][k], params["inertia"][k]
        T = kd.forward_kinematics(link, H, q)
        R, o = T[:3, :3], T[:3, 3]
        V = kd.jacobian(link, H, q) @ nu_mixed
        v, w = V[:3], V[3:]
        rc = R @ c
        vc = v + torch.linalg.cross(w, rc)
        lin = lin + m * vc
        ang = ang + R @ I @ R.T @ w + m * torch.linalg.cross(o + rc - G, vc)
    return torch.cat([lin, ang])


@settings(max_examples=15, **SETTINGS)
@given(tree=trees(), seed=seeds)
def test_centroidal_momentum_is_sum_of_link_momenta(tree, seed):
    kd = load(tree)
    kd.set_frame_velocity_representation(MIXED)
    H, q, nu, qd, _ = state(seed, kd.NDoF)
    v = torch.cat([nu, qd])
    h = link_momenta(kd, H, q, v)
    close(kd.centroidal_momentum_matrix(H, q) @ v, h, 1e-10, "CMM nu")
    close(kd.CoM_jacobian(H, q) @ v, h[:3] / kd.get_total_mass(), 1e-10, "CoM velocity")


def base_curve(rep, H, nu, s):
    """world_H_base after moving for time ``s`` at the constant base velocity ``nu`` (in ``rep``)."""
    xi = torch.zeros(4, 4, dtype=f64)
    xi[:3, :3], xi[:3, 3] = skew(nu[3:]), nu[:3]
    if rep is BODY:  # body twist: H exp(s xi)
        return H @ torch.linalg.matrix_exp(s * xi)
    if rep is INERTIAL:  # twist about the world origin: exp(s xi) H
        return torch.linalg.matrix_exp(s * xi) @ H
    out = H.clone()  # MIXED: origin velocity and angular velocity, both in world axes
    out[:3, :3] = torch.linalg.matrix_exp(s * skew(nu[3:])) @ H[:3, :3]
    out[:3, 3] = H[:3, 3] + s * nu[:3]
    return out


@settings(max_examples=15, **SETTINGS)
@given(tree=trees(), seed=seeds, rep=reps)
def test_jacobian_dot_is_finite_difference_of_jacobian(tree, seed, rep):
    kd = load(tree)
    kd.set_frame_velocity_representation(rep)
    H, q, nu, qd, _ = state(seed, kd.NDoF)
    dt = 1e-5
    for link in tree.links:
        Jp = kd.jacobian(link, base_curve(rep, H, nu, dt), q + dt * qd)
        Jm = kd.jacobian(link, base_curve(rep, H, nu, -dt), q - dt * qd)
        Jd = kd.jacobian_dot(link, H, q, nu, qd)
        close(Jd, (Jp - Jm) / (2 * dt), 1e-6, f"Jdot {link}")


def energy(kd, H, q, nu, qd):
    """Kinetic (from M) plus gravitational potential (from the CoM) energy."""
    v = torch.cat([nu, qd])
    M = kd.mass_matrix(H, q)
    return 0.5 * v @ M @ v - kd.get_total_mass() * kd.gravity @ kd.CoM_position(H, q)


@settings(max_examples=15, **SETTINGS)
@given(tree=trees(), seed=seeds, rep=reps)
def test_energy_balance_along_aba_motion(tree, seed, rep):
    """dE/dt = qd . tau: gravity is conservative and the base is unactuated."""
    kd = load(tree)
    kd.set_frame_velocity_representation(rep)
    H, q, nu, qd, tau = state(seed, kd.NDoF)
    a = kd.aba(H, q, nu, qd, tau)
    dt = 1e-5

    def E(s):
        return energy(kd, base_curve(rep, H, nu, s), q + s * qd, nu + s * a[:6], qd + s * a[6:])

    dE = (E(dt) - E(-dt)) / (2 * dt)
    scale = max(1.0, float(E(0.0).abs()))
    assert abs(float(dE - qd @ tau)) <= 1e-6 * scale, (float(dE), float(qd @ tau))


# ------------------------------------------------------------ gradients at special points
def all_outputs(kd, frames, H, q, nu, qd, tau):
    """Every public quantity at one state (a list of tensors)."""
    out = [
        kd.mass_matrix(H, q), kd.bias_force(H, q, nu, qd), kd.coriolis_term(H, q, nu, qd),
        kd.gravity_term(H, q), kd.aba(H, q, nu, qd, tau), kd.rnea(H, q, nu, qd, nu, qd),
        kd.centroidal_momentum_matrix(H, q), kd.CoM_position(H, q), kd.CoM_jacobian(H, q),
    ]
    for f in frames:
        out += [kd.forward_kinematics(f, H, q), kd.jacobian(f, H, q), kd.jacobian_dot(f, H, q, nu, qd)]
    return out


def assert_finite_gradients(kd, frames, H, q, nu, qd, tau, params=True):
    inputs = [x.clone().requires_grad_(True) for x in (H, q, nu, qd, tau)]
    leaves = list(inputs)
    if params:
        p = {k: v.detach().clone().requires_grad_(True) for k, v in kd.get_inertial_parameters().items()}
        kd.set_inertial_parameters(**p)
        leaves += list(p.values())
    outs = all_outputs(kd, frames, *inputs)
    for o in outs:
        assert torch.isfinite(o).all(), "non-finite output"
    gen = torch.Generator().manual_seed(0)
    loss = sum((o * torch.randn(o.shape, generator=gen, dtype=o.dtype)).sum() for o in outs)
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    for g in grads:
        assert g is None or torch.isfinite(g).all(), "non-finite gradient"


@settings(max_examples=15, **SETTINGS)
@given(tree=trees(), rep=reps, angle=st.sampled_from([0.0, np.pi, -np.pi]), moving=st.booleans())
def test_gradients_finite_at_special_configurations(tree, rep, angle, moving):
    """Identity base, every joint at exactly 0 or +-pi, zero (or unit) velocities."""
    kd = load(tree)
    kd.set_frame_velocity_representation(rep)
    n = kd.NDoF
    H = torch.eye(4, dtype=f64)
    q = torch.full((n,), angle, dtype=f64)
    nu = torch.ones(6, dtype=f64) if moving else torch.zeros(6, dtype=f64)
    qd = torch.ones(n, dtype=f64) if moving else torch.zeros(n, dtype=f64)
    assert_finite_gradients(kd, tree.links, H, q, nu, qd, torch.zeros(n, dtype=f64))


@pytest.mark.parametrize("rep", REPRESENTATIONS, ids=lambda r: r.name)
def test_gradients_finite_icub_zero_state(rep):
    from conftest import SEED_JOINTS, icub_path

    kd = torchrbd.KinDynComputations(icub_path(), SEED_JOINTS)
    kd.set_frame_velocity_representation(rep)
    n = kd.NDoF
    z = torch.zeros(n, dtype=f64)
    q = torch.zeros(n, dtype=f64)
    q[::2] = np.pi  # half the joints at exactly pi
    assert_finite_gradients(kd, ["l_sole", "r_hand"], torch.eye(4, dtype=f64), q, torch.zeros(6, dtype=f64), z, z)


# ------------------------------------------------------------ float32 accuracy
# Bounds stated in docs/accuracy.md: normwise relative error of float32 results
# against float64, max|x32 - x64| / max|x64|. BODY and MIXED results do not
# depend on where the base is; INERTIAL ones (base velocity about the world
# origin) only hold with the base within a few metres of the origin.
F32_BOUNDS = {"M": 1e-5, "h": 1e-5, "J": 1e-5, "aba": 1e-3}


def check_float32(kd, state, frames):
    for rep in REPRESENTATIONS:
        kd.set_frame_velocity_representation(rep)
        cases = [("near", state)] + ([("100 m", far(state))] if rep is not INERTIAL else [])
        for where, sample in cases:
            errs = float32_errors(kd, *sample, frames)
            for k, bound in F32_BOUNDS.items():
                assert errs[k] <= bound, f"{k} ({rep.name}, base {where}): float32 error {errs[k]:.2e} > {bound:.0e}"


def test_float32_accuracy_random_trees():
    rng = np.random.default_rng(2024)
    for _ in range(6):
        tree = tree_from_rng(rng)
        kd = load(tree)
        check_float32(kd, random_state(rng, kd.NDoF, 4), tree.links)


def test_float32_accuracy_icub():
    from conftest import SEED_JOINTS, icub_path

    kd = torchrbd.KinDynComputations(icub_path(), SEED_JOINTS)
    check_float32(kd, random_state(np.random.default_rng(7), kd.NDoF, 16), ["l_sole", "r_hand", "head", "root_link"])


def test_random_tree_generator_covers_all_joint_kinds():
    """The generator (seeded) produces every joint kind, frames without inertia and locked joints."""
    rng = np.random.default_rng(0)
    kinds, massless, locked = set(), 0, 0
    for _ in range(40):
        t = tree_from_rng(rng)
        kinds |= set(t.joints.values())
        massless += len(t.massless)
        locked += t.joints_name_list is not None
    assert kinds == {"revolute", "continuous", "prismatic", "fixed"} and massless and locked


def test_rotation_primitives_have_finite_gradients_at_identity_and_half_turns():
    from torchrbd.spatial import axis_angle_to_matrix, matrix_to_quat, quat_to_matrix

    axes = torch.tensor([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [1, 1, 1]], dtype=f64)
    axes = axes / axes.norm(dim=-1, keepdim=True)
    for angle in (0.0, np.pi, -np.pi, 2 * np.pi):
        a = torch.full((5,), angle, dtype=f64, requires_grad=True)
        R = axis_angle_to_matrix(axes, a)
        Rl = R.detach().clone().requires_grad_(True)
        q = matrix_to_quat(Rl)
        (g_a,) = torch.autograd.grad((R * torch.arange(9, dtype=f64).reshape(3, 3)).sum(), a)
        (g_R,) = torch.autograd.grad((q * torch.tensor([1.0, 2, 3, 4], dtype=f64)).sum(), Rl)
        assert torch.isfinite(g_a).all() and torch.isfinite(g_R).all(), angle
        qq = q.detach().clone().requires_grad_(True)
        (g_q,) = torch.autograd.grad(quat_to_matrix(qq).sum(), qq)
        assert torch.isfinite(g_q).all(), angle
        close(quat_to_matrix(q), R, 1e-12, f"quat round trip at {angle}")


@pytest.mark.parametrize("shape", [(), (7,), (2, 3)])
def test_matrix_to_quat_matches_mujoco(shape):
    """matrix_to_quat (one product for Shepperd's four candidates) against MuJoCo's
    mju_mat2Quat, sign fixed to w >= 0, for random rotations and half turns about
    random axes (w = 0, where the candidate chosen is not the first), in any leading
    shape."""
    mujoco = pytest.importorskip("mujoco")
    from torchrbd.spatial import axis_angle_to_matrix, matrix_to_quat

    rng = np.random.default_rng(4)
    count = int(np.prod(shape)) if shape else 1
    axes = torch.tensor(rng.normal(size=(count, 3)))
    axes = axes / axes.norm(dim=-1, keepdim=True)
    for angles in (torch.tensor(rng.uniform(-np.pi, np.pi, size=count)), torch.full((count,), np.pi, dtype=f64)):
        R = axis_angle_to_matrix(axes, angles).reshape(*shape, 3, 3)
        q = matrix_to_quat(R)
        assert q.shape == (*shape, 4)
        for Ri, qi in zip(R.reshape(-1, 3, 3).numpy(), q.reshape(-1, 4).numpy()):
            ref = np.zeros(4)
            mujoco.mju_mat2Quat(ref, Ri.reshape(9))
            assert qi[0] >= 0
            np.testing.assert_allclose(qi, ref if qi @ ref > 0 else -ref, atol=1e-12)  # (q and -q: one rotation)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_quat_to_matrix_matches_mujoco_for_any_norm(dtype):
    """quat_to_matrix (wxyz, not necessarily unit, any leading shape) against MuJoCo's
    mju_quat2Mat of the normalised quaternion."""
    mujoco = pytest.importorskip("mujoco")
    from torchrbd.spatial import quat_to_matrix

    rng = np.random.default_rng(3)
    q = rng.normal(size=(2, 5, 4)) * rng.uniform(0.1, 10, size=(2, 5, 1))  # norms far from 1
    ref = np.empty((2, 5, 9))
    for i in np.ndindex(2, 5):
        mujoco.mju_quat2Mat(ref[i], q[i] / np.linalg.norm(q[i]))
    R = quat_to_matrix(torch.tensor(q, dtype=dtype))
    assert R.shape == (2, 5, 3, 3) and R.dtype == dtype
    tol = 1e-14 if dtype == torch.float64 else 1e-6
    np.testing.assert_allclose(R.double().numpy().reshape(2, 5, 9), ref, rtol=0, atol=tol)
    R1 = quat_to_matrix(torch.tensor(q[0, 0], dtype=dtype))  # no batch dimension
    np.testing.assert_allclose(R1.double().numpy().reshape(9), ref[0, 0], rtol=0, atol=tol)


def test_quat_multiply_matches_mujoco_and_broadcasts():
    """The Hamilton product (wxyz) against mujoco.mju_mulQuat, one quaternion against a
    batch and batch against batch."""
    mujoco = pytest.importorskip("mujoco")
    from torchrbd.spatial import quat_multiply

    rng = np.random.default_rng(4)
    a, b = rng.normal(size=(6, 4)), rng.normal(size=(6, 4))
    ref = np.empty((6, 4))
    for i in range(6):
        mujoco.mju_mulQuat(ref[i], a[i], b[i])
    np.testing.assert_allclose(quat_multiply(torch.tensor(a), torch.tensor(b)).numpy(), ref, rtol=0, atol=1e-14)
    one = np.empty((6, 4))
    for i in range(6):
        mujoco.mju_mulQuat(one[i], a[0], b[i])
    np.testing.assert_allclose(quat_multiply(torch.tensor(a[0]), torch.tensor(b)).numpy(), one, rtol=0, atol=1e-14)
