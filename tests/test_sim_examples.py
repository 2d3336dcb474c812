"""The simulator examples run (small) and do what they claim."""


import pytest
import torch

from conftest import load_example


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("checkpoint_every", [None, 4], ids=["step-loop", "checkpointed-rollout"])
def test_optimize_pendulum_reduces_the_loss(checkpoint_every):
    main = load_example("optimize_pendulum")["main"]
    history = main(iterations=4, horizon=12, progress=False, checkpoint_every=checkpoint_every)
    assert len(history) == 4
    assert history[-1] < history[0]
    assert all(torch.isfinite(torch.tensor(history)))
