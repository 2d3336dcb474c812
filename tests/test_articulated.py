"""The articulated-body sweep behind ``aba`` for large batches without gradients
(algorithms/articulated.py) against Pinocchio and MuJoCo, and when it is (not) taken."""


import numpy as np
import pytest
import torch

import torchrbd
import torchrbd.models
from torchrbd import ModelError
from torchrbd.algorithms import articulated
from pin_reference import REPRESENTATIONS, PinRobot, pin_robot_of
from random_trees import random_state, tree_from_rng
from test_kinematics import close, sample
from conftest import MASSLESS_JOINT_URDF, graph_names, sweep_at_every_batch
from test_mujoco_dynamics import WALKER, Twin

t = torch.tensor


@pytest.fixture
def sweeps(monkeypatch):
    """Count the sweep's calls, and let every batch size take it (by default only
    batches of ``articulated.sweep_from(model)`` or more do)."""
    calls = []
    original = articulated.articulated_body

    def counted(*args):
        calls.append(args[-1].shape[-1])
        return original(*args)

    monkeypatch.setattr(articulated, "articulated_body", counted)
    sweep_at_every_batch(monkeypatch)
    return calls


@pytest.mark.parametrize("rep", REPRESENTATIONS, ids=lambda r: r.name)
def test_sweep_matches_pinocchio(robot, rng, rep, sweeps):
    robot.kd.set_frame_velocity_representation(rep)
    Hs, q, nu, qd = sample(robot, rng, 3)
    tau = rng.normal(size=(3, robot.n))
    a = robot.kd.aba(t(Hs), t(q), t(nu), t(qd), t(tau))
    assert sweeps == [3]
    for b in range(3):
        close(a[b], robot.pin.aba(rep, Hs[b], q[b], nu[b], qd[b], tau[b]), rtol=1e-8)
    # external wrenches: the same as the CRBA path, which test_dynamics checks against Pinocchio
    w = {f: t(rng.normal(size=(3, 6))) for f in robot.frames[:2]}
    a = robot.kd.aba(t(Hs), t(q), t(nu), t(qd), t(tau), external_wrenches=w)
    assert len(sweeps) == 2
    articulated.FROM = articulated.CHAIN_FROM = 10**9
    close(a, robot.kd.aba(t(Hs), t(q), t(nu), t(qd), t(tau), external_wrenches=w).numpy(), rtol=1e-10)
    assert len(sweeps) == 2


def test_large_batches_take_the_sweep_by_default(rng):
    """iCub (a branched tree) at the threshold: taken without being forced, and every
    configuration right."""
    from conftest import SEED_JOINTS, icub_path

    kd = torchrbd.KinDynComputations(str(icub_path()), SEED_JOINTS)
    pin = PinRobot(str(icub_path()), kd.joints_name_list)
    robot = type("R", (), {"n": kd.NDoF})
    B = articulated.FROM
    assert articulated.sweep_from(kd._model) == B
    Hs, q, nu, qd = sample(robot, rng, B)
    tau = rng.normal(size=(B, kd.NDoF))
    taken = []
    original = articulated.articulated_body
    try:
        articulated.articulated_body = lambda *args: taken.append(1) or original(*args)
        a = kd.aba(t(Hs), t(q), t(nu), t(qd), t(tau))
        assert taken == [1]
        small = kd.aba(t(Hs[:B - 1]), t(q[:B - 1]), t(nu[:B - 1]), t(qd[:B - 1]), t(tau[:B - 1]))
        assert taken == [1], "a batch below the threshold took the sweep"
    finally:
        articulated.articulated_body = original
    rep = REPRESENTATIONS[1]  # MIXED, the default
    for b in range(B):
        close(a[b], pin.aba(rep, Hs[b], q[b], nu[b], qd[b], tau[b]), rtol=1e-8)
    close(small, a[:B - 1].numpy(), rtol=1e-10)


