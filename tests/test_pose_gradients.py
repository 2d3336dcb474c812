"""``forward_kinematics``, ``CoM_position`` and the MIXED and INERTIAL ``jacobian`` with gradients
through their hand-written backwards (algorithms/frame_transform_grad.py: the chain's
joint twists dotted with the cotangent; algorithms/center_of_mass_grad.py: the
coordinates' motion subspaces and subtree moments; algorithms/jacobian_grad.py: running
sums of the twists along the chain): values against Pinocchio's, gradients w.r.t. the
joint positions against Pinocchio's frame and CoM Jacobians and the frame Jacobian's
time variation, w.r.t. the base transform against finite differences, second
derivatives, and when each path is (not) taken."""

import numpy as np
import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

import torchrbd
from torchrbd.algorithms import center_of_mass_grad, frame_transform_grad, jacobian_grad
from conftest import SEED_JOINTS, graph_names, icub_path
from pin_reference import BODY, INERTIAL, MIXED, skew
from test_kinematics import close, sample

t = torch.tensor
FK, COM, JAC = "_FrameTransformBackward", "_CenterOfMassBackward", "_FrameJacobianBackward"

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
    assert node in names and out.is_contiguous()
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


@pytest.mark.parametrize("B", [1, 5])
@pytest.mark.parametrize("rep", [MIXED, INERTIAL, BODY], ids=["MIXED", "INERTIAL", "BODY"])
def test_jacobian_gradient_matches_pinocchio_jacobian_rate(robot, rng, rep, B):
    """Every frame below the base of every robot, every representation, one
    configuration and a batch: with the base at rest, the gradient of ``sum(W * J)``
    w.r.t. q, dotted with joint velocities ``qd``, is ``sum(W * dJ/dt)`` with Pinocchio's
    frame Jacobian time variation."""
    Hs, q, _, qd = sample(robot, rng, B)
    W = rng.normal(size=(B, 6, 6 + robot.n))
    robot.kd.set_frame_velocity_representation(rep)
    try:
        for frame in [f for f in robot.frames if robot.kd.model.frame(f)[0] > 0]:
            qg = t(q).requires_grad_(True)
            J = robot.kd.jacobian(frame, t(Hs), qg)
            assert JAC in graph_names(J)
            (grad,) = torch.autograd.grad((J * t(W)).sum(), qg)
            for b in range(B):
                close(J[b], robot.pin.jacobian(rep, frame, Hs[b], q[b]))
                rate = robot.pin.jacobian_dot(rep, frame, Hs[b], q[b], np.zeros(6), qd[b])
                close((grad[b] * t(qd[b])).sum(), (W[b] * rate).sum())
    finally:
        robot.kd.set_frame_velocity_representation(MIXED)


@pytest.mark.parametrize("rep", [MIXED, INERTIAL, BODY], ids=["MIXED", "INERTIAL", "BODY"])
def test_jacobian_gradient_matches_finite_differences_and_autograd(icub, monkeypatch, rep):
    """Rigid base poses, a long batch: the directional derivative w.r.t. q matches central
    differences, and value and gradient match autograd through the operators; gradcheck
    and gradgradcheck at a short batch."""
    icub.set_frame_velocity_representation(rep)
    B, n = 96, icub.NDoF
    g = torch.Generator().manual_seed(4)
    axis = torch.nn.functional.normalize(torch.randn(B, 3, generator=g, dtype=torch.float64), dim=-1)
    H = torchrbd.spatial.homogeneous(torchrbd.spatial.axis_angle_to_matrix(axis, torch.rand(B, generator=g, dtype=torch.float64) * 3),
                                     torch.randn(B, 3, generator=g, dtype=torch.float64))
    q = torch.randn(B, n, generator=g, dtype=torch.float64)
    dq, W = torch.randn_like(q), torch.randn(B, 6, 6 + n, generator=g, dtype=torch.float64)

    def value_and_grad():
        qg = q.clone().requires_grad_(True)
        J = icub.jacobian("r_hand", H, qg)
        return J, graph_names(J), torch.autograd.grad((J * W).sum(), qg)[0]

    J, names, grad = value_and_grad()
    assert JAC in names and J.is_contiguous()
    eps = 1e-6
    plus, minus = (icub.jacobian("r_hand", H, q + s * eps * dq) for s in (1, -1))
    numeric = ((plus - minus) * W).sum((1, 2)) / (2 * eps)
    torch.testing.assert_close((grad * dq).sum(1), numeric, rtol=1e-6, atol=1e-6 * numeric.abs().max().item())
    with monkeypatch.context() as m:
        m.setattr(jacobian_grad, "applies", lambda *args: False)
        J2, names2, grad2 = value_and_grad()
    assert JAC not in names2
    torch.testing.assert_close(J, J2, rtol=0, atol=1e-13)
    torch.testing.assert_close(grad, grad2, rtol=1e-12, atol=1e-12)
    qs = q[:2].clone().requires_grad_(True)
    assert gradcheck(lambda x: icub.jacobian("l_sole", H[:2], x), (qs,))
    assert gradgradcheck(lambda x: icub.jacobian("l_sole", H[:2], x), (qs,))
    icub.set_frame_velocity_representation(MIXED)


