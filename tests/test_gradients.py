"""Autograd through every public function of KinDynComputations.

* ``torch.autograd.gradcheck`` (float64) in all three representations, w.r.t. joint
  positions, velocities, torques, accelerations, external wrenches, the base pose
  (through ``H = [R0 exp([r]x), p]`` so the perturbed base stays on SO(3)) and the
  inertial parameters (set inside the checked function).
* ``torch.func``: ``vmap`` of the Jacobian and ``jacrev`` of forward kinematics.
* finite gradients at q = 0, q = pi, zero velocities and identity base rotation.
* float32 against float64 on iCub, output dtype, batch-of-one and broadcasting.
"""

import math

import numpy as np
import pytest
import torch
from torch.autograd import gradcheck

import torchrbd
import torchrbd.models
from torchrbd.algorithms.batchlast import DENSE_BELOW
from conftest import SEED_JOINTS, graph_names, icub_path, sweep_at_every_batch

REPS = list(torchrbd.Representations)
REP_IDS = [r.name for r in REPS]
MIXED = torchrbd.Representations.MIXED_REPRESENTATION

# Floating base, 6 links, one branch: revolute, prismatic, continuous on one side,
# revolute + fixed (a massive tool) on the other; full, non-diagonal inertias.
URDF = """<?xml version="1.0"?>
<robot name="grad_bot">
  <link name="base">
    <inertial><origin xyz="0.02 -0.01 0.03" rpy="0.1 0.2 -0.1"/><mass value="3.0"/>
      <inertia ixx="0.05" ixy="0.002" ixz="-0.001" iyy="0.04" iyz="0.003" izz="0.06"/></inertial>
  </link>
  <link name="link1">
    <inertial><origin xyz="0.1 0.02 -0.01" rpy="0.3 0 0.2"/><mass value="1.2"/>
      <inertia ixx="0.01" ixy="0.001" ixz="0.0005" iyy="0.012" iyz="-0.0008" izz="0.008"/></inertial>
  </link>
  <link name="link2">
    <inertial><origin xyz="0.0 0.05 0.02" rpy="-0.2 0.1 0"/><mass value="0.8"/>
      <inertia ixx="0.004" ixy="-0.0003" ixz="0.0002" iyy="0.005" iyz="0.0001" izz="0.003"/></inertial>
  </link>
  <link name="link3">
    <inertial><origin xyz="0.03 0 0.08" rpy="0 0.4 0.1"/><mass value="0.5"/>
      <inertia ixx="0.002" ixy="0.0001" ixz="0" iyy="0.0025" iyz="0.0002" izz="0.0015"/></inertial>
  </link>
  <link name="link4">
    <inertial><origin xyz="-0.05 0.01 0.02" rpy="0.2 -0.3 0"/><mass value="1.0"/>
      <inertia ixx="0.006" ixy="0.0004" ixz="-0.0002" iyy="0.007" iyz="0.0003" izz="0.005"/></inertial>
  </link>
  <link name="tool">
    <inertial><origin xyz="0.01 0.02 0.03" rpy="0 0 0.5"/><mass value="0.3"/>
      <inertia ixx="0.0008" ixy="0.00005" ixz="0.0001" iyy="0.0009" iyz="-0.00002" izz="0.0007"/></inertial>
  </link>
  <joint name="j1" type="revolute">
    <parent link="base"/><child link="link1"/>
    <origin xyz="0.1 0.05 0.2" rpy="0.2 -0.1 0.3"/><axis xyz="0 0.6 0.8"/>
    <limit lower="-2" upper="2" effort="10" velocity="5"/>
  </joint>
  <joint name="j2" type="prismatic">
    <parent link="link1"/><child link="link2"/>
    <origin xyz="0.2 0 0.01" rpy="0 0.3 0"/><axis xyz="1 0 0"/>
    <limit lower="-0.5" upper="0.5" effort="10" velocity="1"/>
  </joint>
  <joint name="j3" type="continuous">
    <parent link="link2"/><child link="link3"/>
    <origin xyz="0 0.1 0.05" rpy="0.1 0.2 0.3"/><axis xyz="0 0 1"/>
  </joint>
  <joint name="j4" type="revolute">
    <parent link="base"/><child link="link4"/>
    <origin xyz="-0.1 -0.05 0.1" rpy="-0.3 0 0.1"/><axis xyz="1 0 0"/>
    <limit lower="-2" upper="2" effort="10" velocity="5"/>
  </joint>
  <joint name="j5" type="fixed">
    <parent link="link4"/><child link="tool"/>
    <origin xyz="-0.15 0.02 0" rpy="0.5 0.1 -0.2"/>
  </joint>
</robot>
"""

FRAMES = ["link3", "tool"]


@pytest.fixture(scope="module")
def kd():
    return torchrbd.KinDynComputations(URDF)


def _skew(r):
    z = torch.zeros_like(r[..., 0])
    return torch.stack([z, -r[..., 2], r[..., 1], r[..., 2], z, -r[..., 0], -r[..., 1], r[..., 0], z], -1).reshape(
        *r.shape[:-1], 3, 3
    )


def pose(R0, r, p):
    """world_H_base (..., 4, 4) = [R0 exp([r]x), p], differentiable in r and p."""
    R = R0 @ torch.linalg.matrix_exp(_skew(r))
    top = torch.cat([R, p.unsqueeze(-1)], -1)
    bottom = torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=p.dtype).expand(*p.shape[:-1], 1, 4)
    return torch.cat([top, bottom], -2)


