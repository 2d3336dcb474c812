"""Kinematics against Pinocchio: FK, Jacobians, Jdot, CoM, in all representations."""

import numpy as np
import pytest
import torch
from torchrbd.algorithms.batchlast import DENSE_BELOW
from torchrbd.algorithms import link_frames
from torchrbd.algorithms.kinematics import CHAIN_PRODUCTS_BELOW

from pin_reference import REPRESENTATIONS, random_pose

RTOL = 1e-9


def close(a, b, rtol=RTOL):
    a = a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    scale = max(1.0, np.abs(b).max())
    err = np.abs(a - b).max()
    assert err <= rtol * scale, f"max error {err:.3e} (scale {scale:.3e})"


def sample(robot, rng, B):
    Hs = np.stack([random_pose(rng) for _ in range(B)])
    q = rng.uniform(-1.2, 1.2, size=(B, robot.n))
    nu = rng.normal(size=(B, 6))
    qd = rng.normal(size=(B, robot.n))
    return Hs, q, nu, qd


def test_forward_kinematics_batched(robot, rng):
    Hs, q, _, _ = sample(robot, rng, 3)
    for frame in robot.frames:
        T = robot.kd.forward_kinematics(frame, torch.tensor(Hs), torch.tensor(q))
        assert T.shape == (3, 4, 4)
        for b in range(3):
            close(T[b], robot.pin.fk(frame, Hs[b], q[b]))


@pytest.mark.parametrize("B", [1, 5, DENSE_BELOW])
def test_forward_kinematics_of_every_batch_length(robot, rng, B):
    """Eager calls multiply the base pose, the chain's local transforms and the frame's
    placement (``kinematics.frame_transforms``: one ``linalg.multi_dot`` for one
    configuration, a ``bmm`` per joint for short batches, batch-last rows by groups of joints for
    long ones, with chains of every parity among the frames): every frame against
    Pinocchio, an exact last row, a base transform whose last row is not read, and
    gradients with respect to the joint positions and the whole base transform against
    finite differences."""
    Hs, q, _, _ = sample(robot, rng, B)
    odd = Hs.copy()
    odd[:, 3] = [1.0, 2.0, 3.0, 4.0]  # not read, as in a longer batch
    for frame in robot.frames:
        refs = [robot.pin.fk(frame, Hs[b], q[b]) for b in range(B)]
        T = robot.kd.forward_kinematics(frame, torch.tensor(Hs), torch.tensor(q))
        T_odd = robot.kd.forward_kinematics(frame, torch.tensor(odd), torch.tensor(q))
        assert T.shape == (B, 4, 4)
        for b in range(B):
            close(T[b], refs[b])
            close(T_odd[b], refs[b])
            assert T[b, 3].tolist() == [0.0, 0.0, 0.0, 1.0]
        T0 = robot.kd.forward_kinematics(frame, torch.tensor(Hs[0]), torch.tensor(q[0]))
        assert T0.shape == (4, 4)
        assert robot.kd.forward_kinematics(frame, torch.tensor(Hs[:0]), torch.tensor(q[:0])).shape == (0, 4, 4)
        assert robot.kd.jacobian(frame, torch.tensor(Hs[:0]), torch.tensor(q[:0])).shape == (0, 6, 6 + robot.n)
        close(T0, refs[0])
    H = torch.tensor(Hs, requires_grad=True)
    qj = torch.tensor(q, requires_grad=True)
    # tolerances well under gradcheck's defaults (atol 1e-5), which a random projection
    # of a long batch's outputs can stay under with a term of the gradient missing
    assert torch.autograd.gradcheck(lambda H, qj: robot.kd.forward_kinematics(robot.frames[0], H, qj), (H, qj),
                                    fast_mode=B >= DENSE_BELOW, atol=1e-8, rtol=1e-6)


@pytest.mark.parametrize("rep", REPRESENTATIONS, ids=lambda r: r.name)
def test_jacobian(robot, rng, rep):
    robot.kd.set_frame_velocity_representation(rep)
    Hs, q, nu, qd = sample(robot, rng, 2)
    for frame in robot.frames:
        J = robot.kd.jacobian(frame, torch.tensor(Hs), torch.tensor(q))
        assert J.shape == (2, 6, 6 + robot.n)
        for b in range(2):
            close(J[b], robot.pin.jacobian(rep, frame, Hs[b], q[b]))
        # unbatched
        J0 = robot.kd.jacobian(frame, torch.tensor(Hs[0]), torch.tensor(q[0]))
        assert J0.shape == (6, 6 + robot.n)
        close(J0, robot.pin.jacobian(rep, frame, Hs[0], q[0]))


