"""Velocity representations (as adam / iDynTree) and the changes of coordinates
between them and the form used inside the algorithms. Batch-last.

Inside, twists, momenta and inertias are taken about the **base origin with world
axes**: a frame frozen at the current base position (so, for an instant, an
inertial frame). Kinematics run with the base at that origin, so positions are
relative to the base. This keeps float32 as accurate 100 m from the world origin as
at it (inertias about a far point grow like m |p|^2 and cancel badly).

With ``nu`` the base velocity in a representation and ``pB``, ``R`` the base pose,
the internal base twist is ``T nu``:

* MIXED (Pinocchio LOCAL_WORLD_ALIGNED):  T = 1
* BODY_FIXED (Pinocchio LOCAL):           T = diag(R, R)
* INERTIAL_FIXED (Pinocchio WORLD):       T = [[1, -[pB]x], [0, 1]]

A frame's internal twist ``V`` becomes ``X V``: ``[[1, -[r_F]x], [0, 1]]`` (MIXED,
``r_F`` the frame origin relative to the base), ``diag(R_F^T, R_F^T)`` times that
(BODY), ``[[1, [pB]x], [0, 1]]`` (INERTIAL). Generalized forces map with ``T^T``;
matrices whose columns multiply a velocity map with ``A T``.

Layouts: a set of rows ``A`` is (r, 6, B) (each row a 6-vector over the base
columns); a set of twists is (c, 6, B). Products with T, X and their
derivatives are written out as cross products, never as 6x6 matrices.
"""

from __future__ import annotations

from enum import Enum

import torch

from ..inference import tensor_cache
from .batchlast import cross, halves, mtv, mv, pair
from . import jacobian_base
from .jacobian_base import mixed_base_rows
from .topology import _uncached


class Representations(Enum):
    BODY_FIXED_REPRESENTATION = "body"
    MIXED_REPRESENTATION = "mixed"
    INERTIAL_FIXED_REPRESENTATION = "inertial"


# The functions below take a representation by its value: "body", "mixed" or
# "inertial" (``Representations.X.value``), not by the enum member. torch.compile's
# dynamo tracks an enum member by identity: reached both from a module global here
# and from ``KinDynComputations``'s attribute, the attribute lost its guard and a
# compiled method kept the representation it was traced with (found in aba).
# Strings are guarded by value.
BODY = Representations.BODY_FIXED_REPRESENTATION.value
MIXED = Representations.MIXED_REPRESENTATION.value
INERTIAL = Representations.INERTIAL_FIXED_REPRESENTATION.value


def to_internal(rep, R, pB, nu):
    """Base velocity (6, B) in ``rep`` -> internal twist T nu (6, B). R (3, 3, B), pB (3, B)."""
    v, w = halves(nu, 0)
    if rep == BODY:
        return torch.cat([mv(R, v), mv(R, w)], 0)
    if rep == INERTIAL:
        return torch.cat([v + cross(w, pB), w], 0)
    return nu


def forces_to_internal(rep, f, R, pB):
    """T^{-T} f: generalized base forces (6, B) in ``rep`` -> internal (about the base
    origin, world axes)."""
    lin, ang = halves(f, 0)
    if rep == BODY:
        return torch.cat([mv(R, lin), mv(R, ang)], 0)
    if rep == INERTIAL:  # moment about the base origin from the moment about the world origin
        return torch.cat([lin, ang - cross(pB, lin)], 0)
    return f


def acceleration_from_internal(rep, a, R, pB, nu):
    """Generalized accelerations (6+k, B) in ``rep`` from the internal ones: the base
    rows become ``T^{-1} (a - Tdot nu)`` with ``nu`` the base velocity in ``rep``
    (``Tdot nu`` is zero but in MIXED, see :func:`T_dot_nu`); the others stay."""
    base, rest = a.split_with_sizes([6, a.shape[0] - 6])
    lin, ang = halves(base, 0)
    if rep == BODY:
        return torch.cat([mtv(R, lin), mtv(R, ang), rest], 0)
    if rep == INERTIAL:
        return torch.cat([lin + cross(pB, ang), ang, rest], 0)
    v, w = halves(nu, 0)
    return torch.cat([lin - cross(v, w), ang, rest], 0)


def base_map(rep, R, pB):
    """T (6, 6, B) as a matrix (batch-last), or None for MIXED (T = 1): ``[[R, 0], [0, R]]``
    for BODY_FIXED, ``[[1, -[pB]x], [0, 1]]`` for INERTIAL_FIXED (what
    :func:`mixed_base_rows` makes of the base position), each one gather of its values
    (iCub's mass matrix at B = 1: 14 operators fewer than blocks concatenated)."""
    if rep == MIXED:
        return None
    if rep == INERTIAL:
        return mixed_base_rows(pB)
    B = R.shape[-1]
    values = torch.cat([R.new_zeros(1, B), R.reshape(9, B)])  # (10, B): 0, then R row-major
    return values.index_select(0, _uncached(_rotation_blocks_entries)(str(R.device))).view(6, 6, B)


