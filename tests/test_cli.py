"""The ``torchrbd`` command line: every subcommand, through ``torchrbd.cli.main``."""

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")

import torchrbd.models
from torchrbd.cli import main
from test_render import assert_picture, gif_frames



def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_no_command_prints_help(capsys):
    code, out, _ = run(capsys)
    assert code == 0
    for command in ("info", "demo", "render", "bench", "models"):
        assert command in out


def test_models(capsys):
    code, out, _ = run(capsys, "models")
    assert code == 0
    for name in torchrbd.models.names():
        assert name in out
    assert "urdf, mjcf" in out


def test_info_embedded_model(capsys):
    code, out, _ = run(capsys, "info", "double_pendulum")
    assert code == 0
    assert "2 joint coordinates" in out and "total mass     2 kg" in out
    # joints with type, axis, limits; links with masses; frames
    assert "joint1  revolute  +y    -6.283  6.283" in out
    assert "base -> link1" in out and "link1 -> link2" in out
    assert "link2  link2     1" in out
    assert "Frames (for forward_kinematics / jacobian): base, link1, link2, tip" in out


def test_info_tree(capsys):
    code, out, _ = run(capsys, "info", "double_pendulum", "--tree")
    assert code == 0
    assert out.splitlines() == [
        "base  [root, floating base]  0 kg",
        "└── link1  <- joint1 (revolute +y [-6.283, 6.283])  1 kg",
        "    └── link2  <- joint2 (revolute +y [-6.283, 6.283])  1 kg",
        "        └── tip  (fixed)  0 kg",
    ]


def test_info_tree_branches_and_sites(capsys):
    code, out, _ = run(capsys, "info", "quadruped", "--format", "mjcf", "--tree")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("trunk  [root, floating base]")
    assert sum(line.startswith(("├── ", "└── ")) for line in lines) == 4  # four legs
    assert any("FL_foot  (frame)" in line for line in lines)


def test_info_on_a_file_path(capsys, tmp_path):
    path = torchrbd.models.path("arm7", "mjcf")
    code, out, _ = run(capsys, "info", str(path))
    assert code == 0
    assert f"MJCF  {path}" in out and "welded to the world" in out
    assert "Extra frames" in out and "ee" in out and "Collision geoms" in out
    code, tree, _ = run(capsys, "info", str(torchrbd.models.path("arm7", "urdf")), "--tree")
    assert code == 0 and "ee  (fixed)" in tree and tree.count("<- joint") == 7


def test_errors_are_reported_without_traceback(capsys, tmp_path):
    code, _, err = run(capsys, "info", "arm8")
    assert code == 2 and "did you mean 'arm7'" in err and "Traceback" not in err
    code, _, err = run(capsys, "render", "double_pendulum", "--q", "0.1", "--output", str(tmp_path / "x.png"))
    assert code == 2 and "has 2 joints" in err


def test_demo_with_no_arguments(capsys, tmp_path, monkeypatch):
    """`torchrbd demo` as a new user runs it: defaults, plot in the current folder."""
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "demo")
    assert code == 0
    losses = [float(line.split("loss")[1]) for line in out.splitlines() if line.strip().startswith("iter")]
    assert len(losses) >= 3
    assert all(b < a for a, b in zip(losses, losses[1:]))  # falls at every iteration
    assert losses[-1] < 1e-6 * losses[0]
    assert "plot written to torchrbd_demo.png" in out
    assert_picture(tmp_path / "torchrbd_demo.png")


def test_demo_options_and_gif(capsys, tmp_path):
    png, gif = tmp_path / "pend.png", tmp_path / "pend.gif"
    code, out, err = run(
        capsys, "demo", "--model", "pendulum", "--horizon", "4", "--iterations", "2", "--knots", "2",
        "--dt", "0.1", "--output", str(png), "--gif", str(gif), "--no-progress",
    )
    assert code == 0
    assert "pendulum (1 joints)" in out and "4 steps of 0.1 s" in out
    assert "optimising" not in err  # --no-progress: no bar
    assert_picture(png)
    assert len(gif_frames(gif)) == 5  # start state + 4 steps