def test_chains_take_the_sweep_from_a_longer_batch(rng):
    """A chain (the embedded 7-joint arm, one body per level) keeps the CRBA path at the
    branched trees' threshold and takes the sweep from ``CHAIN_FROM`` configurations
    on without gradients, from ``CHAIN_GRADIENTS_FROM`` with them (the implicit
    backward either way); its accelerations there match Pinocchio's."""
    kd = torchrbd.models.load("arm7")
    assert articulated.sweep_from(kd._model) == articulated.CHAIN_FROM > articulated.FROM
    with_gradients = articulated.sweep_from(kd._model, gradients=True)
    assert with_gradients == articulated.CHAIN_GRADIENTS_FROM > articulated.CHAIN_FROM
    pin = PinRobot(str(torchrbd.models.path("arm7", "urdf")), kd.joints_name_list)
    robot = type("R", (), {"n": kd.NDoF})
    taken = []  # the batch of each sweep
    original = articulated.sweep
    try:
        articulated.sweep = lambda *args: taken.append(args[-1].shape[-1]) or original(*args)
        for B in (articulated.FROM, articulated.CHAIN_FROM, articulated.CHAIN_GRADIENTS_FROM):
            Hs, q, nu, qd = sample(robot, rng, B)
            tau = rng.normal(size=(B, kd.NDoF))
            a = kd.aba(t(Hs), t(q), t(nu), t(qd), t(tau))
            grad = kd.aba(t(Hs), t(q).requires_grad_(True), t(nu), t(qd), t(tau))
            assert "_ImplicitBackward" in graph_names(grad)
    finally:
        articulated.sweep = original
    # without gradients from CHAIN_FROM on, then with them at CHAIN_GRADIENTS_FROM
    assert taken == [articulated.CHAIN_FROM] + [articulated.CHAIN_GRADIENTS_FROM] * 2
    rep = REPRESENTATIONS[1]  # MIXED, the default
    for b in range(0, B, 37):
        close(a[b], pin.aba(rep, Hs[b], q[b], nu[b], qd[b], tau[b]), rtol=1e-8)


def test_large_batches_with_gradients_take_the_sweep_by_default(rng):
    """iCub at the threshold with gradients: the sweep with its implicit backward, and
    each configuration's directional derivative (joint positions, velocities, torques
    and base velocity at once) matches central differences."""
    from conftest import SEED_JOINTS, icub_path

    kd = torchrbd.KinDynComputations(str(icub_path()), SEED_JOINTS)
    B, n = articulated.FROM, kd.NDoF
    Hs, q, nu, qd = (t(x) for x in sample(type("R", (), {"n": n}), rng, B))
    tau = t(rng.normal(size=(B, n)))
    x = [q, nu, qd, tau]
    dx = [t(rng.normal(size=v.shape)) for v in x]
    w = t(rng.normal(size=(B, 6 + n)))
    leaves = [v.clone().requires_grad_(True) for v in x]
    a = kd.aba(Hs, *leaves)
    assert "_ImplicitBackward" in graph_names(a)
    grads = torch.autograd.grad((a * w).sum(), leaves)
    analytic = sum((g * d).sum(-1) for g, d in zip(grads, dx))
    eps = 1e-6
    plus, minus = (kd.aba(Hs, *(v + s * eps * d for v, d in zip(x, dx))) for s in (1, -1))
    numeric = (w * (plus - minus)).sum(-1) / (2 * eps)
    torch.testing.assert_close(analytic, numeric, rtol=1e-5, atol=1e-5 * numeric.abs().max().item())


def test_sweep_on_random_trees(sweeps):
    """Prismatic, continuous and fixed joints, links declared in random order, in every
    representation; among the trees, levels that are not runs of consecutive bodies
    (results added by index) and coordinates in another order than the bodies."""
    rng = np.random.default_rng(11)
    for tree, kd in _random_trees(rng):
        pin = pin_robot_of(tree, kd.joints_name_list)
        H, q, nu, qd, tau = random_state(rng, kd.NDoF, 4)
        for rep in REPRESENTATIONS:
            kd.set_frame_velocity_representation(rep)
            a = kd.aba(H, q, nu, qd, tau)
            for b in range(4):
                close(a[b], pin.aba(rep, *(x[b].numpy() for x in (H, q, nu, qd, tau))), rtol=1e-8)
    assert len(sweeps) == 8 * len(REPRESENTATIONS)


