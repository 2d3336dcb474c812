"""System identification: recover link masses from simulated trajectories by gradient descent.

A double pendulum carries an unknown payload: its second link really weighs
``true_masses[1]`` kg, the URDF says 1 kg. We record joint trajectories of the
real robot under known, exciting torques (``trajectories`` runs of ``horizon``
steps), then fit the masses of both moving links, starting from the URDF values,
by making simulated trajectories match the recorded ones::

    loss(m) = mean |q_sim(m) - q_recorded|^2

``m`` enters the dynamics through ``kd.set_inertial_parameters(mass=...)`` with a
tensor that requires grad; ``loss.backward()`` differentiates through every
integration step. The masses are optimised as ``exp(log m)`` (always positive)
with L-BFGS (a quasi-Newton method on the same gradients: a handful of
iterations reach the truth to 1e-5 kg) or Adam (``--optimizer adam``, slower).
The rollout is a plain semi-implicit Euler loop on torchrbd's
dynamics, batched over the runs (batch dimensions lead); the robot is bolted to
the world, so the joint block of ``M a + h = [0; tau]`` gives the accelerations
(see :func:`joint_accelerations`)::

    python examples/system_identification.py
    python examples/system_identification.py --noise 1e-3 --optimizer adam --iterations 60

prints the estimate and its error shrinking iteration by iteration.
"""

from __future__ import annotations

import argparse
import math

import torch

import torchrbd.models


def joint_accelerations(kd, q, qd, tau):
    """(B, n) joint accelerations of a fixed-base robot: ``M[6:, 6:] qddot = tau - h[6:]``."""
    B = q.shape[0]
    H = torch.eye(4, dtype=q.dtype).expand(B, 4, 4)
    zero6 = torch.zeros(B, 6, dtype=q.dtype)
    M, h = kd.mass_matrix_and_bias_force(H, q, zero6, qd)  # one forward kinematics for both
    return torch.linalg.solve(M[:, 6:, 6:], (tau - h[:, 6:]).unsqueeze(-1)).squeeze(-1)


def rollout(kd, q0, torques, dt):
    """Semi-implicit Euler from rest at ``q0`` (B, n) under ``torques`` (T, B, n);
    returns the positions (T, B, n) after each step."""
    q, qd, out = q0, torch.zeros_like(q0), []
    for tau in torques:
        qd = qd + dt * joint_accelerations(kd, q, qd, tau)
        q = q + dt * qd
        out.append(q)
    return torch.stack(out)


def main(iterations: int = 10, horizon: int = 40, trajectories: int = 8, dt: float = 0.01,
         optimizer: str = "lbfgs", lr: float | None = None, true_masses=(1.0, 1.6), noise: float = 0.0,
         seed: int = 0, progress: bool = True, verbose: bool = True) -> dict:
    """Identify the two link masses. Returns ``losses`` (trajectory error at the
    start of every iteration) and ``errors`` (|m - m_true|, kg, before the first
    and after every iteration), ``estimate``, ``truth``."""
    g = torch.Generator().manual_seed(seed)
    kd = torchrbd.models.load("double_pendulum")
    names = ["link1", "link2"]
    idx = torch.tensor([kd.model.link_names.index(n) for n in names])
    nominal = kd.get_inertial_parameters()["mass"].clone()
    truth = torch.tensor(true_masses, dtype=torch.float64)

    def with_masses(m):
        return nominal.index_put((idx,), m)

    # the "real" robot: record trajectories under known, exciting torques
    B, T, n = trajectories, horizon, kd.NDoF
    t = torch.arange(T, dtype=torch.float64)[:, None, None] * dt
    freq = 0.5 + 2.0 * torch.rand(1, B, n, generator=g, dtype=torch.float64)
    phase = 2 * math.pi * torch.rand(1, B, n, generator=g, dtype=torch.float64)
    torques = 8.0 * torch.sin(2 * math.pi * freq * t + phase)
    q0 = (torch.rand(B, n, generator=g, dtype=torch.float64) - 0.5) * 2.0
    real = torchrbd.models.load("double_pendulum")
    real.set_inertial_parameters(mass=with_masses(truth))
    with torch.no_grad():
        recorded = rollout(real, q0, torques, dt)
        recorded = recorded + noise * torch.randn(recorded.shape, generator=g, dtype=torch.float64)

    # the model: start from the URDF masses and descend the trajectory error
    log_m = nominal[idx].log().clone().requires_grad_(True)
    if optimizer == "lbfgs":
        opt = torch.optim.LBFGS([log_m], lr=lr or 1.0, max_iter=1, line_search_fn="strong_wolfe")
    elif optimizer == "adam":
        opt = torch.optim.Adam([log_m], lr=lr or 0.08)
    else:
        raise ValueError(f"optimizer must be 'lbfgs' or 'adam', got {optimizer!r}")

    def closure():
        kd.set_inertial_parameters(mass=with_masses(log_m.exp()))
        loss = (rollout(kd, q0, torques, dt) - recorded).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        return loss

    errors = [float((log_m.detach().exp() - truth).norm())]
    losses = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=iterations, desc="identifying masses", unit="it")
    say = (bar.write if bar is not None else print) if verbose else (lambda msg: None)
    say(f"true masses {truth.tolist()} kg; start from the URDF's {nominal[idx].tolist()} kg ({optimizer})")
    for it in range(iterations):
        losses.append(float(opt.step(closure).detach()))
        m = log_m.detach().exp()
        errors.append(float((m - truth).norm()))
        say(f"iter {it + 1:3d}  loss {losses[-1]:.3e}  masses [{m[0]:.5f}, {m[1]:.5f}] kg  error {errors[-1]:.2e} kg")
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return {"losses": losses, "errors": errors, "estimate": log_m.detach().exp(), "truth": truth}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--optimizer", choices=["lbfgs", "adam"], default="lbfgs")
    parser.add_argument("--horizon", type=int, default=40)
    parser.add_argument("--trajectories", type=int, default=8)
    parser.add_argument("--noise", type=float, default=0.0, help="measurement noise on q, rad")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()
    out = main(args.iterations, args.horizon, args.trajectories, optimizer=args.optimizer, noise=args.noise,
               progress=not args.no_progress)
    print(f"estimate {out['estimate'].tolist()} kg, truth {out['truth'].tolist()} kg; "
          f"error {out['errors'][0]:.4f} -> {out['errors'][-1]:.2e} kg")