def test_run_demo_returns_the_result(tmp_path):
    from torchrbd.demo import run_demo

    r = run_demo("double_pendulum", horizon=10, iterations=2, knots=3, output=None, progress=False, verbose=False)
    assert r["output"] is None and r["q"].shape == (11, 2) and r["reference"].shape == (10, 2)
    assert len(r["losses"]) == 3 and r["losses"][-1] < r["losses"][0]
    torch.testing.assert_close(r["tip_goal"], torch.tensor([0.0, 0.0, 2.0], dtype=torch.float64))


def test_demo_leaves_the_simulator_settings_alone():
    import torchrbd.sim as gs
    from torchrbd.demo import run_demo
    from torchrbd.sim import runtime

    before = dict(runtime._SETTINGS)
    try:
        gs.init(backend=gs.cpu, precision="32")
        run_demo("pendulum", horizon=4, iterations=1, knots=2, output=None, progress=False, verbose=False)
        assert gs.tc_float == torch.float32
    finally:
        runtime._SETTINGS.update(before)


def test_render_configuration_png(capsys, tmp_path):
    out_file = tmp_path / "arm.png"
    code, out, _ = run(capsys, "render", "arm7", "--q", "0", "0.5", "0", "-1", "0", "0.8", "0",
                       "--output", str(out_file))
    assert code == 0 and f"wrote {out_file}" in out
    assert_picture(out_file)


def test_render_rollout_files_to_gif(capsys, tmp_path):
    from torchrbd.render import save_rollout

    T = 3
    q = torch.linspace(0, 1, T, dtype=torch.float64)[:, None] * torch.tensor([[2.0, 1.0]], dtype=torch.float64)
    save_rollout(tmp_path / "roll.npz", q, "double_pendulum")
    code, _, _ = run(capsys, "render", str(tmp_path / "roll.npz"), "--output", str(tmp_path / "roll.gif"),
                     "--dt", "0.1", "--no-progress")
    assert code == 0
    frames = gif_frames(tmp_path / "roll.gif")
    assert len(frames) == T and all(f.std() > 0.05 for f in frames)
    # a .pt rollout of a floating robot with base poses, model given on the command line
    H = torch.eye(4, dtype=torch.float64).repeat(T, 1, 1)
    H[:, 2, 3] = torch.linspace(0.3, 0.5, T)
    torch.save({"q": torch.zeros(T, 12, dtype=torch.float64), "base_transform": H}, tmp_path / "quad.pt")
    code, _, err = run(capsys, "render", str(tmp_path / "quad.pt"), "--output", str(tmp_path / "q.png"))
    assert code == 2 and "--robot" in err
    code, _, _ = run(capsys, "render", str(tmp_path / "quad.pt"), "--robot", "quadruped",
                     "--output", str(tmp_path / "q.png"))
    assert code == 0
    assert_picture(tmp_path / "q.png")


def test_bench_quick(capsys):
    code, out, _ = run(capsys, "bench", "--quick", "--no-adam")
    assert code == 0
    assert "mass_matrix" in out and "torchrbd" in out
    code, out, _ = run(capsys, "bench", "--quick", "--no-adam", "--dtype", "both")
    assert code == 0 and "float32 speed-up" in out


def test_bench_more_adds_the_other_methods_next_to_pinocchio(capsys):
    """``--more`` adds the methods outside issue 4's table, each next to Pinocchio's loop
    (link_velocities without one: a Python call per frame would time Python)."""
    from torchrbd.bench import MORE

    def rows(out):
        return {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
                for line in out.splitlines() if line.startswith("| ") and not line.startswith("| quantity")}

    code, out, _ = run(capsys, "bench", "--quick", "--more")
    assert code == 0
    more = {name: cells for name, cells in rows(out).items() if name.split("(")[0] in MORE}
    assert sorted(name.split("(")[0] for name in more) == sorted(MORE)
    for name, (pin, ours, *_) in more.items():
        assert ours != "-" and (pin == "-") == (name == "link_velocities"), name
    code, out, _ = run(capsys, "bench", "--quick")
    assert code == 0 and not any(name.split("(")[0] in MORE for name in rows(out))


