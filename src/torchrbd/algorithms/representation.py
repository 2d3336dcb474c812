"""Velocity representations (as adam / iDynTree) and the base-block changes of
coordinates between them and the world-origin ("inertial") form used inside.

With ``nu_rep`` the base velocity in a representation, the inertial twist of the
base (world axes, about the world origin) is ``nu_in = T nu_rep``:

* INERTIAL_FIXED (Pinocchio WORLD):            T = 1
* MIXED (Pinocchio LOCAL_WORLD_ALIGNED):       T = [[1, [p]x], [0, 1]]
* BODY_FIXED (Pinocchio LOCAL):                T = [[R, [p]x R], [0, R]]

with ``R, p`` the base pose. Frame velocities go the other way, from a frame's
inertial twist ``V`` to its representation: ``X V`` with X = 1 (INERTIAL),
``[[1, -[p_F]x], [0, 1]]`` (MIXED), ``diag(R_F^T, R_F^T) [[1, -[p_F]x], [0, 1]]`` (BODY).
"""

from __future__ import annotations

from enum import Enum

import torch

from ..spatial import block, matvec, skew


class Representations(Enum):
    BODY_FIXED_REPRESENTATION = "body"
    MIXED_REPRESENTATION = "mixed"
    INERTIAL_FIXED_REPRESENTATION = "inertial"


BODY = Representations.BODY_FIXED_REPRESENTATION
MIXED = Representations.MIXED_REPRESENTATION
INERTIAL = Representations.INERTIAL_FIXED_REPRESENTATION


def _zeros33(x):
    return torch.zeros(*x.shape[:-1], 3, 3, dtype=x.dtype, device=x.device)


def _eye33(x):
    return torch.eye(3, dtype=x.dtype, device=x.device).expand(*x.shape[:-1], 3, 3)


def base_T(rep, R, p):
    """(B, 6, 6) T with ``nu_in = T nu_rep`` (R (B,3,3), p (B,3)); None for INERTIAL."""
    if rep is INERTIAL:
        return None
    P = skew(p)
    if rep is MIXED:
        return block(_eye33(p), P, _zeros33(p), _eye33(p))
    return block(R, P @ R, _zeros33(p), R)


def base_T_dot(rep, R, p, nu):
    """(B, 6, 6) time derivative of T along base velocity ``nu`` (B, 6) in ``rep``."""
    if rep is INERTIAL:
        return None
    z = _zeros33(p)
    if rep is MIXED:
        return block(z, skew(nu[..., :3]), z, z)
    Rd = R @ skew(nu[..., 3:])
    return block(Rd, skew(matvec(R, nu[..., :3])) @ R + skew(p) @ Rd, z, Rd)


def base_T_dot_nu(rep, R, p, nu):
    """(B, 6) ``Tdot nu``: zero for BODY and INERTIAL, ``[v x w; 0]`` for MIXED."""
    if rep is MIXED:
        return torch.cat([torch.linalg.cross(nu[..., :3], nu[..., 3:]), torch.zeros_like(nu[..., 3:])], -1)
    return torch.zeros_like(nu)


def to_inertial(rep, R, p, nu):
    """Base velocity (B, 6) in ``rep`` -> inertial twist (B, 6)."""
    T = base_T(rep, R, p)
    return nu if T is None else matvec(T, nu)


def frame_X(rep, R, p):
    """(B, 6, 6) X with ``V_rep = X V_in`` for a frame at pose (R, p); None for INERTIAL."""
    if rep is INERTIAL:
        return None
    Y = block(_eye33(p), -skew(p), _zeros33(p), _eye33(p))
    if rep is MIXED:
        return Y
    Rt = R.transpose(-1, -2)
    z = _zeros33(p)
    return block(Rt, z, z, Rt) @ Y


def frame_X_dot(rep, R, p, V):
    """(B, 6, 6) derivative of :func:`frame_X` given the frame's inertial twist V (B, 6)."""
    if rep is INERTIAL:
        return None
    w = V[..., 3:]
    pd = V[..., :3] + torch.linalg.cross(w, p)  # velocity of the frame origin
    z = _zeros33(p)
    Yd = block(z, -skew(pd), z, z)
    if rep is MIXED:
        return Yd
    Rt = R.transpose(-1, -2)
    Y = block(_eye33(p), -skew(p), z, _eye33(p))
    Rtd = -skew(matvec(Rt, w)) @ Rt
    return block(Rtd, z, z, Rtd) @ Y + block(Rt, z, z, Rt) @ Yd


def momentum_X(rep, R_base, com):
    """(B, 6, 6) maps the momentum about the world origin to the centroidal momentum
    (about the CoM; world axes, or base axes for BODY)."""
    z = _zeros33(com)
    X = block(_eye33(com), z, -skew(com), _eye33(com))
    if rep is BODY:
        Rt = R_base.transpose(-1, -2)
        X = block(Rt, z, z, Rt) @ X
    return X
