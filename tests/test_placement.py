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


@pytest.mark.skipif(not placement.NATIVE, reason="torchrbd._placement not built (no C compiler)")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.int32])
@pytest.mark.parametrize("B", [1, 13, 16, 1031])
@pytest.mark.parametrize("threads", [1, 2])
def test_place_zeroed_matches_zeros_and_index_copy(dtype, B, threads):
    """Every number of each ``out`` row up to its width zeroed, whatever it held, and
    each part's rows in their columns; past the width (a row-strided ``out``) untouched.
    Parts with padded rows, a tail of configurations shorter than a cache line, and
    both thread counts (the loop goes parallel from ``PARALLEL_FROM`` numbers)."""
    g = torch.Generator().manual_seed(B)
    W, sizes = 61, (7, 20, 3)
    columns = torch.randperm(W, generator=g)[:sum(sizes)].split(sizes)
    srcs = [(torch.randn(P, B + 3, generator=g) * 100).to(dtype)[:, :B] for P in sizes]  # (row stride B + 3)
    wide = torch.full((B, W + 2), -7, dtype=dtype)
    out = wide[:, :W]
    expected = torch.zeros(B, W, dtype=dtype)
    for src, cols in zip(srcs, columns):
        expected.index_copy_(1, cols, src.t())
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert placement.place_zeroed(out, list(zip(srcs, columns)))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(out, expected)
    assert torch.equal(wide[:, W:], torch.full((B, 2), -7, dtype=dtype))


def test_place_zeroed_declines_what_the_loop_cannot_do():
    """It returns False and leaves ``out`` as it was: gradients, 2-byte numbers, more
    than four parts, columns of another dtype."""
    out = torch.full((8, 10), 5.0, dtype=torch.float64)
    cols = torch.arange(3)
    src = torch.randn(3, 8, dtype=torch.float64)
    assert not placement.place_zeroed(out, [(src.requires_grad_(), cols)])
    assert not placement.place_zeroed(out.half(), [(src.detach().half(), cols)])
    assert not placement.place_zeroed(out, [(src.detach(), cols)] * 5)
    assert not placement.place_zeroed(out, [(src.detach(), cols.int())])
    assert torch.equal(out, torch.full((8, 10), 5.0, dtype=torch.float64))


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
        "jacobian_dot": lambda: kd.jacobian_dot("l_sole", H, q, v, qd),
        "bias_force": lambda: kd.bias_force(H, q, v, qd),
        "CoM_jacobian": lambda: kd.CoM_jacobian(H, q),
        "centroidal_momentum_matrix": lambda: kd.centroidal_momentum_matrix(H, q),
    }


@pytest.mark.skipif(not placement.NATIVE, reason="torchrbd._placement not built (no C compiler)")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("method, compiled, representation", [
    ("mass_matrix", False, "mixed"), ("bias_force", False, "mixed"), ("CoM_jacobian", False, "mixed"),
    ("centroidal_momentum_matrix", False, "mixed"),
    # (a frame Jacobian's base block is placed from the few values it is made of, in each representation)
    *((method, False, rep) for method in ("jacobian", "jacobian of the base", "jacobian_dot")
      for rep in ("mixed", "body", "inertial")),
    ("mass_matrix", True, "mixed"),  # (compiled code places only the mass matrix by the loop)
])
def test_results_are_the_same_with_and_without_the_c_loop(monkeypatch, compiled, dtype, method, representation):
    """Bit for bit: the loop moves numbers, it computes nothing (the methods themselves
    are checked against Pinocchio elsewhere, on whichever path is the default).
    Each call must have taken the loop."""
    kd = torchrbd.KinDynComputations(icub_path(), SEED_JOINTS)
    kd.set_frame_velocity_representation(torchrbd.Representations(representation))
    if compiled:
        kd = kd.compiled()
    B = 256 if compiled else 1536  # long enough for the loop to pay off
    call = _method_calls(kd, B, dtype)[method]
    calls, loop = [], placement._placement

    class Counting:
        def place(self, *args):
            calls.append(args)
            return loop.place(*args)

        def place_zeroed(self, *args):
            calls.append(args)
            return loop.place_zeroed(*args)

    monkeypatch.setattr(placement, "_placement", Counting())
    with_loop = call()
    assert len(calls) == 1  # (a Jacobian's zeros, base block and chain columns in one call)
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
