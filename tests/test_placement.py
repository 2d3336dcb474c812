"""The C placement loop (``torchrbd._placement``) against torch's own gather, and the
mass matrix with and without it."""

import shutil
import sysconfig

import pytest
import torch

import torchrbd
from torchrbd.algorithms import placement
from conftest import SEED_JOINTS, icub_path


def test_the_c_loop_is_built_where_a_compiler_is():
    """The extension is optional so that an install without a C compiler works; here,
    with one, a failed build would silently leave the slower gather."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    assert shutil.which(compiler) is None or placement._placement is not None
    assert placement.NATIVE == (placement._placement is not None)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.int64, torch.int32])
@pytest.mark.parametrize("B", [1, 7, 8, 16, 33, 1024])
@pytest.mark.parametrize("threads", [1, 2])
def test_place_matches_gather(dtype, B, threads):
    g = torch.Generator().manual_seed(B)
    K, P = 37, 90
    # rows padded (row stride > B), as the algorithms' crosswise buffers are
    src = (torch.randn(K, B + 5, generator=g) * 100).to(dtype)[:, :B]
    index = torch.randint(0, K, (P,), generator=g)
    expected = torch.gather(src.t(), 1, index.expand(B, P))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = placement.place(src, index)
        into = torch.full((B, P), -1, dtype=dtype)
        placement.place(src, index, out=into)
    finally:
        torch.set_num_threads(before)
    assert got.shape == (B, P) and got.dtype == dtype and got.is_contiguous()
    assert torch.equal(got, expected)
    assert torch.equal(into, expected)
    assert placement._native_applies(src, index, None) == placement.NATIVE


def test_place_falls_back_where_the_loop_does_not_apply():
    """Gradients, 2-byte numbers and strided columns go to torch.gather."""
    src = torch.randn(5, 12, dtype=torch.float64, requires_grad=True)
    index = torch.tensor([4, 0, 0, 3])
    out = placement.place(src, index)
    out.sum().backward()
    assert torch.equal(src.grad, torch.tensor([2.0, 0, 0, 1, 1])[:, None].expand(5, 12).double())
    half = torch.randn(5, 12).half()
    assert not placement._native_applies(half, index, None)
    assert torch.equal(placement.place(half, index), half[index].t())
    strided = torch.randn(5, 24, dtype=torch.float64)[:, ::2]
    assert not placement._native_applies(strided, index, None)
    assert torch.equal(placement.place(strided, index), strided[index].t())


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.skipif(not placement.NATIVE, reason="torchrbd._placement not built (no C compiler)")
def test_mass_matrix_is_the_same_with_and_without_the_c_loop(monkeypatch, compiled, dtype):
    """Bit for bit: the loop moves numbers, it computes nothing (the mass matrix itself
    is checked against Pinocchio elsewhere, on whichever path is the default)."""
    kd = torchrbd.KinDynComputations(icub_path(), SEED_JOINTS)
    if compiled:
        kd = kd.compiled()
    B = 256  # long enough for the compiled placement operator
    g = torch.Generator().manual_seed(3)
    H = torch.eye(4, dtype=dtype).repeat(B, 1, 1)
    H[:, :3, 3] = torch.randn(B, 3, generator=g, dtype=dtype)
    q = torch.randn(B, len(SEED_JOINTS), generator=g, dtype=dtype)
    calls, loop = [], placement._placement

    class Counting:
        def place(self, *args):
            calls.append(args)
            return loop.place(*args)

    monkeypatch.setattr(placement, "_placement", Counting())
    with_loop = kd.mass_matrix(H, q)
    assert len(calls) == 1  # (the mass matrix's placement took the loop)
    monkeypatch.setattr(placement, "NATIVE", False)
    without = kd.mass_matrix(H, q)
    assert len(calls) == 1
    assert torch.equal(with_loop, without)
