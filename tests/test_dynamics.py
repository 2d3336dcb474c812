"""Dynamics against Pinocchio: CRBA, centroidal map, RNEA, bias/Coriolis/gravity, ABA."""

import numpy as np
import pytest
import torch
from torchrbd.algorithms.batchlast import DENSE_BELOW

from pin_reference import REPRESENTATIONS
from test_kinematics import close, sample

REP_IDS = lambda r: r.name  # noqa: E731


@pytest.mark.parametrize("rep", REPRESENTATIONS, ids=REP_IDS)
def test_mass_matrix_and_centroidal(robot, rng, rep):
    robot.kd.set_frame_velocity_representation(rep)
    Hs, q, _, _ = sample(robot, rng, 2)
    M = robot.kd.mass_matrix(torch.tensor(Hs), torch.tensor(q))
    A = robot.kd.centroidal_momentum_matrix(torch.tensor(Hs), torch.tensor(q))
    assert M.shape == (2, 6 + robot.n, 6 + robot.n) and A.shape == (2, 6, 6 + robot.n)
    for b in range(2):
        close(M[b], robot.pin.mass_matrix(rep, Hs[b], q[b]))
        close(A[b], robot.pin.centroidal(rep, Hs[b], q[b]))


@pytest.mark.parametrize("rep", REPRESENTATIONS, ids=REP_IDS)
def test_bias_coriolis_gravity(robot, rng, rep):
    robot.kd.set_frame_velocity_representation(rep)
    Hs, q, nu, qd = sample(robot, rng, 2)
    args = [torch.tensor(x) for x in (Hs, q, nu, qd)]
    h = robot.kd.bias_force(*args)
    C = robot.kd.coriolis_term(*args)
    G = robot.kd.gravity_term(*args[:2])
    z6, zn = np.zeros(6), np.zeros(robot.n)
    for b in range(2):
        close(h[b], robot.pin.rnea(rep, Hs[b], q[b], nu[b], qd[b], z6, zn))
        close(C[b], robot.pin.rnea(rep, Hs[b], q[b], nu[b], qd[b], z6, zn, gravity=False))
        close(G[b], robot.pin.rnea(rep, Hs[b], q[b], z6, zn, z6, zn))


