"""Eager calls without autograd run under torch.inference_mode (torchrbd.inference): the
results are normal tensors, and what the library caches during such a call serves a
later call with gradients."""

import pytest
import torch

import torchrbd
import torchrbd.inference
import torchrbd.models
from torchrbd.algorithms.batchlast import DENSE_BELOW
from torchrbd.chunking import chunk_size


def _inputs(kd, B, dtype):
    g = torch.Generator().manual_seed(1)
    n = kd.NDoF
    H = torch.eye(4, dtype=torch.float64).expand(B, 4, 4).clone()
    H[:, :3, 3] = torch.randn(B, 3, generator=g, dtype=torch.float64)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return tuple(x.to(dtype) for x in (H, r(B, n), r(B, 6), r(B, n), r(B, n)))


def _written_into_normal_tensor(name: str, B: int) -> bool:
    """Whether the last operator of the method's result writes it into a normal tensor
    (result_buffer) when it is large enough: the mass matrix's placing gather, the
    Jacobians' assembly, and for B > 1 the batch-first copy of the others (at B = 1 no
    copy is made, and the few numbers are cloned). Not the poses."""
    if name in ("forward_kinematics", "link_poses"):
        return False
    return B > 1 or name in ("mass_matrix", "mass_matrix_and_bias_force[0]", "jacobian", "jacobian_dot")


def _record_clones(monkeypatch) -> list:
    """A list to which each result leaving a method's inference mode appends whether it
    was an inference tensor (to be cloned), a tuple's elements first."""
    cloned = []
    out_of_inference_mode = torchrbd.inference.out_of_inference_mode

    def recording(result):
        results = result if isinstance(result, tuple) else (result,)
        cloned.extend(r.is_inference() for r in results)
        return out_of_inference_mode(result)

    monkeypatch.setattr(torchrbd.inference, "out_of_inference_mode", recording)
    return cloned


def _calls(kd, frame, H, q, nu, qd, tau, plain=False):
    """{method: call}; ``plain``: the methods without their inference-mode wrapper."""
    w = {frame: torch.ones(H.shape[0], 6, dtype=H.dtype)}

    def m(name):
        method = getattr(type(kd), name)
        return (method.__wrapped__ if plain and hasattr(method, "__wrapped__") else method).__get__(kd)

    return {
        "forward_kinematics": lambda: m("forward_kinematics")(frame, H, q),
        "link_poses": lambda: m("link_poses")(H, q),
        "link_velocities": lambda: m("link_velocities")(H, q, nu, qd),
        "jacobian": lambda: m("jacobian")(frame, H, q),
        "jacobian_dot": lambda: m("jacobian_dot")(frame, H, q, nu, qd),
        "CoM_position": lambda: m("CoM_position")(H, q),
        "CoM_jacobian": lambda: m("CoM_jacobian")(H, q),
        "mass_matrix": lambda: m("mass_matrix")(H, q),
        "centroidal_momentum_matrix": lambda: m("centroidal_momentum_matrix")(H, q),
        "bias_force": lambda: m("bias_force")(H, q, nu, qd),
        "mass_matrix_and_bias_force": lambda: m("mass_matrix_and_bias_force")(H, q, nu, qd)[1],
        "mass_matrix_and_bias_force[0]": lambda: m("mass_matrix_and_bias_force")(H, q, nu, qd)[0],
        "coriolis_term": lambda: m("coriolis_term")(H, q, nu, qd),
        "gravity_term": lambda: m("gravity_term")(H, q),
        "rnea": lambda: m("rnea")(H, q, nu, qd, nu, qd, external_wrenches=w),
        "aba": lambda: m("aba")(H, q, nu, qd, tau, external_wrenches=w),
    }


