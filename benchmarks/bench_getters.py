"""Simulator getters: the time of each state getter of the embedded humanoid, next to a step.

A scene with ``gs.morphs.Plane()`` and the humanoid (MJCF, 19 links, contacts on) is
built for each ``--n-envs`` and stepped a few times; then each getter is called
``--calls`` times after three untimed calls, and the mean time per call is printed as
a Markdown table (milliseconds), with one ``scene.step()`` for scale::

    python benchmarks/bench_getters.py                  # n_envs 1 1024
    python benchmarks/bench_getters.py --n-envs 4096 --calls 50
"""

from __future__ import annotations

import argparse
import time

import torch

import torchrbd.models
import torchrbd.sim as gs

GETTERS = ("get_links_pos", "get_links_quat", "get_links_vel", "get_links_ang", "get_dofs_position",
           "get_mass_mat", "get_contacts")


def mean_ms(call, calls: int) -> float:
    """Mean milliseconds per call of ``call`` over ``calls`` calls, after three untimed."""
    for _ in range(3):
        call()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e3


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-envs", type=int, nargs="+", default=[1, 1024])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"# simulator getters, humanoid (MJCF) on a plane, float64, {torch.get_num_threads()} threads; ms per call")
    print("| n_envs | " + " | ".join(GETTERS) + " | scene.step |")
    print("|---:|" + "---:|" * (len(GETTERS) + 1))
    for n_envs in args.n_envs:
        scene = gs.Scene(rigid_options=gs.options.RigidOptions(enable_collision=True), show_viewer=False)
        scene.add_entity(gs.morphs.Plane())
        robot = scene.add_entity(gs.morphs.MJCF(file=str(torchrbd.models.path("humanoid", "mjcf"))))
        scene.build(n_envs=n_envs)
        for _ in range(5):
            scene.step()
        times = [mean_ms(getattr(robot, name), args.calls) for name in GETTERS] + [mean_ms(scene.step, args.calls)]
        print(f"| {n_envs} | " + " | ".join(f"{t:.2f}" for t in times) + " |")


if __name__ == "__main__":
    main()
