"""The GPU checks of issues 4 and 6 in one run (a few minutes on one modern GPU).

1. Agreement: every quantity, aba with a gradient and without (at B = 256, the
   articulated-body sweep; with a gradient, its implicit backward) and on 64 of the
   configurations with a gradient (the CRBA path), and aba's gradients, on CUDA
   against the CPU, float64 (exit status 1 past ``--tol``).
2. The simulator: 200 steps of the humanoid on the floor on CUDA against the CPU; then
   how often the methods and simulator steps make the host wait for the GPU.
3. Throughput: ``torchrbd bench`` in float32 at B = 1, 1024, 65536 and 1M
   (configurations per second), and ``benchmarks/bench_contacts.py`` on CUDA with
   the dense and the tree-sparse solve of M.

    python benchmarks/gpu_check.py                  # iCub if icub-models is installed, else the quadruped
    python benchmarks/gpu_check.py --skip-throughput
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import torchrbd.models
from torchrbd import KinDynComputations
from torchrbd.bench import SEED_JOINTS


def _robot():
    try:
        import icub_models

        return KinDynComputations(str(icub_models.get_model_file("iCubGazeboV2_5")), SEED_JOINTS), "l_sole"
    except ImportError:
        return torchrbd.models.load("quadruped"), "FL_foot"


def quantities(kd, frame, device, B=256, seed=0):
    """{name: tensor} of every quantity at B random configurations on ``device``."""
    g = torch.Generator().manual_seed(seed)
    n = kd.NDoF
    H = torch.eye(4, dtype=torch.float64).repeat(B, 1, 1)
    H[:, :3, 3] = torch.randn(B, 3, generator=g, dtype=torch.float64)
    q, nu, qd, tau = (torch.randn(B, k, generator=g, dtype=torch.float64) for k in (n, 6, n, n))
    H, q, nu, qd, tau = (x.to(device) for x in (H, q, nu, qd, tau))
    qg = q.clone().requires_grad_(True)
    acc = kd.aba(H, qg, nu, qd, tau)  # from articulated.FROM configurations on: the sweep, an implicit backward
    (grad,) = torch.autograd.grad(acc.square().sum(), qg)
    with torch.no_grad():  # the sweep in place
        swept = kd.aba(H, q, nu, qd, tau)
    few = slice(0, 64)  # below articulated.FROM, with a gradient: the CRBA path and a Cholesky solve
    qf = q[few].clone().requires_grad_(True)
    acc_few = kd.aba(H[few], qf, nu[few], qd[few], tau[few])
    (grad_few,) = torch.autograd.grad(acc_few.square().sum(), qf)
    return {
        "forward_kinematics": kd.forward_kinematics(frame, H, q),
        "jacobian": kd.jacobian(frame, H, q),
        "jacobian_dot": kd.jacobian_dot(frame, H, q, nu, qd),
        "CoM_position": kd.CoM_position(H, q),
        "mass_matrix": kd.mass_matrix(H, q),
        "centroidal_momentum_matrix": kd.centroidal_momentum_matrix(H, q),
        "bias_force": kd.bias_force(H, q, nu, qd),
        "aba": acc.detach(),
        "aba without gradients": swept,
        "d|aba|^2/dq": grad,
        "aba, 64 configurations (CRBA path)": acc_few.detach(),
        "d|aba|^2/dq, 64 configurations (CRBA path)": grad_few,
    }


def simulate(device: str, n_envs=64, steps=200):
    """(qpos, vel) of the humanoid after ``steps`` Euler steps from the file's pose."""
    import torchrbd.sim as gs

    gs.init(backend=gs.gpu if device == "cuda" else gs.cpu, precision="64")
    scene = gs.Scene(sim_options=gs.options.SimOptions(dt=0.002))
    robot = scene.add_entity(gs.morphs.MJCF(file=str(torchrbd.models.path("humanoid", "mjcf"))))
    scene.add_entity(gs.morphs.Plane())
    scene.build(n_envs=n_envs)
    for _ in range(steps):
        scene.step()
    return robot.get_qpos().cpu(), robot.get_dofs_velocity().cpu()


