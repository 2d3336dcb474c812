"""examples/policy_through_aba.py, system_identification.py and batched_rollouts.py,
each run small: they work and show what their docstring promises."""


import pytest
import torch

from conftest import load_example as example


def test_policy_through_aba_learns():
    main = example("policy_through_aba")["main"]
    out = main(steps=30, batch=16, lr=3e-2, eval_envs=4, eval_steps=20, progress=False)
    losses = out["losses"]
    assert len(losses) == 30 and all(torch.isfinite(torch.tensor(losses)))
    first, last = sum(losses[:8]) / 8, sum(losses[-8:]) / 8
    assert last < 0.7 * first
    # the rollout with the policy ends nearer the goal than doing nothing
    assert out["final_error"] < out["passive_error"]


def test_policy_through_aba_floating_base_uses_aba():
    ns = example("policy_through_aba")
    import torchrbd.models

    kd = torchrbd.models.load("quadruped")
    q = torch.zeros(3, 12, dtype=torch.float64)
    qdd = ns["joint_accelerations"](kd, q, torch.zeros_like(q), torch.ones_like(q), floating=True)
    H = torch.eye(4, dtype=torch.float64).expand(3, 4, 4)
    z6 = torch.zeros(3, 6, dtype=torch.float64)
    expected = kd.aba(H, q, z6, torch.zeros_like(q), torch.ones_like(q))[:, 6:]
    torch.testing.assert_close(qdd, expected)
    out = ns["main"]("quadruped", steps=3, batch=4, hidden=8, eval_envs=2, eval_steps=2, progress=False)
    assert len(out["losses"]) == 3


def test_system_identification_error_shrinks(capsys):
    main = example("system_identification")["main"]
    out = main(iterations=4, horizon=12, trajectories=3, progress=False)
    errors = out["errors"]
    assert len(errors) == 5
    assert errors[-1] < 0.5 * errors[0]
    assert "masses" in capsys.readouterr().out


def test_system_identification_with_adam():
    main = example("system_identification")["main"]
    out = main(iterations=3, horizon=8, trajectories=2, optimizer="adam", lr=0.1, progress=False, verbose=False)
    assert out["errors"][-1] < out["errors"][0]


def test_batched_rollouts(tmp_path):
    pytest.importorskip("matplotlib")
    main = example("batched_rollouts")["main"]
    gif = tmp_path / "env0.gif"
    out = main(envs=6, steps=10, progress=False, gif=str(gif), verbose=False)
    q = out["q"]
    assert q.shape == (11, 6, 2)
    assert not torch.equal(q[0, 0], q[0, 1])  # each environment starts elsewhere
    assert not torch.equal(q[0], q[-1])  # and moves
    assert out["energy_drift"] < 1e-2
    assert set(out["seconds_per_step"]) == {1, 6}
    assert gif.stat().st_size > 1000
