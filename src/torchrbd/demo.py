"""``torchrbd demo``: swing the double pendulum up by optimising through the simulator.

The job torchrbd is for, in one screen: a robot from :mod:`torchrbd.models`, a
differentiable rollout in :mod:`torchrbd.sim`, gradients of the final state with
respect to the controls, and an optimiser that uses them.

The task. Each joint is driven by a PD controller (the simulator's position
control, gains from the mass matrix at the start: ``kp = w^2 M_ii``,
``kv = 2 w M_ii`` with ``w = 2 pi 0.7 Hz``; torques clamped to the URDF effort
limits). The controllers track a reference trajectory, piecewise linear in time
through ``knots`` values per joint. The optimiser chooses the reference so that,
after ``horizon`` steps of ``dt``, the robot is at its goal and at rest::

    r(x) = [q_T - q_goal ; 0.3 s * qdot_T],      loss = |r|^2

Starting from "hold the initial pose" (the double pendulum hangs still), the
loss falls from about 10 to round-off in a handful of iterations.

The optimiser is Levenberg-Marquardt: the Jacobian ``dr/dx`` (a few rows) comes
from one batched backward pass through the whole rollout
(``torch.autograd.grad(..., is_grads_batched=True)``); each step solves
``(J^T J + mu I) dx = -J^T r`` and is kept only if the loss falls (else ``mu``
grows and the step is retried). Adam works too, with more iterations; see
``examples/optimize_pendulum.py`` for a torque-level version.

>>> from torchrbd.demo import run_demo
>>> result = run_demo()                 # writes torchrbd_demo.png
>>> result["losses"][0], result["losses"][-1]
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .errors import InputError

__all__ = ["run_demo", "TASKS", "Task"]


@dataclass(frozen=True)
class Task:
    """Start and goal joint positions of a demo model (rad or m, in joint order)."""

    q0: tuple
    goal: tuple
    description: str


#: The tasks of the embedded models; other models get a generic one (see :func:`_task`).
TASKS = {
    "double_pendulum": Task((0.0, 0.0), (math.pi, 0.0), "swing up from hanging to upright, and stop there"),
    "pendulum": Task((0.0,), (math.pi,), "swing up from hanging to upright, and stop there"),
    "cartpole": Task((0.0, math.pi), (0.5, 0.0), "swing the pole up while moving the cart 0.5 m, and stop"),
    "arm7": Task((0.0,) * 7, (0.8, 0.9, 0.0, -1.2, 0.0, 0.9, 0.0), "move from upright to a reaching pose, and stop"),
}

GAIN_HZ = 0.7  #: closed-loop bandwidth of the PD controllers
VELOCITY_WEIGHT = 0.3  #: s; weight of the final velocity in the residual


def _model_file(model) -> tuple[str, Path]:
    """(name, file) of an embedded model name or a URDF/MJCF path."""
    from . import models

    if str(model) in models.names():
        return str(model), models.path(str(model))
    path = Path(model)
    if not path.is_file():
        raise InputError(
            f"demo model {str(model)!r} is neither an embedded model ({', '.join(models.names())}) nor a file"
        )
    return path.stem, path


def _task(name: str, model) -> Task:
    """The task of an embedded model, or: start at 0 (clamped into the limits) and
    move every joint by 0.5 rad (or m), staying inside its limits."""
    if name in TASKS and len(TASKS[name].q0) == model.n:
        return TASKS[name]
    inf = torch.full((model.n,), math.inf, dtype=torch.float64)
    lo = (model.lower if model.lower is not None else -inf).double().cpu()
    hi = (model.upper if model.upper is not None else inf).double().cpu()
    q0 = torch.zeros(model.n, dtype=torch.float64).clamp(lo, hi)
    up, down = (q0 + 0.5).clamp(lo, hi), (q0 - 0.5).clamp(lo, hi)
    goal = torch.where(up - q0 >= q0 - down, up, down)
    return Task(tuple(q0.tolist()), tuple(goal.tolist()), "move every joint by up to 0.5 rad (or m), and stop")


@contextlib.contextmanager
def _sim_settings(device):
    """Initialise :mod:`torchrbd.sim` for the demo (float64 on ``device``) and put
    the previous global settings back afterwards."""
    import torchrbd.sim as gs
    from torchrbd.sim import runtime

    saved = dict(runtime._SETTINGS)
    dev = torch.device(device)
    try:
        gs.init(backend=gs.gpu if dev.type == "cuda" else gs.cpu, precision="64")
        yield gs
    finally:
        runtime._SETTINGS.clear()
        runtime._SETTINGS.update(saved)


def _hat_basis(T: int, K: int, dtype, device) -> torch.Tensor:
    """(T, K) linear interpolation weights: sample t of a piecewise-linear curve through K knots."""
    t = torch.linspace(0, 1, T, dtype=dtype, device=device)[:, None]
    k = torch.linspace(0, 1, K, dtype=dtype, device=device)[None, :]
    return (1 - (t - k).abs() * (K - 1)).clamp(min=0) if K > 1 else torch.ones(T, 1, dtype=dtype, device=device)


def _jacobian(r: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """dr/dx (m, p) by one batched backward pass (a loop of m passes where vmap cannot)."""
    eye = torch.eye(r.numel(), dtype=r.dtype, device=r.device)
    try:
        return torch.autograd.grad(r, x, eye, is_grads_batched=True, retain_graph=True)[0]
    except RuntimeError:
        return torch.stack([torch.autograd.grad(r[i], x, retain_graph=True)[0] for i in range(r.numel())])


def run_demo(
    model: str = "double_pendulum",
    horizon: int = 30,
    iterations: int = 10,
    device: str = "cpu",
    output="torchrbd_demo.png",
    progress: bool = True,
    *,
    dt: float = 0.05,
    knots: int = 8,
    verbose: bool = True,
    tolerance: float = 1e-12,
) -> dict:
    """Optimise the reference of the PD controllers so that the robot reaches its goal.

    Args:
        model: embedded model name (``double_pendulum``, ``pendulum``, ``cartpole``,
            ``arm7`` have tasks; others, and URDF/MJCF paths, get a generic one)
            simulated with a fixed base.
        horizon: simulated steps (of ``dt`` seconds each).
        iterations: at most this many Levenberg-Marquardt iterations (stops early
            when the loss is below ``tolerance``).
        device: ``"cpu"`` or ``"cuda"``.
        output: PNG written with the loss curve and the trajectory (None: no plot).
        progress: show a tqdm progress bar.
        knots: reference values per joint (piecewise linear in time).
        verbose: print one line per iteration and a summary.

    Returns:
        dict with ``losses`` (list, the loss before optimising and after each
        iteration), ``q`` (T+1, n) and ``q_initial`` (T+1, n) joint trajectories
        (start state included) after and before optimising, ``reference`` (T, n),
        ``goal`` (n,), ``tip`` / ``tip_goal`` (3,) final and goal position of the
        frame ``frame``, ``time`` (s), ``dt``, ``model``, ``task``, ``converged``,
        ``output`` (Path or None).
    """
    if int(horizon) < 2 or int(iterations) < 0 or int(knots) < 1:
        raise InputError(f"need horizon >= 2, iterations >= 0, knots >= 1 (got {horizon}, {iterations}, {knots})")
    from .render import as_kindyn

    name, file = _model_file(model)
    t_start = time.perf_counter()
    say = _printer(verbose, progress)
    fk = as_kindyn(str(file))  # kinematics for the goal position and the plot
    task = _task(name, fk.model)
    with _sim_settings(device) as gs:
        scene = gs.Scene(
            sim_options=gs.options.SimOptions(dt=dt, requires_grad=True),
            rigid_options=gs.options.RigidOptions(enable_collision=False),
        )
        morph = gs.morphs.MJCF if file.suffix.lower() == ".xml" else gs.morphs.URDF
        robot = scene.add_entity(morph(file=str(file), fixed=True))
        scene.build()
        f64 = dict(dtype=scene.dtype, device=scene.device)
        q0, goal = torch.tensor(task.q0, **f64), torch.tensor(task.goal, **f64)
        n = robot.n_dofs

        # start state, and PD gains from the mass matrix there
        robot.set_dofs_position(q0)
        M = robot.get_mass_mat().detach().sceneless()
        w = 2 * math.pi * GAIN_HZ
        robot.set_dofs_kp(w * w * M.diagonal())
        robot.set_dofs_kv(2 * w * M.diagonal())
        start = scene.get_state()
        basis = _hat_basis(int(horizon), int(knots), **f64)

        def simulate(x):
            """Reference (T, n), joint positions and velocities (T, n) for knot offsets x."""
            scene.reset(start)
            reference = q0 + basis @ x.view(int(knots), n)
            q, v = scene.rollout(reference, mode="position")
            return reference, q.sceneless(), v.sceneless()

        def residual(x):
            _, q, v = simulate(x)
            return torch.cat([q[-1] - goal, VELOCITY_WEIGHT * v[-1]])

        say(f"torchrbd demo: {name} ({n} joints): {task.description}")
        say(f"  {horizon} steps of {dt} s, PD reference with {knots} knots per joint, Levenberg-Marquardt")
        x = torch.zeros(int(knots) * n, **f64, requires_grad=True)
        r = residual(x)
        loss, mu = float(r.detach().pow(2).sum()), 1e-2
        losses = [loss]
        say(f"  iter  0   loss {loss:.3e}")
        bar = _bar(progress, int(iterations), name)
        converged = loss < tolerance
        for it in range(1, int(iterations) + 1):
            if converged:
                break
            J = _jacobian(r, x)
            g, A = J.T @ r.detach(), J.T @ J
            eye = torch.eye(A.shape[0], **f64)
            while True:  # Levenberg-Marquardt: damp until the loss falls
                dx = -torch.linalg.solve(A + mu * eye, g)
                x_new = (x.detach() + dx).requires_grad_(True)
                r_new = residual(x_new)
                loss_new = float(r_new.detach().pow(2).sum())
                if math.isfinite(loss_new) and loss_new < loss:
                    x, r, loss, mu = x_new, r_new, loss_new, max(mu / 10, 1e-12)
                    break
                mu *= 4
                if mu > 1e10:
                    break
            losses.append(loss)
            converged = loss < tolerance or mu > 1e10
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.3e}")
            say(f"  iter {it:2d}   loss {loss:.3e}")
        if bar is not None:
            bar.close()

        with torch.no_grad():
            ref0, q_init, _ = simulate(torch.zeros_like(x))
            reference, q, v = simulate(x.detach())
        q_init = torch.cat([q0[None], q_init.detach()]).cpu()
        q_final = torch.cat([q0[None], q.detach()]).cpu()
        reference = reference.detach().cpu()

    seconds = time.perf_counter() - t_start
    frame = fk.frame_names[-1]
    eye4 = torch.eye(4, dtype=torch.float64)
    tip = fk.forward_kinematics(frame, eye4, q_final[-1].double())[:3, 3]
    tip_goal = fk.forward_kinematics(frame, eye4, goal.cpu().double())[:3, 3]
    result = {
        "losses": losses,
        "q": q_final,
        "q_initial": q_init,
        "reference": reference,
        "goal": goal.cpu(),
        "frame": frame,
        "tip": tip,
        "tip_goal": tip_goal,
        "time": seconds,
        "dt": dt,
        "model": name,
        "task": task.description,
        "converged": bool(losses[-1] < tolerance),
        "output": None,
    }
    if output is not None:
        result["output"] = plot_demo(result, fk, output)
    err = float((tip - tip_goal).norm())
    say(
        f"done in {seconds:.1f} s: loss {losses[0]:.3e} -> {losses[-1]:.3e} in {len(losses) - 1} iterations; "
        f"'{frame}' ends {err:.2e} m from its goal, final speed {float(v[-1].norm()):.2e}"
    )
    if result["output"] is not None:
        say(f"plot written to {result['output']}")
    return result


def _printer(verbose: bool, progress: bool):
    if not verbose:
        return lambda msg: None
    if progress:
        try:
            from tqdm import tqdm

            return tqdm.write
        except ImportError:  # pragma: no cover - tqdm is a dependency of the viz extra
            pass
    return lambda msg: print(msg, flush=True)


def _bar(progress: bool, total: int, name: str):
    if not progress:
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return None
    return tqdm(total=total, desc=f"optimising {name}", unit="it", leave=False)


def plot_demo(result: dict, kd, output) -> Path:
    """The demo's figure: loss per iteration, joint trajectories, and the motion
    of the robot (side view) before and after optimising. Returns the path."""
    from matplotlib.figure import Figure

    from .render import _Scene

    fig = Figure(figsize=(15, 4.6), dpi=100)
    ax_loss, ax_q = fig.add_subplot(1, 3, 1), fig.add_subplot(1, 3, 2)
    ax_xy = fig.add_subplot(1, 3, 3)
    fig.suptitle(f"torchrbd demo: {result['model']}: {result['task']}", fontsize=11)

    losses = np.asarray(result["losses"])
    ax_loss.semilogy(np.arange(len(losses)), np.maximum(losses, 1e-32), "o-", color="tab:blue")
    ax_loss.set_xlabel("iteration")
    ax_loss.set_ylabel("loss  |q_T - q_goal|^2 + |0.3 qdot_T|^2")
    ax_loss.set_title("loss (Levenberg-Marquardt through the simulator)", fontsize=9)
    ax_loss.grid(True, which="both", alpha=0.3)

    q, q0 = result["q"].numpy(), result["q_initial"].numpy()
    t = np.arange(q.shape[0]) * result["dt"]
    colors = [f"C{i % 10}" for i in range(q.shape[1])]
    for j, c in enumerate(colors):
        name = kd.joints_name_list[j]
        ax_q.plot(t, q[:, j], color=c, lw=2, label=f"{name} (optimised)")
        ax_q.plot(t, q0[:, j], color=c, lw=1, ls="--", alpha=0.6)
        ax_q.plot(t[1:], result["reference"].numpy()[:, j], color=c, lw=0.8, ls=":", alpha=0.8)
        ax_q.axhline(float(result["goal"][j]), color=c, lw=0.6, alpha=0.4)
    ax_q.set_xlabel("time [s]")
    ax_q.set_ylabel("joint position [rad or m]")
    ax_q.set_title("solid: optimised, dashed: before, dotted: PD reference", fontsize=9)
    ax_q.legend(fontsize=7, loc="best")
    ax_q.grid(True, alpha=0.3)

    # side view: the two world axes along which the robot moves most
    Q = torch.as_tensor(q, dtype=torch.float64)
    scene = _Scene(kd, Q, torch.eye(4, dtype=torch.float64).expand(len(Q), 4, 4), geoms=False, com=False)
    before = _Scene(kd, torch.as_tensor(q0, dtype=torch.float64),
                    torch.eye(4, dtype=torch.float64).expand(len(Q), 4, 4), geoms=False, com=False)
    pts = scene.poses[:, :, :3, 3]
    spread = np.ptp(pts.reshape(-1, 3), axis=0)
    a, b = sorted(np.argsort(spread)[-2:])
    labels = "xyz"
    tip_index = scene.names.index(result["frame"])
    for i, k in enumerate(np.unique(np.linspace(0, len(Q) - 1, 7).round().astype(int))):
        alpha = 0.15 + 0.85 * i / 6
        o = scene.poses[k, :, :3, 3]
        for p, c in scene.pairs:
            ax_xy.plot(o[[p, c], a], o[[p, c], b], color="0.2", lw=3, alpha=alpha, solid_capstyle="round")
        ax_xy.plot(o[scene.body_links[1:], a], o[scene.body_links[1:], b], "o", color="darkorange",
                   mec="k", ms=5, alpha=alpha)
    ax_xy.plot(before.poses[:, tip_index, a, 3], before.poses[:, tip_index, b, 3], "--", color="0.5",
               label=f"'{result['frame']}' before")
    ax_xy.plot(pts[:, tip_index, a], pts[:, tip_index, b], color="tab:blue", lw=2,
               label=f"'{result['frame']}' optimised")
    goal = result["tip_goal"].numpy()
    ax_xy.plot(goal[a], goal[b], "*", color="crimson", ms=16, label="goal")
    ax_xy.plot(*scene.poses[0, scene.body_links[0], [a, b], 3], "s", color="k", ms=8)
    ax_xy.set_aspect("equal", adjustable="datalim")
    ax_xy.set_xlabel(f"{labels[a]} [m]")
    ax_xy.set_ylabel(f"{labels[b]} [m]")
    ax_xy.set_title("motion (snapshots every 1/6 of the horizon)", fontsize=9)
    ax_xy.legend(fontsize=7, loc="best")
    ax_xy.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(output)
    return Path(output)
