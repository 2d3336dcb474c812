"""In-process A/B: the working tree's torchrbd against another version, interleaved.

    python benchmarks/ab.py --old HEAD~1                 # a git revision of this repository
    python benchmarks/ab.py --old /path/to/src/torchrbd  # or a package directory
    python benchmarks/ab.py --old HEAD~1 --batch 1 --only aba,fb --rounds 21
    python benchmarks/ab.py --old HEAD~1 --compile --only M,h   # both through kd.compiled()

The other version is imported as a second package (``torchrbd_ab_old``) in the same
process, and the two are timed in alternating order round after round, so that this
machine's slow minutes hit both alike (the side-by-side benchmark, ``torchrbd bench``,
cannot resolve changes of a few percent: one quantity's ratio to Pinocchio moves by
0.3-1.0 between runs). Prints each quantity's median time per call for both, their
ratio (new / old) and the median of each round's paired ratio (the steadier one). Results must agree to 1e-9 (float64) before anything is timed.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import torch

from torchrbd.bench import inputs, nograd
from torchrbd.spatial import axis_angle_to_matrix, homogeneous

REPO = Path(__file__).resolve().parents[1]


def import_old(old: str, where: Path):
    """The package at ``old`` (a package directory, or a git revision of this repository
    whose ``src/torchrbd`` is extracted into ``where``) imported as ``torchrbd_ab_old``."""
    path = Path(old)
    if not (path / "__init__.py").is_file():
        archive = subprocess.run(["git", "-C", str(REPO), "archive", old, "src/torchrbd"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
        path = where / "src" / "torchrbd"
    package = where / "torchrbd_ab_old"
    shutil.copytree(path, package, ignore=shutil.ignore_patterns("__pycache__"))
    build_extension(package)
    spec = importlib.util.spec_from_file_location("torchrbd_ab_old", package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["torchrbd_ab_old"] = module
    spec.loader.exec_module(module)
    return module


def build_extension(package: Path):
    """Build the package's optional C loop (``_placement.c``) next to it, as ``pip
    install`` does, where a revision has one and no built copy came with it: otherwise
    the old version would silently run without it, and the A/B would time the loop
    rather than the change."""
    source = package / "_placement.c"
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    if not source.is_file() or (package / f"_placement{suffix}").is_file():
        return
    compiler = (sysconfig.get_config_var("CC") or "cc").split()
    subprocess.run([*compiler, "-O3", "-fopenmp", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}",
                    str(source), "-o", str(package / f"_placement{suffix}")], check=True)


def _base_poses(B: int, dtype) -> torch.Tensor:
    """(B, 4, 4) seeded base poses: rotations about a tilted axis, positions within a metre."""
    g = torch.Generator().manual_seed(1)
    angle = torch.rand(B, generator=g, dtype=torch.float64) * 6.0
    axis = torch.nn.functional.normalize(torch.tensor([0.3, -0.5, 0.8], dtype=torch.float64), dim=0)
    position = torch.rand(B, 3, generator=g, dtype=torch.float64) - 0.5
    return homogeneous(axis_angle_to_matrix(axis.expand(B, 3), angle), position).to(dtype)


def cases(kd, frame: str, B: int, dtype) -> dict:
    """{name: callable} for one KinDynComputations at batch size B (the benchmark's
    fixed inputs, :func:`torchrbd.bench.inputs`, but for base poses away from the
    identity, under which every velocity representation gives the same numbers)."""
    H, q, nu, qd, tau = inputs(kd.NDoF, B, dtype)
    H = _base_poses(B, dtype)

    def fwd_bwd(f):
        def run():
            qg = q.clone().requires_grad_()
            out = f(qg)
            out.backward(torch.ones_like(out))
            return qg.grad
        return run

    def aba_fwd_bwd():
        qg, qdg, taug = (x.clone().requires_grad_() for x in (q, qd, tau))
        a = kd.aba(H, qg, nu, qdg, taug)
        return torch.autograd.grad(a.sum(), (qg, qdg, taug))[0]

    return {
        "M": nograd(lambda: kd.mass_matrix(H, q)),
        "h": nograd(lambda: kd.bias_force(H, q, nu, qd)),
        "aba": nograd(lambda: kd.aba(H, q, nu, qd, tau)),
        "J": nograd(lambda: kd.jacobian(frame, H, q)),
        "FK": nograd(lambda: kd.forward_kinematics(frame, H, q)),
        "Jd": nograd(lambda: kd.jacobian_dot(frame, H, q, nu, qd)),
        "CMM": nograd(lambda: kd.centroidal_momentum_matrix(H, q)),
        "G": nograd(lambda: kd.gravity_term(H, q)),
        "CoM": nograd(lambda: kd.CoM_position(H, q)),
        "Jcom": nograd(lambda: kd.CoM_jacobian(H, q)),
        "LP": nograd(lambda: kd.link_poses(H, q)),
        "fb": aba_fwd_bwd,
        "Mfb": fwd_bwd(lambda x: kd.mass_matrix(H, x)),
        "hfb": fwd_bwd(lambda x: kd.bias_force(H, x, nu, qd)),
        "Jfb": fwd_bwd(lambda x: kd.jacobian(frame, H, x)),
        "FKfb": fwd_bwd(lambda x: kd.forward_kinematics(frame, H, x)),
        "CoMfb": fwd_bwd(lambda x: kd.CoM_position(H, x)),
        "Gfb": fwd_bwd(lambda x: kd.gravity_term(H, x)),
    }


def per_call(fn, calls: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


REPRESENTATIONS = {"mixed": "MIXED_REPRESENTATION", "body": "BODY_FIXED_REPRESENTATION",
                   "inertial": "INERTIAL_FIXED_REPRESENTATION"}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="ab", description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="git revision of this repository, or a torchrbd package directory")
    ap.add_argument("--robot", default="icub", help="icub (needs icub-models) or an embedded model name")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=10, help="calls per sample (a third of it for forward+backward)")
    ap.add_argument("--only", default=None, help="comma-separated subset of M,h,aba,J,FK,Jd,CMM,G,CoM,Jcom,LP,fb,Mfb,hfb,Jfb,FKfb,CoMfb,Gfb")
    ap.add_argument("--compile", action="store_true", help="time both versions' compiled copies (kd.compiled())")
    ap.add_argument("--representation", choices=["mixed", "body", "inertial"], default="mixed",
                    help="the velocity representation of both versions (default: adam's, MIXED)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import torchrbd
    from torchrbd.bench import _robot

    dtype = getattr(torch, args.dtype)
    path, joints, frame = _robot(args.robot)
    with tempfile.TemporaryDirectory() as tmp:
        old_pkg = import_old(args.old, Path(tmp))
        kds = {"old": old_pkg.KinDynComputations(str(path), joints, dtype=dtype),
               "new": torchrbd.KinDynComputations(str(path), joints, dtype=dtype)}
        for side, kd in kds.items():
            package = old_pkg if side == "old" else torchrbd
            kd.set_frame_velocity_representation(getattr(package.Representations, REPRESENTATIONS[args.representation]))
        if args.compile:  # the first call of each quantity compiles (tens of seconds each)
            kds = {side: kd.compiled() for side, kd in kds.items()}
        runs = {name: cases(kd, frame, args.batch, dtype) for name, kd in kds.items()}
        names = list(runs["new"]) if not args.only else args.only.split(",")
        for k in names:
            a, b = runs["old"][k](), runs["new"][k]()
            if dtype == torch.float64 and not torch.allclose(a, b, rtol=1e-9, atol=1e-9):
                raise SystemExit(f"{k}: the two versions disagree by {(a - b).abs().max().item():.3g}")
        samples = {k: {"old": [], "new": []} for k in names}
        for r in range(args.rounds):
            for k in names:
                calls = max(1, args.calls // 3) if k.endswith("fb") else args.calls
                for side in ("old", "new") if r % 2 == 0 else ("new", "old"):
                    samples[k][side].append(per_call(runs[side][k], calls))
    print(f"# in-process A/B{' (compiled)' if args.compile else ''}: {args.robot}, B = {args.batch}, {args.dtype}, "
          f"{args.representation} representation, "
          f"{torch.get_num_threads()} threads, {args.rounds} rounds; old = {args.old}")
    print("| quantity | old | new | new / old | paired |\n|---|---|---|---|---|")
    ratios = {}
    for k, s in samples.items():
        old, new = statistics.median(s["old"]), statistics.median(s["new"])
        # each round's two samples ran back to back: the median of their ratios cancels
        # the slow phases that move both (the ratio of medians does not when they are long)
        paired = statistics.median(n / o for n, o in zip(s["new"], s["old"]))
        ratios[k] = paired
        print(f"| {k} | {old * 1e3:.3f} ms | {new * 1e3:.3f} ms | {new / old:.3f} | {paired:.3f} |")
    return ratios


if __name__ == "__main__":
    main()