def _rot(rng):
    q = rng.normal(size=4)
    w, x, y, z = q / np.linalg.norm(q)
    return torch.tensor(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


# name -> (arguments it reads, call(kd, H, x) with x the dict of inputs)
FUNCTIONS = {
    "forward_kinematics": (("q",), lambda kd, H, x: kd.forward_kinematics(FRAMES[1], H, x["q"])),
    "jacobian": (("q",), lambda kd, H, x: kd.jacobian(FRAMES[0], H, x["q"])),
    "relative_jacobian": (("q",), lambda kd, H, x: kd.relative_jacobian(FRAMES[1], x["q"])),
    "jacobian_dot": (("q", "nu", "qd"), lambda kd, H, x: kd.jacobian_dot(FRAMES[1], H, x["q"], x["nu"], x["qd"])),
    "CoM_position": (("q",), lambda kd, H, x: kd.CoM_position(H, x["q"])),
    "CoM_jacobian": (("q",), lambda kd, H, x: kd.CoM_jacobian(H, x["q"])),
    "mass_matrix": (("q",), lambda kd, H, x: kd.mass_matrix(H, x["q"])),
    "centroidal_momentum_matrix": (("q",), lambda kd, H, x: kd.centroidal_momentum_matrix(H, x["q"])),
    "bias_force": (("q", "nu", "qd"), lambda kd, H, x: kd.bias_force(H, x["q"], x["nu"], x["qd"])),
    "coriolis_term": (("q", "nu", "qd"), lambda kd, H, x: kd.coriolis_term(H, x["q"], x["nu"], x["qd"])),
    "gravity_term": (("q",), lambda kd, H, x: kd.gravity_term(H, x["q"])),
    "rnea": (
        ("q", "nu", "qd", "nud", "qdd", "w0", "w1"),
        lambda kd, H, x: kd.rnea(
            H, x["q"], x["nu"], x["qd"], x["nud"], x["qdd"], external_wrenches={FRAMES[0]: x["w0"], FRAMES[1]: x["w1"]}
        ),
    ),
    "aba": (
        ("q", "nu", "qd", "tau", "w0", "w1"),
        lambda kd, H, x: kd.aba(
            H, x["q"], x["nu"], x["qd"], x["tau"], external_wrenches={FRAMES[0]: x["w0"], FRAMES[1]: x["w1"]}
        ),
    ),
}
USES_BASE = {k for k in FUNCTIONS if k != "relative_jacobian"}
DYNAMIC = ["CoM_position", "CoM_jacobian", "mass_matrix", "centroidal_momentum_matrix", "bias_force",
           "coriolis_term", "gravity_term", "rnea", "aba"]


def state(n, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=dtype)  # noqa: E731
    return {"r": 0.3 * r(3), "p": r(3), "q": r(n), "nu": r(6), "qd": r(n), "tau": r(n), "nud": r(6),
            "qdd": r(n), "w0": r(6), "w1": r(6)}


@pytest.mark.parametrize("rep", REPS, ids=REP_IDS)
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_gradcheck_state(kd, name, rep):
    """d(output)/d(every state input), base pose included."""
    _gradcheck_state(kd, name, rep)


@pytest.fixture
def sweep_with_gradients(monkeypatch):
    """aba through the articulated-body sweep with its implicit backward
    (``forward_dynamics._Implicit``) at every batch size, not only from
    ``articulated.sweep_from(model, gradients=True)`` configurations on; the sweeps' batches."""
    return sweep_at_every_batch(monkeypatch)


@pytest.mark.parametrize("rep", REPS, ids=REP_IDS)
def test_gradcheck_aba_on_the_sweep(kd, rep, sweep_with_gradients):
    """:func:`test_gradcheck_state` for aba on the articulated-body sweep, whose backward
    is the RNEA's adjoint at the computed accelerations after one more solve with the
    sweep's articulated inertias; its graph holds that Function and no CRBA solve."""
    x = state(kd.NDoF)
    H = pose(_rot(np.random.default_rng(5)), x["r"], x["p"])
    names = graph_names(kd.aba(H, x["q"].requires_grad_(), x["nu"], x["qd"], x["tau"]))
    assert "_ImplicitBackward" in names and "_CRBASolveBackward" not in names, names
    assert sweep_with_gradients == [1]
    _gradcheck_state(kd, "aba", rep)


def test_gradcheck_aba_forces_alone_on_the_sweep(kd, sweep_with_gradients):
    """aba on the sweep with a gradient for the torques and external wrenches only: the
    backward is the second solve alone (no RNEA terms are kept); against finite
    differences, with no other input in the graph."""
    kd.set_frame_velocity_representation(MIXED)
    x = state(kd.NDoF, seed=6)
    H = pose(_rot(np.random.default_rng(6)), x["r"], x["p"])
    inputs = tuple(x[k].clone().requires_grad_(True) for k in ("tau", "w0"))

    def f(tau, w0):
        return kd.aba(H, x["q"], x["nu"], x["qd"], tau, external_wrenches={FRAMES[0]: w0})

    assert "_ImplicitBackward" in graph_names(f(*inputs)) and sweep_with_gradients == [1]
    assert gradcheck(f, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("path", ["crba", "sweep"])
def test_vectorized_jacobians_of_every_function(kd, path, monkeypatch):
    """``torch.autograd.functional.jacobian(..., vectorize=True)`` (and ``autograd.grad``
    with ``is_grads_batched``) run the backward under the legacy batching of
    ``torch._vmap_internals``, which has no rule for ``flatten``/``unflatten``: the
    algorithms reshape with ``view`` where a backward goes. Every function's batched
    Jacobian w.r.t. the joint positions equals the one computed output by output; aba on
    both of its paths with gradients."""
    from torchrbd.algorithms import articulated

    if path == "sweep":
        sweep_at_every_batch(monkeypatch)
    kd.set_frame_velocity_representation(MIXED)
    x0 = state(kd.NDoF, seed=8)
    H = pose(_rot(np.random.default_rng(8)), x0["r"], x0["p"]).expand(2, 4, 4)
    x = {k: torch.stack([v, 0.5 * v]) for k, v in x0.items()}
    for name, (_, call) in FUNCTIONS.items():
        def f(q):
            return call(kd, H, {**x, "q": q})

        batched = torch.autograd.functional.jacobian(f, x["q"], vectorize=True)
        one_by_one = torch.autograd.functional.jacobian(f, x["q"])
        torch.testing.assert_close(batched, one_by_one, rtol=1e-10, atol=1e-12, msg=name)


def _gradcheck_state(kd, name, rep):
    kd.set_frame_velocity_representation(rep)
    args, call = FUNCTIONS[name]
    R0 = _rot(np.random.default_rng(5))
    x0 = state(kd.NDoF)
    keys = list(args) + (["r", "p"] if name in USES_BASE else [])
    inputs = tuple(x0[k].clone().requires_grad_(True) for k in keys)

    def f(*vals):
        x = dict(zip(keys, vals))
        H = pose(R0, x["r"], x["p"]) if name in USES_BASE else None
        return call(kd, H, x) / scale

    # compare relative to the output's size: ABA reaches ~1e3 here, and finite
    # differences of world-frame sums carry ~1e-13 relative rounding
    scale = 1.0
    scale = max(1.0, f(*inputs).abs().max().item())

    # full Jacobian comparison in MIXED; random projections (fast_mode) in the others
    assert gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-4, fast_mode=rep is not MIXED)


@pytest.mark.parametrize("rep", REPS, ids=REP_IDS)
@pytest.mark.parametrize("name", DYNAMIC)
def test_gradcheck_inertial_parameters(name, rep):
    """d(output)/d(mass, com, inertia) through set_inertial_parameters."""
    _gradcheck_inertial_parameters(name, rep)


@pytest.mark.parametrize("rep", REPS, ids=REP_IDS)
def test_gradcheck_aba_inertial_parameters_on_the_sweep(rep, sweep_with_gradients):
    """:func:`test_gradcheck_inertial_parameters` for aba on the articulated-body sweep."""
    _gradcheck_inertial_parameters("aba", rep)


def _gradcheck_inertial_parameters(name, rep):
    kd = torchrbd.KinDynComputations(URDF)
    kd.set_frame_velocity_representation(rep)
    args, call = FUNCTIONS[name]
    p0 = {k: v.detach().clone() for k, v in kd.get_inertial_parameters().items()}
    x = state(kd.NDoF, seed=1)
    H = pose(_rot(np.random.default_rng(6)), x["r"], x["p"])

    def f(mass, com, inertia):
        # symmetric inertias only: ABA's Cholesky reads one triangle of M while its
        # backward assumes symmetric perturbations, so an asymmetric finite
        # difference of an inertia entry would not match the analytical gradient
        inertia = 0.5 * (inertia + inertia.transpose(-1, -2))
        kd.set_inertial_parameters(mass=mass, com=com, inertia=inertia)
        return call(kd, H, x) / scale

    scale = 1.0
    scale = max(1.0, f(p0["mass"], p0["com"], p0["inertia"]).abs().max().item())

    inputs = tuple(p0[k].clone().requires_grad_(True) for k in ("mass", "com", "inertia"))
    # 78 inputs: random projections (fast_mode) keep this quick
    assert gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-4, fast_mode=True)
    # later results still see gradients: the parameters stay in the graph
    kd.set_inertial_parameters(*inputs)
    out = call(kd, H, x)
    grads = torch.autograd.grad(out.square().sum(), inputs, allow_unused=True)
    assert grads[0] is not None and torch.isfinite(grads[0]).all()


