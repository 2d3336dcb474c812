"""Batched rotations, transforms and spatial (6D) algebra.

Every function broadcasts over leading dimensions. Spatial vectors are
linear-first: motion ``[v; w]``, force ``[f; tau]``. Quaternions are ``wxyz``.
"""

from __future__ import annotations

import torch


def skew(v: torch.Tensor) -> torch.Tensor:
    """(..., 3) -> (..., 3, 3) with ``skew(a) @ b = a x b``."""
    x, y, z = v.unbind(-1)
    o = torch.zeros_like(x)
    return torch.stack([o, -z, y, z, o, -x, -y, x, o], dim=-1).reshape(*v.shape[:-1], 3, 3)


def matvec(A: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(..., m, k) @ (..., k) -> (..., m)."""
    return (A @ v.unsqueeze(-1)).squeeze(-1)


def axis_angle_to_matrix(axis: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Rodrigues: unit ``axis`` (..., 3), ``angle`` (...) -> rotation (..., 3, 3)."""
    K = skew(axis)
    s = torch.sin(angle)[..., None, None]
    c = torch.cos(angle)[..., None, None]
    eye = torch.eye(3, dtype=axis.dtype, device=axis.device)
    return eye + s * K + (1 - c) * (K @ K)


def quat_to_matrix(q: torch.Tensor) -> torch.Tensor:
    """Unit quaternion ``wxyz`` (..., 4) -> rotation matrix (..., 3, 3). Normalises first."""
    q = q / q.norm(dim=-1, keepdim=True)
    w, x, y, z = q.unbind(-1)
    return torch.stack(
        [
            1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
            2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
            2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
        ],
        dim=-1,
    ).reshape(*q.shape[:-1], 3, 3)


def matrix_to_quat(R: torch.Tensor) -> torch.Tensor:
    """Rotation matrix (..., 3, 3) -> unit quaternion ``wxyz`` (..., 4) with w >= 0.

    Uses the largest of the four candidate denominators (Shepperd), so it is
    accurate and has finite gradients for every rotation.
    """
    m = R
    t = torch.stack(
        [
            1 + m[..., 0, 0] + m[..., 1, 1] + m[..., 2, 2],
            1 + m[..., 0, 0] - m[..., 1, 1] - m[..., 2, 2],
            1 - m[..., 0, 0] + m[..., 1, 1] - m[..., 2, 2],
            1 - m[..., 0, 0] - m[..., 1, 1] + m[..., 2, 2],
        ],
        dim=-1,
    )
    k = t.argmax(dim=-1, keepdim=True)
    # each row: the quaternion computed from candidate k (unnormalised, scaled by 4*q_k)
    c0 = torch.stack([t[..., 0], m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0], m[..., 1, 0] - m[..., 0, 1]], -1)
    c1 = torch.stack([m[..., 2, 1] - m[..., 1, 2], t[..., 1], m[..., 1, 0] + m[..., 0, 1], m[..., 0, 2] + m[..., 2, 0]], -1)
    c2 = torch.stack([m[..., 0, 2] - m[..., 2, 0], m[..., 1, 0] + m[..., 0, 1], t[..., 2], m[..., 2, 1] + m[..., 1, 2]], -1)
    c3 = torch.stack([m[..., 1, 0] - m[..., 0, 1], m[..., 0, 2] + m[..., 2, 0], m[..., 2, 1] + m[..., 1, 2], t[..., 3]], -1)
    cands = torch.stack([c0, c1, c2, c3], dim=-2)  # (..., 4, 4)
    q = torch.take_along_dim(cands, k[..., None].expand(*k.shape[:-1], 1, 4), dim=-2).squeeze(-2)
    tk = torch.take_along_dim(t, k, dim=-1)
    q = q / (2 * torch.sqrt(tk.clamp_min(1e-30)))
    return q * torch.where(q[..., :1] < 0, -1.0, 1.0).to(q)


def quat_multiply(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton product of ``wxyz`` quaternions (..., 4)."""
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        dim=-1,
    )


def euler_to_quat(euler_deg) -> torch.Tensor:
    """Extrinsic x-y-z Euler angles in **degrees** (Genesis convention) -> ``wxyz``."""
    e = torch.deg2rad(torch.as_tensor(euler_deg, dtype=torch.float64))
    half = e / 2
    cx, cy, cz = torch.cos(half).unbind(-1)
    sx, sy, sz = torch.sin(half).unbind(-1)
    qx = torch.stack([cx, sx, torch.zeros_like(sx), torch.zeros_like(sx)], -1)
    qy = torch.stack([cy, torch.zeros_like(sy), sy, torch.zeros_like(sy)], -1)
    qz = torch.stack([cz, torch.zeros_like(sz), torch.zeros_like(sz), sz], -1)
    return quat_multiply(qz, quat_multiply(qy, qx))


def homogeneous(R: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """(..., 3, 3), (..., 3) -> (..., 4, 4)."""
    top = torch.cat([R, p.unsqueeze(-1)], dim=-1)
    bottom = torch.zeros(*R.shape[:-2], 1, 4, dtype=R.dtype, device=R.device)
    bottom[..., 0, 3] = 1
    return torch.cat([top, bottom], dim=-2)