@tensor_cache(8)
def _rotation_blocks_entries(device: str) -> torch.Tensor:
    """(36,) where each entry of ``[[R, 0], [0, R]]`` sits in ``(0, R_00, R_01, ..., R_22)``
    (row-major)."""
    rows = [[0] * 6 for _ in range(6)]
    for i in range(3):
        for j in range(3):
            rows[i][j] = rows[3 + i][3 + j] = 1 + 3 * i + j
    return torch.tensor(rows, device=device).flatten()


def T_dot_nu(rep, nu):
    """(6, B) ``Tdot nu``: ``[v x w; 0]`` for MIXED, zero otherwise."""
    if rep == MIXED:
        v, w = halves(nu, 0)
        return torch.cat([cross(v, w), torch.zeros_like(w)], 0)
    return torch.zeros_like(nu)


def rows_times_T(rep, A, R, pB):
    """A T for rows over the base columns, A (r, 6, B)."""
    if rep == MIXED:
        return A
    lin, ang = halves(A)
    if rep == BODY:
        return torch.cat([mtv(R, lin), mtv(R, ang)], 1)
    return torch.cat([lin, ang + cross(pB, lin)], 1)  # x^T (-[pB]x) = (pB x x)^T


def base_columns_times_T(rep, A, R, pB):
    """``A`` (r, 6+n, B) with its base columns times T (:func:`rows_times_T`) and its
    joint columns as they are: generalized forces or velocity maps from the internal
    (MIXED) coordinates to ``rep``'s (returned as it is for MIXED)."""
    if rep == MIXED:
        return A
    return torch.cat([rows_times_T(rep, A[:, :6], R, pB), A[:, 6:]], 1)


def twists_to_rep(rep, V, r_F, pB):
    """X V for internal twists V (c, 6, B): in MIXED the same twists about the frame
    origin ``r_F`` (3, B, relative to the base), in INERTIAL_FIXED about the world origin
    (the base at ``pB``). BODY_FIXED's come from :func:`body_frame_jacobian`."""
    assert rep != BODY
    lin, ang = halves(V)
    if rep == INERTIAL:
        return torch.cat([lin + cross(pB, ang), ang], 1)
    return torch.cat([lin - cross(r_F, ang), ang], 1)


def velocities_to_rep(rep, V, R_F, r_F, pB):
    """Frames' velocities (k, 6, B) in ``rep``, what ``J_F [nu; qd]`` gives, from their
    bodies' internal twists ``V`` (k, 6, B), the frames' rotations ``R_F`` (k, 3, 3, B) and
    origins ``r_F`` (k, 3, B) relative to the base, the base at ``pB`` (3, B): in MIXED
    each origin's velocity and the angular velocity, world axes; in BODY_FIXED the same
    in the frame's axes; in INERTIAL_FIXED the twist about the world origin."""
    if rep == INERTIAL:
        return twists_to_rep(rep, V, None, pB)
    mixed = twists_to_rep(MIXED, V, r_F, pB)
    return mixed if rep == MIXED else _in_frame_axes(R_F[:, None], mixed)