def test_trained_parameters_with_inputs_of_another_dtype():
    """Masses requiring grad on a float64 model, float32 inputs: each call converts the
    masses in its graph (the model's other fields are converted once and kept). The
    mass matrix and the gradient of its sum w.r.t. the masses match the float64 call,
    and a later call sees the masses' new values (nothing kept from the first call)."""
    kd = torchrbd.KinDynComputations(URDF)
    mass = kd.get_inertial_parameters()["mass"].clone().requires_grad_(True)
    kd.set_inertial_parameters(mass=mass)
    x = state(kd.NDoF, seed=4)
    H = pose(torch.eye(3, dtype=torch.float64), x["r"], x["p"])
    for scale in (1.0, 3.0):
        with torch.no_grad():
            mass.mul_(scale)
        M64 = kd.mass_matrix(H, x["q"])
        M32 = kd.mass_matrix(H.float(), x["q"].float())
        assert M32.dtype == torch.float32
        assert M32[0, 0].item() == pytest.approx(mass.detach().sum().item(), rel=1e-6)  # the total mass, now
        torch.testing.assert_close(M32.double(), M64, rtol=1e-5, atol=1e-5)
        (g64,) = torch.autograd.grad(M64.sum(), mass)
        (g32,) = torch.autograd.grad(M32.sum(), mass)
        torch.testing.assert_close(g32, g64, rtol=1e-4, atol=1e-4)


