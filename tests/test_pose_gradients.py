"""``forward_kinematics`` and ``CoM_position`` with gradients through their hand-written
backwards (algorithms/frame_transform_grad.py: the chain's joint twists dotted with the
cotangent; algorithms/center_of_mass_grad.py: the coordinates' motion subspaces and
subtree moments): values against Pinocchio's, gradients w.r.t. the joint positions
against Pinocchio's frame and CoM Jacobians, w.r.t. the base transform against finite
differences, second derivatives, and when each path is (not) taken."""

import numpy as np
import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

import torchrbd
from torchrbd.algorithms import center_of_mass_grad, frame_transform_grad
from conftest import SEED_JOINTS, graph_names, icub_path
from pin_reference import MIXED, skew
from test_kinematics import close, sample

t = torch.tensor
FK, COM = "_FrameTransformBackward", "_CenterOfMassBackward"

PATHS = {  # name: (module, its Function's node, call(kd, H, q))
    "forward_kinematics": (frame_transform_grad, FK, lambda kd, H, q: kd.forward_kinematics("l_sole", H, q)),
    "CoM_position": (center_of_mass_grad, COM, lambda kd, H, q: kd.CoM_position(H, q)),
}


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
        assert FK in graph_names(T)
        (grad,) = torch.autograd.grad((T * t(W)).sum(), qg)
        for b in range(0, B, 19):
            pose = robot.pin.fk(frame, Hs[b], q[b])
            close(T[b], pose)
            J = robot.pin.jacobian(MIXED, frame, Hs[b], q[b])[:, 6:]
            expected = [(W[b, :3, :3] * (skew(J[3:, k]) @ pose[:3, :3])).sum() + W[b, :3, 3] @ J[:3, k]
                        for k in range(robot.n)]
            close(grad[b], np.array(expected))


@pytest.mark.parametrize("B", [1, 5])
def test_com_and_gradient_match_pinocchio(robot, rng, B):
    """Every robot, one configuration and a batch: the CoM is Pinocchio's, and the
    gradient of ``w . CoM`` w.r.t. q is ``w`` times the joint columns of Pinocchio's CoM
    Jacobian."""
    Hs, q, _, _ = sample(robot, rng, B)
    w = rng.normal(size=(B, 3))
    qg = t(q).requires_grad_(True)
    c = robot.kd.CoM_position(t(Hs), qg)
    assert COM in graph_names(c)
    (grad,) = torch.autograd.grad((c * t(w)).sum(), qg)
    for b in range(B):
        close(c[b], robot.pin.com(Hs[b], q[b]))
        close(grad[b], w[b] @ robot.pin.com_jacobian(MIXED, Hs[b], q[b])[:, 6:])


@pytest.fixture(scope="module")
def icub():
    pytest.importorskip("icub_models")
    return torchrbd.KinDynComputations(str(icub_path()), SEED_JOINTS)


