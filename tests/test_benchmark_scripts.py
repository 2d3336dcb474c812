"""The scripts in benchmarks/ still run against the current API (tiny sizes here; the
numbers they print are for BENCHMARKS.md, not asserted)."""

import runpy
from pathlib import Path

import pytest
import torch

from torchrbd.sim import runtime

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def sim_settings():
    """The scripts call gs.init: give the other tests their settings back."""
    saved = dict(runtime._SETTINGS)
    yield
    runtime._SETTINGS.clear()
    runtime._SETTINGS.update(saved)


def _script(name: str) -> dict:
    return runpy.run_path(str(BENCHMARKS / f"{name}.py"), run_name=name)


def test_bench_contacts_prints_a_row_per_size(capsys, sim_settings):
    pytest.importorskip("mujoco")
    _script("bench_contacts")["main"](["--n-envs", "2", "--seconds", "0", "--settle", "0.004", "--precision", "64",
                                       "--solve", "auto", "tree"])
    out = capsys.readouterr().out
    assert "| 2 | float64 | auto |" in out and "| 2 | float64 | tree |" in out and "MuJoCo" in out


def test_bench_getters_prints_a_row_per_size(capsys, sim_settings):
    _script("bench_getters")["main"](["--n-envs", "1", "2", "--calls", "1"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(rows) == 2 and all(len(r.split("|")) == 11 for r in rows) and "get_links_pos" in out


def test_gpu_check_pieces_run_on_the_cpu(sim_settings):
    g = _script("gpu_check")
    kd = g["torchrbd"].models.load("quadruped")
    out = g["quantities"](kd, "FL_foot", "cpu", B=2)
    n = kd.NDoF
    assert out["mass_matrix"].shape == (2, 6 + n, 6 + n) and out["d|aba|^2/dq"].shape == (2, n)
    assert all(torch.isfinite(x).all() for x in out.values())
    qpos, vel = g["simulate"]("cpu", n_envs=2, steps=3)
    assert qpos.shape[0] == 2 and torch.isfinite(qpos).all() and torch.isfinite(vel).all()
    if not torch.cuda.is_available():
        assert g["main"]([]) == 1  # says so and stops



def test_ab_compares_two_versions_in_one_process(capsys):
    """benchmarks/ab.py imports a second copy of the package (here the installed one,
    given by its directory) beside torchrbd, checks that both agree and times them."""
    import torchrbd

    ratios = _script("ab")["main"](["--old", str(Path(torchrbd.__file__).parent), "--robot", "arm7", "--batch", "4",
                                     "--rounds", "2", "--calls", "1", "--only", "M,fb"])
    assert set(ratios) == {"M", "fb"} and all(r > 0 for r in ratios.values())
    assert "| M |" in capsys.readouterr().out


def test_ab_builds_the_c_loop_of_a_version_that_has_none_built(tmp_path):
    """A git revision's exported package has the C source but no built loop: ab.py
    builds it (else the old version would run without it, and the A/B would time the
    loop rather than the change)."""
    import shutil
    import sysconfig

    import torchrbd

    package = tmp_path / "pkg"
    shutil.copytree(Path(torchrbd.__file__).parent, package, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    built = package / f"_placement{sysconfig.get_config_var('EXT_SUFFIX')}"
    assert not built.exists()
    _script("ab")["build_extension"](package)
    assert built.is_file()


def test_traffic_counts_operators_and_bytes(capsys):
    """benchmarks/traffic.py: a batch of one moves little, a longer batch proportionally
    more, and the table groups the operators by function."""
    main = _script("traffic")["main"]
    one = main(["aba", "--robot", "arm7", "--batch", "1"])
    many = main(["aba", "--robot", "arm7", "--batch", "256"])
    assert one["operators"] > 20 and many["written"] > 100 * one["written"] > 0
    out = capsys.readouterr().out
    assert "| where | operators |" in out and "kindyn.py:aba" in out
