"""Contact simulation throughput: the embedded humanoid on a floor.

torchrbd.sim steps ``n_envs`` humanoids (MJCF ``torchrbd.models.path("humanoid",
"mjcf")`` plus ``gs.morphs.Plane()``, Euler, contacts on) in one batched
``scene.step()``; MuJoCo steps the same MJCF with a floor plane added to its
worldbody in a single-core ``mujoco.mj_step`` loop (one environment; N
environments on one core take N times as long). Both start from the file's
initial pose (soles 4 cm above the floor) and first run ``--settle`` seconds so
that the feet are on the floor. Prints a Markdown table of environment-steps per
second, for float64 and float32 (Genesis's default) unless ``--precision`` picks one::

    python benchmarks/bench_contacts.py                       # n_envs 1 64 1024 4096
    python benchmarks/bench_contacts.py --n-envs 1 64 --precision 64 --threads 2
    python benchmarks/bench_contacts.py --n-envs 4096 --precision 32 --solve dense tree

``--solve`` picks how the step solves with the mass matrices (``auto``: the library's
choice, see ``torchrbd.algorithms.tree_cholesky.pays_off``; ``dense``: LAPACK's
batched Cholesky; ``tree``: the tree-sparse factorisation); several values time
each in turn in one process, for an A/B.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch

import torchrbd.models
import torchrbd.sim as gs
from torchrbd.algorithms import tree_cholesky

FLOOR = '<geom name="floor" type="plane" size="0 0 0.1"/>'


def _min_time(fn, min_seconds: float, min_calls: int) -> tuple[int, float]:
    """Call ``fn`` until ``min_seconds`` have passed (at least ``min_calls`` times);
    returns (calls, seconds)."""
    calls, t0 = 0, time.perf_counter()
    while calls < min_calls or time.perf_counter() - t0 < min_seconds:
        fn()
        calls += 1
    return calls, time.perf_counter() - t0


def torchrbd_rate(n_envs: int, dt: float, settle: float, seconds: float, device, sync) -> float:
    """Environment-steps per second of torchrbd.sim with ``n_envs`` humanoids."""
    scene = gs.Scene(sim_options=gs.options.SimOptions(dt=dt))
    scene.add_entity(gs.morphs.MJCF(file=str(torchrbd.models.path("humanoid", "mjcf"))))
    scene.add_entity(gs.morphs.Plane())
    scene.build(n_envs=n_envs)
    for _ in range(int(round(settle / dt))):
        scene.step()

    def step():
        scene.step()
        sync()

    calls, elapsed = _min_time(step, seconds, 3)
    return max(n_envs, 1) * calls / elapsed


def mujoco_rate(dt: float, settle: float, seconds: float) -> float:
    """Steps per second of ``mujoco.mj_step`` on the humanoid with a floor (one core)."""
    import mujoco

    xml = torchrbd.models.path("humanoid", "mjcf").read_text().replace("<worldbody>", "<worldbody>" + FLOOR, 1)
    model = mujoco.MjModel.from_xml_string(xml)
    model.opt.timestep = dt
    data = mujoco.MjData(model)
    for _ in range(int(round(settle / dt))):
        mujoco.mj_step(model, data)
    n = 1000

    def burst():
        for _ in range(n):
            mujoco.mj_step(model, data)

    calls, elapsed = _min_time(burst, seconds, 1)
    return n * calls / elapsed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-envs", type=int, nargs="+", default=[1, 64, 1024, 4096])
    ap.add_argument("--dt", type=float, default=0.002, help="time step, s (the file's own)")
    ap.add_argument("--settle", type=float, default=0.1, help="simulated seconds before timing")
    ap.add_argument("--seconds", type=float, default=3.0, help="minimum wall time per measurement")
    ap.add_argument("--precision", choices=["32", "64"], nargs="+", default=["64", "32"])
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (MuJoCo uses one core)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--solve", choices=["auto", "dense", "tree"], nargs="+", default=["auto"],
                    help="how the step solves with M (several: an A/B in one process)")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    backend = gs.gpu if args.device == "cuda" else gs.cpu
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    mj = mujoco_rate(args.dt, args.settle, args.seconds)
    print(f"humanoid (24 dofs, 29 candidate contacts with the floor), dt = {args.dt} s, Euler, "
          f"torch threads = {args.threads}, device = {args.device}; MuJoCo in float64")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}\n")
    print("| n_envs | precision | solve | torchrbd env-steps/s | torchrbd ms/step | MuJoCo mj_step (1 core) "
          "steps/s | torchrbd / MuJoCo |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    auto = tree_cholesky.pays_off
    choices = {"auto": auto, "dense": lambda *a, **k: False, "tree": lambda *a, **k: True}
    try:
        for precision in args.precision:
            gs.init(backend=backend, precision=precision)
            for n in args.n_envs:
                for solve in args.solve:
                    tree_cholesky.pays_off = choices[solve]
                    rate = torchrbd_rate(n, args.dt, args.settle, args.seconds, args.device, sync)
                    print(f"| {n} | float{precision} | {solve} | {rate:,.0f} | {1e3 * max(n, 1) / rate:.1f} "
                          f"| {mj:,.0f} | {rate / mj:.3f} |", flush=True)
    finally:
        tree_cholesky.pays_off = auto


if __name__ == "__main__":
    main()
