"""torchrbd.render: pictures of configurations and trajectories are real pictures
(not blank), inputs are checked, rollout files round-trip."""

import numpy as np
import pytest
import torch

pytest.importorskip("matplotlib")

import torchrbd
import torchrbd.models
from torchrbd.errors import InputError, ModelError
from torchrbd.render import _skeleton, load_rollout, render, save_rollout


SMALL = {"figsize": (4, 4), "dpi": 60}  # quick to draw, still a real picture


def assert_picture(path):
    """The PNG holds a drawing: varied pixels, many colours, some non-white area."""
    import matplotlib.image

    img = matplotlib.image.imread(str(path))[..., :3]
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    assert img.std() > 0.05
    colours = np.unique((img.reshape(-1, 3) * 255).astype(np.uint8), axis=0)
    assert len(colours) > 20
    assert (img.mean(-1) < 0.9).mean() > 0.01  # some ink


def gif_frames(path):
    from PIL import Image

    with Image.open(path) as im:
        frames = []
        for i in range(im.n_frames):
            im.seek(i)
            frames.append(np.asarray(im.convert("RGB"), dtype=np.float64) / 255)
    return frames


def test_png_of_a_configuration(tmp_path):
    out = render("arm7", q=[0, 0.5, 0, -1.0, 0, 0.8, 0], output=tmp_path / "arm.png", **SMALL)
    assert out == tmp_path / "arm.png"
    assert_picture(out)


def test_png_of_a_floating_robot_with_geoms_and_sites(tmp_path):
    kd = torchrbd.models.load("quadruped", format="mjcf")
    H = torch.eye(4, dtype=torch.float64)
    H[2, 3] = 0.4
    assert_picture(render(kd, base_transform=H, output=tmp_path / "quad.png", labels=True, **SMALL))
    # base pose as [x y z qw qx qy qz], as the simulator's get_pos / get_quat give it
    pose = torch.tensor([0.0, 0.0, 0.4, 1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    assert_picture(render(kd.model, base_transform=pose, output=tmp_path / "quad7.png", **SMALL))


def test_trajectory_png_and_gif(tmp_path):
    T = 6
    t = torch.linspace(0, 1, T, dtype=torch.float64)[:, None]
    traj = torch.cat([2.5 * t, 0.5 * t], 1)
    assert_picture(render("double_pendulum", trajectory=traj, output=tmp_path / "strip.png", **SMALL))
    gif = render("double_pendulum", trajectory=traj, output=tmp_path / "swing.gif", dt=0.1, **SMALL)
    frames = gif_frames(gif)
    assert len(frames) == T
    assert all(f.std() > 0.05 for f in frames)
    assert np.abs(frames[0] - frames[-1]).max() > 0.2  # the pendulum moved


def test_figure_without_file_and_skeleton():
    fig = render("pendulum", q=[0.3], output=None)
    assert fig.axes and fig.axes[0].name == "3d"
    # double pendulum: base->link1 (coincident origins), link1->link2, link2->tip
    m = torchrbd.models.load("double_pendulum").model
    names = [(m.link_names[a], m.link_names[b]) for a, b in _skeleton(m)]
    assert set(names) == {("base", "link1"), ("link1", "link2"), ("link2", "tip")}


def test_input_errors(tmp_path):
    with pytest.raises(InputError, match=r"expected 2 joint positions"):
        render("double_pendulum", q=[0.1, 0.2, 0.3], output=tmp_path / "x.png")
    with pytest.raises(InputError, match=r"trajectory: expected shape \(T, 2\)"):
        render("double_pendulum", trajectory=torch.zeros(4, 3), output=tmp_path / "x.png")
    with pytest.raises(InputError, match="not both"):
        render("double_pendulum", q=[0, 0], trajectory=torch.zeros(4, 2), output=tmp_path / "x.png")
    with pytest.raises(InputError, match="unknown format"):
        render("double_pendulum", output=tmp_path / "x.jpg")
    with pytest.raises(InputError, match="3 poses for a trajectory of 4"):
        render("double_pendulum", trajectory=torch.zeros(4, 2), base_transform=torch.eye(4).repeat(3, 1, 1),
               output=tmp_path / "x.png")
    with pytest.raises(ModelError, match="did you mean 'arm7'"):
        render("arm8")


def test_mp4_needs_ffmpeg(tmp_path):
    from matplotlib import animation

    if animation.writers.is_available("ffmpeg"):
        pytest.skip("ffmpeg is installed here")
    with pytest.raises(InputError, match="ffmpeg"):
        render("pendulum", trajectory=torch.zeros(3, 1), output=tmp_path / "x.mp4")


@pytest.mark.parametrize("suffix", [".pt", ".npz"])
def test_rollout_files_round_trip(tmp_path, suffix):
    q = torch.rand(5, 2, dtype=torch.float64)
    H = torch.eye(4, dtype=torch.float64).repeat(5, 1, 1)
    path = save_rollout(tmp_path / f"r{suffix}", q, "double_pendulum", base_transform=H)
    data = load_rollout(path)
    torch.testing.assert_close(data["q"], q)
    torch.testing.assert_close(data["base_transform"], H)
    assert data["model"] == "double_pendulum"


def test_rollout_file_errors(tmp_path):
    np.savez(tmp_path / "bad.npz", x=np.zeros(3))
    with pytest.raises(InputError, match="no 'q' entry"):
        load_rollout(tmp_path / "bad.npz")
    with pytest.raises(InputError, match=".pt or .npz"):
        load_rollout(tmp_path / "bad.csv")
