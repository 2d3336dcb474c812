"""``import torchrbd`` guards the first parallel call of MKL's vector math (see
``torchrbd/vml_warmup.py``): the race it guards against strikes a fresh process's first
such call, so each check runs in processes of its own."""

import subprocess
import sys

import pytest
import torch

FIRST_CALL = """
import numpy, torch
{setup}
torch.set_num_threads(2)
# drawn on one thread: a parallel operator first (linspace, say) would start the
# thread pool and hide the race
x = torch.rand(64, 1024, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
y = torch.sin(x)  # the process's first VML call, its 65536 values split over two threads
print(numpy.abs(y.numpy() - numpy.sin(x.numpy())).max())
"""


def first_call_errors(setup: str, processes: int) -> list:
    """The largest error of the first parallel ``torch.sin`` in each of ``processes``
    fresh interpreters, one after the other (two at once on two cores hid the race),
    after ``setup``."""
    code = FIRST_CALL.format(setup=setup)
    return [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True, timeout=120).stdout) for _ in range(processes)]


@pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="torch built without MKL: no VML to guard")
def test_first_parallel_sin_after_import_is_exact():
    # Unguarded (setup "pass"), about one process in five of this machine's was off by
    # ~7e-9 (2 threads, torch 2.13.0's MKL): twelve would all pass by chance 7% of the time.
    errors = first_call_errors("import torchrbd", processes=12)
    assert max(errors) < 1e-15, errors


def test_warm_up_calls_each_function_once_per_dtype(monkeypatch):
    from torchrbd import vml_warmup

    calls = []
    for name in vml_warmup._FUNCTIONS:
        f = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda x, f=f, name=name: calls.append((name, x.dtype, x.numel())) or f(x))
    assert vml_warmup.warm_up() == torch.backends.mkl.is_available()
    if torch.backends.mkl.is_available():
        wanted = [(n, d, 1) for n in vml_warmup._FUNCTIONS for d in (torch.float32, torch.float64)]
        assert sorted(map(str, calls)) == sorted(map(str, wanted))
