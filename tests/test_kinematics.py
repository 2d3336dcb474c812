"""Kinematics against Pinocchio: FK, Jacobians, Jdot, CoM, in all representations."""

import numpy as np
import pytest
import torch

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