def test_jacobian_path_is_taken_where_it_applies(icub):
    """The Jacobian in every representation with q requiring grad, one configuration
    included; not a gradient wanted from the base transform, not while a joint placement
    needs grad, not inside torch.func."""
    B, n = 4, icub.NDoF
    H = torch.eye(4, dtype=torch.float64).expand(B, 4, 4)
    q = torch.zeros(B, n, dtype=torch.float64)
    qg = q.clone().requires_grad_(True)
    try:
        for rep in torchrbd.Representations:
            icub.set_frame_velocity_representation(rep)
            assert JAC in graph_names(icub.jacobian("l_sole", H, qg))
        icub.set_frame_velocity_representation(MIXED)
        assert JAC in graph_names(icub.jacobian("l_sole", H[:1], qg[:1]))
        assert JAC not in graph_names(icub.jacobian("l_sole", H.clone().requires_grad_(True), qg))
        body_pos = icub.model.body_pos.clone().requires_grad_(True)
        J = torchrbd.KinDynComputations(icub.model.replace(body_pos=body_pos)).jacobian("l_sole", H, qg)
        assert JAC not in graph_names(J)
        assert torch.autograd.grad(J.sum(), body_pos)[0].abs().sum() > 0
        D = torch.func.jacrev(lambda x: icub.jacobian("l_sole", H, x))(q)
        assert D.shape == (B, 6, 6 + n, B, n)
    finally:
        icub.set_frame_velocity_representation(MIXED)


@pytest.mark.parametrize("name", [*PATHS, "jacobian"])
def test_batched_gradients(icub, name):
    """``autograd.grad(..., is_grads_batched=True)`` (the backward under vmap, as
    ``torch.autograd.functional.jacobian(vectorize=True)`` runs it) through each
    hand-written backward equals the cotangents taken one by one, w.r.t. H and q."""
    icub.set_frame_velocity_representation(MIXED)
    B, n = frame_transform_grad.FROM, icub.NDoF
    g = torch.Generator().manual_seed(5)
    H = torch.eye(4, dtype=torch.float64) + 0.1 * torch.randn(B, 4, 4, generator=g, dtype=torch.float64)
    q = torch.randn(B, n, generator=g, dtype=torch.float64)
    if name == "jacobian":
        module, node, call = jacobian_grad, JAC, lambda kd, H, q: kd.jacobian("l_sole", H, q)
        inputs = (q.requires_grad_(True),)
    else:
        module, node, call = PATHS[name]
        inputs = (H.requires_grad_(True), q.requires_grad_(True))
    out = call(icub, H, q)
    assert node in graph_names(out)
    V = torch.randn(3, *out.shape, generator=g, dtype=torch.float64)
    batched = torch.autograd.grad(out, inputs, V, retain_graph=True, is_grads_batched=True)
    for i in range(3):
        one = torch.autograd.grad(out, inputs, V[i], retain_graph=True)
        for a, b in zip(batched, one):
            torch.testing.assert_close(a[i], b, rtol=1e-12, atol=1e-12)
