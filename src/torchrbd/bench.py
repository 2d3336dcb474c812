"""Side-by-side benchmark: torchrbd (batched) against Pinocchio (C++ loop over the
same configurations) and adam's PyTorch backend, in one process.

Run ``torchrbd bench`` (or ``python benchmarks/bench.py``); ``--help`` lists the
options. Pinocchio (``pin``), ``icub-models`` and adam are optional: a missing one
is skipped with a note. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import warnings

import numpy as np
import torch

SEED_JOINTS = [
    "torso_pitch", "torso_roll", "torso_yaw", "l_shoulder_pitch", "l_shoulder_roll", "l_shoulder_yaw",
    "l_elbow", "r_shoulder_pitch", "r_shoulder_roll", "r_shoulder_yaw", "r_elbow", "l_hip_pitch",
    "l_hip_roll", "l_hip_yaw", "l_knee", "l_ankle_pitch", "l_ankle_roll", "r_hip_pitch", "r_hip_roll",
    "r_hip_yaw", "r_knee", "r_ankle_pitch", "r_ankle_roll",
]


def _robot(name: str):
    """(urdf path, joint list, frame) of the benchmark robot."""
    if name == "icub":
        import icub_models

        return icub_models.get_model_file("iCubGazeboV2_5"), SEED_JOINTS, "l_sole"
    from . import models

    frames = {"arm7": "ee", "quadruped": "FL_foot"}
    return str(models.path(name, "urdf")), None, frames.get(name, models.load(name).model.link_names[-1])


_SPIN_SETTLE_S = 0.05
_WARM_S = 0.01


def _timeit(fns: dict, repeat: int, sync=None, single_threaded=("pinocchio",), spreads=None) -> dict:
    """{key: median wall time per call, s} for the callables ``fns`` (None skipped); a
    key is a column name or a ``(quantity, column)`` pair. ``spreads``: a dict to fill
    with {key: median sample / fastest sample}.

    Three warm-up calls each; each sample runs one callable enough times in a row to
    last about 5 ms (microsecond calls are timed in steady state), and the samples of
    the callables are interleaved round by round, so that a load spike on this shared
    machine hits every column and quantity alike instead of one (``main`` times all
    quantities of a batch size in one call: each quantity's samples then spread over
    the whole run, not over the fraction of a second its own turn would last).

    After each parallel operator, torch's OpenMP threads keep spinning for some
    milliseconds (libgomp's default wait policy); a single-threaded C++ loop timed right
    after a torch call shares the CPU with them (Pinocchio's loop measured up to 1.5x
    slower here). So the samples of the ``single_threaded`` callables start after a
    pause of ``_SPIN_SETTLE_S`` when torch runs more than one thread.

    Each sample starts with untimed calls of the same callable, for at least
    ``_WARM_S`` (at least one call): after that pause, or after the other callable
    swept the caches, the first call of a sub-millisecond function ran 2-4x slower here
    (a cold core), and at B=1 a sample holds only a few calls. One call is not enough
    for a core that idled: after a 50 ms sleep, iCub's mass matrix at B = 1024 (one
    torch thread) took 10.5 ms on the first call, 8.8 on the second and 8.2 on the
    fourth, against 7.7-7.9 in a steady loop. With two torch threads the second core
    idles through every Pinocchio sample, so one untimed call left torch's samples
    5-20% slow (mass matrix, aba); the same rule applies to every callable,
    Pinocchio's included."""
    fns = {k: f for k, f in fns.items() if f is not None}
    settle = _SPIN_SETTLE_S if torch.get_num_threads() > 1 else 0.0

    def run(fn, number, pause=0.0):
        if pause:
            time.sleep(pause)
        warm_until = time.perf_counter() + _WARM_S
        fn()  # untimed: warms the caches (and the core) for this callable
        while time.perf_counter() < warm_until:
            fn()
        if sync:
            sync()
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        if sync:
            sync()
        return (time.perf_counter() - t0) / number

    numbers = {}
    for k, fn in fns.items():
        for _ in range(2):
            fn()
        numbers[k] = max(1, min(1000, int(0.005 / max(run(fn, 1), 1e-7))))
    samples = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            column = k[-1] if isinstance(k, tuple) else k
            samples[k].append(run(fn, numbers[k], settle if column in single_threaded else 0.0))
    if spreads is not None:
        spreads.update({k: statistics.median(v) / min(v) for k, v in samples.items()})
    return {k: statistics.median(v) for k, v in samples.items()}