def test_bench_names_the_machine(capsys):
    """The header names the architecture and, on Linux, the CPU model from /proc/cpuinfo
    (``platform.processor()`` is empty there, which left "x86_64 , 2 cores")."""
    code, out, _ = run(capsys, "bench", "--quick", "--no-adam")
    line = next(line for line in out.splitlines() if line.startswith("machine: "))
    described = line[len("machine: "):].split(", ")[0]
    assert described.startswith(platform.machine()) and not described.endswith(" ")
    if sys.platform == "linux" and Path("/proc/cpuinfo").is_file():
        models = [l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                  if l.startswith("model name")]
        if models:
            assert described == f"{platform.machine()} {models[0]}"


def test_bench_without_pinocchio_reports_configurations_per_second(capsys):
    code, out, _ = run(capsys, "bench", "--quick", "--no-adam", "--no-pinocchio")
    assert code == 0 and "Pinocchio skipped (--no-pinocchio)" in out
    row = next(line for line in out.splitlines() if line.startswith("| mass_matrix |"))
    _, pin, time, rate, ratio, *_ = [cell.strip() for cell in row.split("|")[1:]]
    assert pin == "-" and ratio == "-"
    value, unit = time.split()
    seconds = float(value) * {"ms": 1e-3, "us": 1e-6}[unit]
    assert float(rate.replace(",", "")) == pytest.approx(8 / seconds, rel=0.01)  # --quick: B = 8


@pytest.mark.skipif(sys.platform != "linux", reason="mallopt is glibc's")
def test_bench_says_which_allocator_and_placement_it_ran_with():
    code = "from torchrbd.cli import main; main(['bench', '--quick'])"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "TORCHRBD_TUNE_MALLOC"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert "glibc allocator tuned by torchrbd" in done.stdout
    from torchrbd.algorithms import placement

    assert ("C placement loop built" in done.stdout) == (placement._placement is not None)
    env["TORCHRBD_TUNE_MALLOC"] = "0"
    env["TORCHRBD_NATIVE"] = "0"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert "allocator: the process default" in done.stdout
    assert "C placement loop not in use" in done.stdout


def test_console_script_entry_point():
    from importlib.metadata import entry_points

    eps = [ep for ep in entry_points(group="console_scripts") if ep.name == "torchrbd"]
    if not eps:
        pytest.skip("package not installed with its entry points")
    assert eps[0].value == "torchrbd.cli:main"


def test_bench_pauses_before_single_threaded_samples(monkeypatch):
    """torch's OpenMP threads spin for milliseconds after each operator: Pinocchio's
    samples start after a pause when torch runs several threads, and only then."""
    from torchrbd import bench

    slept = []
    monkeypatch.setattr(bench.time, "sleep", slept.append)
    calls = {"torchrbd": lambda: None, "pinocchio": lambda: None}
    monkeypatch.setattr(bench.torch, "get_num_threads", lambda: 2)
    bench._timeit(calls, repeat=3)
    assert slept == [bench._SPIN_SETTLE_S] * 3
    slept.clear()
    monkeypatch.setattr(bench.torch, "get_num_threads", lambda: 1)
    bench._timeit(calls, repeat=3)
    assert slept == []


def test_bench_samples_all_quantities_round_by_round(monkeypatch):
    """`torchrbd bench` times every quantity and column of a batch size in one
    interleaved run (each quantity's samples spread over the whole run, so that a slow
    second on this shared machine does not land on one quantity's samples only)."""
    from torchrbd import bench

    seen = []

    def fake_timeit(fns, repeat, sync=None, single_threaded=("pinocchio",), spreads=None):
        seen.append(sorted(k for k, f in fns.items() if f is not None))
        spreads.update({k: 1.0 for k in fns})
        return {k: 1e-3 for k in fns}

    monkeypatch.setattr(bench, "_timeit", fake_timeit)
    rows = bench.main(["--quick", "--no-adam", "--dtype", "both"])
    quantities = [row["quantity"] for row in rows]
    assert len(seen) == 1 and len(quantities) == 7
    expected = [(q, col) for q in quantities for col in ("torchrbd", "pinocchio", "float32")] + [bench.PROBE_KEY]
    assert seen[0] == sorted(expected)


