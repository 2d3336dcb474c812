"""Gradient-safe quaternion maps used by the integrators (``wxyz``, batched).

``exp`` and ``log`` switch to Taylor series below a small angle with the
double-``where`` trick, so values *and* gradients stay finite at zero rotation.
"""

from __future__ import annotations

import torch

from ..spatial import quat_multiply, quat_to_matrix  # noqa: F401  (re-exported)

_SMALL = 1e-4  # squared angle below which the series are used (error ~ theta^6 / 10^4)


def exp(rotvec: torch.Tensor) -> torch.Tensor:
    """Rotation vector (..., 3) -> unit quaternion (..., 4) = [cos(t/2), sin(t/2) u]."""
    t2 = (rotvec * rotvec).sum(-1, keepdim=True)
    small = t2 < _SMALL
    t2_safe = torch.where(small, torch.ones_like(t2), t2)
    t = torch.sqrt(t2_safe)
    c = torch.where(small, 1 - t2 / 8 + t2 * t2 / 384, torch.cos(t / 2))
    s = torch.where(small, 0.5 - t2 / 48 + t2 * t2 / 3840, torch.sin(t / 2) / t)  # sin(t/2)/t
    return torch.cat([c, s * rotvec], -1)


def log(q: torch.Tensor) -> torch.Tensor:
    """Unit quaternion (..., 4) -> rotation vector (..., 3) with angle in [0, pi]."""
    q = q / q.norm(dim=-1, keepdim=True)
    q = q * torch.where(q[..., :1] < 0, -1.0, 1.0).to(q)  # w >= 0: the shorter rotation
    w, v = q[..., :1], q[..., 1:]
    s2 = (v * v).sum(-1, keepdim=True)
    small = s2 < _SMALL
    s_safe = torch.sqrt(torch.where(small, torch.ones_like(s2), s2))
    # angle / sin(angle/2) with angle = 2 atan2(s, w); series in s for small s (w ~ 1)
    big = 2 * torch.atan2(s_safe, w) / s_safe
    series = 2 / w * (1 - s2 / (3 * w * w))
    return torch.where(small, series, big) * v


def dexp_inv(theta: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Inverse of the right-trivialised differential of ``exp`` on SO(3), (..., 3):
    the rate of ``theta`` for which ``R0 exp(theta)`` turns with body angular
    velocity ``w``: ``w + theta x w / 2 + c(t) theta x (theta x w)``,
    ``c(t) = 1 / t^2 - (1 + cos t) / (2 t sin t)`` (series below a small angle)."""
    t2 = (theta * theta).sum(-1, keepdim=True)
    small = t2 < _SMALL
    t = torch.sqrt(torch.where(small, torch.ones_like(t2), t2))
    c_big = 1 / (t * t) - (1 + torch.cos(t)) / (2 * t * torch.sin(t))
    c = torch.where(small, 1 / 12 + t2 / 720 + t2 * t2 / 30240, c_big)
    txw = torch.linalg.cross(theta, w)
    return w + 0.5 * txw + c * torch.linalg.cross(theta, txw)


def integrate(quat: torch.Tensor, omega_local: torch.Tensor, h: float) -> torch.Tensor:
    """MuJoCo's ``mju_quatIntegrate``: normalise, then rotate by ``omega_local * h``
    about the body's own axes (right multiplication)."""
    quat = quat / quat.norm(dim=-1, keepdim=True)
    return quat_multiply(quat, exp(omega_local * h))


def rotate(quat: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """R(quat) v for (..., 4), (..., 3)."""
    return (quat_to_matrix(quat) @ v.unsqueeze(-1)).squeeze(-1)


def rotate_inv(quat: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """R(quat)^T v."""
    return (quat_to_matrix(quat).transpose(-1, -2) @ v.unsqueeze(-1)).squeeze(-1)