def test_set_inertial_parameters_linear_in_mass(kd):
    """The mass matrix of a model with every mass, inertia scaled by s is s M."""
    kd.set_frame_velocity_representation(MIXED)
    p = kd.get_inertial_parameters()
    k2 = torchrbd.KinDynComputations(URDF)
    k2.set_inertial_parameters(mass=2 * p["mass"], inertia=2 * p["inertia"])
    x = state(kd.NDoF, seed=2)
    H = pose(torch.eye(3, dtype=torch.float64), x["r"], x["p"])
    torch.testing.assert_close(k2.mass_matrix(H, x["q"]), 2 * kd.mass_matrix(H, x["q"]), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- torch.func
def test_vmap_jacobian(kd):
    kd.set_frame_velocity_representation(torchrbd.Representations.MIXED_REPRESENTATION)
    B = 5
    g = torch.Generator().manual_seed(3)
    r = 0.5 * torch.randn(B, 3, generator=g, dtype=torch.float64)
    p = torch.randn(B, 3, generator=g, dtype=torch.float64)
    H = pose(torch.eye(3, dtype=torch.float64), r, p)
    q = torch.randn(B, kd.NDoF, generator=g, dtype=torch.float64)
    J_vmap = torch.func.vmap(lambda H1, q1: kd.jacobian(FRAMES[1], H1, q1))(H, q)
    J_batch = kd.jacobian(FRAMES[1], H, q)
    assert J_vmap.shape == (B, 6, 6 + kd.NDoF)
    torch.testing.assert_close(J_vmap, J_batch, rtol=1e-12, atol=1e-12)


def test_forward_mode_ad_over_batched_calls(kd, monkeypatch):
    """``torch.autograd.forward_ad`` dual inputs, a batch of ``articulated.sweep_from``: the
    forward kinematics' buffers (``out=`` has no forward-mode rule) step aside, the
    articulated-body sweep carries the tangents through its in-place updates; the
    tangents match central differences."""
    import torch.autograd.forward_ad as fwAD

    from torchrbd.algorithms import articulated

    x, B = state(kd.NDoF, seed=5), articulated.sweep_from(kd._model)
    g = torch.Generator().manual_seed(5)
    H = pose(torch.eye(3, dtype=torch.float64), x["r"], x["p"]).expand(B, 4, 4)
    q, qd, tau, dq = (torch.randn(B, kd.NDoF, generator=g, dtype=torch.float64) for _ in range(4))
    nu = torch.randn(B, 6, generator=g, dtype=torch.float64)
    calls = {
        "mass_matrix": lambda q: kd.mass_matrix(H, q),
        "jacobian": lambda q: kd.jacobian(FRAMES[1], H, q),
        "aba": lambda q: kd.aba(H, q, nu, qd, tau),
    }
    swept, sweep = [], articulated.articulated_body
    monkeypatch.setattr(articulated, "articulated_body", lambda *args: swept.append(1) or sweep(*args))
    for name, f in calls.items():
        with fwAD.dual_level():
            tangent = fwAD.unpack_dual(f(fwAD.make_dual(q, dq))).tangent
        fd = (f(q + 1e-6 * dq) - f(q - 1e-6 * dq)) / 2e-6
        torch.testing.assert_close(tangent, fd, rtol=1e-6, atol=1e-6 * fd.abs().max().item(), msg=name)
    assert len(swept) == 3  # the dual call and the two differences


def test_vmap_over_batched_calls_without_gradients(kd):
    """vmap over a dimension in front of a batch of several configurations, without
    gradients: where the eager code writes into buffers (``out=``, which vmap cannot
    batch) or takes the articulated-body sweep, it must fall back inside the transform."""
    from torchrbd.algorithms import articulated

    x, B = state(kd.NDoF, seed=4), articulated.sweep_from(kd._model)
    g = torch.Generator().manual_seed(4)
    H = pose(torch.eye(3, dtype=torch.float64), x["r"], x["p"]).expand(2, B, 4, 4)
    q, qd, tau = (torch.randn(2, B, kd.NDoF, generator=g, dtype=torch.float64) for _ in range(3))
    nu = torch.randn(2, B, 6, generator=g, dtype=torch.float64)
    calls = {
        "mass_matrix": lambda H, q, nu, qd, tau: kd.mass_matrix(H, q),
        "jacobian": lambda H, q, nu, qd, tau: kd.jacobian(FRAMES[1], H, q),
        "forward_kinematics": lambda H, q, nu, qd, tau: kd.forward_kinematics(FRAMES[1], H, q),
        "aba": lambda H, q, nu, qd, tau: kd.aba(H, q, nu, qd, tau),
    }
    with torch.no_grad():
        for name, f in calls.items():
            torch.testing.assert_close(torch.func.vmap(f)(H, q, nu, qd, tau), f(H, q, nu, qd, tau),
                                       rtol=1e-12, atol=1e-12, msg=name)


def test_jacrev_forward_kinematics(kd):
    """jacrev of FK w.r.t. q, against the MIXED Jacobian (dp/dq_k = J_v[:, k],
    dR/dq_k = [J_w[:, k]]x R), and vmap(jacrev) against the per-sample result."""
    kd.set_frame_velocity_representation(torchrbd.Representations.MIXED_REPRESENTATION)
    x = state(kd.NDoF, seed=4)
    H = pose(_rot(np.random.default_rng(7)), x["r"], x["p"])
    fk = lambda q: kd.forward_kinematics(FRAMES[1], H, q)  # noqa: E731
    D = torch.func.jacrev(fk)(x["q"])  # (4, 4, n)
    assert D.shape == (4, 4, kd.NDoF)
    J = kd.jacobian(FRAMES[1], H, x["q"])[:, 6:]
    R = fk(x["q"])[:3, :3]
    torch.testing.assert_close(D[:3, 3, :], J[:3], rtol=1e-10, atol=1e-10)
    for k in range(kd.NDoF):
        torch.testing.assert_close(D[:3, :3, k], _skew(J[3:, k]) @ R, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(D[3], torch.zeros_like(D[3]))

    qs = torch.stack([x["q"], -x["q"], 0.5 * x["q"]])
    Db = torch.func.vmap(torch.func.jacrev(fk))(qs)
    for b in range(3):
        torch.testing.assert_close(Db[b], torch.func.jacrev(fk)(qs[b]), rtol=1e-12, atol=1e-12)


def test_spd_solve_gradients_to_second_order():
    """The solve behind ``aba`` has a hand-written backward and forward-mode rule: first
    and second derivatives (reverse and forward mode) against finite differences, for
    a symmetric M built from a free A."""
    from torchrbd.algorithms.solve import spd_solve

    g = torch.Generator().manual_seed(11)
    A = torch.randn(2, 5, 5, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2, 5, 3, generator=g, dtype=torch.float64, requires_grad=True)

    def f(A, b):
        return spd_solve(A @ A.transpose(-1, -2) + 5 * torch.eye(5, dtype=A.dtype), b)

    assert gradcheck(f, (A, b), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(f, (A, b))


def test_aba_backward_works_on_the_crba_pieces_to_second_order(kd, monkeypatch):
    """aba's CRBA path with gradients (what the implicit rule's second derivatives
    recompute inside the graph; taken here for first derivatives too) solves through
    ``crba_solve``, whose backward maps the gradient straight to the CRBA's pieces with
    masked sums (no (B, N, N) gradient of M, no backward of the placement gather): the
    graph holds that Function and no gather, and first and second derivatives w.r.t.
    the joint positions, velocities and torques match finite differences."""
    from torchrbd.algorithms import forward_dynamics

    monkeypatch.setattr(forward_dynamics, "implicit_backward", lambda *tensors: False)
    kd.set_frame_velocity_representation(MIXED)
    x = state(kd.NDoF, seed=3)
    H = pose(_rot(np.random.default_rng(9)), x["r"], x["p"]).expand(2, 4, 4)
    nu = torch.stack([x["nu"], -x["nu"]])
    inputs = tuple(torch.stack([x[k], 0.5 * x[k]]).requires_grad_() for k in ("q", "qd", "tau"))
    scale = kd.aba(H, inputs[0], nu, inputs[1], inputs[2]).abs().max().item()

    def f(q, qd, tau):
        return kd.aba(H, q, nu, qd, tau) / scale

    names = graph_names(f(*inputs))
    assert "_CRBASolveBackward" in names and not any("Gather" in n for n in names), names
    assert gradcheck(f, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)
    assert torch.autograd.gradgradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-4, fast_mode=True)


def test_aba_on_the_sweep_to_second_order(kd, sweep_with_gradients):
    """aba on the articulated-body sweep, with gradients: first and second derivatives
    w.r.t. the joint positions, velocities and torques and the base velocity match
    finite differences. The implicit rule behind the first derivatives holds the
    accelerations constant; a second derivative recomputes them by the CRBA path inside
    the graph (``create_graph``)."""
    kd.set_frame_velocity_representation(MIXED)
    x = state(kd.NDoF, seed=3)
    H = pose(_rot(np.random.default_rng(9)), x["r"], x["p"]).expand(2, 4, 4)
    inputs = tuple(torch.stack([x[k], 0.5 * x[k]]).requires_grad_() for k in ("q", "nu", "qd", "tau"))
    scale = kd.aba(H, *inputs).abs().max().item()

    def f(q, nu, qd, tau):
        return kd.aba(H, q, nu, qd, tau) / scale

    out = f(*inputs)
    assert "_ImplicitBackward" in graph_names(out)
    assert gradcheck(f, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)
    # the first derivatives that the second ones differentiate: those of the implicit rule
    v = torch.randn(out.shape, generator=torch.Generator().manual_seed(4), dtype=out.dtype)
    for plain, graphed in zip(torch.autograd.grad(out, inputs, v, retain_graph=True),
                              torch.autograd.grad(out, inputs, v, create_graph=True)):
        torch.testing.assert_close(graphed, plain, rtol=1e-9, atol=1e-12)
    assert torch.autograd.gradgradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-4, fast_mode=True)


@pytest.mark.parametrize("B", [3, DENSE_BELOW])
def test_rnea_adjoint_sweep_to_second_order(kd, B):
    """With gradients (eager), the RNEA runs through ``rnea._RNEA``, whose backward is
    the adjoint sweep: first and second derivatives w.r.t. every input (the bodies'
    motion subspaces, the inertia parameters with a non-symmetric J,
    the base twist and acceleration, joint velocities and accelerations, body wrenches)
    against finite differences, on short batches (library cross products) and long
    ones (batch-last cross products); the bias force's graph holds that Function."""
    from torchrbd.algorithms import forward, rnea, world_inertias
    from torchrbd.algorithms.inertia import SpatialInertia

    model = kd.model
    n, nb = model.n, model.nbody
    g = torch.Generator().manual_seed(15)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    R = _rot(np.random.default_rng(10))[..., None].expand(3, 3, B).contiguous()
    kin = forward(model, R, r(3, B), r(n, B))
    inertia = world_inertias(model, kin)
    J = inertia.J + 0.01 * r(nb, 3, 3, B)  # not symmetric: the backward is exact for any J
    inputs = tuple(x.detach().clone().requires_grad_() for x in (
        kin.S, inertia.m, inertia.h, J, r(6, B), r(6, B), r(n, B), r(n, B), r(nb, 6, B)))

    def f(*x):
        return rnea._RNEA.apply(model, *x)

    assert "_RNEABackward" in graph_names(f(*inputs))
    with torch.no_grad():  # as the Function's forward runs them (long batches: products into buffers)
        S, m, h, J, *rest = inputs
        plain = rnea._forward_sweeps(model, S, SpatialInertia(m, h, J), *rest)[0]
    torch.testing.assert_close(f(*inputs), plain, rtol=0, atol=0)
    short = B < DENSE_BELOW  # every entry for a short batch, random projections for a long one
    assert gradcheck(f, inputs, eps=1e-6, atol=1e-6, rtol=1e-6, fast_mode=not short)
    assert torch.autograd.gradgradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-4, fast_mode=True)

    x = state(kd.NDoF, seed=4)
    q = x["q"].expand(B, n).clone().requires_grad_()
    H = pose(_rot(np.random.default_rng(11)), x["r"], x["p"]).expand(B, 4, 4)
    assert "_RNEABackward" in graph_names(kd.bias_force(H, q, x["nu"].expand(B, 6), x["qd"].expand(B, n)))