PROBE_MB = 16
PROBE_KEY = ("memory probe", "probe")
NOISY_SPREAD = 1.3
PROBE_WARNS_FROM = 256  # batch size; below it torchrbd's data stays in cache (iCub at B = 64: 0.4 MB)


def memory_probe(device) -> callable:
    """A callable copying ``PROBE_MB`` MB from one tensor into another (torch's threads):
    timed in each round beside the quantities, it shows whether the machine's memory
    bandwidth held steady through the run. On this shared 2-core machine it often does
    not: in noisy minutes a 16 MB copy took 0.44-1.7 ms (0.44 in quiet ones), and iCub's
    mass matrix at B = 1024 2.8-6.0 ms with it (3.1 quiet; torchrbd's batched sweeps
    move megabytes per call), while Pinocchio's loop, which stays in cache, kept its
    3.8 ms or slowed less: torchrbd's ratios then rise with no change of code. A steady
    probe does not prove a quiet run: some slow phases of torchrbd leave the copy's time
    alone (see BENCHMARKS.md)."""
    src = torch.ones(PROBE_MB * 2**20 // 8, dtype=torch.float64, device=device)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def probe_line(median: float, spread: float, batch: int) -> str:
    """The line printed under a batch size's table about the memory probe: a warning
    when it was unsteady and the batch is large enough for torchrbd to feel it."""
    head = (f"memory probe ({PROBE_MB} MB copy, timed in each round): median {_fmt(median)}, "
            f"{spread:.2f}x the fastest round")
    if spread < NOISY_SPREAD:
        return head + ": memory bandwidth steady through the run."
    if batch < PROBE_WARNS_FROM:
        return head + ": memory bandwidth varied during this run (torchrbd's calls at this batch size stay in cache)."
    return (head + ": WARNING: memory bandwidth varied during this run (other work on this machine?). "
            "torchrbd's batched times move megabytes per call and rise with it; Pinocchio's loop stays "
            "in cache and slows less: the ratios above may be too high. Rerun when the machine is quiet.")


def machine(device) -> str:
    """The machine the table was measured on: architecture and CPU model (Linux's
    ``/proc/cpuinfo``, where ``platform.processor()`` is often empty), and the GPU's
    name for a CUDA device."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    text = " ".join(x for x in (platform.machine(), cpu) if x)
    if torch.device(device).type == "cuda":
        text += f", {torch.cuda.get_device_name(torch.device(device))}"
    return text


def inputs(n: int, B: int, dtype, device="cpu"):
    """Fixed benchmark inputs (the same for every run): ``H`` (B, 4, 4) identity base
    poses and ``q, nu, qd, tau`` (B, n / 6 / n / n) drawn from a seeded generator."""
    g = torch.Generator().manual_seed(0)

    def r(*s):
        return torch.randn(*s, generator=g, dtype=torch.float64).to(dtype=dtype, device=device)

    H = torch.eye(4, dtype=dtype, device=device).expand(B, 4, 4).contiguous()
    return H, r(B, n), r(B, 6), r(B, n), r(B, n)


def nograd(f):
    """``f`` called without gradients (its result returned)."""
    def run():
        with torch.no_grad():
            return f()
    return run


def torchrbd_cases(path, joints, frame, B, dtype, device, compile_=False, python_wrapper=False, more=False):
    """{quantity: callable} for torchrbd at batch size B (compiled: with inductor's Python
    wrapper when ``python_wrapper``, instead of the C++ one ``kd.compiled()`` uses on CPU);
    ``more``: also the quantities of :data:`MORE`."""
    from .kindyn import KinDynComputations

    kd = KinDynComputations(path, joints)
    if compile_:
        # torch's own deprecation notice, printed by inductor while it compiles, would cut into the table
        warnings.filterwarnings("ignore", message=r".*torch\._prims_common\.check.* is deprecated", category=FutureWarning)
        kd = kd.compiled(**({"options": {"cpp_wrapper": False}} if python_wrapper else {}))
    H, q, nu, qd, tau = inputs(kd.NDoF, B, dtype, device)
    qg, qdg, taug = (x.clone().requires_grad_(True) for x in (q, qd, tau))

    def fwd_bwd():
        a = kd.aba(H, qg, nu, qdg, taug)
        torch.autograd.grad(a.sum(), (qg, qdg, taug))

    def gradient(f):  # forward + the gradient of the sum of the outputs w.r.t. q
        def run():
            torch.autograd.grad(f(qg).sum(), qg)
        return run

    return {
        "mass_matrix": nograd(lambda: kd.mass_matrix(H, q)),
        "bias_force": nograd(lambda: kd.bias_force(H, q, nu, qd)),
        "gravity_term": nograd(lambda: kd.gravity_term(H, q)),
        "aba": nograd(lambda: kd.aba(H, q, nu, qd, tau)),
        f"jacobian({frame})": nograd(lambda: kd.jacobian(frame, H, q)),
        f"forward_kinematics({frame})": nograd(lambda: kd.forward_kinematics(frame, H, q)),
        "aba forward+backward": fwd_bwd,
        **({
            "centroidal_momentum_matrix": nograd(lambda: kd.centroidal_momentum_matrix(H, q)),
            "CoM_position": nograd(lambda: kd.CoM_position(H, q)),
            "CoM_jacobian": nograd(lambda: kd.CoM_jacobian(H, q)),
            f"jacobian_dot({frame})": nograd(lambda: kd.jacobian_dot(frame, H, q, nu, qd)),
            "rnea": nograd(lambda: kd.rnea(H, q, nu, qd, nu, tau)),
            "link_poses": nograd(lambda: kd.link_poses(H, q)),
            "link_velocities": nograd(lambda: kd.link_velocities(H, q, nu, qd)),
            "forward_kinematics forward+backward": gradient(lambda x: kd.forward_kinematics(frame, H, x)),
            "CoM_position forward+backward": gradient(lambda x: kd.CoM_position(H, x)),
            "rnea forward+backward": lambda: torch.autograd.grad(kd.rnea(H, qg, nu, qdg, nu, taug).sum(),
                                                                 (qg, qdg, taug)),
        } if more else {}),
    }


MORE = ("centroidal_momentum_matrix", "CoM_position", "CoM_jacobian", "jacobian_dot", "rnea", "link_poses",
        "link_velocities", "forward_kinematics forward+backward", "CoM_position forward+backward",
        "rnea forward+backward")
"""The quantities ``--more`` adds, with Pinocchio's loop over ``computeCentroidalMap``,
``centerOfMass``, ``jacobianCenterOfMass``, ``computeJointJacobiansTimeVariation`` +
``getFrameJacobianTimeVariation``, ``rnea`` and ``framesForwardKinematics`` (every frame's
placement). ``link_velocities`` has no Pinocchio column: its frames' velocities take one
Python call each (``getFrameVelocity``), which would time Python, not Pinocchio. The
gradients (the forward and the gradient of the outputs' sum w.r.t. the joint positions,
for ``rnea`` also w.r.t. the joint velocities and accelerations) stand next to what gives
Pinocchio's user the same: the frame Jacobian with the pose (``computeFrameJacobian``),
the CoM Jacobian with the CoM (``jacobianCenterOfMass``), the RNEA's derivatives
(``computeRNEADerivatives``, as ``computeABADerivatives`` for aba)."""


def pinocchio_cases(path, joints, frame, B, more=False):
    """{quantity: callable} looping Pinocchio over B configurations, or a note."""
    try:
        import pinocchio as pin
    except ImportError:
        return None, "Pinocchio not installed (pip install pin)"
    full = pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer())
    names = list(full.names)[2:]
    keep = set(joints) if joints is not None else set(names)
    lock = [full.getJointId(n) for n in names if n not in keep]
    model = pin.buildReducedModel(full, lock, pin.neutral(full)) if lock else full
    data = model.createData()
    rng = np.random.default_rng(0)
    qs = [pin.randomConfiguration(model, -np.ones(model.nq), np.ones(model.nq)) for _ in range(B)]
    vs = [rng.normal(size=model.nv) for _ in range(B)]
    ts = [rng.normal(size=model.nv) for _ in range(B)]
    fid = model.getFrameId(frame)

    def loop(f):
        def run():
            for i in range(B):
                f(i)
        return run

    return {
        "mass_matrix": loop(lambda i: pin.crba(model, data, qs[i])),
        "bias_force": loop(lambda i: pin.nonLinearEffects(model, data, qs[i], vs[i])),
        "gravity_term": loop(lambda i: pin.computeGeneralizedGravity(model, data, qs[i])),
        "aba": loop(lambda i: pin.aba(model, data, qs[i], vs[i], ts[i])),
        f"jacobian({frame})": loop(
            lambda i: pin.computeFrameJacobian(model, data, qs[i], fid, pin.LOCAL_WORLD_ALIGNED)
        ),
        f"forward_kinematics({frame})": loop(
            lambda i: (pin.forwardKinematics(model, data, qs[i]), pin.updateFramePlacement(model, data, fid))
        ),
        "aba forward+backward": loop(lambda i: pin.computeABADerivatives(model, data, qs[i], vs[i], ts[i])),
        **({
            "centroidal_momentum_matrix": loop(lambda i: pin.computeCentroidalMap(model, data, qs[i])),
            "CoM_position": loop(lambda i: pin.centerOfMass(model, data, qs[i])),
            "CoM_jacobian": loop(lambda i: pin.jacobianCenterOfMass(model, data, qs[i])),
            f"jacobian_dot({frame})": loop(lambda i: (
                pin.computeJointJacobiansTimeVariation(model, data, qs[i], vs[i]),
                pin.updateFramePlacement(model, data, fid),
                pin.getFrameJacobianTimeVariation(model, data, fid, pin.LOCAL_WORLD_ALIGNED))),
            "rnea": loop(lambda i: pin.rnea(model, data, qs[i], vs[i], ts[i])),
            "link_poses": loop(lambda i: pin.framesForwardKinematics(model, data, qs[i])),
            # the gradients' counterparts: the pose or CoM with its Jacobian
            "forward_kinematics forward+backward": loop(
                lambda i: pin.computeFrameJacobian(model, data, qs[i], fid, pin.LOCAL_WORLD_ALIGNED)),
            "CoM_position forward+backward": loop(lambda i: pin.jacobianCenterOfMass(model, data, qs[i])),
            "rnea forward+backward": loop(lambda i: pin.computeRNEADerivatives(model, data, qs[i], vs[i], ts[i])),
        } if more else {}),
    }, "Pinocchio " + pin.__version__


def adam_cases(path, joints, frame, B, dtype, more=False):
    try:
        from adam.pytorch import KinDynComputations as AdamKD
    except ImportError:
        return None, "adam not installed (pip install adam-robotics[pytorch])"
    kd = AdamKD(str(path), joints)
    n = len(joints)
    H = torch.eye(4, dtype=dtype).expand(B, 4, 4)
    q, nu, qd, tau = (torch.randn(B, k, dtype=dtype) for k in (n, 6, n, n))
    return {
        "mass_matrix": lambda: kd.mass_matrix(H, q),
        "bias_force": lambda: kd.bias_force(H, q, nu, qd),
        "gravity_term": lambda: kd.gravity_term(H, q),
        "aba": lambda: kd.aba(H, q, nu, qd, tau),
        f"jacobian({frame})": lambda: kd.jacobian(frame, H, q),
        f"forward_kinematics({frame})": lambda: kd.forward_kinematics(frame, H, q),
        **({
            "centroidal_momentum_matrix": lambda: kd.centroidal_momentum_matrix(H, q),
            "CoM_position": lambda: kd.CoM_position(H, q),
            "CoM_jacobian": lambda: kd.CoM_jacobian(H, q),
            f"jacobian_dot({frame})": lambda: kd.jacobian_dot(frame, H, q, nu, qd),
        } if more else {}),
    }, "adam"


def first_call(fn, sync=None) -> tuple:
    """``(seconds, cached, compiled)`` of the first call of ``fn``, a method of a compiled
    copy: dynamo's tracing, inductor's compiling and one call, with the number of graphs
    inductor took from its on-disk cache of earlier runs (``cached``) and compiled anew
    (not found there, or one that inductor does not cache).
    The first compile of a process also pays for inductor's start-up."""
    from torch._dynamo.utils import counters

    def graphs():  # (read anew: inductor's first compile in a process replaces the Counter with a copy)
        inductor = counters["inductor"]
        return inductor["fxgraph_cache_hit"], inductor["fxgraph_cache_miss"] + inductor["fxgraph_cache_bypass"]

    hits, misses = graphs()
    start = time.perf_counter()
    fn()
    if sync:
        sync()
    seconds = time.perf_counter() - start
    hits_after, misses_after = graphs()
    return seconds, hits_after - hits, misses_after - misses


def first_calls_line(firsts: dict) -> str:
    """The line printed under a batch size's table about the compiled columns' first
    calls: ``firsts`` maps ``(quantity, column)`` to :func:`first_call`'s result."""
    cached = sum(f[1] for f in firsts.values())
    graphs = cached + sum(f[2] for f in firsts.values())
    parts = []
    for column in ("compiled", "compiled float32"):
        times = [f"{name} {f[0]:.1f} s" for (name, col), f in firsts.items() if col == column]
        if times:
            parts.append(("float32: " if column != "compiled" else "") + ", ".join(times))
    return (f"compiled, first call of each quantity (tracing, compiling and one call; {cached} of {graphs} "
            f"graphs from inductor's on-disk cache of earlier runs): " + "; ".join(parts) + ".")


def _fmt(t):
    if t is None:
        return "-"
    return f"{t * 1e3:.3g} ms" if t >= 1e-4 else f"{t * 1e6:.3g} us"


def main(argv=None) -> list:
    ap = argparse.ArgumentParser(prog="torchrbd bench", description=__doc__.splitlines()[0])
    ap.add_argument("--robot", default="icub", help="icub (needs icub-models) or an embedded model name")
    ap.add_argument("--batch", type=int, nargs="+", default=[1024, 1], help="batch sizes")
    ap.add_argument("--dtype", choices=["float64", "float32", "both"], default="float64",
                    help="both: float64, plus a float32 column timed alongside it (with --compile, "
                         "a compiled float32 column too)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--compile", action="store_true", help="also time the torch.compile'd path")
    ap.add_argument("--python-wrapper", action="store_true",
                    help="with --compile: inductor's Python wrapper (kd.compiled() uses the C++ one on CPU)")
    ap.add_argument("--no-adam", action="store_true")
    ap.add_argument("--no-pinocchio", action="store_true",
                    help="skip Pinocchio's loop (for batches where it takes seconds, e.g. on a GPU at B = 1M)")
    ap.add_argument("--more", action="store_true",
                    help="also the methods outside issue 4's table: centroidal momentum matrix, CoM, CoM "
                         "Jacobian, Jacobian rate, RNEA, every link's pose and velocity")
    ap.add_argument("--quick", action="store_true", help="tiny run (embedded arm, B=8, 2 repeats)")
    args = ap.parse_args(argv)
    if args.quick:
        args.robot, args.batch, args.repeat, args.no_adam = "arm7", [8], 2, True
    if args.threads:
        torch.set_num_threads(args.threads)
    from .algorithms import placement
    from .perf import allocator_tuned

    dtype = torch.float32 if args.dtype == "float32" else torch.float64
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    path, joints, frame = _robot(args.robot)
    if joints is None:
        from .kindyn import KinDynComputations

        joints = KinDynComputations(path).joints_name_list
    label = "float64 (and float32)" if args.dtype == "both" else args.dtype
    print(f"# torchrbd benchmark: {args.robot} ({len(joints)} joints, floating base), {label}, {device}")
    print(
        f"machine: {machine(device)}, {os.cpu_count()} cores; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
        + ("; glibc allocator tuned by torchrbd (TORCHRBD_TUNE_MALLOC=0 to compare)" if allocator_tuned()
           else "; allocator: the process default")
        + ("; C placement loop built (TORCHRBD_NATIVE=0 to compare)" if placement.NATIVE
           else "; C placement loop not in use (torch's gather instead)")
    )
    rows = []
    for B in args.batch:
        more = args.more
        ours = torchrbd_cases(path, joints, frame, B, dtype, device, more=more)
        comp = (torchrbd_cases(path, joints, frame, B, dtype, device, compile_=True, python_wrapper=args.python_wrapper,
                               more=more) if args.compile else {})
        f32 = torchrbd_cases(path, joints, frame, B, torch.float32, device, more=more) if args.dtype == "both" else {}
        comp32 = (torchrbd_cases(path, joints, frame, B, torch.float32, device, compile_=True,
                                 python_wrapper=args.python_wrapper, more=more) if comp and f32 else {})
        pin_cases, pin_note = ((None, "Pinocchio skipped (--no-pinocchio)") if args.no_pinocchio
                               else pinocchio_cases(path, joints, frame, B, more=more))
        adam, adam_note = ((None, "adam skipped (--no-adam)") if args.no_adam
                           else adam_cases(path, joints, frame, B, dtype, more=more))
        print(f"\n## batch {B}")
        if pin_cases is None or adam is None:
            print(" ".join(f"note: {x}." for x, c in ((pin_note, pin_cases), (adam_note, adam)) if c is None))
        head = "| quantity | Pinocchio loop | torchrbd | torchrbd configs/s | ratio |"
        sep = "|---|---|---|---|---|"
        if comp:
            head += " torchrbd compiled | ratio |"
            sep += "---|---|"
        if f32:
            head += " torchrbd float32 | ratio | float32 speed-up |"
            sep += "---|---|---|"
        if comp32:
            head += " compiled float32 | ratio | compiled float32 speed-up |"
            sep += "---|---|---|"
        head += " adam | torchrbd speed-up over adam |"
        sep += "---|---|"
        print(head)
        print(sep)
        columns = {"torchrbd": ours, "pinocchio": pin_cases or {}, "compiled": comp, "float32": f32,
                   "compiled float32": comp32}
        # (the compiled columns' first calls, timed before the rounds: what compiling each one costs)
        firsts = {(name, col): first_call(columns[col][name], sync)
                  for col in ("compiled", "compiled float32") for name in ours if name in columns[col]}
        calls = {(name, col): fns.get(name) for name in ours for col, fns in columns.items()}
        if device.type == "cpu":
            calls[PROBE_KEY] = memory_probe(device)
        spreads = {}
        times = _timeit(calls, args.repeat, sync, spreads=spreads)
        for name in ours:
            # adam is 10-100x slower: fewer samples of it, on their own
            ta = _timeit({"adam": adam[name]}, max(1, args.repeat // 3), sync)["adam"] if adam and name in adam else None
            t, tp, tc, t32, tc32 = (times.get((name, col))
                                    for col in ("torchrbd", "pinocchio", "compiled", "float32", "compiled float32"))
            row = dict(batch=B, quantity=name, pinocchio=tp, torchrbd=t, compiled=tc, float32=t32,
                       compiled_float32=tc32, adam=ta, memory_probe_spread=spreads.get(PROBE_KEY),
                       compiled_first_call=firsts.get((name, "compiled"), (None,))[0],
                       compiled_float32_first_call=firsts.get((name, "compiled float32"), (None,))[0])
            rows.append(row)
            line = f"| {name} | {_fmt(tp)} | {_fmt(t)} | {B / t:,.0f} | {f'{t / tp:.2f}x' if tp else '-'} |"
            if comp:
                line += f" {_fmt(tc)} | {f'{tc / tp:.2f}x' if tp else '-'} |"
            if f32:
                line += f" {_fmt(t32)} | {f'{t32 / tp:.2f}x' if tp else '-'} | {t / t32:.2f}x |"
            if comp32:
                line += f" {_fmt(tc32)} | {f'{tc32 / tp:.2f}x' if tp else '-'} | {tc / tc32:.2f}x |"
            line += f" {_fmt(ta)} | {f'{ta / t:.0f}x' if ta else '-'} |"
            print(line)
        if PROBE_KEY in times:
            print("\n" + probe_line(times[PROBE_KEY], spreads[PROBE_KEY], B))
        if firsts:
            print("\n" + first_calls_line(firsts))
    print("\nratio = torchrbd time / Pinocchio time (below 1 means torchrbd is faster); "
          "configs/s = batch size / torchrbd time.")
    return rows


if __name__ == "__main__":
    main()
