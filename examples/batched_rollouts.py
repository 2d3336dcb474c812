"""Many environments at once: ``n_envs`` double pendulums in one scene of the simulator.

``scene.build(n_envs=N)`` gives every getter and setter a leading dimension of
size N. Each environment starts from its own random angles and swings freely
(no control, no damping) for ``steps`` steps; one ``scene.step()`` advances all of
them with one batched dynamics evaluation, so N environments cost about as much
wall time per step as one on a CPU with small N, and much less than N on a GPU.

The example times the same rollout with 1 and with N environments, and checks the
physics of every environment through its energy (kinetic ``0.5 qdot^T M qdot``
plus potential ``m g z_com``), which semi-implicit Euler keeps close to its
initial value::

    python examples/batched_rollouts.py --envs 256 --steps 200
    python examples/batched_rollouts.py --gif swing.gif     # animate environment 0
"""

from __future__ import annotations

import argparse
import math
import time

import torch

import torchrbd.models
import torchrbd.sim as gs


def energy(kd, q, qd, g: float = 9.81):
    """(B,) total energy of a fixed-base robot: 0.5 qd^T M qd + m g z_com."""
    B = q.shape[0]
    H = torch.eye(4, dtype=q.dtype, device=q.device).expand(B, 4, 4)
    M = kd.mass_matrix(H, q)[:, 6:, 6:]
    kinetic = 0.5 * torch.einsum("bi,bij,bj->b", qd, M, qd)
    return kinetic + kd.get_total_mass() * g * kd.CoM_position(H, q)[:, 2]


def simulate(n_envs: int, steps: int, dt: float, seed: int, progress: bool, model: str = "double_pendulum"):
    """Run ``steps`` free steps of ``n_envs`` environments from random angles; returns
    (positions (steps + 1, n_envs, n), velocities (steps + 1, n_envs, n), seconds per step)."""
    scene = gs.Scene(
        sim_options=gs.options.SimOptions(dt=dt),
        rigid_options=gs.options.RigidOptions(enable_collision=False, enable_joint_limit=False),
    )
    robot = scene.add_entity(gs.morphs.URDF(file=str(torchrbd.models.path(model)), fixed=True))
    scene.build(n_envs=n_envs)
    g = torch.Generator().manual_seed(seed)
    q0 = (torch.rand(n_envs, robot.n_dofs, generator=g, dtype=torch.float64) - 0.5) * 2 * math.pi / 3
    robot.set_dofs_position(q0)  # (n_envs, n): one row per environment
    qs, vs = [robot.get_dofs_position()], [robot.get_dofs_velocity()]
    steps_iter = range(steps)
    if progress:
        from tqdm import tqdm

        steps_iter = tqdm(steps_iter, desc=f"{n_envs} envs", unit="step", leave=False)
    t0 = time.perf_counter()
    for _ in steps_iter:
        scene.step()
        qs.append(robot.get_dofs_position())
        vs.append(robot.get_dofs_velocity())
    seconds = (time.perf_counter() - t0) / max(steps, 1)
    return torch.stack(qs).sceneless(), torch.stack(vs).sceneless(), seconds


def main(envs: int = 256, steps: int = 200, dt: float = 0.005, seed: int = 0, progress: bool = True,
         gif: str | None = None, verbose: bool = True) -> dict:
    """Returns ``q`` (steps + 1, envs, n), ``energy_drift`` (max over environments of
    |E(T) - E(0)| / (|E(0)| + m g l)), ``seconds_per_step`` for 1 and ``envs``
    environments and the throughput ``env_steps_per_second``."""
    gs.init(backend=gs.cpu, precision="64")
    _, _, single = simulate(1, steps, dt, seed, progress)
    q, qd, batched = simulate(envs, steps, dt, seed, progress)
    kd = torchrbd.models.load("double_pendulum")
    with torch.no_grad():
        e0, e1 = energy(kd, q[0], qd[0]), energy(kd, q[-1], qd[-1])
    scale = float(kd.get_total_mass()) * 9.81 * 2.0  # m g l of the whole pendulum
    drift = float(((e1 - e0).abs() / (e0.abs() + scale)).max())
    out = {
        "q": q, "energy_drift": drift, "seconds_per_step": {1: single, envs: batched},
        "env_steps_per_second": envs / batched,
    }
    if verbose:
        print(f"1 env: {1e3 * single:.2f} ms/step; {envs} envs: {1e3 * batched:.2f} ms/step "
              f"({out['env_steps_per_second']:.0f} env-steps/s, "
              f"{envs * single / batched:.1f}x the throughput of one env)")
        print(f"energy after {steps * dt:.2f} s: max relative drift over {envs} envs {drift:.2e}")
    if gif:
        from torchrbd.render import render

        render("double_pendulum", trajectory=q[:, 0], output=gif, dt=dt, max_frames=80)
        if verbose:
            print(f"environment 0 animated in {gif}")
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--dt", type=float, default=0.005)
    parser.add_argument("--gif", default=None, help="write an animation of environment 0")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()
    main(args.envs, args.steps, args.dt, progress=not args.no_progress, gif=args.gif)
