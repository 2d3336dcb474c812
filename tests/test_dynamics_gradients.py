"""The dynamics' gradients against Pinocchio's derivatives. ``aba`` against
``computeABADerivatives``, on each way torchrbd computes them: the implicit rule
(``forward_dynamics._Implicit``: one more solve with the forward's factor, then the
RNEA's adjoint) with the dense Cholesky factor below ``articulated.sweep_from``
configurations and with the articulated-body sweep from it on, and autograd through
the CRBA path (what a second derivative recomputes); short batches and a long one
(component-wise products). ``rnea`` against ``computeRNEADerivatives``."""

import numpy as np
import pytest
import torch

from torchrbd.algorithms import forward_dynamics
from torchrbd.algorithms.batchlast import DENSE_BELOW
from conftest import graph_names, sweep_at_every_batch
from pin_reference import BODY, MIXED, pin
from test_kinematics import close, sample

t = torch.tensor
METHODS = [("dense", 3), ("sweep", 3), ("crba_autograd", 3), ("default", DENSE_BELOW)]


@pytest.fixture
def method(request, monkeypatch):
    """Routes aba's gradients through one method (see the module note; "default": what a
    batch of its size takes); returns its name, the batch and the batches of the sweeps
    that ran (recorded for "sweep" only)."""
    name, B = request.param
    sweeps = sweep_at_every_batch(monkeypatch) if name == "sweep" else []
    if name == "crba_autograd":
        monkeypatch.setattr(forward_dynamics, "implicit_backward", lambda *tensors: False)
    return name, B, sweeps


@pytest.mark.parametrize("method", METHODS, indirect=True, ids=[f"{m}-B{B}" for m, B in METHODS])
@pytest.mark.parametrize("rep", [MIXED, BODY], ids=["mixed", "body"])
def test_aba_gradient_matches_pinocchio(robot, rng, method, rep):
    """Every robot, batches of 3 and of ``DENSE_BELOW``: the vector-Jacobian product of
    the accelerations (base and joints) w.r.t. the joint positions, velocities and torques is the cotangent times
    Pinocchio's ``ddq_dq``, ``ddq_dv`` and ``M^-1`` (their joint columns), mapped to the
    representation's base acceleration; and the graph holds the method's Function.
    Tolerance: 1e-9 relative, or 100 eps cond(M) where M is ill-conditioned (tiago's
    cond(M) is about 3e7: a derivative of ``M^-1`` loses that much to rounding in
    either library)."""
    (method, B, sweeps), kd, pr, n = method, robot.kd, robot.pin, robot.n
    kd.set_frame_velocity_representation(rep)
    Hs, q, nu, qd = sample(robot, rng, B)
    tau = rng.normal(size=(B, n))
    W = rng.normal(size=(B, 6 + n))
    leaves = [t(x).requires_grad_(True) for x in (q, qd, tau)]
    a = kd.aba(t(Hs), leaves[0], t(nu), leaves[1], leaves[2])
    assert ("_ImplicitBackward" in graph_names(a)) == (method != "crba_autograd")
    assert sweeps == ([B] if method == "sweep" else [])
    grads = torch.autograd.grad((a * t(W)).sum(), leaves)
    P = pr.P()
    for b in range(0, B, 19):
        pq = pr.q(Hs[b], q[b])
        v = pr.v_local(rep, Hs[b], nu[b], qd[b])
        pin.computeABADerivatives(pr.model, pr.data, pq, v, P @ np.concatenate([np.zeros(6), tau[b]]))
        Minv = np.triu(pr.data.Minv) + np.triu(pr.data.Minv, 1).T  # Pinocchio fills the upper triangle
        out = pr.full_K(rep, Hs[b]) @ P.T  # ours = K P^T (Pinocchio's accelerations) + terms free of q, qd, tau
        rtol = max(1e-9, 100 * np.finfo(float).eps * np.linalg.cond(Minv))
        for grad, d in zip(grads, (pr.data.ddq_dq, pr.data.ddq_dv, Minv)):
            close(grad[b], W[b] @ (out @ d @ P)[:, 6:], rtol=rtol)


@pytest.mark.parametrize("B", [3, DENSE_BELOW])
@pytest.mark.parametrize("rep", [MIXED, BODY], ids=["mixed", "body"])
def test_rnea_gradient_matches_pinocchio(robot, rng, B, rep):
    """Every robot, a short and a long batch: the vector-Jacobian product of ``rnea``'s
    generalized forces w.r.t. the joint positions, velocities and accelerations is the
    cotangent times Pinocchio's ``dtau_dq``, ``dtau_dv`` and ``M`` (their joint columns),
    the base rows mapped to the representation (``K^-T``)."""
    kd, pr, n = robot.kd, robot.pin, robot.n
    kd.set_frame_velocity_representation(rep)
    Hs, q, nu, qd = sample(robot, rng, B)
    nud, qdd = rng.normal(size=(B, 6)), rng.normal(size=(B, n))
    W = rng.normal(size=(B, 6 + n))
    leaves = [t(x).requires_grad_(True) for x in (q, qd, qdd)]
    f = kd.rnea(t(Hs), leaves[0], t(nu), leaves[1], t(nud), leaves[2])
    grads = torch.autograd.grad((f * t(W)).sum(), leaves)
    P = pr.P()
    for b in range(0, B, 19):
        pq, v = pr.q(Hs[b], q[b]), pr.v_local(rep, Hs[b], nu[b], qd[b])
        a_base = np.linalg.solve(pr.K(rep, Hs[b]), nud[b]) + pr.Kinv_dot(rep, Hs[b], (P.T @ v)[:6]) @ nu[b]
        pin.computeRNEADerivatives(pr.model, pr.data, pq, v, P @ np.concatenate([a_base, qdd[b]]))
        M = np.triu(pr.data.M) + np.triu(pr.data.M, 1).T  # Pinocchio fills the upper triangle
        out = np.linalg.inv(pr.full_K(rep, Hs[b])).T @ P.T  # ours = K^-T P^T (Pinocchio's forces)
        for grad, d in zip(grads, (pr.data.dtau_dq, pr.data.dtau_dv, M)):
            close(grad[b], W[b] @ (out @ d @ P)[:, 6:])
