"""examples/adam_seed.py (adam's PyTorch-backend page run on torchrbd), small, with
the shapes the page's comments promise."""


import pytest
import torch

pytest.importorskip("icub_models")
pytest.importorskip("mujoco")

from conftest import load_example  # noqa: E402

N = 23  # iCub joints of the page's joints_name_list
B = 8


@pytest.fixture(scope="module")
def out():
    main = load_example("adam_seed")["main"]
    default = torch.get_default_dtype()
    result = main(batch_size=B, steps=2)
    assert torch.get_default_dtype() == default  # the page's set_default_dtype is undone
    return result


def test_single_configuration(out):
    assert out["M"].shape == (6 + N, 6 + N)
    assert out["M_device"].device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert out["joints_grad"].shape == (N,) and torch.isfinite(out["joints_grad"]).all()
    assert out["J"].shape == (6, 6 + N)
    assert out["w_H_f"].shape == (4, 4)
    assert out["com"].shape == (3,)
    assert out["J_com"].shape == (3, 6 + N)
    assert out["action"].shape == (N,)
    assert out["acc"].shape == (6 + N,) and torch.isfinite(out["acc"]).all()
    # M symmetric positive definite
    M = out["M"].detach()
    torch.testing.assert_close(M, M.T)
    assert torch.linalg.eigvalsh(M).min() > 0


def test_batches(out):
    assert out["M_batch"].shape == (B, 6 + N, 6 + N)  # (batch_size, 6+n_dof, 6+n_dof)
    assert out["J_batch"].shape == (B, 6, 6 + N)  # (batch_size, 6, 6+n)
    assert out["w_H_f_batch"].shape == (B, 4, 4)  # (batch_size, 4, 4)
    assert out["Ag_batch"].shape == (B, 6, 6 + N)  # (batch_size, 6, 6+n)
    assert out["joints_batch_grad"].shape == (B, N)
    assert out["J_trajectory"].shape == (B, 6, 6 + N)
    assert out["M_rollout"].shape == (B, 6 + N, 6 + N)
    assert torch.isfinite(out["rollout_joints"]).all()
    chunks = out["mini_batch_results"]
    assert sum(c.shape[0] for c in chunks) == B and len(chunks) > 1
    torch.testing.assert_close(torch.cat(chunks).detach(), out["M_batch"].detach(), rtol=1e-12, atol=1e-12)


def test_mujoco_section(out):
    n = out["mujoco_ndof"]
    assert n == 18  # the embedded humanoid: free joint + 18 hinges
    assert out["M_mujoco"].shape == (6 + n, 6 + n)
    assert out["mujoco_joints_grad"].shape == (n,) and torch.isfinite(out["mujoco_joints_grad"]).all()
