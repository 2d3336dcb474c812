"""Operators and bytes moved by one call, grouped by where they are issued.

    python benchmarks/traffic.py h                 # iCub's bias force, B = 1024, float64
    python benchmarks/traffic.py aba --batch 1     # a batch of one: operator counts
    python benchmarks/traffic.py M --depth 2       # grouped two calls below the method

On this machine an eager call at B = 1024 takes about its bytes over 25-35 GB/s, and at
B = 1 about its operator count times 2-4 us; neither count depends on the minute, where
timings move by up to 2x (see BENCHMARKS.md). So a change can be sized here first, then
timed with ``benchmarks/ab.py``. Bytes: each operator's tensor arguments read in full
and its outputs written in full (views, ``empty`` and other allocations count as
operators but move nothing); an estimate of the traffic, not a measurement.
"""

from __future__ import annotations

import argparse
import collections
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torchrbd.bench import _robot, inputs

MOVES_NOTHING = {
    "view", "_unsafe_view", "select", "slice", "unbind", "split_with_sizes", "transpose", "t", "unsqueeze",
    "squeeze", "expand", "permute", "diagonal", "alias", "as_strided", "detach", "empty", "new_empty",
    "empty_like", "empty_strided",
}


WRAPPERS = {"call_in_inference_mode"}
"""Frames between a public method's wrapper and the method, skipped (like the chunking's)."""


def _tensors(x) -> list:
    """The tensors in ``x``: a tensor, or lists and tuples of them (others skipped)."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for y in x for t in _tensors(y)]
    return []


def _nbytes(x) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(x))


def _moves_nothing(func, args, out) -> bool:
    """Whether the operator only made a view: a listed one, or one that writes nothing
    in place and returns tensors on its inputs' memory (``reshape`` of a contiguous
    tensor; the same ``reshape`` of a strided one copies, and counts)."""
    if func.overloadpacket.__name__.rstrip("_") in MOVES_NOTHING:
        return True
    if func._schema.is_mutable:
        return False
    outs = _tensors(out)
    inputs = {t.untyped_storage().data_ptr() for t in _tensors(list(args)) if t.numel()}
    return bool(outs) and all(t.untyped_storage().data_ptr() in inputs for t in outs if t.numel())


class Traffic(TorchDispatchMode):
    """Counts each aten operator under the torchrbd function ``depth`` frames below the
    outermost one that issued it (0: the public method)."""

    def __init__(self, depth: int):
        super().__init__()
        self.depth = depth
        self.rows = collections.defaultdict(lambda: [0, 0, 0])  # operators, bytes written, bytes read

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        frames = [f for f in traceback.extract_stack()
                  if "/torchrbd/" in f.filename and "chunking" not in f.filename and f.name not in WRAPPERS]
        where = "?"
        if frames:
            f = frames[min(self.depth, len(frames) - 1)]
            where = f"{f.filename.rsplit('/', 1)[-1]}:{f.name}"
        row = self.rows[where]
        row[0] += 1
        if not _moves_nothing(func, args, out):
            row[1] += _nbytes(out)
            row[2] += _nbytes(list(args))
        return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="traffic", description=__doc__.splitlines()[0])
    ap.add_argument("quantity", choices=["M", "h", "aba", "J", "FK", "CMM"])
    ap.add_argument("--robot", default="icub")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--depth", type=int, default=1, help="group by the function this many calls below the method")
    args = ap.parse_args(argv)
    import torchrbd

    path, joints, frame = _robot(args.robot)
    dtype = getattr(torch, args.dtype)
    kd = torchrbd.KinDynComputations(str(path), joints, dtype=dtype)
    H, q, nu, qd, tau = inputs(kd.NDoF, args.batch, dtype)
    call = {
        "M": lambda: kd.mass_matrix(H, q), "h": lambda: kd.bias_force(H, q, nu, qd),
        "aba": lambda: kd.aba(H, q, nu, qd, tau), "J": lambda: kd.jacobian(frame, H, q),
        "FK": lambda: kd.forward_kinematics(frame, H, q), "CMM": lambda: kd.centroidal_momentum_matrix(H, q),
    }[args.quantity]
    with torch.no_grad():
        call()  # caches filled
        with Traffic(args.depth) as t:
            call()
    ops, written, read = (sum(r[i] for r in t.rows.values()) for i in range(3))
    print(f"# {args.quantity}: {args.robot}, B = {args.batch}, {args.dtype}: {ops} operators, "
          f"{written / 1e6:.1f} MB written, {read / 1e6:.1f} MB read")
    print("| where | operators | MB written | MB read |\n|---|---|---|---|")
    for where, (n, w, r) in sorted(t.rows.items(), key=lambda kv: (-(kv[1][1] + kv[1][2]), -kv[1][0])):
        print(f"| {where} | {n} | {w / 1e6:.2f} | {r / 1e6:.2f} |")
    return {"operators": ops, "written": written, "read": read}


if __name__ == "__main__":
    main()
