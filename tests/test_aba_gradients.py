"""``aba``'s gradients against Pinocchio's ``computeABADerivatives``, on each way torchrbd
computes them: the implicit rule (``forward_dynamics._Implicit``: one more solve with
the forward's factor, then the RNEA's adjoint) with the dense Cholesky factor below
``articulated.sweep_from`` configurations and with the articulated-body sweep from it
on, and autograd through the CRBA path (what a second derivative recomputes)."""

import numpy as np
import pytest
import torch

from torchrbd.algorithms import articulated, forward_dynamics
from conftest import graph_names
from pin_reference import BODY, MIXED, pin
from test_kinematics import close, sample

t = torch.tensor
METHODS = ["dense", "sweep", "crba_autograd"]


@pytest.fixture
def method(request, monkeypatch):
    """Routes aba's gradients through one method (see the module note)."""
    if request.param == "sweep":
        monkeypatch.setattr(articulated, "FROM", 1)
        monkeypatch.setattr(articulated, "CHAIN_FROM", 1)
    if request.param == "crba_autograd":
        monkeypatch.setattr(forward_dynamics, "implicit_backward", lambda *tensors: False)
    return request.param


@pytest.mark.parametrize("method", METHODS, indirect=True)
@pytest.mark.parametrize("rep", [MIXED, BODY], ids=["mixed", "body"])
def test_aba_gradient_matches_pinocchio(robot, rng, method, rep):
    """Every robot, a batch of 3: the vector-Jacobian product of the accelerations (base
    and joints) w.r.t. the joint positions, velocities and torques is the cotangent times
    Pinocchio's ``ddq_dq``, ``ddq_dv`` and ``M^-1`` (their joint columns), mapped to the
    representation's base acceleration; and the graph holds the method's Function.
    Tolerance: 1e-9 relative, or 100 eps cond(M) where M is ill-conditioned (tiago's
    cond(M) is about 3e7: a derivative of ``M^-1`` loses that much to rounding in
    either library)."""
    kd, pr = robot.kd, robot.pin
    kd.set_frame_velocity_representation(rep)
    B, n = 3, robot.n
    Hs, q, nu, qd = sample(robot, rng, B)
    tau = rng.normal(size=(B, n))
    W = rng.normal(size=(B, 6 + n))
    leaves = [t(x).requires_grad_(True) for x in (q, qd, tau)]
    a = kd.aba(t(Hs), leaves[0], t(nu), leaves[1], leaves[2])
    assert ("_ImplicitBackward" in graph_names(a)) == (method != "crba_autograd")
    grads = torch.autograd.grad((a * t(W)).sum(), leaves)
    P = pr.P()
    for b in range(B):
        pq = pr.q(Hs[b], q[b])
        v = pr.v_local(rep, Hs[b], nu[b], qd[b])
        pin.computeABADerivatives(pr.model, pr.data, pq, v, P @ np.concatenate([np.zeros(6), tau[b]]))
        Minv = np.triu(pr.data.Minv) + np.triu(pr.data.Minv, 1).T  # Pinocchio fills the upper triangle
        out = pr.full_K(rep, Hs[b]) @ P.T  # ours = K P^T (Pinocchio's accelerations) + terms free of q, qd, tau
        rtol = max(1e-9, 100 * np.finfo(float).eps * np.linalg.cond(Minv))
        for grad, d in zip(grads, (pr.data.ddq_dq, pr.data.ddq_dv, Minv)):
            close(grad[b], W[b] @ (out @ d @ P)[:, 6:], rtol=rtol)