def _in_frame_axes(R_F: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """Twists ``V`` (k, 6, B), world axes, in the axes of ``R_F`` (3, 3, B), or one per
    twist as (k, 1, 3, 3, B): ``R_F^T`` on each half."""
    return mtv(R_F, pair(V)).reshape(V.shape)


def body_frame_jacobian(chain_cols: torch.Tensor, R_F: torch.Tensor, r_F: torch.Tensor, R: torch.Tensor):
    """A frame's BODY_FIXED Jacobian pieces, (6, 6, B) rows over the base columns and
    (k, 6, B) the chain's columns, from its MIXED chain columns ``chain_cols`` (twists
    about the frame origin ``r_F`` (3, B) relative to the base, world axes), the frame's
    rotation ``R_F`` and the base's ``R`` (3, 3, B).

    The frame's twist in its own axes is ``R_F^T`` on each half of the MIXED one, and
    the base's MIXED velocity is ``T = [[R, 0], [0, R]]`` times its BODY one: the base
    rows are ``[[Q, P], [0, Q]]``, ``Q = R_F^T R``, ``P = -R_F^T [r_F]x R``, whose
    columns are R_F^T times R's columns ``c`` and ``c x r_F`` (one product; the block is
    returned as its :func:`~.jacobian_base.body`), and the chain's columns are ``R_F^T``
    on each half."""
    c = R.transpose(0, 1)  # R's columns (3, 3, B)
    base = jacobian_base.body(mtv(R_F, torch.cat([c, cross(c, r_F)])))
    return base, _in_frame_axes(R_F, chain_cols)


def body_frame_jacobian_rate(chain_cols, chain_rates, R_F, r_F, V_F, R, V_0):
    """The time derivatives of :func:`body_frame_jacobian`'s pieces, from the chain's
    columns ``chain_cols`` (k, 6, B) about O (the base origin, world axes) and their rates
    ``chain_rates``, the frame's pose ``R_F``, ``r_F`` and internal twist ``V_F`` (6, B),
    the base's rotation ``R`` and internal twist ``V_0`` (6, B).

    With ``w_F``, ``w_B`` the frame's and the base's angular velocities and
    ``r_F' = v_F + w_F x r_F - v_B`` the rate of the frame origin relative to the base,
    ``Q' = -R_F^T [w_F - w_B]x R`` and ``P' = R_F^T ([w_F]x [r_F]x - [r_F']x - [r_F]x [w_B]x) R``:
    column by column, cross products of R's columns and one product with R_F^T (the block
    as its :func:`~.jacobian_base.body`). The chain's columns: MIXED's rate ``Ydot`` of
    ``Y = X_mixed V`` seen in the frame's axes, ``R_F^T (Ydot - w_F x Y)`` (each half),
    one cross product and one rotation, where the rotations of each term took four
    times the operators. This replaces the rates of the six base columns as twists and
    the products with T and its rate (iCub's l_sole: see docs/performance.md)."""
    c = R.transpose(0, 1)  # R's columns (3, 3, B)
    w_F, w_B = V_F[3:], V_0[3:]
    pd = _origin_velocity(r_F, V_F)
    r_rate = pd - V_0[:3]
    Q_rate = cross(c, w_F - w_B)
    P_rate = cross(w_F, cross(r_F, c)) - cross(r_rate, c) - cross(r_F, cross(w_B, c))
    base = jacobian_base.body(mtv(R_F, torch.cat([Q_rate, P_rate])))
    Y = pair(twists_to_rep(MIXED, chain_cols, r_F, None))  # (k, 2, 3, B)
    Z = _mixed_twists_rate(chain_cols, chain_rates, r_F, pd).reshape(Y.shape) - cross(w_F, Y)
    return base, mtv(R_F, Z).reshape(chain_cols.shape)


def _mixed_twists_rate(V, V_rate, r_F, pd):
    """``d/dt (X V)`` (c, 6, B) in MIXED for internal twists V (c, 6, B) changing at
    ``V_rate``: ``X V_rate`` plus ``Xdot V``, X moving with the frame origin ``r_F`` (3,
    B), whose velocity is ``pd`` (3, B) (:func:`_origin_velocity`)."""
    _, ang = halves(V)
    return torch.cat([-cross(pd, ang), torch.zeros_like(ang)], 1) + twists_to_rep(MIXED, V_rate, r_F, None)


def _origin_velocity(r_F, V_F):
    """(3, B) the velocity of the frame origin ``r_F`` (3, B) from the frame's internal
    twist ``V_F`` (6, B), world axes."""
    return V_F[:3] + cross(V_F[3:], r_F)


def mixed_frame_jacobian_rate(chain_cols, chain_rates, r_F, V_F, V_0):
    """The time derivatives of a frame's MIXED Jacobian pieces, the base rows (a
    :class:`~.jacobian_base.BaseRows`) and the chain's columns (k, 6, B), from the
    chain's columns ``chain_cols`` (k, 6, B) about O (the base origin, world axes) and
    their rates ``chain_rates``, the frame origin ``r_F`` (3, B) relative to the base, the
    frame's internal twist ``V_F`` and the base's ``V_0`` (6, B).

    The base rows ``[[1, -[r_F]x], [0, 1]]`` change with ``r_F`` only:
    ``[[0, -[r_F']x], [0, 0]]``, ``r_F' = v_F + w_F x r_F - v_B`` the rate of the frame
    origin relative to the base's, placed as the block's ``r`` and ``-r`` entries
    (:func:`~.jacobian_base.mixed_rate`). (This is the rate of ``X`` times the base's six
    constant unit twists plus ``X Tdot``, ``Tdot = [[0, [v_B]x], [0, 0]]``, which were
    computed as such.) The chain's columns take :func:`_mixed_twists_rate`."""
    pd = _origin_velocity(r_F, V_F)
    return jacobian_base.mixed_rate(pd - V_0[:3]), _mixed_twists_rate(chain_cols, chain_rates, r_F, pd)


def momentum_to_centroidal(rep, H, R_base, com):
    """Internal momenta H (c, 6, B) -> about the CoM (``com`` (3, B) relative to the
    base; world axes, base axes for BODY)."""
    lin, ang = halves(H)
    ang = ang - cross(com, lin)
    if rep == BODY:
        lin, ang = mtv(R_base, lin), mtv(R_base, ang)
    return torch.cat([lin, ang], 1)