def _how_added(rows, target) -> str:
    """How a level of the sweep's plan adds into its parents: by a slice of one row per
    body ("same"), into one row ("one"), or by index."""
    if not isinstance(target, slice):
        return "index"
    return "same" if target.stop - target.start == articulated._count(rows) else "one"


def _random_trees(rng, count=8):
    """Yield ``count`` random trees with at least two coordinates, each with its
    ``KinDynComputations``; once all are drawn, check that among them some levels add
    into their parents by slice, by one row and by index, and that some coordinates
    come in another order than the bodies."""
    kinds, permuted, made = set(), False, 0
    while made < count:
        tree = tree_from_rng(rng, max_links=12)
        kd = torchrbd.KinDynComputations(tree.urdf, tree.joints_name_list)
        if kd.NDoF < 2:
            continue
        plan, dof_pos = articulated._level_plan(kd.model)
        kinds |= {_how_added(rows, target) for rows, target, _ in plan}
        permuted |= dof_pos is not None
        made += 1
        yield tree, kd
    assert kinds == {"same", "one", "index"} and permuted


def test_sweep_gradients_on_random_trees(sweeps):
    """The implicit backward's second solve (``articulated.solve_again``) and the RNEA's
    adjoint on trees whose levels add into their parents by index and whose coordinates
    come in another order than the bodies: directional derivatives w.r.t. the base pose
    and velocity, joint positions, velocities and torques against central differences,
    in every representation."""
    rng = np.random.default_rng(12)
    for _, kd in _random_trees(rng):
        H, q, nu, qd, tau = random_state(rng, kd.NDoF, 3)
        p, x = H[:, :3, 3], [q, nu, qd, tau]
        dp, dx = t(rng.normal(size=p.shape)), [t(rng.normal(size=v.shape)) for v in x]
        w = t(rng.normal(size=(3, 6 + kd.NDoF)))

        def aba(p, *x):
            return kd.aba(torch.cat([torch.cat([H[:, :3, :3], p[:, :, None]], 2), H[:, 3:]], 1), *x)

        for rep in REPRESENTATIONS:
            kd.set_frame_velocity_representation(rep)
            leaves = [v.clone().requires_grad_(True) for v in [p] + x]
            a = aba(*leaves)
            assert "_ImplicitBackward" in graph_names(a)
            grads = torch.autograd.grad((a * w).sum(), leaves)
            analytic = sum((g * d).sum(-1) for g, d in zip(grads, [dp] + dx))
            eps = 1e-6
            plus, minus = (aba(*(v + s * eps * d for v, d in zip([p] + x, [dp] + dx))) for s in (1, -1))
            numeric = (w * (plus - minus)).sum(-1) / (2 * eps)
            torch.testing.assert_close(analytic, numeric, rtol=1e-5, atol=1e-6 * max(1.0, numeric.abs().max().item()))


@pytest.mark.parametrize("one_joint_per_body", [False, True], ids=["two_hinges_on_a_body", "one_joint_per_body"])
def test_sweep_with_armature_and_a_slide_matches_mujoco(sweeps, one_joint_per_body):
    """MuJoCo's floating walker: armature on the pivots, a slide, a welded body, and
    (unless removed) a body with two hinges, which becomes a chain of two bodies."""
    xml = WALKER
    if one_joint_per_body:
        xml = WALKER.replace('<joint name="hip_x" axis="1 0 0.3" pos="0.01 0.02 0.04"/>', "")
        assert xml != WALKER
    walker = Twin(xml)
    assert walker.kd.model.has_armature
    rng = np.random.default_rng(5)
    states, expected = zip(*(walker.aba_case(rng) for _ in range(4)))
    acc = walker.kd.aba(*(t(np.stack(x)) for x in zip(*states)))
    assert sweeps == [4]
    close(acc, np.stack(expected))


