"""Memory per simulation step kept for backward, with and without checkpointing.

Builds a 30-DoF robot (floating base + 4 chains of 6 revolute joints), runs a
rollout with ``requires_grad=True`` and counts the bytes of the tensors that
autograd saves for the backward pass (``torch.autograd.graph.saved_tensors_hooks``,
each storage counted once). No CUDA needed::

    python examples/sim_memory.py --steps 50 --envs 1
    python examples/sim_memory.py --rss   # also peak RSS of long rollouts (subprocesses)

With ``checkpoint_every=K`` the saved tensors inside a segment are replaced by
recomputation, so the count drops to the segment boundaries; during backward
one segment (K steps) is alive at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

import torchrbd.sim as gs


def robot_urdf(chains: int = 4, joints_per_chain: int = 6) -> str:
    """A floating-base tree with ``chains * joints_per_chain`` revolute joints."""
    inertia = '<inertia ixx="{0}" ixy="0" ixz="0" iyy="{0}" iyz="0" izz="{1}"/>'
    links = [f'<link name="base"><inertial><mass value="10"/>{inertia.format(0.2, 0.3)}</inertial></link>']
    joints = []
    for c in range(chains):
        parent = "base"
        for k in range(joints_per_chain):
            name = f"c{c}_l{k}"
            links.append(
                f'<link name="{name}"><inertial><origin xyz="0 0 -0.1"/><mass value="0.5"/>'
                f"{inertia.format(0.004, 0.001)}</inertial></link>"
            )
            xyz = f"{0.2 * (1 if c % 2 else -1)} {0.15 * (1 if c < 2 else -1)} 0" if k == 0 else "0 0 -0.2"
            axis = ("1 0 0", "0 1 0", "0 0 1")[k % 3]
            joints.append(
                f'<joint name="{name}_j" type="revolute"><parent link="{parent}"/><child link="{name}"/>'
                f'<origin xyz="{xyz}"/><axis xyz="{axis}"/><limit lower="-2" upper="2" effort="50" velocity="10"/>'
                '<dynamics damping="0.1"/></joint>'
            )
            parent = name
    return '<?xml version="1.0"?><robot name="robot30">' + "".join(links + joints) + "</robot>"


def build(n_envs: int, integrator: str = "Euler"):
    gs.init(backend=gs.cpu, precision="64")
    path = os.path.join(tempfile.mkdtemp(), "robot30.urdf")
    with open(path, "w") as f:
        f.write(robot_urdf())
    scene = gs.Scene(
        sim_options=gs.options.SimOptions(dt=0.01, requires_grad=True),
        rigid_options=gs.options.RigidOptions(integrator=getattr(gs.integrator, integrator)),
    )
    robot = scene.add_entity(gs.morphs.URDF(file=path, pos=(0, 0, 1)))
    scene.build(n_envs=n_envs)
    return scene, robot


def saved_bytes(scene, robot, steps: int, checkpoint_every):
    """Bytes saved for backward during a rollout of ``steps`` steps (unique storages)."""
    seen, total = set(), [0]

    def pack(t):
        key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        if key not in seen:
            seen.add(key)
            total[0] += key[1]
        return t

    scene.reset()
    batch = (scene.n_envs,) if scene.n_envs else ()
    tau = torch.zeros(steps, *batch, robot.n_dofs, dtype=torch.float64, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if checkpoint_every == "step":
            for t in range(steps):
                robot.control_dofs_force(tau[t])
                scene.step()
            loss = robot.get_qpos().sum()
        else:
            qpos, _ = scene.rollout(tau, checkpoint_every=checkpoint_every)
            loss = qpos[-1].sum()
    loss.backward()
    return total[0]


def peak_rss(steps: int, checkpoint_every, n_envs: int, integrator: str) -> float:
    """Peak resident memory (MiB) of a fresh process running one rollout + backward."""
    code = (
        "import json, resource, torch, sys; sys.path.insert(0, %r); import sim_memory as m; "
        "s, r = m.build(%d, %r); "
        "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss; "
        "tau = torch.zeros(%d, *(([%d]) if %d else []), r.n_dofs, dtype=torch.float64, requires_grad=True); "
        "q, _ = s.rollout(tau, checkpoint_every=%r); q[-1].sum().backward(); "
        "print(json.dumps([base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]))"
    ) % (os.path.dirname(os.path.abspath(__file__)), n_envs, integrator, steps, n_envs, n_envs, checkpoint_every)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = json.loads(out.stdout.strip().splitlines()[-1])
    return (after - before) / 1024.0


def main(steps: int = 50, n_envs: int = 0, checkpoint_every: int = 10, rss: bool = False,
         integrator: str = "Euler") -> dict:
    scene, robot = build(n_envs, integrator)
    assert robot.n_dofs == 30, robot.n_dofs
    res = {
        "n_dofs": robot.n_dofs,
        "steps": steps,
        "n_envs": n_envs,
        "integrator": integrator,
        "state_bytes": (robot.n_qs + robot.n_dofs) * 8 * max(n_envs, 1),
        "step_loop_bytes_per_step": saved_bytes(scene, robot, steps, "step") / steps,
        "rollout_bytes_per_step": saved_bytes(scene, robot, steps, None) / steps,
        f"rollout_checkpoint_{checkpoint_every}_bytes_per_step": saved_bytes(scene, robot, steps, checkpoint_every)
        / steps,
    }
    if rss:
        long = 10 * steps
        res["rss_MiB"] = {
            f"{long} steps, no checkpoint": peak_rss(long, None, n_envs, integrator),
            f"{long} steps, checkpoint_every={checkpoint_every}": peak_rss(long, checkpoint_every, n_envs, integrator),
        }
    return res


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--envs", type=int, default=0)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--rss", action="store_true")
    parser.add_argument("--integrator", choices=["Euler", "RK4"], default="Euler")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(json.dumps(main(args.steps, args.envs, args.checkpoint_every, args.rss, args.integrator), indent=2))
