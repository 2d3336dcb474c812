"""Random kinematic trees written as URDF, for property-based tests.

A tree has links ``l0`` (the root) ... ``l{N-1}``; link ``i > 0`` hangs from a
random earlier link through joint ``j{i}`` of a random type (revolute,
continuous, prismatic, fixed) with a random axis (principal, negative or
arbitrary) and a random placement. Every link has a positive mass and a
physically valid inertia (a rotated diagonal that satisfies the triangle
inequality), except that some links hung by a fixed joint carry no
``<inertial>`` at all (pure frames). Links and joints are declared in a random
order, so the parser's tree ordering is exercised too.

The same generator runs from a numpy ``Generator`` (:func:`tree_from_rng`, for
seeded loops and the accuracy measurement) or from hypothesis (:func:`trees`).

Run as a script to measure the float32 accuracy reported in docs/accuracy.md::

    python tests/random_trees.py
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass, field

import numpy as np

KINDS = ("revolute", "continuous", "prismatic", "fixed")
PRINCIPAL_AXES = [(1, 0, 0), (0, 1, 0), (0, 0, 1), (-1, 0, 0), (0, -1, 0), (0, 0, -1)]


@dataclass
class RandomTree:
    """A generated URDF and what is in it."""

    urdf: str
    links: list  # link names, l0 first
    joints: dict  # joint name -> kind
    joints_name_list: list | None  # coordinates to use (None: every movable joint)
    massless: list = field(default_factory=list)  # links without <inertial>

    @property
    def movable(self) -> list:
        return [j for j, k in self.joints.items() if k != "fixed"]

    def write(self) -> str:
        """Write the URDF to a temporary file (Pinocchio reads files) and return its path."""
        fd, path = tempfile.mkstemp(suffix=".urdf", prefix="torchrbd_tree_")
        with os.fdopen(fd, "w") as f:
            f.write(self.urdf)
        return path


# ------------------------------------------------------------ randomness sources
class _NumpySource:
    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:  # inclusive
        return int(self.rng.integers(lo, hi + 1))

    def real(self, lo: float, hi: float) -> float:
        return float(self.rng.uniform(lo, hi))

    def choice(self, options):
        return options[self.integer(0, len(options) - 1)]

    def permutation(self, items: list) -> list:
        return [items[i] for i in self.rng.permutation(len(items))]


class _HypothesisSource:
    def __init__(self, draw):
        from hypothesis import strategies as st

        self.draw, self.st = draw, st

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(self.st.integers(lo, hi))

    def real(self, lo: float, hi: float) -> float:
        return self.draw(self.st.floats(lo, hi, allow_nan=False, allow_infinity=False, allow_subnormal=False))

    def choice(self, options):
        return self.draw(self.st.sampled_from(options))

    def permutation(self, items: list) -> list:
        return list(self.draw(self.st.permutations(items)))


# ------------------------------------------------------------ geometry helpers
def rpy_to_matrix(r: float, p: float, y: float) -> np.ndarray:
    """URDF convention: R = Rz(y) Ry(p) Rx(r)."""
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    Rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    Ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    Rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return Rz @ Ry @ Rx


def _f(x: float) -> str:
    return repr(float(x))  # shortest string that reads back to the same double


def _vec(v) -> str:
    return " ".join(_f(x) for x in v)


def _draw_vec(src, lo, hi, n=3) -> list:
    return [src.real(lo, hi) for _ in range(n)]


def _draw_axis(src) -> list:
    if src.integer(0, 1):
        return list(PRINCIPAL_AXES[src.integer(0, 5)])
    v = np.array(_draw_vec(src, -1.0, 1.0))
    norm = np.linalg.norm(v)
    return (v / norm).tolist() if norm > 0.2 else [0.0, 0.0, 1.0]


def _draw_inertial(src) -> str:
    mass = src.real(0.1, 5.0)
    com = _draw_vec(src, -0.3, 0.3)
    # second moments a, b, c >= 0 give principal inertias that satisfy the triangle inequality
    a, b, c = _draw_vec(src, 0.005, 0.5)
    D = np.diag([b + c, a + c, a + b])
    R = rpy_to_matrix(*_draw_vec(src, -np.pi, np.pi))
    I = R @ D @ R.T
    origin_rpy = _draw_vec(src, -np.pi, np.pi) if src.integer(0, 1) else [0.0, 0.0, 0.0]
    return (
        f'<inertial><origin xyz="{_vec(com)}" rpy="{_vec(origin_rpy)}"/><mass value="{_f(mass)}"/>'
        f'<inertia ixx="{_f(I[0, 0])}" iyy="{_f(I[1, 1])}" izz="{_f(I[2, 2])}" '
        f'ixy="{_f(I[0, 1])}" ixz="{_f(I[0, 2])}" iyz="{_f(I[1, 2])}"/></inertial>'
    )


def _draw_joint(src, name: str, kind: str, parent: str, child: str) -> str:
    xyz = _draw_vec(src, -0.5, 0.5)
    rpy = _draw_vec(src, -np.pi, np.pi) if src.integer(0, 3) else [0.0, 0.0, 0.0]
    parts = [
        f'<joint name="{name}" type="{kind}">',
        f'<parent link="{parent}"/><child link="{child}"/>',
        f'<origin xyz="{_vec(xyz)}" rpy="{_vec(rpy)}"/>',
    ]
    if kind != "fixed":
        parts.append(f'<axis xyz="{_vec(_draw_axis(src))}"/>')
    if kind in ("revolute", "prismatic"):
        parts.append('<limit lower="-3.0" upper="3.0" effort="100" velocity="10"/>')
    parts.append("</joint>")
    return "".join(parts)


def generate(src, max_links: int = 7, *, allow_massless: bool = True, subset: bool = True) -> RandomTree:
    """A random tree from a randomness source (see :func:`tree_from_rng`, :func:`trees`)."""
    n = src.integer(2, max_links)
    kinds = {i: src.choice(KINDS) for i in range(1, n)}
    link_xml, joint_xml, joints, massless = {}, [], {}, []
    for i in range(n):
        name = f"l{i}"
        frame_only = allow_massless and i > 0 and kinds[i] == "fixed" and src.integer(0, 2) == 0
        if frame_only:
            massless.append(name)
            link_xml[name] = f'<link name="{name}"/>'
        else:
            link_xml[name] = f'<link name="{name}">{_draw_inertial(src)}</link>'
    for i in range(1, n):
        parent = src.integer(0, i - 1)
        jname = f"j{i}"
        joints[jname] = kinds[i]
        joint_xml.append(_draw_joint(src, jname, kinds[i], f"l{parent}", f"l{i}"))
    body = src.permutation(list(link_xml.values())) + src.permutation(joint_xml)
    urdf = '<?xml version="1.0"?>\n<robot name="random_tree">\n' + "\n".join(body) + "\n</robot>\n"
    movable = [j for j, k in joints.items() if k != "fixed"]
    jnl = None
    if subset and movable and src.integer(0, 2) == 0:
        # a reordered subset: the others are locked at 0
        perm = src.permutation(movable)
        jnl = perm[: src.integer(0, len(perm))]
    return RandomTree(urdf, [f"l{i}" for i in range(n)], joints, jnl, massless)


def tree_from_rng(rng: np.random.Generator, **kw) -> RandomTree:
    return generate(_NumpySource(rng), **kw)


def trees(**kw):
    """Hypothesis strategy of :class:`RandomTree`."""
    from hypothesis import strategies as st

    @st.composite
    def _trees(draw):
        return generate(_HypothesisSource(draw), **kw)

    return _trees()


# ------------------------------------------------------------ float32 accuracy
def rel_err(x32, x64) -> float:
    """Normwise relative error max|x32 - x64| / max(max|x64|, 1e-12)."""
    import torch

    return float((x32.to(torch.float64) - x64).abs().max() / x64.abs().max().clamp_min(1e-12))


def float32_errors(kd, H, q, nu, qd, tau, frames) -> dict:
    """Relative float32-vs-float64 errors of M, h, aba and J (max over ``frames``).

    Inputs are float64 tensors (batched); the float32 run gets the same values
    rounded. ``aba`` is inf when the float32 Cholesky factorization fails.
    """
    import torch

    quantities = {
        "M": lambda a: kd.mass_matrix(a[0], a[1]),
        "h": lambda a: kd.bias_force(*a[:4]),
        "aba": lambda a: kd.aba(*a),
        "J": lambda a: torch.stack([kd.jacobian(f, a[0], a[1]) for f in frames]),
    }
    x64 = (H, q, nu, qd, tau)
    x32 = [x.to(torch.float32) for x in x64]
    errs = {}
    for k, f in quantities.items():
        try:
            errs[k] = rel_err(f(x32), f(x64))
        except torch.linalg.LinAlgError:
            errs[k] = float("inf")
    return errs


def random_state(rng, n: int, B: int):
    """Batched (H, q, nu, qd, tau) float64 tensors: random pose, q in [-pi, pi], unit-scale velocities."""
    import torch

    from pin_reference import random_pose

    H = torch.tensor(np.stack([random_pose(rng) for _ in range(B)]))
    q = torch.tensor(rng.uniform(-np.pi, np.pi, size=(B, n)))
    nu = torch.tensor(rng.normal(size=(B, 6)))
    qd = torch.tensor(rng.normal(size=(B, n)))
    tau = torch.tensor(rng.normal(size=(B, n)))
    return H, q, nu, qd, tau


def far(state, dist: float = 100.0):
    """The same state with the base moved ``dist`` metres along x."""
    H = state[0].clone()
    H[..., 0, 3] += dist
    return (H,) + tuple(state[1:])


def measure(n_trees: int = 200, n_icub: int = 64, seed: int = 0) -> dict:
    """float32 relative errors per (group, representation, quantity): (median, max, failures).

    Groups: random trees (a batch of 4 random states each) and iCub (the 23
    SEED_JOINTS), each with the base near the origin (position ~ N(0, 1) m) and
    moved 100 m away.
    """
    import torchrbd
    from conftest import SEED_JOINTS, icub_path

    rng = np.random.default_rng(seed)
    samples = {}  # (group, rep) -> quantity -> list of errors

    def add(group, kd, state, frames):
        for rep in torchrbd.Representations:
            kd.set_frame_velocity_representation(rep)
            for base, st in (("", state), ("_base_100m", far(state))):
                for k, v in float32_errors(kd, *st, frames).items():
                    samples.setdefault((group + base, rep.name), {}).setdefault(k, []).append(v)

    for _ in range(n_trees):
        tree = tree_from_rng(rng)
        kd = torchrbd.KinDynComputations(tree.urdf, tree.joints_name_list)
        add("trees", kd, random_state(rng, kd.NDoF, 4), tree.links)
    kd = torchrbd.KinDynComputations(icub_path(), SEED_JOINTS)
    for _ in range(n_icub):
        add("icub", kd, random_state(rng, kd.NDoF, 1), ["l_sole", "r_hand", "head", "root_link"])
    return {
        key: {k: (float(np.median(v)), float(np.max(v)), int(np.isinf(v).sum())) for k, v in qs.items()}
        for key, qs in sorted(samples.items())
    }


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    for (group, rep), errs in measure().items():
        cells = (f"{k}: {m:.1e} / {x:.1e} ({f} failed)" for k, (m, x, f) in errs.items())
        print(f"{group:15s} {rep:30s}", "  ".join(cells))