@pytest.mark.parametrize("B", [CHAIN_PRODUCTS_BELOW[0] + 2, CHAIN_PRODUCTS_BELOW[1] + 16])
@pytest.mark.parametrize("rep", REPRESENTATIONS, ids=lambda r: r.name)
def test_long_batch_jacobians(robot, rng, rep, B):
    """Long batches (the batch-last products, which short batches replace by library
    calls) without autograd: every frame's Jacobian (its chain's joints in groups,
    ``frame_twists``, for chains of every length modulo the group's) and one Jacobian
    rate (the chain composed joint by joint: the products' autograd Functions above both
    bounds of ``kinematics.CHAIN_PRODUCTS_BELOW``; between them one ``bmm`` per joint),
    configuration by configuration, against Pinocchio; and the same Jacobians with the
    joint positions requiring grad."""
    robot.kd.set_frame_velocity_representation(rep)
    Hs, q, nu, qd = sample(robot, rng, B)
    t = torch.tensor
    for frame in robot.frames:
        with torch.no_grad():
            J = robot.kd.jacobian(frame, t(Hs), t(q))
        assert J.shape == (B, 6, 6 + robot.n) and J.is_contiguous()
        for b in range(B):
            close(J[b], robot.pin.jacobian(rep, frame, Hs[b], q[b]))
        J_g = robot.kd.jacobian(frame, t(Hs), t(q).requires_grad_())
        assert J_g.requires_grad or robot.kd.model.frame(frame)[0] == 0  # (a frame on the base moves with no joint)
        torch.testing.assert_close(J_g.detach(), J, rtol=1e-12, atol=1e-12)
    frame = robot.frames[-1]
    with torch.no_grad():
        Jd = robot.kd.jacobian_dot(frame, t(Hs), t(q), t(nu), t(qd))
    for b in range(B):
        close(Jd[b], robot.pin.jacobian_dot(rep, frame, Hs[b], q[b], nu[b], qd[b]))


@pytest.mark.parametrize("B", [2, DENSE_BELOW])
@pytest.mark.parametrize("rep", REPRESENTATIONS, ids=lambda r: r.name)
def test_batch_jacobian_gradients(robot, rng, rep, B):
    """A batch's Jacobian and Jacobian rate with every input requiring grad (the chain's
    joints in groups, ``frame_twists``, through plain operators; cross products by the
    library below ``DENSE_BELOW``, by components from there): for every frame, each
    configuration's directional derivative along a random direction of all inputs
    against central differences."""
    robot.kd.set_frame_velocity_representation(rep)
    x = [torch.tensor(v) for v in sample(robot, rng, B)]  # H, q, nu, qd
    dx = [torch.tensor(rng.normal(size=v.shape)) for v in x]
    leaves = [v.clone().requires_grad_(True) for v in x]
    eps = 1e-6
    for frame in robot.frames:
        if robot.kd.model.frame(frame)[0] == 0:  # a frame on the base: J depends on nothing
            continue
        for f, k in ((robot.kd.jacobian, 2), (robot.kd.jacobian_dot, 4)):
            out = f(frame, *leaves[:k])
            w = torch.tensor(rng.normal(size=out.shape))
            grads = torch.autograd.grad((out * w).sum(), leaves[:k])
            analytic = sum((g * d).flatten(1).sum(1) for g, d in zip(grads, dx))
            plus, minus = (f(frame, *(v + s * eps * d for v, d in zip(x[:k], dx))) for s in (1, -1))
            numeric = (w * (plus - minus)).flatten(1).sum(1) / (2 * eps)
            torch.testing.assert_close(analytic, numeric, rtol=1e-6, atol=1e-6 * numeric.abs().max().item())