@pytest.mark.parametrize("name", ["grad_bot", "humanoid"])
@pytest.mark.parametrize("B", [3, DENSE_BELOW])
def test_body_poses_backward_to_second_order(name, B):
    """With gradients, a batch's body poses take a Function with a hand-written
    backward: short batches ``kinematics._ShortPoseRows`` (base-relative poses by
    pointer jumping; the backward one product with the subtree mask), longer ones
    ``kinematics._PoseRows`` (one buffer; the backward a reverse sweep, parents' rows
    added by slice, by one row for siblings, or by index). First and second derivatives
    w.r.t. the base pose (any 3x3 block, in the finite differences' directions) and the
    joint positions against finite differences; the backward under ``is_grads_batched``."""
    from torchrbd.algorithms import kinematics

    model = (torchrbd.KinDynComputations(URDF) if name == "grad_bot" else torchrbd.models.load("humanoid")).model
    g = torch.Generator().manual_seed(0)
    R = _rot(np.random.default_rng(3))[..., None].expand(3, 3, B).contiguous().requires_grad_()
    p = torch.randn(3, B, dtype=torch.float64, generator=g, requires_grad=True)
    q = torch.randn(model.n, B, dtype=torch.float64, generator=g, requires_grad=True)

    def f(R, p, q):
        return kinematics.body_pose_rows(model, R, p, q)

    node = "_ShortPoseRowsBackward" if B < DENSE_BELOW else "_PoseRowsBackward"
    X = f(R, p, q)
    assert node in graph_names(X)
    assert gradcheck(f, (R, p, q), fast_mode=True)
    assert torch.autograd.gradgradcheck(f, (R, p, q), fast_mode=True)
    # the backward under vmap (is_grads_batched) equals the cotangents taken one by one
    V = torch.randn(2, *X.shape, dtype=torch.float64, generator=g)
    batched = torch.autograd.grad(X, (R, p, q), V, retain_graph=True, is_grads_batched=True)
    for i in range(2):
        for a, b in zip(batched, torch.autograd.grad(X, (R, p, q), V[i], retain_graph=True)):
            torch.testing.assert_close(a[i], b, rtol=1e-12, atol=1e-12)