@pytest.mark.parametrize("name", PATHS)
def test_gradient_for_any_base_matrix_matches_finite_differences(icub, name, monkeypatch):
    """Base matrices that are not rigid transforms (each path is written for any ``H``,
    as the operator-by-operator one differentiates it), gradients w.r.t. H and q at once:
    the directional derivative matches central differences, and the results match the
    operator-by-operator path's."""
    module, node, call = PATHS[name]
    B, n = frame_transform_grad.FROM, icub.NDoF
    g = torch.Generator().manual_seed(2)
    H = torch.eye(4, dtype=torch.float64) + 0.3 * torch.randn(B, 4, 4, generator=g, dtype=torch.float64)
    q = torch.randn(B, n, generator=g, dtype=torch.float64)
    dH, dq = torch.randn_like(H), torch.randn_like(q)
    W = torch.randn_like(call(icub, H, q))

    def value_and_grads():
        Hg, qg = H.clone().requires_grad_(True), q.clone().requires_grad_(True)
        out = call(icub, Hg, qg)
        return out, graph_names(out), torch.autograd.grad((out * W).sum(), (Hg, qg))

    out, names, (gH, gq) = value_and_grads()
    assert node in names
    assert gH[:, 3].abs().max() == 0  # H's last row is not read
    eps = 1e-6
    plus, minus = (call(icub, H + s * eps * dH, q + s * eps * dq) for s in (1, -1))
    numeric = ((plus - minus) * W).flatten(1).sum(1) / (2 * eps)
    analytic = (gH * dH).sum((1, 2)) + (gq * dq).sum(1)
    torch.testing.assert_close(analytic, numeric, rtol=1e-6, atol=1e-6 * numeric.abs().max().item())
    monkeypatch.setattr(module, "applies", lambda *args: False)
    out2, names2, (gH2, gq2) = value_and_grads()
    assert node not in names2
    torch.testing.assert_close(out, out2, rtol=0, atol=1e-13)
    torch.testing.assert_close(gH, gH2, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gq, gq2, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", PATHS)
def test_gradcheck_and_second_derivatives(icub, name, monkeypatch):
    """gradcheck and gradgradcheck of each path (taken at every batch size here), w.r.t.
    the base transform and the joint positions; second derivatives recompute the output
    operator by operator inside the graph."""
    module, node, call = PATHS[name]
    monkeypatch.setattr(module, "FROM", 1)
    g = torch.Generator().manual_seed(3)
    H = (torch.eye(4, dtype=torch.float64) + 0.2 * torch.randn(2, 4, 4, generator=g, dtype=torch.float64))
    q = torch.randn(2, icub.NDoF, generator=g, dtype=torch.float64)
    inputs = (H.requires_grad_(True), q.requires_grad_(True))

    def f(H, q):
        return call(icub, H, q)

    assert node in graph_names(f(*inputs))
    assert gradcheck(f, inputs)
    assert gradgradcheck(f, inputs)


@pytest.mark.parametrize("name", PATHS)
def test_when_it_is_taken(icub, name):
    """Taken with q requiring grad (forward kinematics from FROM configurations on); not
    for a gradient w.r.t. the base transform alone, not while a model parameter it would
    not differentiate needs grad (which then gets its gradient), not inside torch.func."""
    module, node, call = PATHS[name]
    B, n = frame_transform_grad.FROM, icub.NDoF
    H = torch.eye(4, dtype=torch.float64).expand(B, 4, 4)
    q = torch.zeros(B, n, dtype=torch.float64)
    assert node in graph_names(call(icub, H, q.clone().requires_grad_(True)))
    assert node not in graph_names(call(icub, H.clone().requires_grad_(True), q))
    m = icub.model
    for field in ("body_pos", "link_mass") if module is center_of_mass_grad else ("body_pos",):
        p = getattr(m, field).clone().requires_grad_(True)
        out = call(torchrbd.KinDynComputations(m.replace(**{field: p})), H, q.clone().requires_grad_(True))
        assert node not in graph_names(out)
        assert torch.autograd.grad(out.sum(), p)[0].abs().sum() > 0
    D = torch.func.jacrev(lambda x: call(icub, H, x))(q)  # the transform's wrapped tensors take the other path
    assert D.shape == (*call(icub, H, q).shape, B, n)


def test_forward_kinematics_below_the_threshold_and_on_the_base(icub):
    """Forward kinematics keeps autograd through the chain below FROM configurations and
    for a frame on the base."""
    B, n = frame_transform_grad.FROM, icub.NDoF
    H = torch.eye(4, dtype=torch.float64).expand(B, 4, 4)
    q = torch.zeros(B, n, dtype=torch.float64, requires_grad=True)
    assert FK not in graph_names(icub.forward_kinematics("l_sole", H[1:], q[1:]))
    assert FK not in graph_names(icub.forward_kinematics("root_link", H, q))
