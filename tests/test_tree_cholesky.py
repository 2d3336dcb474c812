"""The tree-sparse factorisation of M (algorithms/tree_cholesky.py) against dense
linear algebra, and aba / the simulator's step on it against Pinocchio and MuJoCo."""

import numpy as np
import pytest
import torch

import torchrbd
import torchrbd.algorithms as alg
from torchrbd.algorithms import tree_cholesky as tc
from pin_reference import REPRESENTATIONS
from random_trees import tree_from_rng
from test_kinematics import close, sample
from test_sim_contacts import _penetrating_quadruped, _stage
from test_sim_gradients import ROBOT, _check_fd, _drive, _scene


def _pieces(seed: int, B: int = 3, massless: bool = False):
    """A random tree's model and CRBA pieces (Mbb, F, S) and dense M (B, 6+n, 6+n)."""
    tree = tree_from_rng(np.random.default_rng(seed), max_links=8, allow_massless=massless)
    kd = torchrbd.KinDynComputations(tree.write(), tree.joints_name_list)
    model = kd.model
    g = torch.Generator().manual_seed(seed)
    H = torch.eye(4, dtype=torch.float64).repeat(B, 1, 1)
    H[:, :3, 3] = torch.randn(B, 3, generator=g, dtype=torch.float64)
    q = torch.randn(B, model.n, generator=g, dtype=torch.float64)
    R, p = H[:, :3, :3].permute(1, 2, 0), H[:, :3, 3].T
    kin = alg.forward(model, R.contiguous(), p.contiguous(), q.T.contiguous())
    Mbb, F, S = alg.mass_matrix_top(model, kin, alg.world_inertias(model, kin))
    return model, Mbb, F, S, alg.assemble(model, Mbb, F, S)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("floating", [True, False], ids=["floating", "fixed"])
def test_solve_and_inverse_diagonal_match_dense_algebra(seed, floating):
    model, Mbb, F, S, M = _pieces(seed)
    plan = tc.tree_plan(model, floating)
    M = M if floating else M[:, 6:, 6:]
    if not plan.N:  # every joint of this tree is fixed
        assert M.shape[-1] == 0 and plan.size == 0
        return
    g = torch.Generator().manual_seed(100 + seed)
    extra = torch.rand(plan.N, M.shape[0], generator=g, dtype=torch.float64)  # added to the diagonal
    packed = tc.packed_inertia(model, plan, F, S, Mbb if floating else None, extra)
    M = M + torch.diag_embed(extra.T)
    b = torch.randn(plan.N, 2, M.shape[0], generator=g, dtype=torch.float64)
    x = tc.tree_solve(plan, packed, b)
    expected = torch.linalg.solve(M, b.permute(2, 0, 1)).permute(1, 2, 0)
    torch.testing.assert_close(x, expected, rtol=1e-10, atol=1e-10 * expected.abs().max().item())
    inv_diag = tc.inverse_diagonal(plan, tc.factor(plan, packed))
    torch.testing.assert_close(inv_diag, torch.linalg.inv(M).diagonal(0, 1, 2).T, rtol=1e-10, atol=0)