@pytest.mark.parametrize("B", [2, link_frames.FROM])
def test_link_poses(robot, rng, B):
    """Every link's pose against Pinocchio's frame placements: a short batch (each
    link's body pose composed batch-last), a long one (products with constants written
    straight into the result, ``algorithms.link_frames``) with and without gradients,
    and the gradient against finite differences."""
    Hs, q, _, _ = sample(robot, rng, B)
    names = robot.kd.model.link_names
    P = robot.kd.link_poses(torch.tensor(Hs), torch.tensor(q))
    assert P.shape == (B, len(names), 4, 4) and P.is_contiguous()
    for b in range(B):
        close(P[b], robot.pin.fk_all(names, Hs[b], q[b]))
    H, qj = torch.tensor(Hs, requires_grad=True), torch.tensor(q, requires_grad=True)
    P_g = robot.kd.link_poses(H, qj)
    torch.testing.assert_close(P_g.detach(), P, rtol=1e-12, atol=1e-12)
    w = torch.randn(P.shape, dtype=P.dtype, generator=torch.Generator().manual_seed(0))
    _, dq = torch.autograd.grad((P_g * w).sum(), (H, qj))
    eps, d = 1e-6, torch.randn(q.shape, dtype=P.dtype, generator=torch.Generator().manual_seed(1))
    plus, minus = (robot.kd.link_poses(torch.tensor(Hs), torch.tensor(q) + s * eps * d) for s in (1, -1))
    close((dq * d).sum(), ((w * (plus - minus)).sum() / (2 * eps)).item(), rtol=1e-6)


def test_link_poses_and_velocities_of_long_batches_have_second_derivatives():
    """The products' backward (``link_frames._RunProducts``) is made of differentiable
    operators: second derivatives against finite differences of the first."""
    import torchrbd.models

    kd = torchrbd.models.load("quadruped")
    g = torch.Generator().manual_seed(0)
    B = link_frames.FROM
    H = torch.eye(4, dtype=torch.float64).repeat(B, 1, 1)
    q, nu, qd = (torch.randn(B, k, dtype=torch.float64, generator=g, requires_grad=True) for k in (kd.NDoF, 6, kd.NDoF))
    assert torch.autograd.gradgradcheck(lambda q: kd.link_poses(H, q), (q,), fast_mode=True)
    assert torch.autograd.gradgradcheck(lambda q, qd: kd.link_velocities(H, q, nu, qd), (q, qd), fast_mode=True)


@pytest.mark.parametrize("B", [2, link_frames.FROM])
@pytest.mark.parametrize("rep", REPRESENTATIONS, ids=lambda r: r.name)
def test_link_velocities(robot, rng, rep, B):
    """Every link's velocity from one sweep of the tree (``link_velocities``) against
    Pinocchio's frame velocities: a short batch (each link's body twist converted like
    a frame's), a long one (products with constants, ``algorithms.link_frames``) with
    and without gradients, its gradient against finite differences, and one unbatched
    configuration."""
    robot.kd.set_frame_velocity_representation(rep)
    Hs, q, nu, qd = sample(robot, rng, B)
    t = torch.tensor
    names = robot.kd.model.link_names
    V = robot.kd.link_velocities(t(Hs), t(q), t(nu), t(qd))
    assert V.shape == (B, len(names), 6) and V.is_contiguous()
    refs = [robot.pin.frame_velocities(rep, names, Hs[b], q[b], nu[b], qd[b]) for b in range(B)]
    for b in range(B):
        close(V[b], refs[b])
    qj, qdj = t(q).requires_grad_(), t(qd).requires_grad_()
    V_g = robot.kd.link_velocities(t(Hs), qj, t(nu), qdj)
    torch.testing.assert_close(V_g.detach(), V, rtol=1e-12, atol=1e-12)
    w = torch.randn(V.shape, dtype=V.dtype, generator=torch.Generator().manual_seed(0))
    dq, dqd = torch.autograd.grad((V_g * w).sum(), (qj, qdj))
    eps, g = 1e-6, torch.Generator().manual_seed(1)
    d, dd = torch.randn(q.shape, dtype=V.dtype, generator=g), torch.randn(qd.shape, dtype=V.dtype, generator=g)
    plus, minus = (robot.kd.link_velocities(t(Hs), t(q) + s * eps * d, t(nu), t(qd) + s * eps * dd) for s in (1, -1))
    close((dq * d).sum() + (dqd * dd).sum(), ((w * (plus - minus)).sum() / (2 * eps)).item(), rtol=1e-6)
    V0 = robot.kd.link_velocities(t(Hs[0]), t(q[0]), t(nu[0]), t(qd[0]))
    assert V0.shape == (len(names), 6)
    close(V0, refs[0])