def test_bench_times_compiled_float32_with_compile_and_both_dtypes(monkeypatch, capsys):
    """`--compile --dtype both` adds a compiled float32 column, timed in the same
    interleaved run, and its speed-up over the compiled float64 one; each compiled
    callable's first call is timed before the rounds (``bench.first_call``, faked here
    as the timing is: nothing is compiled) and printed under the table."""
    from torchrbd import bench

    seen, first = [], []

    def fake_timeit(fns, repeat, sync=None, single_threaded=("pinocchio",), spreads=None):
        seen.append(sorted(k for k, f in fns.items() if f is not None))
        spreads.update({k: 1.0 for k in fns})
        return {k: {"compiled": 4e-3, "compiled float32": 1e-3}.get(k[-1], 2e-3) for k in fns}

    def fake_first_call(fn, sync=None):
        first.append(fn)
        return 2.5, 1, 1

    monkeypatch.setattr(bench, "_timeit", fake_timeit)
    monkeypatch.setattr(bench, "first_call", fake_first_call)
    rows = bench.main(["--quick", "--no-adam", "--dtype", "both", "--compile"])
    assert len(first) == 2 * len(rows) == 14 and all(row["compiled_first_call"] == 2.5 for row in rows)
    columns = ("torchrbd", "pinocchio", "compiled", "float32", "compiled float32")
    expected = [(row["quantity"], col) for row in rows for col in columns] + [bench.PROBE_KEY]
    assert seen[0] == sorted(expected)
    assert all(row["compiled_float32"] == 1e-3 for row in rows)
    out = capsys.readouterr().out
    assert "| compiled float32 | ratio | compiled float32 speed-up |" in out
    row = next(line for line in out.splitlines() if line.startswith("| mass_matrix |"))
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    assert cells[-5:] == ["1 ms", "0.50x", "4.00x", "-", "-"]  # compiled float32, its ratio, speed-up; adam
    line = next(line for line in out.splitlines() if line.startswith("compiled, first call"))
    assert "14 of 28 graphs" in line and "; float32: mass_matrix 2.5 s" in line


def test_bench_samples_start_with_an_untimed_call(monkeypatch):
    """Each timed sample is preceded by one call of the same callable (steady state:
    the first call after another callable or a pause runs on cold caches)."""
    from torchrbd import bench

    log = []
    clock = iter(range(10**6))
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(clock))
    bench._timeit({"a": lambda: log.append("a"), "b": lambda: log.append("b")}, repeat=2)
    # 2 warm-ups + 1 probe per callable (1 untimed call, 1 timed: each "takes" >= 1 tick,
    # so number = 1), then per round and callable: 1 untimed + 1 timed call
    assert log == ["a"] * 4 + ["b"] * 4 + ["a", "a", "b", "b"] * 2


