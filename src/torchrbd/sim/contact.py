"""Soft contact law: from :class:`~torchrbd.sim.collision.Contacts` to forces and body wrenches.

Every function is pure and batched over leading (environment) dims; all vectors are in
world axes. One contact step of a simulator reads::

    contacts = detect(plan, R, p)                      # collision.py
    vel_a, vel_b = contact_velocities(contacts, v_o, w)
    mass = contact_mass(contacts, slot_mass)           # optional, see below
    f = contact_forces(contacts, vel_a, vel_b, params, mass)
    wrench = body_wrenches(contacts, f, n_slots)       # (..., S, 6) about the world origin

(:func:`contact_wrenches` does exactly this.)

The law
-------
Normal force on A, along ``normal`` (a MuJoCo-like soft constraint written as a
penalty): with ``m`` the effective mass of the contact, ``tc = timeconst`` and
``zeta = dampratio``,

    k = m / (tc * zeta)^2,      c = 2 m / tc
    f_n,i = max(0, w_i * (k * s(d_i) - c * v_n,i * s'(d_i)))

where ``d_i`` is the depth, ``v_n,i = (vel_a - vel_b) . normal`` and ``s`` a smoothed
ReLU of half width ``margin``: ``s(d) = 0`` for ``d <= -margin``,
``(d + margin)^2 / (4 margin)`` in between, ``d`` for ``d >= margin`` (C1; ``s'`` goes
linearly from 0 to 1). Contacts deeper than ``-margin`` give exactly zero force, and
the ``max`` lets contacts push, never pull.

Shared constraint (``shared=True``, default): ``w_i = s(d_i) / sum_j s(d_j)`` over the
contacts ``j`` between the same two slots (``contacts.slot_pair``), so however many
points a kernel reports (4 box corners on the floor, 40 box-box candidates, 64 hull
vertices, several geoms of one foot), the two bodies feel the stiffness ``k`` and
damping ``c`` of *one* constraint: like MuJoCo, where every contact of a pair aims at
the same reference acceleration. A single contact is then a critically damped spring
of natural frequency ``1 / (tc zeta)``, and a body resting with its own mass as
``m`` sinks by ``s(d) = g tc^2`` (0.63 mm with the defaults; the smoothed ReLU makes
the depth 0.58 mm). With ``shared=False`` every contact is its own spring-damper.

Friction (regularised Coulomb): ``f_t = -mu f_n v_t / sqrt(|v_t|^2 + v_eps^2)`` with
``v_t`` the tangential relative velocity and ``v_eps = friction_vel``. No torsional or
rolling friction.

Explicit-integration limits (semi-implicit Euler, step ``dt``), used to pick the
defaults:

* normal: a body of mass ``m`` (given as ``mass``) touching ``n`` other bodies at once
  is stable while ``2 n dt / tc < 2`` and ``n (dt / tc)^2 < 4 - 4 n dt / tc``: with the
  defaults, up to 7 touching bodies at ``dt = 1 ms`` and 3 at ``dt = 2 ms`` (MuJoCo's
  rule of thumb ``tc >= 2 dt`` for a single one).
* friction: below ``v_eps`` friction is a viscous damper of gain ``mu f_n / v_eps`` on
  the contact point, stable while ``mu g dt kappa / v_eps < 2`` with ``kappa`` the
  body mass over the point's tangential effective mass (1 for pure translation, 3.5
  for a rolling solid sphere, about 4 for a box corner). ``v_eps = 0.05`` m/s allows
  ``kappa < 10`` at 1 ms and ``kappa < 5`` at 2 ms with ``mu = 1``; beyond it the slip
  velocity rings in a bounded 2-cycle (e.g. a box never stops spinning) instead of
  sticking. The price of the regularisation is creep: a tangential load ``F_t`` below
  ``mu f_n`` slides at ``v_eps F_t / sqrt((mu f_n)^2 - F_t^2)``.

``mass`` is the modelling choice left to the caller: the body's own mass for a free
body; for the feet of an articulated robot rather the mass they hold up (e.g. the
whole robot's), else the feet sink by ``(M / m_foot) g tc^2``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .collision import ContactPlan, Contacts, detect

_SHARE_FLOOR = 1e-3  # fraction of the margin: floor of the sum in the shared weights


@dataclass(frozen=True)
class ContactParams:
    """Parameters of the contact law, SI units (floats or tensors, e.g. requiring grad).

    ``timeconst`` (s) and ``dampratio`` set stiffness and damping per kg of effective
    mass (MuJoCo's ``solref``); ``mass`` (kg) is the effective mass used when
    :func:`contact_forces` is given none; ``margin`` (m) is the half width of the
    smooth activation around zero depth; ``friction_vel`` (m/s) the regularisation
    velocity of Coulomb friction; ``shared``: the contacts between the same two
    slots share one soft constraint (see the module docstring), else each contact is
    an independent spring-damper.
    """

    timeconst: float = 0.008
    dampratio: float = 1.0
    mass: float = 1.0
    margin: float = 1e-3
    friction_vel: float = 0.05
    shared: bool = True


def point_velocity(v_origin: torch.Tensor, w: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """World velocity ``v_origin + w x p`` of the body point at world position ``p``.

    ``(v_origin, w)`` is the body's spatial velocity at the world origin in world axes
    (linear, angular) (..., 3) each; for a body whose origin ``o`` moves at ``v_body``,
    ``v_origin = v_body - w x o``.
    """
    w, p = torch.broadcast_tensors(w, p)
    return v_origin + torch.linalg.cross(w, p)


def _gather_slots(x: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
    """``x (..., S, d)`` at ``slot (K,)``, zeros where ``slot < 0`` (static world)."""
    zero = x.new_zeros(x.shape[:-2] + (1, x.shape[-1]))
    padded = torch.cat([x, zero], -2)  # row S: the static world
    return padded.index_select(-2, torch.where(slot >= 0, slot, x.shape[-2]))


def contact_velocities(contacts: Contacts, v_origin: torch.Tensor, w: torch.Tensor):
    """World velocities ``(vel_a, vel_b)`` (..., K, 3) of each contact point on A and on B.

    ``v_origin, w (..., S, 3)``: spatial velocity of each slot at the world origin
    (see :func:`point_velocity`); static slots (-1) have zero velocity.
    """
    v_origin, w = torch.broadcast_tensors(v_origin, w)
    twist = torch.cat([v_origin, w], -1)
    ta, tb = _gather_slots(twist, contacts.slot_a), _gather_slots(twist, contacts.slot_b)
    return point_velocity(ta[..., :3], ta[..., 3:], contacts.pos), point_velocity(tb[..., :3], tb[..., 3:], contacts.pos)


def contact_mass(contacts: Contacts, slot_mass: torch.Tensor) -> torch.Tensor:
    """Effective mass of each contact: ``m_a m_b / (m_a + m_b)``, ``m_a`` against the world.

    ``slot_mass (..., S)`` in kg (e.g. the body masses, or, for articulated robots,
    the mass the contact has to hold up, such as the whole robot's for its feet).
    Returns (..., K).
    """
    return pair_mass(contacts.slot_a, contacts.slot_b, slot_mass)


def pair_mass(slot_a: torch.Tensor, slot_b: torch.Tensor, slot_mass: torch.Tensor) -> torch.Tensor:
    """:func:`contact_mass` of the contacts between slots ``slot_a, slot_b (K,)`` (-1: world)."""
    inv = 1.0 / slot_mass

    def inverse(slot):
        if inv.shape[-1] == 0:
            return inv.new_zeros(inv.shape[:-1] + (slot.shape[0],))
        x = inv[..., slot.clamp(min=0)]
        return torch.where(slot >= 0, x, torch.zeros_like(x))

    return 1.0 / (inverse(slot_a) + inverse(slot_b))


def smooth_relu(depth: torch.Tensor, margin):
    """``(s(depth), s'(depth))``: 0 below ``-margin``, ``depth`` above ``margin``, C1 between."""
    q = (depth + margin).clamp(min=0.0)
    band = depth < margin
    return torch.where(band, q * q / (4.0 * margin), depth), torch.where(band, q / (2.0 * margin), 1.0)


def contact_forces(
    contacts: Contacts,
    vel_a: torch.Tensor,
    vel_b: torch.Tensor,
    params: ContactParams = ContactParams(),
    mass: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """World force (..., K, 3) on shape A at each contact point (B gets the opposite).

    ``vel_a, vel_b (..., K, 3)``: world velocities of the contact point on A and on B.
    ``mass``: effective mass per contact (..., K) or scalar, kg (:func:`contact_mass`);
    ``None`` uses ``params.mass``. Contacts with ``depth <= -params.margin`` give exactly 0.
    """
    return contact_forces_and_gains(contacts, vel_a, vel_b, params, mass)[0]


def contact_forces_and_gains(
    contacts: Contacts,
    vel_a: torch.Tensor,
    vel_b: torch.Tensor,
    params: ContactParams = ContactParams(),
    mass: torch.Tensor | float | None = None,
):
    """:func:`contact_forces` and the gains of ``-d force / d velocity``: ``(forces
    (..., K, 3), c_n (..., K), c_t (..., K))``.

    Normal: ``c_n = c w s'(d)`` while the normal force is positive (``w`` the shared
    weight), else 0; tangential: the secant gain ``c_t = mu f_n / sqrt(|v_t|^2 + v_eps^2)``
    of regularised Coulomb friction (``f_t = -c_t v_t``).
    """
    m = params.mass if mass is None else mass
    return contact_law(contacts.depth, contacts.normal, vel_a - vel_b, contacts.friction, contacts.slot_pair, m, params)


def contact_law(depth, normal, v, friction, slot_pair, mass, params: ContactParams, dim: int = -1, n_pairs: int | None = None):
    """:func:`contact_forces_and_gains` on plain tensors, in either layout: the xyz axis
    of ``normal`` and of the relative velocity ``v = vel_a - vel_b`` is ``dim`` (-1:
    batch-first ``(..., K, 3)``; 1: batch-last ``(K, 3, B)``), and ``depth``, ``friction``,
    ``mass`` are laid out as the vectors without that axis (batch-first ``(..., K)`` and
    ``(K,)``; batch-last ``(K, B)`` and ``(K, 1)``). ``slot_pair (K,)``: see
    :class:`~torchrbd.sim.collision.Contacts`, numbers below ``n_pairs`` (default K)."""
    n = normal
    vn = (v * n).sum(dim)
    vt = v - vn.unsqueeze(dim) * n
    s, ds = smooth_relu(depth, params.margin)
    k = mass / (params.timeconst * params.dampratio) ** 2
    c = 2.0 * mass / params.timeconst
    fn = k * s - c * vn * ds
    if params.shared:
        weight = _shared_weight(s, slot_pair, params, 0 if dim >= 0 else -1, n_pairs)  # the K axis
        fn, ds = fn * weight, ds * weight
    fn = fn.clamp(min=0.0)
    c_t = friction * fn / torch.sqrt((vt * vt).sum(dim) + params.friction_vel**2)
    c_n = torch.where(fn > 0, c * ds, torch.zeros_like(fn))
    return fn.unsqueeze(dim) * n - c_t.unsqueeze(dim) * vt, c_n, c_t


def shared_weight(contacts: Contacts, s: torch.Tensor, params: ContactParams) -> torch.Tensor:
    """(..., K) weight ``s_i / sum_j s_j`` over the contacts between the same two slots,
    so that they act as one constraint; ``s`` is :func:`smooth_relu` of the depths."""
    return _shared_weight(s, contacts.slot_pair, params, -1)


def _shared_weight(s, slot_pair, params: ContactParams, dim: int, n_pairs: int | None = None):
    """:func:`shared_weight` with the contacts along ``dim`` of ``s``."""
    shape = list(s.shape)
    shape[dim] = s.shape[dim] if n_pairs is None else n_pairs
    total = s.new_zeros(shape).index_add(dim, slot_pair, s).index_select(dim, slot_pair)
    return s / torch.clamp(total, min=_SHARE_FLOOR * params.margin)


def body_wrenches(contacts: Contacts, forces: torch.Tensor, n_slots: int) -> torch.Tensor:
    """Per-slot contact wrench (..., S, 6) = sum of ``[f; pos x f]`` about the world origin.

    Linear first, world axes. ``forces (..., K, 3)`` act on A at ``contacts.pos``; B gets
    ``-f``. Static slots (-1) are skipped. One ``index_add`` per side, no Python loop.
    """
    pos, forces = torch.broadcast_tensors(contacts.pos, forces)
    w6 = torch.cat([forces, torch.linalg.cross(pos, forces)], -1)
    spare = n_slots  # static contacts land in an extra row that is dropped
    out = w6.new_zeros(w6.shape[:-2] + (n_slots + 1, 6))
    out = out.index_add(-2, torch.where(contacts.slot_a >= 0, contacts.slot_a, spare), w6)
    out = out.index_add(-2, torch.where(contacts.slot_b >= 0, contacts.slot_b, spare), -w6)
    return out[..., :n_slots, :]


def contact_wrenches(
    plan: ContactPlan,
    R: torch.Tensor,
    p: torch.Tensor,
    v_origin: torch.Tensor,
    w: torch.Tensor,
    params: ContactParams = ContactParams(),
    slot_mass: torch.Tensor | None = None,
):
    """The whole contact step: ``(wrench (..., S, 6), contacts, forces (..., K, 3))``.

    ``R (..., S, 3, 3), p (..., S, 3)``: world poses of the slots; ``v_origin, w (..., S, 3)``
    their spatial velocities at the world origin (world axes); ``slot_mass (..., S)`` kg
    (``None``: ``params.mass`` for every contact). The wrench is about the world origin,
    linear first.
    """
    contacts = detect(plan, R, p)
    vel_a, vel_b = contact_velocities(contacts, v_origin, w)
    mass = None if slot_mass is None else contact_mass(contacts, slot_mass)
    forces = contact_forces(contacts, vel_a, vel_b, params, mass)
    return body_wrenches(contacts, forces, R.shape[-3]), contacts, forces