def test_gradients_take_the_crba_path(sweeps, rng):
    """With an input that requires grad, aba keeps the CRBA path and its hand-written
    backwards; its values equal the sweep's."""
    from conftest import SEED_JOINTS, icub_path

    kd = torchrbd.KinDynComputations(str(icub_path()), SEED_JOINTS)
    Hs, q, nu, qd = sample(type("R", (), {"n": kd.NDoF}), rng, 2)
    tau = t(rng.normal(size=(2, kd.NDoF)))
    qg = t(q).requires_grad_()
    a = kd.aba(t(Hs), qg, t(nu), t(qd), tau)
    assert sweeps == [] and a.grad_fn is not None
    close(a.detach(), kd.aba(t(Hs), t(q), t(nu), t(qd), tau).numpy(), rtol=1e-10)
    assert sweeps == [2]
    with torch.no_grad():
        kd.aba(t(Hs), qg, t(nu), t(qd), tau)
    assert sweeps == [2, 2]


def test_a_massless_joint_is_an_error_on_the_sweep(sweeps):
    kd = torchrbd.KinDynComputations(MASSLESS_JOINT_URDF)
    one, zero = torch.ones(2, 1, dtype=torch.float64), torch.zeros(2, 6, dtype=torch.float64)
    with pytest.raises(ModelError, match="not positive definite"):
        kd.aba(torch.eye(4, dtype=torch.float64).expand(2, 4, 4), one, zero, one, one)
    assert sweeps == [2]


def test_float32_sweep_within_the_documented_bound(sweeps):
    """docs/accuracy.md: float32 aba within 1e-3 of float64 (relative), here on the sweep,
    with the base near the origin and, for BODY_FIXED and MIXED, 100 m away."""
    from conftest import SEED_JOINTS, icub_path
    from random_trees import far, rel_err
    from test_properties import F32_BOUNDS, INERTIAL

    kd = torchrbd.KinDynComputations(str(icub_path()), SEED_JOINTS)
    state = random_state(np.random.default_rng(8), kd.NDoF, 32)
    for rep in REPRESENTATIONS:
        kd.set_frame_velocity_representation(rep)
        for placed in [state] + ([far(state)] if rep is not INERTIAL else []):
            err = rel_err(kd.aba(*(x.float() for x in placed)), kd.aba(*placed))
            assert err <= F32_BOUNDS["aba"], f"{rep.name}: {err:.2e}"
    assert sweeps == [32] * 10


def test_gradients_in_the_parameters_on_the_sweep(sweeps):
    """A mass (set_inertial_parameters), an armature or the gravity that requires grad,
    with the joint positions: the sweep with its implicit backward
    (``forward_dynamics._Implicit``; the in-place sweep is only for calls without
    gradients), the same accelerations as without them, and gradients that match
    finite differences (MuJoCo's walker, which has armatures). (Gravity alone keeps the
    in-place sweep: of a free-floating robot it only moves the base's acceleration, the
    one term added after the sweep.)"""
    from torch.autograd import gradcheck

    walker = Twin(WALKER)
    rng = np.random.default_rng(9)
    states = [walker.random_state(rng) for _ in range(2)]
    H = t(np.stack([s[0] for s in states]))
    q = t(np.stack([s[1] for s in states]))
    nu, qd, tau = (t(rng.normal(size=(2, k))) for k in (6, walker.n, walker.n))
    expected = walker.kd.aba(H, q, nu, qd, tau)
    assert sweeps == [2]
    model = walker.kd.model

    def with_mass(mass):
        kd = torchrbd.KinDynComputations(model)
        kd.set_inertial_parameters(mass=mass)
        return kd

    def with_gravity(gravity):
        kd = torchrbd.KinDynComputations(model)
        kd.gravity = gravity
        return kd

    makers = {
        "mass": (with_mass, walker.kd.get_inertial_parameters()["mass"]),
        "armature": (lambda a: torchrbd.KinDynComputations(model.replace(armature=a)), model.armature),
        "gravity": (with_gravity, model.gravity),
    }
    for name, (make, value) in makers.items():  # with the joint positions: gravity alone has the in-place sweep
        value, qg = value.detach().clone().requires_grad_(True), q.clone().requires_grad_(True)
        a = make(value).aba(H, qg, nu, qd, tau)
        assert "_ImplicitBackward" in graph_names(a), name
        close(a.detach(), expected.numpy(), rtol=1e-10)
        scale = a.abs().max().item()
        assert gradcheck(lambda v, q: make(v).aba(H, q, nu, qd, tau) / scale, (value, qg), eps=1e-6, atol=1e-6,
                         rtol=1e-5), name
    assert sweeps == [2]

