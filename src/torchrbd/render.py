"""Pictures of a robot: one configuration to a PNG, a trajectory to a GIF or MP4.

Drawn with matplotlib in 3D (no GPU, no display needed):

* **links** as thick segments between the origins of parent and child bodies
  (and from a body's origin to each link welded to it, e.g. an end effector);
* **joints** as orange dots at the origins of moving bodies, the base as a black square;
* **frames** as small red/green/blue x/y/z axes at every link and extra frame
  (MJCF site), extra frames joined to their body's origin;
* **collision shapes** of ``model.geoms`` (boxes, spheres, cylinders, capsules,
  planes; mesh vertices as points) as wireframes, placed with
  ``world_H_geom = world_H_link @ link_H_geom``;
* **centres of mass** as red dots whose area grows with the link mass.

>>> import torchrbd.models, torchrbd.render
>>> kd = torchrbd.models.load("arm7")
>>> torchrbd.render.render(kd, q=[0, 0.5, 0, -1, 0, 0.5, 0], output="arm.png")
>>> torchrbd.render.render(kd, trajectory=q_traj, output="arm.gif")  # q_traj: (T, 7)

Every pose comes from :meth:`torchrbd.KinDynComputations.link_poses`, batched
over the whole trajectory in one call. The camera and the axis limits are fixed
over an animation (equal scale on x, y and z, in metres).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from .errors import InputError, ModelError

__all__ = ["render", "as_kindyn", "load_rollout", "save_rollout", "draw"]

#: What :func:`render` can write.
FORMATS = (".png", ".gif", ".mp4")


# ---------------------------------------------------------------- inputs
def as_kindyn(model, format: str | None = None):
    """A :class:`~torchrbd.KinDynComputations` from one itself, a :class:`~torchrbd.Model`,
    an embedded model name (``format`` picks URDF/MJCF) or a URDF/MJCF path."""
    from .kindyn import KinDynComputations
    from .model import Model

    if isinstance(model, KinDynComputations):
        return model
    if isinstance(model, Model):
        return KinDynComputations(model)
    if isinstance(model, (str, Path)):
        from . import models

        if isinstance(model, str) and model in models.names():
            return models.load(model, format=format)
        p = Path(model)
        if not p.is_file():
            from .errors import closest

            near = closest(str(model), models.names())
            hint = f"; did you mean {', '.join(repr(n) for n in near)}?" if near else ""
            raise ModelError(
                f"{str(model)!r} is neither an embedded model ({', '.join(models.names())}) nor a model file{hint}"
            )
        return KinDynComputations(p)
    raise ModelError(
        f"cannot render a {type(model).__name__}; expected a KinDynComputations, a Model, "
        "an embedded model name or a URDF/MJCF path"
    )


def _plain(x, dtype, what: str) -> torch.Tensor:
    """A detached plain (not ``gs.Tensor``) CPU tensor of ``dtype``."""
    if isinstance(x, torch.Tensor):
        x = x.detach().as_subclass(torch.Tensor)
    try:
        return torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x).to("cpu", dtype)
    except (TypeError, ValueError, RuntimeError) as e:
        raise InputError(f"{what}: cannot convert {type(x).__name__} to a tensor ({e})") from None


def _base_poses(base_transform, T: int, dtype) -> torch.Tensor:
    """(T, 4, 4) world_H_base from None, (4, 4), (T, 4, 4), (7,) or (T, 7) [position, quaternion wxyz]."""
    if base_transform is None:
        return torch.eye(4, dtype=dtype).expand(T, 4, 4)
    H = _plain(base_transform, dtype, "base_transform")
    if H.shape[-1] == 7 and H.dim() in (1, 2):
        from .spatial import homogeneous, quat_to_matrix

        q = H[..., 3:] / H[..., 3:].norm(dim=-1, keepdim=True)
        H = homogeneous(quat_to_matrix(q), H[..., :3])
    if H.shape[-2:] != (4, 4) or H.dim() not in (2, 3):
        raise InputError(
            f"base_transform: expected (4, 4), (T, 4, 4), (7,) or (T, 7) [x y z qw qx qy qz], got {tuple(H.shape)}"
        )
    if H.dim() == 3 and H.shape[0] not in (1, T):
        raise InputError(f"base_transform: {H.shape[0]} poses for a trajectory of {T} configurations")
    return H.expand(T, 4, 4) if H.dim() == 2 or H.shape[0] == 1 else H


def _configurations(kd, q, trajectory, base_transform):
    """(joint positions (T, n), base poses (T, 4, 4)); T = 1 for a single configuration."""
    dtype, n = kd.model.body_rot.dtype, kd.NDoF
    if q is not None and trajectory is not None:
        raise InputError("give either q (one configuration) or trajectory (T configurations), not both")
    if trajectory is not None:
        Q = _plain(trajectory, dtype, "trajectory")
        if Q.dim() == 1 and n == 1:
            Q = Q[:, None]
        if Q.dim() != 2 or Q.shape[1] != n or Q.shape[0] == 0:
            raise InputError(f"trajectory: expected shape (T, {n}) with T >= 1, got {tuple(Q.shape)}")
    else:
        Q = torch.zeros(1, n, dtype=dtype) if q is None else _plain(q, dtype, "q").reshape(1, -1)
        if Q.shape[1] != n:
            raise InputError(
                f"q: expected {n} joint positions (joints: {', '.join(kd.joints_name_list)}), got {Q.shape[1]}"
            )
    return Q, _base_poses(base_transform, Q.shape[0], dtype)


# ---------------------------------------------------------------- geometry
def _skeleton(model) -> list[tuple[int, int]]:
    """Link index pairs (a, b) to join with a segment: parent body -> child body
    origins, and body origin -> each other link welded to that body."""
    index = {name: k for k, name in enumerate(model.link_names)}
    root = [index[name] for name in model.body_names]
    pairs = [(root[model.body_parent[i]], root[i]) for i in range(1, model.nbody)]
    pairs += [(root[b], k) for k, b in enumerate(model.link_body) if k != root[b]]
    return pairs


def _circle(radius: float, z: float = 0.0, n: int = 24) -> np.ndarray:
    t = np.linspace(0.0, 2 * math.pi, n + 1)
    return np.stack([radius * np.cos(t), radius * np.sin(t), np.full_like(t, z)], -1)


def _arc(radius: float, z0: float, sign: float, plane: str, n: int = 12) -> np.ndarray:
    """Half circle closing a capsule end (in the xz or yz plane), bulging along ``sign`` z."""
    t = np.linspace(0.0, math.pi, n + 1)
    a, b = radius * np.cos(t), z0 + sign * radius * np.sin(t)
    zero = np.zeros_like(t)
    return np.stack([a, zero, b], -1) if plane == "xz" else np.stack([zero, a, b], -1)


def _geom_lines(geom, scale: float) -> list[np.ndarray]:
    """Polylines (k, 3) of a geom's wireframe in the geom frame (``scale`` sizes planes)."""
    from .model.model import GeomType

    s = [float(x) for x in geom.size] if geom.size is not None else []
    kind = GeomType(geom.type)
    if kind == GeomType.BOX:
        hx, hy, hz = s[:3]
        c = np.array([[x, y, z] for x in (-hx, hx) for y in (-hy, hy) for z in (-hz, hz)])
        edges = [(0, 1), (2, 3), (4, 5), (6, 7), (0, 2), (1, 3), (4, 6), (5, 7), (0, 4), (1, 5), (2, 6), (3, 7)]
        return [c[[i, j]] for i, j in edges]
    if kind == GeomType.SPHERE:
        r = s[0]
        ring = _circle(r)
        return [ring, ring[:, [0, 2, 1]], ring[:, [2, 0, 1]]]
    if kind in (GeomType.CYLINDER, GeomType.CAPSULE):
        r, h = s[0], s[1]
        lines = [_circle(r, -h), _circle(r, h)]
        lines += [np.array([[r * math.cos(a), r * math.sin(a), -h], [r * math.cos(a), r * math.sin(a), h]])
                  for a in np.linspace(0, 2 * math.pi, 4, endpoint=False)]
        if kind == GeomType.CAPSULE:
            lines += [_arc(r, z, sign, plane) for z, sign in ((h, 1.0), (-h, -1.0)) for plane in ("xz", "yz")]
        return lines
    if kind == GeomType.PLANE:
        a = scale
        grid = [np.array([[x, -a, 0], [x, a, 0]]) for x in np.linspace(-a, a, 5)]
        return grid + [np.array([[-a, y, 0], [a, y, 0]]) for y in np.linspace(-a, a, 5)]
    if kind == GeomType.MESH and geom.vertices is not None:
        v = geom.vertices.detach().cpu().numpy()
        return [v[:: max(1, len(v) // 200)]]  # drawn as points
    return []


def _transform(H: np.ndarray, pts: np.ndarray) -> np.ndarray:
    return pts @ H[:3, :3].T + H[:3, 3]


class _Scene:
    """Everything :func:`draw` needs, precomputed for all T configurations (numpy)."""

    def __init__(self, kd, Q: torch.Tensor, H: torch.Tensor, geoms: bool, com: bool):
        model = kd.model
        with torch.no_grad():
            poses = kd.link_poses(H, Q).cpu().numpy()  # (T, nlink, 4, 4)
        index = {name: k for k, name in enumerate(model.link_names)}
        self.body_links = [index[name] for name in model.body_names]
        self.pairs = _skeleton(model)
        # extra frames (MJCF sites) become points after the links, joined to their body's origin
        extra = []
        for name, (k, rot, pos) in model.extra_frames.items():
            fH = np.eye(4)
            fH[:3, :3], fH[:3, 3] = rot.detach().cpu().numpy(), pos.detach().cpu().numpy()
            extra.append(poses[:, k] @ fH)
            self.pairs.append((self.body_links[model.link_body[k]], model.nlink + len(extra) - 1))
        if extra:
            poses = np.concatenate([poses, np.stack(extra, 1)], 1)
        self.names = list(model.link_names) + list(model.extra_frames)
        self.model, self.poses, self.T = model, poses, poses.shape[0]
        self.geoms = [g for g in model.geoms if g.link in index] if geoms else []
        self.geom_link = [index[g.link] for g in self.geoms]
        origins = poses[:, :, :3, 3].reshape(-1, 3)
        extent = float(np.ptp(origins, axis=0).max()) if origins.shape[0] > 1 else 0.0
        geom_size = max([max(float(x) for x in g.size) for g in self.geoms if g.size] + [0.0])
        self.extent = max(extent, 4 * geom_size, 0.2)
        self.geom_H = []
        for g in self.geoms:
            gH = np.eye(4)
            gH[:3, :3] = g.rot.detach().cpu().numpy()
            gH[:3, 3] = g.pos.detach().cpu().numpy()
            self.geom_H.append(gH)
        self.geom_local = [_geom_lines(g, 0.5 * self.extent) for g in self.geoms]
        self.com = com and model.nlink > 0
        if self.com:
            self.link_com = model.link_com.detach().cpu().numpy()
            self.link_mass = model.link_mass.detach().cpu().numpy()
        self.limits = self._limits()

    def geom_lines(self, t: int) -> list[tuple[np.ndarray, bool]]:
        """(polyline in world, is point cloud) of every geom at configuration t."""
        from .model.model import GeomType

        out = []
        for g, k, gH, lines in zip(self.geoms, self.geom_link, self.geom_H, self.geom_local):
            W = self.poses[t, k] @ gH
            out += [(_transform(W, line), GeomType(g.type) == GeomType.MESH) for line in lines]
        return out

    def _limits(self):
        pts = [self.poses[:, :, :3, 3].reshape(-1, 3)]
        for t in range(self.T):
            pts += [line for line, _ in self.geom_lines(t)]
        from .model.model import GeomType

        if any(GeomType(g.type) == GeomType.PLANE for g in self.geoms):  # planes are unbounded: keep the robot
            pts = [self.poses[:, :, :3, 3].reshape(-1, 3)]
        pts = np.concatenate(pts, 0)
        lo, hi = pts.min(0), pts.max(0)
        centre, half = (lo + hi) / 2, max(float((hi - lo).max()) / 2 * 1.1, 0.1)
        return [(c - half, c + half) for c in centre]


# ---------------------------------------------------------------- drawing
def draw(ax, scene: _Scene, t: int, alpha: float = 1.0, frames: bool = True, labels: bool = False) -> None:
    """Draw configuration ``t`` of a prepared scene on a 3D axes."""
    P = scene.poses[t]
    o = P[:, :3, 3]
    for line, points in scene.geom_lines(t):
        if points:
            ax.scatter(*line.T, s=1, color="steelblue", alpha=0.5 * alpha)
        else:
            ax.plot(*line.T, color="steelblue", lw=0.8, alpha=0.8 * alpha)
    for a, b in scene.pairs:
        ax.plot(*np.stack([o[a], o[b]]).T, color="0.25", lw=3.5, alpha=alpha, solid_capstyle="round")
    joints = o[scene.body_links[1:]]
    if len(joints):
        ax.scatter(*joints.T, s=40, color="darkorange", edgecolors="k", linewidths=0.5, alpha=alpha, depthshade=False)
    base = o[scene.body_links[0]]
    ax.scatter(*base, s=60, marker="s", color="k", alpha=alpha, depthshade=False)
    if scene.com:
        nl = scene.model.nlink
        c = np.einsum("lij,lj->li", P[:nl, :3, :3], scene.link_com) + o[:nl]
        keep = scene.link_mass > 0
        size = 250 * (scene.link_mass[keep] / max(scene.link_mass.max(), 1e-12)) ** (2 / 3)
        ax.scatter(*c[keep].T, s=size, color="crimson", alpha=0.8 * alpha, depthshade=False)
    if frames:
        L = 0.08 * scene.extent
        for k in range(P.shape[0]):
            for j, color in enumerate(("r", "g", "b")):
                ax.plot(*np.stack([o[k], o[k] + L * P[k, :3, j]]).T, color=color, lw=1.0, alpha=alpha)
    if labels:
        for k, name in enumerate(scene.names):
            ax.text(*o[k], f" {name}", fontsize=6, color="0.3", alpha=alpha)


def _setup_axes(ax, scene: _Scene, title: str | None, elev: float, azim: float):
    (x0, x1), (y0, y1), (z0, z1) = scene.limits
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_zlim(z0, z1)
    ax.set_box_aspect((1, 1, 1))
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    ax.set_zlabel("z [m]")
    ax.tick_params(labelsize=7)
    ax.view_init(elev=elev, azim=azim)
    if title:
        ax.set_title(title, fontsize=10)


def _figure(figsize, dpi):
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=dpi)
    return fig, fig.add_subplot(projection="3d")


def render(
    kindyn_or_model,
    q=None,
    base_transform=None,
    trajectory=None,
    output="torchrbd_render.png",
    *,
    dt: float | None = None,
    fps: int = 20,
    max_frames: int = 100,
    frames: bool = True,
    geoms: bool = True,
    com: bool = True,
    labels: bool = False,
    title: str | None = None,
    elev: float = 20.0,
    azim: float = -60.0,
    figsize=(6.0, 6.0),
    dpi: int = 100,
    progress: bool = False,
):
    """Draw a configuration or a trajectory of a robot and write it to ``output``.

    Args:
        kindyn_or_model: a :class:`~torchrbd.KinDynComputations`, a :class:`~torchrbd.Model`,
            an embedded model name (``"arm7"``) or a URDF/MJCF path.
        q: (n,) joint positions (rad, m), default all zeros. Excludes ``trajectory``.
        base_transform: world_H_base (4, 4), or one per configuration (T, 4, 4);
            ``[x, y, z, qw, qx, qy, qz]`` (7,) / (T, 7) also works (the simulator's
            ``get_pos``/``get_quat``). Default: identity.
        trajectory: (T, n) joint positions, e.g. a simulated rollout.
        output: ``.png`` (one picture; a trajectory is drawn as a strip of up to
            6 fading snapshots), ``.gif`` (animation, Pillow) or ``.mp4``
            (animation, needs ``ffmpeg`` on PATH). ``None``: return the
            matplotlib Figure of the picture instead of writing a file.
        dt: seconds between trajectory samples, shown in the animation's title.
        fps, max_frames: animation speed and length (trajectories longer than
            ``max_frames`` are subsampled evenly).
        frames, geoms, com, labels: draw link frames, collision shapes, centres
            of mass (dot area ~ mass), link names.
        elev, azim: camera angles in degrees (matplotlib's ``view_init``).
        progress: show a tqdm bar while writing an animation.

    Returns:
        The :class:`pathlib.Path` written, or the Figure when ``output`` is None.

    Raises:
        InputError: wrong shapes, an unknown suffix, or ``.mp4`` without ffmpeg.
    """
    kd = as_kindyn(kindyn_or_model)
    Q, H = _configurations(kd, q, trajectory, base_transform)
    suffix = None if output is None else Path(output).suffix.lower()
    if output is not None and suffix not in FORMATS:
        raise InputError(
            f"output {str(output)!r}: unknown format {suffix or '(none)'!r}; use one of {', '.join(FORMATS)}"
        )
    if suffix == ".mp4":
        from matplotlib import animation

        if not animation.writers.is_available("ffmpeg"):
            raise InputError(
                f"cannot write {str(output)!r}: MP4 needs the ffmpeg program on PATH (not found); "
                "install ffmpeg or write a .gif instead"
            )
    scene = _Scene(kd, Q, H, geoms=geoms, com=com)
    name = title if title is not None else kd.model.name
    if suffix in (".gif", ".mp4"):
        return _animate(scene, Path(output), name, dt, fps, max_frames, frames, labels, elev, azim, figsize, dpi,
                        progress)
    fig, ax = _figure(figsize, dpi)
    _setup_axes(ax, scene, name, elev, azim)
    if scene.T == 1:
        draw(ax, scene, 0, frames=frames, labels=labels)
    else:
        shots = np.unique(np.linspace(0, scene.T - 1, min(6, scene.T)).round().astype(int))
        for i, t in enumerate(shots):
            last = i == len(shots) - 1
            draw(ax, scene, int(t), alpha=0.25 + 0.75 * (i + 1) / len(shots), frames=frames and last,
                 labels=labels and last)
    if output is None:
        return fig
    fig.savefig(output, dpi=dpi)
    return Path(output)


def _animate(scene, output: Path, name, dt, fps, max_frames, frames, labels, elev, azim, figsize, dpi, progress):
    from matplotlib import animation

    steps = np.unique(np.linspace(0, scene.T - 1, min(max_frames, scene.T)).round().astype(int))
    fig, ax = _figure(figsize, dpi)

    def frame(i):
        ax.cla()
        t = int(steps[i])
        label = f"{name}   t = {t * dt:.2f} s" if dt else f"{name}   {t + 1}/{scene.T}"
        _setup_axes(ax, scene, label, elev, azim)
        draw(ax, scene, t, frames=frames, labels=labels)
        return ()

    anim = animation.FuncAnimation(fig, frame, frames=len(steps), blit=False)
    writer = animation.PillowWriter(fps=fps) if output.suffix.lower() == ".gif" else animation.FFMpegWriter(fps=fps)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(steps), desc=f"writing {output.name}", unit="frame")
    try:
        anim.save(str(output), writer=writer, dpi=dpi,
                  progress_callback=(lambda i, n: bar.update(1)) if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    return output


# ---------------------------------------------------------------- rollout files
def save_rollout(path, q, model, base_transform=None) -> Path:
    """Write a trajectory for ``torchrbd render ROLLOUT``: ``q`` (T, n), ``model``
    (embedded name or file path) and optionally ``base_transform`` (T, 4, 4).
    ``.pt`` (torch.save of a dict) or ``.npz`` (numpy)."""
    path = Path(path)
    data = {"q": _plain(q, torch.float64, "q"), "model": str(model)}
    if base_transform is not None:
        data["base_transform"] = _plain(base_transform, torch.float64, "base_transform")
    if path.suffix == ".pt":
        torch.save(data, path)
    elif path.suffix == ".npz":
        np.savez(path, **{k: (v.numpy() if isinstance(v, torch.Tensor) else np.array(v)) for k, v in data.items()})
    else:
        raise InputError(f"rollout file {str(path)!r}: expected a .pt or .npz suffix")
    return path


def load_rollout(path) -> dict:
    """Read a rollout file: ``{"q": (T, n) tensor, "base_transform": (T, 4, 4) or None,
    "model": str or None}``. ``.pt`` files must hold a dict, ``.npz`` files arrays,
    with at least the key ``q``."""
    path = Path(path)
    if path.suffix == ".pt":
        data = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(data, dict):
            raise InputError(
                f"{path}: expected a dict with keys 'q' [, 'base_transform', 'model'], got {type(data).__name__}"
            )
    elif path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as f:
            data = {k: f[k] for k in f.files}
    else:
        raise InputError(f"rollout file {str(path)!r}: expected a .pt or .npz suffix")
    if "q" not in data:
        raise InputError(f"{path}: no 'q' entry (found {', '.join(map(str, data)) or 'nothing'})")
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        model = str(np.asarray(model).item())
    def tensor(x):
        return x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))

    base = data.get("base_transform")
    return {"q": tensor(data["q"]), "base_transform": None if base is None else tensor(base), "model": model}