@pytest.mark.parametrize("rep", REPRESENTATIONS, ids=lambda r: r.name)
def test_jacobian_dot(robot, rng, rep):
    robot.kd.set_frame_velocity_representation(rep)
    Hs, q, nu, qd = sample(robot, rng, 2)
    frame = robot.frames[0]
    Jd = robot.kd.jacobian_dot(frame, torch.tensor(Hs), torch.tensor(q), torch.tensor(nu), torch.tensor(qd))
    for b in range(2):
        close(Jd[b], robot.pin.jacobian_dot(rep, frame, Hs[b], q[b], nu[b], qd[b]))


@pytest.mark.parametrize("rep", REPRESENTATIONS, ids=lambda r: r.name)
def test_relative_jacobian(robot, rng, rep):
    robot.kd.set_frame_velocity_representation(rep)
    _, q, _, _ = sample(robot, rng, 2)
    frame = robot.frames[0]
    Jr = robot.kd.relative_jacobian(frame, torch.tensor(q))
    assert Jr.shape == (2, 6, robot.n)
    for b in range(2):
        close(Jr[b], robot.pin.jacobian(rep, frame, np.eye(4), q[b])[:, 6:])


@pytest.mark.parametrize("rep", REPRESENTATIONS, ids=lambda r: r.name)
def test_com(robot, rng, rep):
    robot.kd.set_frame_velocity_representation(rep)
    Hs, q, _, _ = sample(robot, rng, 2)
    c = robot.kd.CoM_position(torch.tensor(Hs), torch.tensor(q))
    Jc = robot.kd.CoM_jacobian(torch.tensor(Hs), torch.tensor(q))
    assert c.shape == (2, 3) and Jc.shape == (2, 3, 6 + robot.n)
    for b in range(2):
        close(c[b], robot.pin.com(Hs[b], q[b]))
        close(Jc[b], robot.pin.com_jacobian(rep, Hs[b], q[b]))
    close(robot.kd.get_total_mass(), robot.pin.total_mass())


@pytest.mark.parametrize("batch", [(), (3,), (2, 3)])
def test_outputs_are_contiguous_in_the_batch_shape(batch):
    """Every result has the inputs' batch shape in front and contiguous memory (the
    algorithms run batch-last; a user's ``.view`` must not meet those strides)."""
    import torchrbd.models

    kd = torchrbd.models.load("quadruped")
    n, f = kd.NDoF, "FL_foot"
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*batch, *s, generator=g, dtype=torch.float64)  # noqa: E731
    H = torch.eye(4, dtype=torch.float64).expand(*batch, 4, 4)
    q, nu, qd, tau = r(n), r(6), r(n), r(n)
    results = {
        "forward_kinematics": kd.forward_kinematics(f, H, q), "link_poses": kd.link_poses(H, q),
        "link_velocities": kd.link_velocities(H, q, nu, qd),
        "jacobian": kd.jacobian(f, H, q), "jacobian_dot": kd.jacobian_dot(f, H, q, nu, qd),
        "relative_jacobian": kd.relative_jacobian(f, q), "CoM_position": kd.CoM_position(H, q),
        "CoM_jacobian": kd.CoM_jacobian(H, q), "mass_matrix": kd.mass_matrix(H, q),
        "centroidal_momentum_matrix": kd.centroidal_momentum_matrix(H, q),
        "bias_force": kd.bias_force(H, q, nu, qd), "coriolis_term": kd.coriolis_term(H, q, nu, qd),
        "gravity_term": kd.gravity_term(H, q), "rnea": kd.rnea(H, q, nu, qd, nu, qd),
        "aba": kd.aba(H, q, nu, qd, tau),
        "mass_matrix_and_bias_force[1]": kd.mass_matrix_and_bias_force(H, q, nu, qd)[1],
    }
    for name, x in results.items():
        assert tuple(x.shape[: len(batch)]) == batch, name
        assert x.is_contiguous(), name
