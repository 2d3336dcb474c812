"""The C placement loop (``torchrbd._placement``) against torch's own gather, and the
mass matrix with and without it."""

import os
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
    switched_off = os.environ.get("TORCHRBD_NATIVE") == "0"
    assert placement.NATIVE == (placement._placement is not None and not switched_off)


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


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("B", [5, 64])
def test_place_into_columns(dtype, B):
    """With ``columns``: entry j into ``out[:, columns[j]]`` of a row-strided ``out``,
    the rest untouched (as the Jacobian's base block and chain columns are placed)."""
    g = torch.Generator().manual_seed(B)
    K, P, W = 20, 30, 50
    src = torch.randn(K, B, generator=g).to(dtype)
    index = torch.randint(0, K, (P,), generator=g)
    columns = torch.randperm(W, generator=g)[:P]
    wide = torch.full((B, W + 3), -7.0, dtype=dtype)
    out = wide[:, :W]  # (row stride W + 3)
    expected = out.clone().index_copy_(1, columns, torch.gather(src.t(), 1, index.expand(B, P)))
    assert placement.place(src, index, out=out, columns=columns) is out
    assert torch.equal(out, expected)
    assert torch.equal(wide[:, W:], torch.full((B, 3), -7.0, dtype=dtype))
    assert placement._native_applies(src, index, out, columns) == placement.NATIVE


def _method_calls(kd, B, dtype):
    g = torch.Generator().manual_seed(3)
    H = torch.eye(4, dtype=dtype).repeat(B, 1, 1)
    H[:, :3, 3] = torch.randn(B, 3, generator=g, dtype=dtype)
    q = torch.randn(B, len(SEED_JOINTS), generator=g, dtype=dtype)
    v = torch.randn(B, 6, generator=g, dtype=dtype)
    qd = torch.randn(B, len(SEED_JOINTS), generator=g, dtype=dtype)
    return {
        "mass_matrix": lambda: kd.mass_matrix(H, q),
        "jacobian": lambda: kd.jacobian("l_sole", H, q),
        "jacobian of the base": lambda: kd.jacobian("root_link", H, q),  # (no chain columns)
        "bias_force": lambda: kd.bias_force(H, q, v, qd),
        "CoM_jacobian": lambda: kd.CoM_jacobian(H, q),
        "centroidal_momentum_matrix": lambda: kd.centroidal_momentum_matrix(H, q),
    }


@pytest.mark.skipif(not placement.NATIVE, reason="torchrbd._placement not built (no C compiler)")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("method, compiled", [
    ("mass_matrix", False), ("jacobian", False), ("jacobian of the base", False), ("bias_force", False), ("CoM_jacobian", False),
    ("centroidal_momentum_matrix", False),
    ("mass_matrix", True),  # (compiled code places only the mass matrix by the loop)
])
def test_results_are_the_same_with_and_without_the_c_loop(monkeypatch, compiled, dtype, method):
    """Bit for bit: the loop moves numbers, it computes nothing (the methods themselves
    are checked against Pinocchio elsewhere, on whichever path is the default).
    Each call must have taken the loop."""
    kd = torchrbd.KinDynComputations(icub_path(), SEED_JOINTS)
    if compiled:
        kd = kd.compiled()
    B = 256 if compiled else 1536  # long enough for the loop to pay off
    call = _method_calls(kd, B, dtype)[method]
    calls, loop = [], placement._placement

    class Counting:
        def place(self, *args):
            calls.append(args)
            return loop.place(*args)

    monkeypatch.setattr(placement, "_placement", Counting())
    with_loop = call()
    assert len(calls) == (2 if method.startswith("jacobian") else 1)  # (the base block, the chain's columns)
    monkeypatch.setattr(placement, "NATIVE", False)
    calls.clear()
    without = call()
    assert not calls
    assert torch.equal(with_loop, without)


@pytest.mark.parametrize("shape, memory_order", [
    ((6, 29, 2048), (0, 1, 2)),  # contiguous
    ((6, 29, 2048), (1, 0, 2)),  # a transposed result (the centroidal momentum matrix's)
    ((3, 4, 5, 4096), (2, 0, 1, 3)),
])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_batch_first_copy_of_permuted_rows(shape, memory_order, dtype):
    memory = torch.randn(*[shape[d] for d in memory_order]).to(dtype)
    x = memory.permute(*sorted(range(len(shape)), key=memory_order.__getitem__))
    assert x.shape == shape
    expected = x.permute(-1, *range(x.dim() - 1)).contiguous()
    got = placement.to_batch_first(x)
    if placement.NATIVE:
        assert got is not None and got.is_contiguous() and torch.equal(got, expected)
    else:
        assert got is None
    strided = torch.randn(shape[0], 2 * shape[1], shape[2]).to(dtype)[:, ::2]  # (rows not one block of memory)
    assert placement.to_batch_first(strided) is None