def synchronisations(fn) -> int:
    """How many times ``fn()`` makes the host wait for the GPU (torch's sync debug mode
    warns at each synchronisation)."""
    import warnings

    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message).lower() for w in caught)


def report_synchronisations(kd, frame, n_envs=64, steps=10) -> None:
    """Prints the synchronisations of each method at 256 configurations without
    gradients (``aba`` is expected to make one: its check that M is positive definite)
    and of ``steps`` steps of the humanoid on the floor (expected: none)."""
    import torchrbd.sim as gs

    B, n = 256, kd.NDoF
    H = torch.eye(4, dtype=torch.float64, device="cuda").repeat(B, 1, 1)
    q, nu, qd, tau = (torch.randn(B, k, dtype=torch.float64, device="cuda") for k in (n, 6, n, n))
    calls = {
        "forward_kinematics": lambda: kd.forward_kinematics(frame, H, q),
        "jacobian": lambda: kd.jacobian(frame, H, q),
        "mass_matrix": lambda: kd.mass_matrix(H, q),
        "bias_force": lambda: kd.bias_force(H, q, nu, qd),
        "aba": lambda: kd.aba(H, q, nu, qd, tau),
    }
    with torch.no_grad():
        for name, call in calls.items():
            call()
            print(f"{name:28s} host synchronisations per call: {synchronisations(call)}", flush=True)
    gs.init(backend=gs.gpu, precision="64")
    scene = gs.Scene(sim_options=gs.options.SimOptions(dt=0.002))
    scene.add_entity(gs.morphs.MJCF(file=str(torchrbd.models.path("humanoid", "mjcf"))))
    scene.add_entity(gs.morphs.Plane())
    scene.build(n_envs=n_envs)
    for _ in range(5):
        scene.step()

    def run():
        for _ in range(steps):
            scene.step()

    print(f"humanoid on the floor, {n_envs} envs: host synchronisations in {steps} steps: {synchronisations(run)}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tol", type=float, default=1e-9, help="largest relative difference accepted")
    ap.add_argument("--skip-throughput", action="store_true")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 1
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    kd, frame = _robot()
    cpu, gpu = quantities(kd, frame, "cpu"), quantities(kd, frame, "cuda")
    worst = 0.0
    for name, ref in cpu.items():
        got = gpu[name]
        assert got.device.type == "cuda" and got.dtype == ref.dtype, name
        rel = ((got.cpu() - ref).abs().max() / ref.abs().max().clamp(min=1e-300)).item()
        worst = max(worst, rel)
        print(f"{name:28s} CUDA vs CPU, largest relative difference {rel:.1e}", flush=True)
    (qc, vc), (qg, vg) = simulate("cpu"), simulate("cuda")
    sim = max((qg - qc).abs().max().item(), (vg - vc).abs().max().item())
    print(f"humanoid on the floor, 64 envs, 200 steps: largest state difference CUDA vs CPU {sim:.1e}", flush=True)
    try:  # (a report only: its failure must not cost the rest of a scarce GPU run)
        report_synchronisations(kd, frame)
    except Exception as error:  # noqa: BLE001
        print(f"host synchronisations not counted: {error!r}", flush=True)
    ok = worst <= args.tol and bool(torch.isfinite(qg).all())
    if not args.skip_throughput:
        from torchrbd.bench import main as bench

        bench(["--device", "cuda", "--dtype", "float32", "--batch", "1", "1024", "65536", "1048576",
               "--no-adam", "--no-pinocchio", "--repeat", "5"])
        sys.path.insert(0, str(Path(__file__).parent))
        from bench_contacts import main as contacts

        # dense (LAPACK's path, the default on CUDA) against the tree-sparse solve, unmeasured there
        contacts(["--device", "cuda", "--n-envs", "1024", "4096", "65536", "--seconds", "2", "--solve", "dense", "tree"])
    print("agreement:", "ok" if ok else f"FAILED (worst {worst:.1e} > {args.tol:.0e})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