def test_pose_composition_rules_to_second_order():
    """Forward kinematics composes poses through a Function with hand-written backward
    and forward-mode rules (long batches, with gradients): first and second derivatives
    (reverse and forward mode) against finite differences, broadcasting of the parent
    pose included, and ``vmap`` over an extra dimension."""
    from torchrbd.algorithms.kinematics import _compose, _compose_values

    g = torch.Generator().manual_seed(12)
    Xp = torch.randn(1, 3, 4, 64, generator=g, dtype=torch.float64, requires_grad=True)  # one parent, broadcast
    L = torch.randn(2, 3, 4, 64, generator=g, dtype=torch.float64, requires_grad=True)
    names = graph_names(_compose(Xp, L))
    assert "_ComposeBackward" in names, names
    torch.testing.assert_close(_compose(Xp, L), _compose_values(Xp.detach(), L.detach()), rtol=0, atol=0)
    assert gradcheck(_compose, (Xp, L), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(_compose, (Xp, L))
    batched = torch.func.vmap(_compose, in_dims=(None, 0))(Xp, torch.stack([L, 2 * L]))
    torch.testing.assert_close(batched[1], _compose_values(Xp.detach(), 2 * L.detach()))


@pytest.mark.parametrize("product", ["matmul", "mv", "mtv"])
def test_batch_last_product_rules_to_second_order(product):
    """The batch-last products take a Function with hand-written backward and
    forward-mode rules when a gradient is needed: first and second derivatives (reverse
    and forward mode) against finite differences, with broadcasting over bodies and a
    constant factor without a batch (last dimension 1), and ``vmap``."""
    from torchrbd.algorithms import batchlast

    g = torch.Generator().manual_seed(13)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True)  # noqa: E731
    A, C = r(2, 3, 3, DENSE_BELOW), r(1, 3, 3, 1)  # C: one constant matrix for all bodies and configurations
    right = r(2, 3, 4, DENSE_BELOW) if product == "matmul" else r(2, 3, DENSE_BELOW)
    f = getattr(batchlast, product)
    names = graph_names(f(A, right))
    assert "_MatmulBackward" in names, names
    for inputs in ((A, right), (C, right)):
        assert gradcheck(f, inputs, check_forward_ad=True)
        assert torch.autograd.gradgradcheck(f, inputs)
    with torch.no_grad():
        plain = f(A, right)
    torch.testing.assert_close(f(A, right), plain, rtol=0, atol=0)
    batched = torch.func.vmap(f, in_dims=(None, 0))(A, torch.stack([right, 2 * right]))
    torch.testing.assert_close(batched[1], 2 * plain)


