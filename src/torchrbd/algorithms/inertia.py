"""Inertial parameters: links merged into bodies, and world-frame spatial inertias.

A body's parameters are kept in the form that is linear in the links' ones:
mass ``m``, first moment ``h = m c`` and rotational inertia ``Io`` about the
body origin (body axes). No division by a mass happens, so massless bodies
(MJCF joint chains) are fine.
"""

from __future__ import annotations

import torch

from ..model.model import Model
from ..spatial import matvec, skew
from .topology import topology


def _outer(a, b):
    return a.unsqueeze(-1) * b.unsqueeze(-2)


def _eye(x):
    return torch.eye(3, dtype=x.dtype, device=x.device)


def body_parameters(model: Model):
    """(m (nb,), h (nb, 3), Io (nb, 3, 3)) of each body in its own frame."""
    topo = topology(model)
    m_l = model.link_mass
    c = model.link_pos + matvec(model.link_rot, model.link_com)  # link CoM in the body frame
    I_c = model.link_rot @ model.link_inertia @ model.link_rot.transpose(-1, -2)
    I_o = I_c + m_l[:, None, None] * ((c * c).sum(-1)[:, None, None] * _eye(c) - _outer(c, c))
    nb, lb = model.nbody, topo.link_body
    m = torch.zeros(nb, dtype=m_l.dtype, device=m_l.device).index_add(0, lb, m_l)
    h = torch.zeros(nb, 3, dtype=m_l.dtype, device=m_l.device).index_add(0, lb, m_l[:, None] * c)
    Io = torch.zeros(nb, 3, 3, dtype=m_l.dtype, device=m_l.device).index_add(0, lb, I_o)
    return m, h, Io


def world_inertias(model: Model, R: torch.Tensor, p: torch.Tensor, params=None):
    """Spatial inertias (B, nb, 6, 6) of the bodies about the world origin, world axes.

    ``R`` (B, nb, 3, 3), ``p`` (B, nb, 3): world poses of the bodies. Linear-first:
    ``[[m 1, -[hw]x], [[hw]x, Iw]]`` with ``hw = m c_world`` and ``Iw`` the
    rotational inertia about the world origin.
    """
    m, h, Io = params if params is not None else body_parameters(model)
    hr = matvec(R, h)  # m (c - p), world axes
    hw = hr + m[:, None] * p
    mI = m[:, None, None] * _eye(p)
    shift = (2 * (hr * p).sum(-1) + m * (p * p).sum(-1))[..., None, None] * _eye(p) - (
        _outer(hr, p) + _outer(p, hr) + m[:, None, None] * _outer(p, p)
    )
    Iw = R @ Io @ R.transpose(-1, -2) + shift
    S = skew(hw)
    return torch.cat([torch.cat([mI.expand_as(Iw), -S], -1), torch.cat([S, Iw], -1)], -2)


def center_of_mass(model: Model, R, p, params=None):
    """(B, 3) world CoM and total mass (scalar tensor)."""
    m, h, _ = params if params is not None else body_parameters(model)
    hw = matvec(R, h) + m[:, None] * p
    M = m.sum()
    return hw.sum(-2) / M, M