def test_bench_samples_warm_up_for_a_minimum_time(monkeypatch):
    """The untimed calls before a sample last at least ``_WARM_S`` (a core that idled,
    e.g. torch's second thread during a Pinocchio sample, runs the first milliseconds
    slow): calls of 4 ms make three untimed calls before each 10 ms warm-up ends."""
    from torchrbd import bench

    now, log = [0.0], []

    def call():
        log.append("a")
        now[0] += 0.004

    monkeypatch.setattr(bench.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(bench, "_WARM_S", 0.01)
    bench._timeit({"a": call}, repeat=1)
    # 2 warm-ups, the probe (3 untimed + 1 timed: number = 1), the sample (3 untimed + 1 timed)
    assert len(log) == 2 + 4 + 4


def test_bench_reports_the_spread_of_each_callables_samples(monkeypatch):
    """``spreads`` receives, per callable, its median sample over its fastest one."""
    from torchrbd import bench

    now, durations = [0.0], iter([1.0] * 4 + [1.0, 3.0, 1.0, 5.0, 1.0, 3.0, 1.0, 2.0, 1.0, 5.0])

    def call():
        now[0] += next(durations)

    monkeypatch.setattr(bench.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(bench, "_WARM_S", 0.0)
    spreads = {}
    # 2 warm-ups and the probe (2 calls), then 5 rounds of 1 untimed call (1 s) and 1
    # timed one: 3, 5, 3, 2, 5 s
    times = bench._timeit({"a": call}, repeat=5, spreads=spreads)
    assert times["a"] == 3.0 and spreads["a"] == 1.5


def test_bench_warns_when_the_memory_probe_was_unsteady():
    """The line under each table says whether the memory probe (a 16 MB copy timed in
    each round) held steady, and warns when its median round is well above its fastest
    and the batch is large enough for torchrbd's data to leave the caches."""
    from torchrbd import bench

    steady = bench.probe_line(0.5e-3, 1.1, 1024)
    assert "0.5 ms" in steady and "1.10x" in steady and "WARNING" not in steady
    noisy = bench.probe_line(0.8e-3, bench.NOISY_SPREAD + 0.1, 1024)
    assert "WARNING" in noisy and "ratios above may be too high" in noisy
    small = bench.probe_line(0.8e-3, bench.NOISY_SPREAD + 0.1, bench.PROBE_WARNS_FROM - 1)
    assert "varied" in small and "WARNING" not in small


def test_bench_times_the_memory_probe_on_cpu(monkeypatch, capsys):
    """On CPU `torchrbd bench` times the memory probe with the quantities and prints its line."""
    from torchrbd import bench

    def fake_timeit(fns, repeat, sync=None, single_threaded=("pinocchio",), spreads=None):
        fns[bench.PROBE_KEY]()  # a callable that runs
        spreads.update({k: 2.0 if k == bench.PROBE_KEY else 1.0 for k in fns})
        return {k: 1e-3 for k in fns}

    monkeypatch.setattr(bench, "_timeit", fake_timeit)
    monkeypatch.setattr(bench, "PROBE_WARNS_FROM", 8)  # --quick: B = 8
    rows = bench.main(["--quick", "--no-adam"])
    assert all(row["memory_probe_spread"] == 2.0 for row in rows)
    assert "memory probe (16 MB copy, timed in each round): median 1 ms, 2.00x the fastest round: WARNING" in \
        capsys.readouterr().out


def test_bench_compiles_with_the_python_wrapper_when_asked(monkeypatch):
    """`torchrbd bench --compile --python-wrapper` compiles with inductor's Python
    wrapper; without the flag, as `kd.compiled()` does by default."""
    import torchrbd.models
    from torchrbd import bench
    from torchrbd.kindyn import KinDynComputations

    seen = []
    monkeypatch.setattr(KinDynComputations, "compiled", lambda self, **kw: seen.append(kw) or self)
    path = torchrbd.models.path("arm7")
    for flag in (False, True):
        bench.torchrbd_cases(path, None, "ee", 2, torch.float64, torch.device("cpu"), True, python_wrapper=flag)
    assert seen == [{}, {"options": {"cpp_wrapper": False}}]


def test_bench_times_a_compiled_first_call_and_counts_its_graphs(tmp_path, monkeypatch):
    """``bench.first_call``: the time of a compiled function's first call, and how many
    graphs inductor compiled for it or took from its on-disk cache; a second call
    compiles nothing. The cache is a fresh directory, so the graph is compiled."""
    from torchrbd import bench

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    x = torch.randn(5, dtype=torch.float64)
    f = torch.compile(lambda: (x.sin() * 3.0).sum())
    seconds, cached, compiled = bench.first_call(f)
    assert seconds > 0 and (cached, compiled) == (0, 1)
    assert bench.first_call(f)[1:] == (0, 0)
    line = bench.first_calls_line({("mass_matrix", "compiled"): (17.61, 0, 2), ("aba", "compiled"): (30.0, 1, 3),
                                   ("mass_matrix", "compiled float32"): (12.0, 2, 0)})
    assert line == ("compiled, first call of each quantity (tracing, compiling and one call; 3 of 8 graphs from "
                    "inductor's on-disk cache of earlier runs): mass_matrix 17.6 s, aba 30.0 s; "
                    "float32: mass_matrix 12.0 s.")
