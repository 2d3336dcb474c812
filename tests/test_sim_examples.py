"""The simulator examples run (small) and do what they claim."""

import importlib.util
from pathlib import Path

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("checkpoint_every", [None, 4], ids=["step-loop", "checkpointed-rollout"])
def test_optimize_pendulum_reduces_the_loss(checkpoint_every):
    example = _load("optimize_pendulum")
    history = example.main(iterations=4, horizon=12, progress=False, checkpoint_every=checkpoint_every)
    assert len(history) == 4
    assert history[-1] < history[0]
    assert all(torch.isfinite(torch.tensor(history)))
