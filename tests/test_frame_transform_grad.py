"""``forward_kinematics`` with a gradient on long batches (algorithms/frame_transform_grad.py,
whose backward dots the chain's joint twists with the cotangent): its pose against
Pinocchio's, its gradient w.r.t. the joint positions against Pinocchio's frame Jacobian,
w.r.t. the base transform against finite differences, second derivatives, and when it
is (not) taken."""

import numpy as np
import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

import torchrbd
from torchrbd.algorithms import frame_transform_grad
from conftest import SEED_JOINTS, graph_names, icub_path
from pin_reference import MIXED, skew
from test_kinematics import close, sample

t = torch.tensor
TAKEN = "_FrameTransformBackward"


def test_pose_and_gradient_match_pinocchio(robot, rng):
    """Every frame below the base of every robot, B = FROM: the poses are Pinocchio's, and
    the gradient of ``sum(W * world_H_frame)`` w.r.t. q is, joint by joint,
    ``sum(W_R * [w_k]x R) + W_p . v_k`` with ``[v_k; w_k]`` the joint's column of
    Pinocchio's LOCAL_WORLD_ALIGNED frame Jacobian."""
    B = frame_transform_grad.FROM
    Hs, q, _, _ = sample(robot, rng, B)
    W = rng.normal(size=(B, 4, 4))
    frames = [f for f in robot.frames if robot.kd.model.frame(f)[0] > 0]
    assert frames
    for frame in frames:
        qg = t(q).requires_grad_(True)
        T = robot.kd.forward_kinematics(frame, t(Hs), qg)
        assert TAKEN in graph_names(T)
        (grad,) = torch.autograd.grad((T * t(W)).sum(), qg)
        for b in range(0, B, 19):
            pose = robot.pin.fk(frame, Hs[b], q[b])
            close(T[b], pose)
            J = robot.pin.jacobian(MIXED, frame, Hs[b], q[b])[:, 6:]
            expected = [(W[b, :3, :3] * (skew(J[3:, k]) @ pose[:3, :3])).sum() + W[b, :3, 3] @ J[:3, k]
                        for k in range(robot.n)]
            close(grad[b], np.array(expected))


@pytest.fixture(scope="module")
def icub():
    pytest.importorskip("icub_models")
    return torchrbd.KinDynComputations(str(icub_path()), SEED_JOINTS)


def test_gradient_for_any_base_matrix_matches_finite_differences(icub):
    """Base matrices that are not rigid transforms (the path is written for any ``H``,
    as the operator-by-operator one differentiates it), gradients w.r.t. H and q at once:
    the directional derivative matches central differences, and the results match the
    operator-by-operator path's."""
    B, n = frame_transform_grad.FROM, icub.NDoF
    g = torch.Generator().manual_seed(2)
    H = torch.eye(4, dtype=torch.float64) + 0.3 * torch.randn(B, 4, 4, generator=g, dtype=torch.float64)
    q = torch.randn(B, n, generator=g, dtype=torch.float64)
    dH, dq, W = torch.randn_like(H), torch.randn_like(q), torch.randn_like(H)
    Hg, qg = H.clone().requires_grad_(True), q.clone().requires_grad_(True)
    T = icub.forward_kinematics("l_sole", Hg, qg)
    assert TAKEN in graph_names(T)
    gH, gq = torch.autograd.grad((T * W).sum(), (Hg, qg))
    assert gH[:, 3].abs().max() == 0  # H's last row is not read
    eps = 1e-6
    plus, minus = (icub.forward_kinematics("l_sole", H + s * eps * dH, q + s * eps * dq) for s in (1, -1))
    numeric = ((plus - minus) * W).sum((1, 2)) / (2 * eps)
    analytic = (gH * dH).sum((1, 2)) + (gq * dq).sum(1)
    torch.testing.assert_close(analytic, numeric, rtol=1e-6, atol=1e-6 * numeric.abs().max().item())
    Hg2, qg2 = H.clone().requires_grad_(True), q.clone().requires_grad_(True)
    frame_transform_grad_applies = frame_transform_grad.applies
    try:
        frame_transform_grad.applies = lambda *args: False
        T2 = icub.forward_kinematics("l_sole", Hg2, qg2)
        assert TAKEN not in graph_names(T2)
        gH2, gq2 = torch.autograd.grad((T2 * W).sum(), (Hg2, qg2))
    finally:
        frame_transform_grad.applies = frame_transform_grad_applies
    torch.testing.assert_close(T, T2, rtol=0, atol=1e-13)
    torch.testing.assert_close(gH, gH2, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gq, gq2, rtol=1e-12, atol=1e-12)


def test_gradcheck_and_second_derivatives(icub, monkeypatch):
    """gradcheck and gradgradcheck of the path (taken at every batch size here), w.r.t.
    the base transform and the joint positions; second derivatives recompute the pose
    inside the graph."""
    monkeypatch.setattr(frame_transform_grad, "FROM", 1)
    g = torch.Generator().manual_seed(3)
    H = (torch.eye(4, dtype=torch.float64) + 0.2 * torch.randn(2, 4, 4, generator=g, dtype=torch.float64))
    q = torch.randn(2, icub.NDoF, generator=g, dtype=torch.float64)
    inputs = (H.requires_grad_(True), q.requires_grad_(True))

    def f(H, q):
        return icub.forward_kinematics("r_hand", H, q)

    assert TAKEN in graph_names(f(*inputs))
    assert gradcheck(f, inputs)
    assert gradgradcheck(f, inputs)


def test_when_it_is_taken(icub):
    """Taken from FROM configurations on with q requiring grad; not below, not for a
    gradient w.r.t. the base transform alone, not for a frame on the base, not while a
    model parameter it would not differentiate needs grad, not inside torch.func."""
    B, n = frame_transform_grad.FROM, icub.NDoF
    H = torch.eye(4, dtype=torch.float64).expand(B, 4, 4)
    q = torch.zeros(B, n, dtype=torch.float64)

    def names(frame, H, q):
        return graph_names(icub.forward_kinematics(frame, H, q))

    assert TAKEN in names("l_sole", H, q.clone().requires_grad_(True))
    assert TAKEN not in names("l_sole", H[1:], q[1:].clone().requires_grad_(True))
    assert TAKEN not in names("l_sole", H.clone().requires_grad_(True), q)
    assert TAKEN not in names("root_link", H, q.clone().requires_grad_(True))
    m = icub.model
    body_pos = m.body_pos.clone().requires_grad_(True)
    kd = torchrbd.KinDynComputations(m.replace(body_pos=body_pos))
    T = kd.forward_kinematics("l_sole", H, q.clone().requires_grad_(True))
    assert TAKEN not in graph_names(T)
    assert torch.autograd.grad(T.sum(), body_pos)[0].abs().sum() > 0
    # jacrev over a long batch: the transform's wrapped tensors take the other path
    D = torch.func.jacrev(lambda x: icub.forward_kinematics("l_sole", H, x))(q)
    assert D.shape == (B, 4, 4, B, n)