@pytest.mark.parametrize("rep", REPRESENTATIONS, ids=REP_IDS)
def test_gravity_of_a_long_batch_and_a_tilted_gravity(robot, rng, rep):
    """G(q) from the subtrees' first moments (not a Newton-Euler pass) on a long batch,
    whose cross products take the per-component path, and under a gravity that is not
    vertical: Pinocchio's RNEA at rest with the same gravity."""
    kd = robot.kd
    kd.set_frame_velocity_representation(rep)
    Hs, q, _, _ = sample(robot, rng, DENSE_BELOW)
    z6, zn = np.zeros(6), np.zeros(robot.n)
    g = np.array([1.5, -2.0, -9.0])
    before = kd.gravity.clone()
    try:
        G = kd.gravity_term(torch.tensor(Hs), torch.tensor(q))
        kd.gravity = torch.tensor(g)
        Gt = kd.gravity_term(torch.tensor(Hs), torch.tensor(q))
    finally:
        kd.gravity = before
    for b in (0, DENSE_BELOW // 2, DENSE_BELOW - 1):
        close(G[b], robot.pin.rnea(rep, Hs[b], q[b], z6, zn, z6, zn))
        close(Gt[b], robot.pin.rnea(rep, Hs[b], q[b], z6, zn, z6, zn, gravity=g))


@pytest.mark.parametrize("rep", REPRESENTATIONS, ids=REP_IDS)
def test_rnea_and_aba(robot, rng, rep):
    robot.kd.set_frame_velocity_representation(rep)
    Hs, q, nu, qd = sample(robot, rng, 2)
    nud = rng.normal(size=(2, 6))
    qdd = rng.normal(size=(2, robot.n))
    tau = rng.normal(size=(2, robot.n))
    t = lambda x: torch.tensor(x)  # noqa: E731
    f = robot.kd.rnea(t(Hs), t(q), t(nu), t(qd), t(nud), t(qdd))
    a = robot.kd.aba(t(Hs), t(q), t(nu), t(qd), t(tau))
    for b in range(2):
        close(f[b], robot.pin.rnea(rep, Hs[b], q[b], nu[b], qd[b], nud[b], qdd[b]))
        close(a[b], robot.pin.aba(rep, Hs[b], q[b], nu[b], qd[b], tau[b]), rtol=1e-8)
    # unbatched, and the round trip ABA(RNEA) = identity
    a0 = robot.kd.aba(t(Hs[0]), t(q[0]), t(nu[0]), t(qd[0]), t(tau[0]))
    assert a0.shape == (6 + robot.n,)
    back = robot.kd.rnea(t(Hs[0]), t(q[0]), t(nu[0]), t(qd[0]), a0[:6], a0[6:])
    close(back, np.concatenate([np.zeros(6), tau[0]]), rtol=1e-8)


@pytest.mark.parametrize("rep", REPRESENTATIONS, ids=REP_IDS)
def test_aba_external_wrenches(robot, rng, rep):
    """M a + h = [0; tau] + sum J^T w."""
    robot.kd.set_frame_velocity_representation(rep)
    Hs, q, nu, qd = sample(robot, rng, 2)
    tau = rng.normal(size=(2, robot.n))
    frames = robot.frames[:2]
    w = {f: torch.tensor(rng.normal(size=(2, 6))) for f in frames}
    t = lambda x: torch.tensor(x)  # noqa: E731
    a = robot.kd.aba(t(Hs), t(q), t(nu), t(qd), t(tau), external_wrenches=w)
    M = robot.kd.mass_matrix(t(Hs), t(q))
    h = robot.kd.bias_force(t(Hs), t(q), t(nu), t(qd))
    lhs = (M @ a.unsqueeze(-1)).squeeze(-1) + h
    rhs = torch.cat([torch.zeros(2, 6, dtype=torch.float64), t(tau)], -1)
    for f in frames:
        J = robot.kd.jacobian(f, t(Hs), t(q))
        rhs = rhs + (J.transpose(-1, -2) @ w[f].unsqueeze(-1)).squeeze(-1)
    close(lhs, rhs.numpy(), rtol=1e-9)
    # and against Pinocchio's M and h directly
    for b in range(2):
        Mp = robot.pin.mass_matrix(rep, Hs[b], q[b])
        hp = robot.pin.rnea(rep, Hs[b], q[b], nu[b], qd[b], np.zeros(6), np.zeros(robot.n))
        close(Mp @ a[b].numpy() + hp, rhs[b].numpy(), rtol=1e-8)


@pytest.mark.parametrize("B", [1, 5, DENSE_BELOW])
@pytest.mark.parametrize("rep", REPRESENTATIONS, ids=REP_IDS)
def test_batch_sizes_with_their_own_code_match_pinocchio(robot, rng, rep, B):
    """A batch of ``batchlast.DENSE_BELOW`` takes the eager long-batch code (products
    written into buffers, see ``batchlast.writes_into_buffers``), shorter ones the dense 6x6 products
    (``batchlast.dense_products``: one ``bmm`` each at B = 1, where the kinematics also
    pose the tree by pointer jumping): every configuration against Pinocchio, under
    ``torch.no_grad``, in grad mode with nothing requiring grad, and with the velocities
    requiring grad."""
    robot.kd.set_frame_velocity_representation(rep)
    Hs, q, nu, qd = sample(robot, rng, B)
    nud, qdd, tau = rng.normal(size=(B, 6)), rng.normal(size=(B, robot.n)), rng.normal(size=(B, robot.n))
    t = lambda x: torch.tensor(x)  # noqa: E731
    kd = robot.kd
    with torch.no_grad():
        M = kd.mass_matrix(t(Hs), t(q))
        A = kd.centroidal_momentum_matrix(t(Hs), t(q))
        C = kd.coriolis_term(t(Hs), t(q), t(nu), t(qd))
        G = kd.gravity_term(t(Hs), t(q))
        f = kd.rnea(t(Hs), t(q), t(nu), t(qd), t(nud), t(qdd))
        a = kd.aba(t(Hs), t(q), t(nu), t(qd), t(tau))
    h = kd.bias_force(t(Hs), t(q), t(nu), t(qd))  # grad mode on, nothing requires grad
    qd_g = t(qd).requires_grad_()
    h_g = kd.bias_force(t(Hs), t(q), t(nu), qd_g)
    assert h_g.requires_grad
    z6, zn = np.zeros(6), np.zeros(robot.n)
    for b in range(B):
        close(M[b], robot.pin.mass_matrix(rep, Hs[b], q[b]))
        close(A[b], robot.pin.centroidal(rep, Hs[b], q[b]))
        hp = robot.pin.rnea(rep, Hs[b], q[b], nu[b], qd[b], z6, zn)
        close(h[b], hp)
        close(h_g[b], hp)
        close(C[b], robot.pin.rnea(rep, Hs[b], q[b], nu[b], qd[b], z6, zn, gravity=False))
        close(G[b], robot.pin.rnea(rep, Hs[b], q[b], z6, zn, z6, zn))
        close(f[b], robot.pin.rnea(rep, Hs[b], q[b], nu[b], qd[b], nud[b], qdd[b]))
        close(a[b], robot.pin.aba(rep, Hs[b], q[b], nu[b], qd[b], tau[b]), rtol=1e-8)


@pytest.mark.parametrize("path", ["by_bodies", "from_entries"])
@pytest.mark.parametrize("rep", [r for r in REPRESENTATIONS if not r.name.startswith("MIXED")], ids=REP_IDS)
def test_long_batch_mass_matrix_in_other_representations(robot, rng, rep, path, monkeypatch):
    """A long batch without gradients makes the mass matrix from its distinct entries,
    in the bodies' order or (a model whose bodies are not one per coordinate) the
    coordinates'; in BODY_FIXED and INERTIAL_FIXED its base rows are then taken to the
    representation in place (``crba._base_rows_in_representation``). Every
    configuration against Pinocchio, counting that the transformation ran."""
    from torchrbd.algorithms import crba

    if path == "from_entries":  # what models with several coordinates on a body take
        monkeypatch.setattr(crba, "_by_bodies", lambda *args: False)
    calls = []
    transform = crba._base_rows_in_representation
    monkeypatch.setattr(crba, "_base_rows_in_representation", lambda *a: calls.append(1) or transform(*a))
    robot.kd.set_frame_velocity_representation(rep)
    Hs, q, _, _ = sample(robot, rng, DENSE_BELOW)
    with torch.no_grad():
        M = robot.kd.mass_matrix(torch.tensor(Hs), torch.tensor(q))
    assert calls == [1]
    for b in range(DENSE_BELOW):
        close(M[b], robot.pin.mass_matrix(rep, Hs[b], q[b]))


@pytest.mark.parametrize("B", [1, 5, DENSE_BELOW])
def test_batch_sizes_with_their_own_code_on_random_trees(B):
    """The same two code paths on random trees (prismatic, continuous and fixed joints,
    arbitrary axes, links in random order, coordinates in another order than the
    bodies): mass matrix, bias force and aba against Pinocchio, every representation."""
    import torchrbd
    from pin_reference import pin_robot_of
    from random_trees import random_state, tree_from_rng

    rng = np.random.default_rng(21)
    for _ in range(6):
        tree = tree_from_rng(rng, max_links=10)
        kd = torchrbd.KinDynComputations(tree.urdf, tree.joints_name_list)
        pin = pin_robot_of(tree, kd.joints_name_list)
        H, q, nu, qd, tau = random_state(rng, kd.NDoF, B)
        z6, zn = np.zeros(6), np.zeros(kd.NDoF)
        for rep in REPRESENTATIONS:
            kd.set_frame_velocity_representation(rep)
            with torch.no_grad():
                M, h, a = kd.mass_matrix(H, q), kd.bias_force(H, q, nu, qd), kd.aba(H, q, nu, qd, tau)
            for b in range(B):
                x = [t[b].numpy() for t in (H, q, nu, qd, tau)]
                close(M[b], pin.mass_matrix(rep, x[0], x[1]))
                close(h[b], pin.rnea(rep, *x[:4], z6, zn))
                close(a[b], pin.aba(rep, *x), rtol=1e-8)
