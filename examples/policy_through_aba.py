"""Train a small MLP policy by backpropagating through the robot's forward dynamics.

The policy maps the state ``(q, qdot)`` of a robot to joint torques. Its training
signal is the joint acceleration those torques *produce*, computed by torchrbd's
forward dynamics, compared with the acceleration of a desired, critically damped
behaviour that pulls the robot to a goal posture::

    qddot_des = wn^2 (q_goal - q) - 2 wn qdot          (angle errors wrapped to [-pi, pi])
    loss      = mean over a batch of random states |qddot(q, qdot, policy(q, qdot)) - qddot_des|^2

so the policy learns computed-torque control (``tau = M qddot_des + h``) without
ever being shown a torque. Every training step is one batched dynamics call
(batch dimensions lead: ``q`` is (B, n)). After training, the policy is rolled out
from random starts with semi-implicit Euler and compared with doing nothing.

Forward dynamics: for a floating-base robot (``quadruped``) the accelerations are
``kd.aba`` (the base reacts to the joint torques, as in flight). For a robot
bolted to the world (``double_pendulum``, ``arm7``; torchrbd's URDF models always
carry a 6-DoF base) only the joint block of ``M a + h = [0; tau]`` applies:
``M[6:, 6:] qddot = tau - h[6:]`` with the base at rest, see
:func:`joint_accelerations`::

    python examples/policy_through_aba.py                     # double pendulum, upright
    python examples/policy_through_aba.py --model arm7 --steps 400
    python examples/policy_through_aba.py --model quadruped   # floating base, kd.aba
"""

from __future__ import annotations

import argparse
import math

import torch

import torchrbd
import torchrbd.models

GOALS = {  # goal posture of each supported model; angles wrap for revolute joints
    "double_pendulum": [math.pi, 0.0],  # balance upright
    "arm7": [0.5, 0.8, 0.0, -1.0, 0.0, 0.7, 0.0],
    "quadruped": [0.0, 0.8, -1.5] * 4,  # legs folded, in flight
}


def joint_accelerations(kd, q, qd, tau, floating: bool):
    """(B, n) joint accelerations for joint torques ``tau`` (B, n).

    ``floating``: free base at rest in the world frame (``kd.aba``; base
    velocity zero at the sampled instant); else the base is welded to the world.
    """
    B = q.shape[0]
    H = torch.eye(4, dtype=q.dtype).expand(B, 4, 4)
    zero6 = torch.zeros(B, 6, dtype=q.dtype)
    if floating:
        return kd.aba(H, q, zero6, qd, tau)[:, 6:]
    M, h = kd.mass_matrix_and_bias_force(H, q, zero6, qd)  # one forward kinematics for both
    return torch.linalg.solve(M[:, 6:, 6:], (tau - h[:, 6:]).unsqueeze(-1)).squeeze(-1)


def wrap(angle):
    """Angles to [-pi, pi] (smooth away from +-pi)."""
    return torch.atan2(torch.sin(angle), torch.cos(angle))


class Policy(torch.nn.Module):
    """MLP: [sin q, cos q, qdot] -> tau (N m), scaled by ``torque_scale``."""

    def __init__(self, n: int, hidden: int, torque_scale: float):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(3 * n, hidden), torch.nn.Tanh(),
            torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
            torch.nn.Linear(hidden, n),
        )
        self.torque_scale = torque_scale

    def forward(self, q, qd):
        return self.torque_scale * self.net(torch.cat([torch.sin(q), torch.cos(q), qd], -1))


def main(model: str = "double_pendulum", steps: int = 300, batch: int = 128, hidden: int = 64, lr: float = 1e-2,
         wn: float = 3.0, eval_envs: int = 16, eval_steps: int = 200, dt: float = 0.01, seed: int = 0,
         progress: bool = True) -> dict:
    """Train, then evaluate. Returns ``losses`` (per training step), ``final_error``
    and ``passive_error`` (mean wrapped distance to the goal after ``eval_steps``
    Euler steps with the policy / with zero torque), and the ``policy``."""
    torch.manual_seed(seed)
    kd = torchrbd.models.load(model)
    floating = model == "quadruped"
    n = kd.NDoF
    goal = torch.tensor(GOALS.get(model, [0.0] * n), dtype=torch.float64)
    lower = torch.nan_to_num(kd.model.lower, neginf=-math.pi).clamp(min=-math.pi)
    upper = torch.nan_to_num(kd.model.upper, posinf=math.pi).clamp(max=math.pi)
    def sample(B):
        q = lower + (upper - lower) * torch.rand(B, n, dtype=torch.float64)
        return q, torch.randn(B, n, dtype=torch.float64)

    # torque scale: the largest gravity torque over a few random postures
    eye = torch.eye(4, dtype=torch.float64)
    scale = float(kd.gravity_term(eye, sample(64)[0])[:, 6:].abs().max().clamp(min=1.0))
    policy = Policy(n, hidden, scale).double()
    optimizer = torch.optim.Adam(policy.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max(steps, 1))

    def desired(q, qd):
        return wn**2 * wrap(goal - q) - 2 * wn * qd

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=steps, desc=f"training on {model}", unit="step")
    losses = []
    for _ in range(steps):
        q, qd = sample(batch)
        qdd = joint_accelerations(kd, q, qd, policy(q, qd), floating)
        loss = (qdd - desired(q, qd)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.3g}")
    if bar is not None:
        bar.close()

    def rollout(controller):
        g = torch.Generator().manual_seed(seed + 1)
        q = lower + (upper - lower) * torch.rand(eval_envs, n, generator=g, dtype=torch.float64)
        qd = torch.zeros_like(q)
        with torch.no_grad():
            for _ in range(eval_steps):
                qd = qd + dt * joint_accelerations(kd, q, qd, controller(q, qd), floating)
                q = q + dt * qd
        return float(wrap(goal - q).norm(dim=-1).mean())

    final = rollout(policy)
    passive = rollout(lambda q, qd: torch.zeros_like(q))
    return {"losses": losses, "final_error": final, "passive_error": passive, "policy": policy}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="double_pendulum", choices=sorted(GOALS))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--eval-steps", type=int, default=200)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()
    out = main(args.model, steps=args.steps, batch=args.batch, eval_steps=args.eval_steps,
               progress=not args.no_progress)
    k = max(1, len(out["losses"]) // 10)
    first, last = sum(out["losses"][:k]) / k, sum(out["losses"][-k:]) / k
    print(f"acceleration loss: {first:.3g} (first {k} steps) -> {last:.3g} (last {k} steps)")
    print(f"distance to the goal after {args.eval_steps} steps: {out['final_error']:.3f} rad with the policy, "
          f"{out['passive_error']:.3f} rad with zero torque")