@pytest.mark.parametrize("seed", range(4))
def test_gradients_of_the_solve(seed):
    """First and second derivatives in the packed entries and the right-hand side
    (the hand-written backward of _TreeSolve), and torch.func through it."""
    model, Mbb, F, S, _ = _pieces(seed, B=2)
    plan = tc.tree_plan(model)
    packed = tc.packed_inertia(model, plan, F, S, Mbb).detach().requires_grad_()
    b = torch.randn(plan.N, 2, dtype=torch.float64, requires_grad=True)
    solve = lambda P, r: tc.tree_solve(plan, P, r)  # noqa: E731
    assert torch.autograd.gradcheck(solve, (packed, b), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(solve, (packed, b))
    J = torch.func.jacrev(solve, argnums=1)(packed.detach(), b.detach())  # (N, B, N, B)
    M = alg.assemble(model, Mbb, F, S)
    torch.testing.assert_close(J[:, 0, :, 0], torch.linalg.inv(M[0]), rtol=1e-9, atol=1e-9)


def test_a_matrix_that_is_not_positive_definite_raises_when_checked():
    model, Mbb, F, S, _ = _pieces(0)
    plan = tc.tree_plan(model)
    packed = tc.packed_inertia(model, plan, F, S, Mbb)
    packed[plan.diagonal[-1]] = -1.0  # a negative diagonal entry
    b = torch.ones(plan.N, packed.shape[-1], dtype=torch.float64)
    with pytest.raises(torch.linalg.LinAlgError):
        tc.tree_solve(plan, packed, b, check=True)
    assert not torch.isfinite(tc.tree_solve(plan, packed, b)).all()


@pytest.fixture
def tree_path(monkeypatch):
    """Make every batch take the tree factorisation (by default only large CPU batches do)."""
    monkeypatch.setattr(tc, "pays_off", lambda *args, **kwargs: True)


@pytest.mark.parametrize("rep", REPRESENTATIONS, ids=lambda r: r.name)
def test_aba_on_the_tree_path_matches_pinocchio(robot, rng, rep, tree_path):
    robot.kd.set_frame_velocity_representation(rep)
    Hs, q, nu, qd = sample(robot, rng, 2)
    tau = rng.normal(size=(2, robot.n))
    t = torch.tensor
    a = robot.kd.aba(t(Hs), t(q), t(nu), t(qd), t(tau))
    for b in range(2):
        close(a[b], robot.pin.aba(rep, Hs[b], q[b], nu[b], qd[b], tau[b]), rtol=1e-8)


@pytest.mark.parametrize("tree", [False, True], ids=["dense", "tree"])
def test_forward_mode_and_hessians_through_aba(monkeypatch, tree):
    """jacfwd (the solves' jvp rules) equals jacrev, and the forward-over-reverse
    Hessian of a loss equals the reverse-over-reverse one, on either solve path."""
    monkeypatch.setattr(tc, "pays_off", lambda *args, **kwargs: tree)
    kd = torchrbd.models.load("quadruped")
    g = torch.Generator().manual_seed(2)
    H = torch.eye(4, dtype=torch.float64)
    q, qd, tau = (torch.randn(kd.NDoF, generator=g, dtype=torch.float64) for _ in range(3))
    nu = torch.randn(6, generator=g, dtype=torch.float64)
    aba = lambda x: kd.aba(H, x, nu, qd, tau)  # noqa: E731
    J = torch.func.jacrev(aba)(q)
    torch.testing.assert_close(torch.func.jacfwd(aba)(q), J, rtol=1e-9, atol=1e-9 * J.abs().max().item())
    loss = lambda x: aba(x).square().sum()  # noqa: E731
    Hr = torch.func.jacrev(torch.func.jacrev(loss))(q)
    torch.testing.assert_close(torch.func.hessian(loss)(q), Hr, rtol=1e-8, atol=1e-8 * Hr.abs().max().item())


def test_vmap_of_jacrev_through_aba_when_the_plan_is_first_built_inside(tree_path):
    """The plan's index tensors are cached; built for the first time inside
    ``vmap(jacrev(...))`` they must still be plain tensors (they were wrapped for the
    transform's level, and the solve failed with an internal functorch assertion)."""
    kd = torchrbd.models.load("quadruped")
    g = torch.Generator().manual_seed(3)
    H = torch.eye(4, dtype=torch.float64)[None]
    q = torch.randn(3, kd.NDoF, generator=g, dtype=torch.float64)
    nu, qd, tau = (torch.randn(1, k, generator=g, dtype=torch.float64) for k in (6, kd.NDoF, kd.NDoF))

    def aba(x):
        return kd.aba(H, x[None], nu, qd, tau)[0]

    tc._plan.cache_clear()
    J = torch.func.vmap(torch.func.jacrev(aba))(q)
    for b in range(len(q)):
        torch.testing.assert_close(J[b], torch.autograd.functional.jacobian(aba, q[b]))


def test_aba_on_the_tree_path_counts_the_armature(tree_path):
    """A tree with rotor inertia: aba solves with M as mass_matrix gives it (the
    dense M includes the armature, checked against MuJoCo in test_mujoco_dynamics)."""
    tree = tree_from_rng(np.random.default_rng(5), max_links=6, allow_massless=False)
    kd = torchrbd.KinDynComputations(tree.write(), tree.joints_name_list)
    n = kd.NDoF
    kd = torchrbd.KinDynComputations(kd.model.replace(armature=torch.linspace(0.1, 0.5, n, dtype=torch.float64)))
    assert kd.model.has_armature
    g = torch.Generator().manual_seed(0)
    H = torch.eye(4, dtype=torch.float64).repeat(3, 1, 1)
    q, qd, tau = (torch.randn(3, n, generator=g, dtype=torch.float64) for _ in range(3))
    nu = torch.randn(3, 6, generator=g, dtype=torch.float64)
    a = kd.aba(H, q, nu, qd, tau)
    M, h = kd.mass_matrix(H, q), kd.bias_force(H, q, nu, qd)
    rhs = torch.cat([torch.zeros(3, 6, dtype=torch.float64), tau], 1) - h
    torch.testing.assert_close(a, torch.linalg.solve(M, rhs), rtol=1e-10, atol=1e-10)


def test_the_default_path_choice(monkeypatch):
    """Large CPU batches take the tree in float32, and in float64 when torch runs on one
    thread; the rest LAPACK's dense Cholesky."""
    cpu, f32, f64 = torch.device("cpu"), torch.float32, torch.float64
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert tc.pays_off(4096, f32, cpu) and tc.pays_off(512, f32, cpu)
    assert not tc.pays_off(1, f32, cpu) and not tc.pays_off(64, f32, cpu) and not tc.pays_off(4096, f64, cpu)
    assert not tc.pays_off(4096, f32, torch.device("cuda"))  # unmeasured there: the dense path stays
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert tc.pays_off(512, f64, cpu) and tc.pays_off(4096, f64, cpu)
    assert not tc.pays_off(256, f64, cpu) and not tc.pays_off(4096, f64, torch.device("cuda"))
    assert tc.pays_off(256, f64, cpu, compiled=True) and not tc.pays_off(64, f64, cpu, compiled=True)


@pytest.mark.usefixtures("sim_float64_one_thread")
@pytest.mark.parametrize("tree", [False, True], ids=["dense", "tree"])
def test_simulator_acceleration_with_contacts_limits_and_damping(monkeypatch, tree):
    """The simulator's acceleration on either solve path against dense algebra written
    here: the quadruped pressed into the floor (Euler's implicit contact, joint and PD
    damping folded into M) with four joints past their limits (the soft limit force
    ``m_eff (a_ref - a)``, ``m_eff = 1 / (M^-1)_ii``, one-sided)."""
    from torchrbd.sim import dynamics as dyn

    monkeypatch.setattr(tc, "pays_off", lambda *args, **kwargs: tree)
    scene, robot = _penetrating_quadruped()
    st = robot._statics()
    n = st.n
    q = robot._qpos.detach()[:, 7:].clone()
    q[:, 0], q[:, 1] = st.upper[0] + 0.05, st.lower[1] - 0.02  # past the upper / lower limits
    q[:, 5], q[:, 8] = st.upper[5] + 0.01, st.lower[8] - 0.03
    robot.set_dofs_position(q[0], dofs_idx_local=list(range(6, 6 + n)))
    res = _stage(scene, implicit=True)
    ctrl, qpos, vel, h = robot._control(), robot._qpos.detach(), robot._vel.detach(), 1e-3
    acc = dyn.acceleration(st, ctrl, qpos, vel, h, res.loads[0])

    R, p, quat = dyn.base_pose(st, qpos, None)
    qd = vel[:, 6:]
    M, bias = dyn.mass_and_bias(robot._kd, R, p, q, vel[:, :6], qd, True)
    tau, kv = dyn.control_force(st, ctrl, qpos, vel, quat)
    tau = tau + torch.nn.functional.pad(dyn.passive_force(st, q, qd), (6, 0)) + res.generalized[0]
    M = M + torch.diag_embed(h * (torch.nn.functional.pad(st.damping, (6, 0)) + kv)) + h * res.damping[0]
    Minv = torch.linalg.inv(M)[0]
    a = Minv @ (tau - bias)[0]
    tc_, zeta = st.limit_timeconst, st.limit_dampratio
    b, k = 2.0 / tc_, 1.0 / (tc_ * zeta) ** 2
    m_eff = 1.0 / Minv.diagonal()[6:]
    r_up, r_lo = (q - st.upper)[0], (st.lower - q)[0]
    f = torch.where(st.has_upper & (r_up > 0), (m_eff * (-k * r_up - b * qd[0] - a[6:])).clamp(max=0), 0.0)
    f = f + torch.where(st.has_lower & (r_lo > 0), (m_eff * (k * r_lo - b * qd[0] - a[6:])).clamp(min=0), 0.0)
    assert (f != 0).sum() >= 3  # the limits push
    expected = a + Minv @ torch.nn.functional.pad(f, (6, 0))
    torch.testing.assert_close(acc[0].detach(), expected.detach(), rtol=1e-9, atol=1e-9)


@pytest.mark.usefixtures("sim_float64_one_thread", "tree_path")
@pytest.mark.parametrize("integrator", ["Euler", "RK4"])
def test_simulator_gradients_on_the_tree_path_match_finite_differences(tmp_path, integrator):
    """Gradients through steps whose solves take the tree path (its lean backward, and
    the joint-limit force: the shoulder starts past its upper limit of 3 rad)."""
    import torchrbd.sim as gs

    urdf = tmp_path / "robot.urdf"
    urdf.write_text(ROBOT)
    scene, robot = _scene(str(urdf), False, getattr(gs.integrator, integrator))
    nv, T = robot.n_dofs, 4
    rng = np.random.default_rng(4)

    def run(q0, v0, tau):
        return _drive(scene, robot, q0, v0, tau)

    q0 = torch.tensor(rng.normal(size=nv) * 0.3)
    q0[:3] += torch.tensor([0.0, 0.1, 0.5])
    q0[6] = 3.1
    params = dict(q0=q0, v0=torch.tensor(rng.normal(size=nv)), tau=torch.tensor(rng.normal(size=(T, nv))))
    _check_fd(run, params)


@pytest.mark.usefixtures("sim_float64_one_thread")
def test_fixed_base_robot_held_at_its_limit_moves_alike_on_both_paths(tmp_path, monkeypatch):
    """A fixed-base arm driven into its shoulder limit (the limit force active for
    most of the run): the tree path's trajectory is the dense path's."""
    import torchrbd.sim as gs

    urdf = tmp_path / "robot.urdf"
    urdf.write_text(ROBOT)

    def run(tree):
        monkeypatch.setattr(tc, "pays_off", lambda *args, **kwargs: tree)
        scene = gs.Scene(sim_options=gs.options.SimOptions(dt=0.002))
        arm = scene.add_entity(gs.morphs.URDF(file=str(urdf), fixed=True))
        scene.build(n_envs=4)
        arm.control_dofs_force(torch.tensor([[40.0, 1.0]] * 4, dtype=torch.float64))
        past = 0
        for _ in range(150):
            scene.step()
            past += int((arm.get_dofs_position().as_subclass(torch.Tensor)[:, 0] > 3.0).any())
        return past, arm.get_dofs_position().as_subclass(torch.Tensor), arm.get_dofs_velocity().as_subclass(torch.Tensor)

    (past, q_dense, v_dense), (_, q_tree, v_tree) = run(False), run(True)
    assert past > 50
    torch.testing.assert_close(q_tree, q_dense, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(v_tree, v_dense, rtol=1e-10, atol=1e-10)