def test_batch_last_cross_product_rules_to_second_order():
    """Long batches with gradients take the cross product's Function: first and second
    derivatives (reverse and forward mode) against finite differences, with one vector
    broadcast against a pair (as RNEA crosses both halves of a 6-vector), and ``vmap``."""
    from torchrbd.algorithms.batchlast import cross

    g = torch.Generator().manual_seed(14)
    a = torch.randn(2, 1, 3, DENSE_BELOW, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2, 2, 3, DENSE_BELOW, generator=g, dtype=torch.float64, requires_grad=True)
    assert "_CrossBackward" in graph_names(cross(a, b))
    torch.testing.assert_close(cross(a, b), torch.linalg.cross(a.expand_as(b), b, dim=-2))
    assert gradcheck(cross, (a, b), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(cross, (a, b))
    batched = torch.func.vmap(cross, in_dims=(None, 0))(a, torch.stack([b, -b]))
    torch.testing.assert_close(batched[1], -cross(a, b))


@pytest.mark.parametrize("B", [3, DENSE_BELOW])
def test_sum_of_cross_products_matches_the_library(B):
    """``cross_sum`` (multiply-adds into one buffer for long batches without gradients;
    separate products otherwise) against ``torch.linalg.cross``."""
    from torchrbd.algorithms.batchlast import cross_sum

    g = torch.Generator().manual_seed(16)
    a, b, c, d = (torch.randn(5, 3, B, generator=g, dtype=torch.float64) for _ in range(4))
    expected = torch.linalg.cross(a, b, dim=-2) + torch.linalg.cross(c, d, dim=-2)
    torch.testing.assert_close(cross_sum((a, b), (c, d)), expected, rtol=1e-14, atol=1e-14)
    a.requires_grad_()
    torch.testing.assert_close(cross_sum((a, b), (c, d)), expected, rtol=1e-14, atol=1e-14)


def test_gradients_reach_batch_last_tensors_contiguous():
    """A user's gradient arrives batch-first; where a batch-last intermediate was viewed
    batch-first, its gradient is made contiguous again (otherwise the whole backward of
    the algorithms runs on transposed strides). Values and higher-order rules unchanged."""
    from torchrbd.algorithms.batchlast import to_batch_first

    x = torch.randn(2, 3, 64, dtype=torch.float64, requires_grad=True)
    seen = []
    z = x * 2.0  # a batch-last intermediate (its gradient is not accumulated like a leaf's)
    z.register_hook(lambda g: seen.append(g.is_contiguous()))
    out = to_batch_first(z)
    assert out.shape == (64, 2, 3)
    upstream = torch.randn(out.shape, dtype=torch.float64)
    out.backward(upstream)
    assert seen == [True]
    assert torch.equal(x.grad, 2 * upstream.permute(1, 2, 0))
    assert gradcheck(lambda x: to_batch_first(x * x), (x.detach().requires_grad_(),), check_forward_ad=True)


def test_jacrev_and_vmap_of_aba(kd):
    """torch.func through aba (its custom solve included): jacrev w.r.t. the torques is
    M^{-1} in the joint block's columns, and vmap(jacrev) equals the per-sample one."""
    kd.set_frame_velocity_representation(MIXED)
    x = state(kd.NDoF, seed=5)
    H = pose(_rot(np.random.default_rng(8)), x["r"], x["p"])
    acc = lambda tau: kd.aba(H, x["q"], x["nu"], x["qd"], tau)  # noqa: E731
    D = torch.func.jacrev(acc)(x["tau"])  # (6+n, n)
    Minv = torch.linalg.inv(kd.mass_matrix(H, x["q"]))
    torch.testing.assert_close(D, Minv[:, 6:], rtol=1e-9, atol=1e-9)
    taus = torch.stack([x["tau"], -x["tau"]])
    Db = torch.func.vmap(torch.func.jacrev(acc))(taus)
    torch.testing.assert_close(Db[1], torch.func.jacrev(acc)(taus[1]), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- finite gradients
@pytest.mark.parametrize("rep", REPS, ids=REP_IDS)
@pytest.mark.parametrize("q_value", [0.0, math.pi], ids=["q0", "qpi"])
def test_gradients_finite_at_special_points(kd, rep, q_value):
    """q = 0 or pi, zero velocities, identity base: every gradient exists and is finite."""
    kd.set_frame_velocity_representation(rep)
    n = kd.NDoF
    for name, (args, call) in FUNCTIONS.items():
        x = {k: torch.zeros_like(v) for k, v in state(n).items()}
        x["q"] = torch.full((n,), q_value, dtype=torch.float64)
        x = {k: v.requires_grad_(True) for k, v in x.items()}
        H = torch.eye(4, dtype=torch.float64, requires_grad=True)
        out = call(kd, H, x)
        assert torch.isfinite(out).all(), name
        wanted = [x[k] for k in args] + ([H] if name in USES_BASE else [])
        grads = torch.autograd.grad(out.sum() + out.square().sum(), wanted, allow_unused=True)
        for k, gr in zip(list(args) + ["H"], grads):
            assert gr is None or torch.isfinite(gr).all(), f"{name}: non-finite gradient w.r.t. {k}"


# ---------------------------------------------------------------- dtypes and shapes
@pytest.fixture(scope="module")
def icub():
    pytest.importorskip("icub_models")
    return torchrbd.KinDynComputations(icub_path(), SEED_JOINTS)


def _icub_outputs(kd, dtype, base_offset, seed=0, B=4):
    """M, h, ABA, J, FK at B random states, base positions ``base_offset + 0.2 randn``."""
    g = torch.Generator().manual_seed(seed)
    n = kd.NDoF
    r = torch.randn(B, 3, generator=g, dtype=torch.float64)
    p = torch.tensor(base_offset, dtype=torch.float64) + 0.2 * torch.randn(B, 3, generator=g, dtype=torch.float64)
    H = pose(torch.eye(3, dtype=torch.float64), r, p)
    q = torch.rand(B, n, generator=g, dtype=torch.float64) * 2 - 1
    nu, qd, tau = (torch.randn(B, k, generator=g, dtype=torch.float64) for k in (6, n, n))
    H, q, nu, qd, tau = (t.to(dtype) for t in (H, q, nu, qd, tau))
    return {
        "M": kd.mass_matrix(H, q),
        "h": kd.bias_force(H, q, nu, qd),
        "aba": kd.aba(H, q, nu, qd, tau),
        "J": kd.jacobian("l_sole", H, q),
        "FK": kd.forward_kinematics("r_hand", H, q),
    }


def _float32_errors(kd, base_offset):
    lo = _icub_outputs(kd, torch.float32, base_offset)
    hi = _icub_outputs(kd, torch.float64, base_offset)
    errors = {}
    for key in hi:
        assert lo[key].dtype == torch.float32 and hi[key].dtype == torch.float64, key
        scale = max(1.0, hi[key].abs().max().item())
        errors[key] = (lo[key].double() - hi[key]).abs().max().item() / scale
    return errors


@pytest.mark.parametrize("rep", REPS, ids=REP_IDS)
def test_float32_matches_float64_icub(icub, rep):
    """iCub standing near the world origin (base 0.6 m up)."""
    icub.set_frame_velocity_representation(rep)
    errors = _float32_errors(icub, (0.0, 0.0, 0.6))
    bad = {k: f"{e:.1e}" for k, e in errors.items() if e > 1e-4}
    assert not bad, f"float32 relative errors above 1e-4: {bad}"


@pytest.mark.parametrize("rep", REPS, ids=REP_IDS)
def test_float32_far_from_world_origin(icub, rep):
    """float32 must stay accurate with the base 12 m from the world origin.

    MIXED and BODY dynamics do not depend on the base position at all. INERTIAL
    quantities do, but only through the base change of coordinates T(p): e.g. the
    INERTIAL ABA solved in MIXED and converted (``nudot = T nudot_mixed + Tdot nu_mixed``)
    is within ~7e-6 here, whereas a Cholesky solve with the INERTIAL mass matrix
    (condition number growing like |p|^4) is off by ~1e-2. (With intermediates about
    the world origin, MIXED/BODY ABA was also off by ~7e-3 here, and M stopped being
    positive definite in float32 at 100 m.)"""
    icub.set_frame_velocity_representation(rep)
    errors = _float32_errors(icub, (10.0, -6.0, 0.6))
    bad = {k: f"{e:.1e}" for k, e in errors.items() if e > 1e-4}
    assert not bad, f"float32 relative errors above 1e-4 with the base 12 m from the origin: {bad}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_output_dtype_follows_inputs(kd, dtype):
    kd.set_frame_velocity_representation(torchrbd.Representations.MIXED_REPRESENTATION)
    x = {k: v.to(dtype) for k, v in state(kd.NDoF).items()}
    H = pose(torch.eye(3, dtype=dtype), x["r"], x["p"])
    for name, (_, call) in FUNCTIONS.items():
        assert call(kd, H, x).dtype == dtype, name


def test_batch_of_one_and_broadcasting(kd):
    kd.set_frame_velocity_representation(torchrbd.Representations.MIXED_REPRESENTATION)
    n, B = kd.NDoF, 3
    x = state(n)
    H = pose(torch.eye(3, dtype=torch.float64), x["r"], x["p"])
    one = {k: v.unsqueeze(0) for k, v in x.items()}
    out1 = {name: call(kd, H.unsqueeze(0), one) for name, (_, call) in FUNCTIONS.items()}
    assert out1["mass_matrix"].shape == (1, 6 + n, 6 + n)
    assert out1["forward_kinematics"].shape == (1, 4, 4)
    assert out1["jacobian"].shape == (1, 6, 6 + n)
    assert out1["relative_jacobian"].shape == (1, 6, n)
    assert out1["CoM_position"].shape == (1, 3)
    assert out1["aba"].shape == (1, 6 + n) and out1["rnea"].shape == (1, 6 + n)
    for name, (_, call) in FUNCTIONS.items():
        single = call(kd, H, x)
        assert out1[name].shape == (1, *single.shape), name
        torch.testing.assert_close(out1[name][0], single, rtol=1e-12, atol=1e-12)

    # one base pose (4, 4) with a batch of joint states (B, n)
    qs = x["q"] + 0.1 * torch.arange(B, dtype=torch.float64)[:, None]
    qds = x["qd"].expand(B, n)
    M = kd.mass_matrix(H, qs)
    h = kd.bias_force(H, qs, x["nu"], qds)
    assert M.shape == (B, 6 + n, 6 + n) and h.shape == (B, 6 + n)
    for b in range(B):
        torch.testing.assert_close(M[b], kd.mass_matrix(H, qs[b]), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(h[b], kd.bias_force(H, qs[b], x["nu"], qds[b]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("B", [1, 4, DENSE_BELOW])
def test_gradcheck_joint_and_link_placements(B):
    """d(world_H_frame, J)/d(joint placements, link placements) of a model whose placements
    require grad (``Model.replace``), at each forward-kinematics path: the per-frame
    caches (a frame's placement, its chain's pose coefficients) are made anew inside the
    graph, so each call's gradient is exact and a second call's backward works."""
    kd0 = torchrbd.models.load("arm7")
    m = kd0._model
    g = torch.Generator().manual_seed(3)
    H = torch.eye(4, dtype=torch.float64).expand(B, 4, 4).clone()
    H[:, :3, 3] = torch.randn(B, 3, generator=g, dtype=torch.float64)
    q = torch.randn(B, kd0.NDoF, generator=g, dtype=torch.float64)
    body_pos = m.body_pos.clone().requires_grad_()
    link_pos = m.link_pos.clone().requires_grad_()
    kd = torchrbd.KinDynComputations(m.replace(body_pos=body_pos, link_pos=link_pos))

    def outputs(bp, lp):  # the same model each call (gradcheck perturbs the inputs in place)
        assert bp is body_pos and lp is link_pos
        return kd.forward_kinematics("ee", H, q), kd.jacobian("ee", H, q)

    for _ in range(2):  # the second call must not meet a graph freed by the first one's backward
        fk, J = outputs(body_pos, link_pos)
        (fk.sum() + J.sum()).backward()
        assert body_pos.grad.abs().sum() > 0 and link_pos.grad.abs().sum() > 0
    assert gradcheck(outputs, (body_pos, link_pos), eps=1e-6, atol=1e-6, rtol=1e-5, fast_mode=True)
