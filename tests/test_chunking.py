"""Long CPU batches run in chunks (torchrbd.chunking): with the chunk size forced down to
two configurations, every public method of the whole tree still matches Pinocchio
configuration by configuration, for flat and nested batches, broadcast arguments and external wrenches;
anything that needs a gradient runs in one call."""

import numpy as np
import pytest
import torch

import torchrbd.chunking as chunking
from conftest import ROBOTS, Robot
from pin_reference import REPRESENTATIONS
from test_kinematics import close, sample

t = torch.tensor


@pytest.fixture(scope="module")
def icub():
    name, path, joints, frames = [r for r in ROBOTS if r[0] == "icub_seed_joints"][0]
    return Robot(name, path(), joints, frames)


@pytest.fixture
def chunk_calls(monkeypatch):
    """Chunks of two configurations; returns the list of chunked calls made."""
    monkeypatch.setattr(chunking, "CHUNK_BYTES", 1)
    monkeypatch.setattr(chunking, "_MIN_CHUNK", 2)
    calls, run = [], chunking._run_in_chunks

    def spy(self, method, specs, named, size):
        calls.append((method.__name__, size))
        return run(self, method, specs, named, size)

    monkeypatch.setattr(chunking, "_run_in_chunks", spy)
    return calls


@pytest.mark.parametrize("rep", REPRESENTATIONS, ids=lambda r: r.name)
def test_chunked_methods_match_pinocchio(icub, rng, chunk_calls, rep):
    kd, pin, B = icub.kd, icub.pin, 5
    kd.set_frame_velocity_representation(rep)
    Hs, q, nu, qd = sample(icub, rng, B)
    nud, qdd, tau = rng.normal(size=(B, 6)), rng.normal(size=(B, icub.n)), rng.normal(size=(B, icub.n))
    frame = icub.frames[0]
    args = [t(x) for x in (Hs, q, nu, qd)]
    z6, zn = np.zeros(6), np.zeros(icub.n)
    checks = [
        (kd.forward_kinematics(frame, *args[:2]), lambda b: pin.fk(frame, Hs[b], q[b])),
        (kd.jacobian(frame, *args[:2]), lambda b: pin.jacobian(rep, frame, Hs[b], q[b])),
        (kd.jacobian_dot(frame, *args), lambda b: pin.jacobian_dot(rep, frame, Hs[b], q[b], nu[b], qd[b])),
        (kd.CoM_position(*args[:2]), lambda b: pin.com(Hs[b], q[b])),
        (kd.CoM_jacobian(*args[:2]), lambda b: pin.com_jacobian(rep, Hs[b], q[b])),
        (kd.mass_matrix(*args[:2]), lambda b: pin.mass_matrix(rep, Hs[b], q[b])),
        (kd.centroidal_momentum_matrix(*args[:2]), lambda b: pin.centroidal(rep, Hs[b], q[b])),
        (kd.bias_force(*args), lambda b: pin.rnea(rep, Hs[b], q[b], nu[b], qd[b], z6, zn)),
        (kd.coriolis_term(*args), lambda b: pin.rnea(rep, Hs[b], q[b], nu[b], qd[b], z6, zn, gravity=False)),
        (kd.gravity_term(*args[:2]), lambda b: pin.rnea(rep, Hs[b], q[b], z6, zn, z6, zn)),
        (kd.rnea(*args, t(nud), t(qdd)), lambda b: pin.rnea(rep, Hs[b], q[b], nu[b], qd[b], nud[b], qdd[b])),
        (kd.aba(*args, t(tau)), lambda b: pin.aba(rep, Hs[b], q[b], nu[b], qd[b], tau[b])),
        (kd.link_velocities(*args), lambda b: np.stack([pin.frame_velocity(rep, name, Hs[b], q[b], nu[b], qd[b])
                                                        for name in kd.model.link_names])),
    ]
    M, h = kd.mass_matrix_and_bias_force(*args)
    checks += [(M, checks[5][1]), (h, checks[7][1])]
    for value, reference in checks:
        assert value.shape[0] == B and value.is_contiguous()
        for b in range(B):
            close(value[b], reference(b), rtol=1e-8)
    one_call = {"forward_kinematics", "jacobian", "jacobian_dot"}  # one frame's: never chunked
    assert len(chunk_calls) == len(checks) - 3 - 1 and all(size == 2 for _, size in chunk_calls)
    assert not one_call & {name for name, _ in chunk_calls}


def test_nested_batch_broadcast_and_wrenches(icub, rng, chunk_calls):
    """A (2, 3) batch with an unbatched base pose, and wrenches batched (2, 3, 6) on
    one frame and unbatched on another: aba against M a + h = [0; tau] + sum J^T w
    with Pinocchio's M and h."""
    kd, pin = icub.kd, icub.pin
    rep = REPRESENTATIONS[1]
    kd.set_frame_velocity_representation(rep)
    H = sample(icub, rng, 1)[0][0]
    q = rng.uniform(-1.2, 1.2, size=(2, 3, icub.n))
    nu, qd, tau = rng.normal(size=(2, 3, 6)), rng.normal(size=(2, 3, icub.n)), rng.normal(size=(2, 3, icub.n))
    f1, f2 = icub.frames[:2]
    w = {f1: rng.normal(size=(2, 3, 6)), f2: rng.normal(size=6)}
    a = kd.aba(t(H), t(q), t(nu), t(qd), t(tau), external_wrenches={f: t(x) for f, x in w.items()})
    M = kd.mass_matrix(t(H), t(q))
    assert a.shape == (2, 3, 6 + icub.n) and M.shape == (2, 3, 6 + icub.n, 6 + icub.n)
    for i in range(2):
        for j in range(3):
            Mp = pin.mass_matrix(rep, H, q[i, j])
            close(M[i, j], Mp)
            hp = pin.rnea(rep, H, q[i, j], nu[i, j], qd[i, j], np.zeros(6), np.zeros(icub.n))
            rhs = np.concatenate([np.zeros(6), tau[i, j]])
            for f, wf in w.items():
                rhs = rhs + pin.jacobian(rep, f, H, q[i, j]).T @ (wf[i, j] if wf.ndim == 3 else wf)
            close(Mp @ a[i, j].numpy() + hp, rhs, rtol=1e-8)
    assert [name for name, _ in chunk_calls] == ["aba", "mass_matrix"]


def test_gradients_run_in_one_call(icub, rng, chunk_calls):
    kd = icub.kd
    Hs, q, nu, qd = sample(icub, rng, 5)
    qg = t(q).requires_grad_()
    kd.mass_matrix(t(Hs), qg).sum().backward()
    assert qg.grad.shape == q.shape and chunk_calls == []
    with torch.no_grad():  # no graph: chunks again
        kd.mass_matrix(t(Hs), qg)
    assert [name for name, _ in chunk_calls] == ["mass_matrix"]