@pytest.mark.parametrize("buffer_bytes", [None, 0])
def test_results_without_autograd_are_normal_tensors_and_caches_serve_gradients(buffer_bytes, monkeypatch):
    """A fresh model's first calls, without gradients, in float32 (a model converted
    and cached during the call), at every batch regime (one configuration, a short
    batch, a long one, one past the articulated-body sweep's threshold) and in every
    representation: each result is a normal tensor that can be updated in place and
    equals, to the bit, the result of the method without its inference-mode wrapper.
    Then the same calls with q requiring grad run backward through the cached
    constants. ``buffer_bytes`` 0: every result written into a normal tensor by its last
    operator (``result_buffer``), none cloned after."""
    cloned = _record_clones(monkeypatch)
    if buffer_bytes is not None:
        monkeypatch.setattr(torchrbd.inference, "RESULT_BUFFER_BYTES", buffer_bytes)
    kd = torchrbd.models.load("quadruped")
    frame = "FL_foot"
    for rep in torchrbd.Representations:
        kd.set_frame_velocity_representation(rep)
        for B in (1, 5, DENSE_BELOW, 300):
            H, q, nu, qd, tau = _inputs(kd, B, torch.float32)
            plain = _calls(kd, frame, H, q, nu, qd, tau, plain=True)
            for name, call in _calls(kd, frame, H, q, nu, qd, tau).items():
                with torch.no_grad():
                    cloned.clear()
                    out = call()
                    ref = plain[name]()
                assert not out.is_inference(), (name, B)
                if buffer_bytes == 0 and _written_into_normal_tensor(name, B):
                    assert cloned and not cloned[0], f"{name}, B = {B}: its result was cloned out of inference mode"
                torch.testing.assert_close(out, ref, rtol=0, atol=0, msg=f"{name}, B = {B}, {rep}")
                qg = q.clone().requires_grad_()
                with_grad = _calls(kd, frame, H, qg, nu, qd, tau)[name]()
                with_grad.sum().backward()
                assert qg.grad is not None and torch.isfinite(qg.grad).all(), (name, B)
                out.add_(1.0)  # a normal tensor: updated in place outside inference mode


def test_long_batches_in_chunks_return_normal_tensors(monkeypatch):
    """A batch run in chunks (torchrbd.chunking) writes them into normal tensors: equal
    to the bit to the chunked method without the inference-mode wrapper, and updatable
    in place; a result of more than ``RESULT_BUFFER_BYTES`` (the mass matrix) is not
    cloned after."""
    cloned = _record_clones(monkeypatch)
    kd = torchrbd.models.load("arm7")
    B = chunk_size(kd._model.nbody, 4) + 3
    H, q, nu, qd, tau = _inputs(kd, B, torch.float32)
    plain = _calls(kd, "ee", H, q, nu, qd, tau, plain=True)
    for name, call in _calls(kd, "ee", H, q, nu, qd, tau).items():
        if name in ("mass_matrix", "aba", "bias_force", "centroidal_momentum_matrix"):
            cloned.clear()
            out = call()
            assert not out.is_inference(), name
            if name == "mass_matrix":
                assert out.numel() * out.element_size() >= torchrbd.inference.RESULT_BUFFER_BYTES
                assert cloned == [False], "the mass matrix's chunks were cloned out of inference mode"
            torch.testing.assert_close(out, plain[name](), rtol=0, atol=0, msg=name)
            out.add_(1.0)


def test_calls_inside_inference_mode_and_with_gradients_keep_their_behaviour():
    """Under the caller's own inference mode the results are inference tensors (as for
    any operator there); with grad mode on and an input requiring grad they require
    grad."""
    kd = torchrbd.models.load("arm7")
    H, q, nu, qd, tau = _inputs(kd, 4, torch.float64)
    with torch.inference_mode():
        assert kd.mass_matrix(H, q).is_inference()
    qg = q.clone().requires_grad_()
    assert kd.aba(H, qg, nu, qd, tau).requires_grad
    assert not kd.aba(H, q, nu, qd, tau).requires_grad
