"""The allocator setting ``import torchrbd`` applies (torchrbd.perf)."""

import os
import subprocess
import sys

import pytest

from torchrbd import perf


def _tuned_in_fresh_process(**extra) -> bool:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k not in ("TORCHRBD_TUNE_MALLOC", "LD_PRELOAD")}
    env.update(extra)
    code = "import torchrbd; print(torchrbd.perf.allocator_tuned())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip() == "True"


@pytest.mark.skipif(sys.platform != "linux", reason="mallopt is glibc's")
def test_import_tunes_glibc_unless_opted_out():
    assert _tuned_in_fresh_process()
    assert not _tuned_in_fresh_process(TORCHRBD_TUNE_MALLOC="0")
    assert not _tuned_in_fresh_process(TORCHRBD_TUNE_MALLOC="off")


@pytest.mark.skipif(sys.platform != "linux", reason="mallopt is glibc's")
def test_a_users_own_allocator_choice_is_left_alone():
    assert not _tuned_in_fresh_process(MALLOC_ARENA_MAX="2")
    assert not _tuned_in_fresh_process(GLIBC_TUNABLES="glibc.malloc.trim_threshold=1")


def test_user_choice_detection():
    assert perf._user_chose_allocator({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"})
    assert perf._user_chose_allocator({"MALLOC_MMAP_THRESHOLD_": "1"})
    assert not perf._user_chose_allocator({"LD_PRELOAD": "/usr/lib/libfoo.so", "PATH": "/bin"})
    assert not perf.apply_default({"TORCHRBD_TUNE_MALLOC": "0"})
