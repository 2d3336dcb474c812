"""Contact law (torchrbd.sim.contact): activation, friction, shared constraints, wrenches,
and the defaults validated on tiny semi-implicit Euler integrators of one rigid body
(3-dof translation, and 6-dof for a spinning box)."""

import math

import pytest
import torch

from torchrbd.model.model import Geom, GeomType
from torchrbd.sim.collision import CollisionGeom, ContactPlan, Contacts, ground_plane
from torchrbd.sim.contact import (
    ContactParams,
    body_wrenches,
    contact_forces,
    contact_mass,
    contact_velocities,
    contact_wrenches,
    point_velocity,
    smooth_relu,
)

F64 = dict(dtype=torch.float64)
I3 = torch.eye(3, **F64)
Z3 = torch.zeros(3, **F64)
G = 9.81
UP = torch.tensor([0.0, 0.0, 1.0], **F64)


def contacts(depth, normal=None, pos=None, slot_a=None, slot_b=None, friction=0.5, slot_pair=None) -> Contacts:
    """Hand-made contacts: by default each on slot 0 against the world, normal +z."""
    depth = torch.as_tensor(depth, **F64)
    K = depth.shape[-1]

    def index(x, default):
        return torch.as_tensor(default if x is None else x, dtype=torch.long)

    return Contacts(
        pos=torch.zeros(depth.shape + (3,), **F64) if pos is None else pos,
        normal=UP.expand(depth.shape + (3,)) if normal is None else normal,
        depth=depth,
        slot_a=index(slot_a, [0] * K),
        slot_b=index(slot_b, [-1] * K),
        friction=torch.full((K,), friction, **F64),
        pair=torch.arange(K),
        slot_pair=index(slot_pair, list(range(K))),
    )


# --------------------------------------------------------------- the law itself


def test_smooth_relu_is_c1_and_exactly_zero_below_margin():
    m = 1e-3
    d = torch.tensor([-1.0, -2 * m, -m, -0.5 * m, 0.0, 0.5 * m, m, 2 * m, 1.0], **F64, requires_grad=True)
    s, ds = smooth_relu(d, m)
    assert s[:3].tolist() == [0.0, 0.0, 0.0]
    assert s[4].item() == pytest.approx(m / 4) and s[6].item() == pytest.approx(m) and s[-1].item() == 1.0
    (g,) = torch.autograd.grad(s.sum(), d)
    assert torch.allclose(g, ds) and torch.isfinite(g).all()
    assert g[:3].tolist() == [0.0, 0.0, 0.0] and g[-3:].tolist() == [1.0, 1.0, 1.0]
    eps = 1e-9  # the slope is continuous at both ends of the band
    for x in (-m, m):
        lo, hi = smooth_relu(torch.tensor([x - eps, x + eps], **F64), m)[1].tolist()
        assert hi - lo == pytest.approx(0.0, abs=1e-5)


def test_inactive_contacts_give_exactly_zero_force_and_finite_gradients():
    p = ContactParams()
    depth = torch.tensor([-1.0, -p.margin, -0.5 * p.margin, 0.0, 0.01], **F64, requires_grad=True)
    c = contacts(depth)
    va = (torch.randn(5, 3, generator=torch.Generator().manual_seed(0), **F64) * torch.tensor([1.0, 1.0, 0.0], **F64)).requires_grad_(True)
    f = contact_forces(c, va, torch.zeros(5, 3, **F64), p)
    assert (f[:2] == 0).all()
    assert (f[2:, 2] >= 0).all() and f[4, 2] > 0
    f.sum().backward()
    assert torch.isfinite(depth.grad).all() and torch.isfinite(va.grad).all()
    assert (depth.grad[:2] == 0).all()


def test_gradcheck_forces():
    depth = torch.tensor([0.004, 0.0003, -0.0004, 0.002], **F64, requires_grad=True)
    normal = torch.nn.functional.normalize(torch.tensor([[0.1, 0.0, 1.0], [0.0, 0.2, 1.0], [0.0, 0.0, 1.0], [0.3, 0.1, 1.0]], **F64), dim=1)
    va = torch.tensor([[0.3, 0.0, -0.2], [0.001, 0.002, -0.1], [0.0, 0.5, 0.0], [-0.2, 0.1, -0.05]], **F64, requires_grad=True)

    def f(depth, va, mass):
        c = contacts(depth, normal=normal, slot_pair=[0, 0, 0, 1])
        return contact_forces(c, va, torch.zeros(4, 3, **F64), ContactParams(), mass)

    mass = torch.tensor(1.3, **F64, requires_grad=True)
    assert torch.autograd.gradcheck(f, (depth, va, mass))


def test_contacts_push_and_never_pull():
    c = contacts([0.001])
    away = torch.tensor([[0.0, 0.0, 5.0]], **F64)  # separating fast: damping would pull
    assert contact_forces(c, away, torch.zeros(1, 3, **F64)).abs().max() == 0


def test_regularised_coulomb_friction():
    p = ContactParams(shared=False)
    c = contacts([0.002, 0.002], friction=0.8)
    v = torch.tensor([[3.0, 0.0, 0.0], [0.0, 0.0, 0.0]], **F64)
    f = contact_forces(c, v, torch.zeros(2, 3, **F64), p)
    fn = f[:, 2]
    assert fn[0].item() == pytest.approx(fn[1].item())  # no normal velocity: same normal force
    assert f[0, 0].item() == pytest.approx(-0.8 * fn[0].item() * 3.0 / math.hypot(3.0, p.friction_vel))
    assert f[0, 1].item() == 0.0 and f[1, :2].abs().max() == 0.0


def test_stiffness_and_damping_from_time_constant():
    p = ContactParams(timeconst=0.01, dampratio=0.5, mass=2.0, shared=False)
    c = contacts([0.01])
    vn = torch.tensor([[0.0, 0.0, -0.1]], **F64)  # approaching
    f = contact_forces(c, vn, torch.zeros(1, 3, **F64), p)
    k, b = 2.0 / (0.01 * 0.5) ** 2, 2 * 2.0 / 0.01
    assert f[0, 2].item() == pytest.approx(k * 0.01 + b * 0.1)
    f3 = contact_forces(c, vn, torch.zeros(1, 3, **F64), p, mass=torch.tensor([6.0], **F64))
    assert f3[0, 2].item() == pytest.approx(3 * f[0, 2].item())


def test_contacts_of_one_body_pair_share_one_constraint():
    v = torch.zeros(4, 3, **F64)
    one = contact_forces(contacts([0.003]), v[:1], v[:1])
    four = contacts([0.003] * 4, slot_pair=[0, 0, 0, 0])
    shared = contact_forces(four, v, v)
    assert shared[:, 2].sum().item() == pytest.approx(one[0, 2].item())
    independent = contact_forces(four, v, v, ContactParams(shared=False))
    assert independent[:, 2].sum().item() == pytest.approx(4 * one[0, 2].item())
    # uneven depths: the deeper contact carries more, and far contacts nothing
    uneven = contact_forces(contacts([0.004, 0.001, -1.0], slot_pair=[0, 0, 0]), v[:3], v[:3])
    assert uneven[0, 2] > uneven[1, 2] > 0 and uneven[2, 2] == 0


# ----------------------------------------------------------- kinematics and sums


def test_point_velocity_and_contact_velocities():
    w = torch.tensor([0.0, 0.0, 2.0], **F64)
    centre = torch.tensor([1.0, 0.0, 0.0], **F64)
    v_o = torch.tensor([0.5, 0.0, 0.0], **F64) - torch.linalg.cross(w, centre)  # body origin at centre moves at 0.5 x
    assert torch.allclose(point_velocity(v_o, w, centre), torch.tensor([0.5, 0.0, 0.0], **F64))
    assert torch.allclose(point_velocity(v_o, w, centre + torch.tensor([0.0, 1.0, 0.0], **F64)), torch.tensor([-1.5, 0.0, 0.0], **F64))
    c = contacts([0.0, 0.0], pos=torch.stack([centre, centre]), slot_a=[0, 1], slot_b=[-1, 0])
    va, vb = contact_velocities(c, torch.stack([v_o, Z3]), torch.stack([w, Z3]))
    assert torch.allclose(va[0], torch.tensor([0.5, 0.0, 0.0], **F64)) and (vb[0] == 0).all()
    assert (va[1] == 0).all() and torch.allclose(vb[1], va[0])


def test_contact_mass():
    c = contacts([0.0, 0.0], slot_a=[0, 0], slot_b=[-1, 1])
    m = contact_mass(c, torch.tensor([[2.0, 6.0]], **F64))
    assert m.shape == (1, 2) and m[0, 0].item() == 2.0 and m[0, 1].item() == pytest.approx(1.5)


def test_body_wrenches_match_a_loop_and_balance():
    torch.manual_seed(0)
    K, S = 7, 3
    slot_a = torch.tensor([0, 1, 2, 0, 1, 2, 0])
    slot_b = torch.tensor([-1, 0, 1, 2, -1, -1, 1])
    c = contacts(torch.zeros(2, K, **F64), pos=torch.randn(2, K, 3, **F64), slot_a=slot_a, slot_b=slot_b)
    f = torch.randn(2, K, 3, **F64)
    W = body_wrenches(c, f, S)
    assert W.shape == (2, S, 6)
    ref = torch.zeros(2, S, 6, **F64)
    for k in range(K):
        w = torch.cat([f[:, k], torch.linalg.cross(c.pos[:, k], f[:, k])], -1)
        if slot_a[k] >= 0:
            ref[:, slot_a[k]] += w
        if slot_b[k] >= 0:
            ref[:, slot_b[k]] -= w
    assert torch.allclose(W, ref)
    inner = (slot_a >= 0) & (slot_b >= 0)  # body-body contacts cancel in the total
    between = contacts(torch.zeros(2, int(inner.sum()), **F64), pos=c.pos[:, inner], slot_a=slot_a[inner], slot_b=slot_b[inner])
    assert torch.allclose(body_wrenches(between, f[:, inner], S).sum(-2), torch.zeros(2, 6, **F64), atol=1e-12)


# ------------------------------------------- a tiny translational integrator


def free_body(shape: GeomType, size, mu=1.0):
    body = Geom("body", "body", shape, size, I3, Z3)
    return ContactPlan.build([ground_plane(friction=mu), CollisionGeom(body, 0, entity=1, friction=mu)])


def simulate(plan, x, v, duration, dt=1e-3, mass=1.0, params=ContactParams()):
    """Semi-implicit Euler of one rigid body that only translates (3 dof, no rotation).

    Returns the positions (steps, 3) after each step.
    """
    R = I3[None]
    m = torch.tensor([mass], **F64)
    gravity = torch.tensor([0.0, 0.0, -mass * G], **F64)
    xs = []
    for _ in range(int(round(duration / dt))):
        wrench, _, _ = contact_wrenches(plan, R, x[None], v[None], Z3[None], params, slot_mass=m)
        v = v + dt * (wrench[0, :3] + gravity) / mass
        x = x + dt * v
        xs.append(x)
    return torch.stack(xs)


def test_dropped_sphere_touches_down_on_time_and_comes_to_rest():
    r, h = 0.1, 1.0
    z = simulate(free_body(GeomType.SPHERE, (r,)), torch.tensor([0.0, 0.0, h + r], **F64), Z3.clone(), 1.5)[:, 2]
    touchdown = (int((z <= r).nonzero()[0]) + 1) * 1e-3
    assert touchdown == pytest.approx(math.sqrt(2 * h / G), abs=0.02)
    last = z[-500:]  # the last 0.5 s: at rest, at the radius
    assert (last.max() - last.min()).item() < 1e-6
    assert abs(z[-1].item() - r) < 0.01
    assert abs(z[-1].item() - r) < 1e-3  # measured: 0.58 mm below


def test_box_rests_with_sub_millimetre_penetration():
    z = simulate(free_body(GeomType.BOX, (0.1, 0.1, 0.1)), torch.tensor([0.0, 0.0, 0.1], **F64), Z3.clone(), 0.5)[:, 2]
    assert 0.1 - z[-1].item() < 1e-3  # measured: 0.58 mm
    assert 0.1 - z.min().item() < 1e-3


def test_sliding_box_stops_at_coulomb_distance_with_correct_gradient():
    mu, v0 = 0.5, 2.0
    plan = free_body(GeomType.BOX, (0.1, 0.1, 0.1), mu=mu)
    rest = simulate(plan, torch.tensor([0.0, 0.0, 0.1], **F64), Z3.clone(), 0.1)[-1].detach()

    def stop(v):
        return simulate(plan, rest, torch.stack([v, Z3[0], Z3[0]]), 0.55)[-1, 0] - rest[0]  # stops at 0.42 s

    speed = torch.tensor(v0, **F64, requires_grad=True)
    x = stop(speed)
    (dx,) = torch.autograd.grad(x, speed)
    expected = v0**2 / (2 * mu * G)
    assert x.item() == pytest.approx(expected, rel=0.1)  # measured: 0.4080 vs 0.4077
    eps = 1e-4
    with torch.no_grad():
        fd = (stop(torch.tensor(v0 + eps, **F64)) - stop(torch.tensor(v0 - eps, **F64))) / (2 * eps)
    assert dx.item() == pytest.approx(fd.item(), rel=0.05)
    assert dx.item() == pytest.approx(v0 / (mu * G), rel=0.05)  # d/dv0 of v0^2 / (2 mu g)


def _rotation(w: torch.Tensor) -> torch.Tensor:
    """exp of the rotation vector ``w`` (3,)."""
    K = torch.zeros(3, 3, **F64)
    K[0, 1], K[0, 2], K[1, 2] = -w[2], w[1], -w[0]
    return torch.linalg.matrix_exp(K - K.T)


def test_tossed_spinning_box_comes_to_rest_flat():
    """6-dof semi-implicit Euler (Euler's equations in world axes): the wrench about the
    world origin, the rotation and the friction defaults together stop a spinning box."""
    h, m = 0.1, 1.0
    plan = free_body(GeomType.BOX, (h, h, h))
    inertia = torch.eye(3, **F64) * m * (2 * h) ** 2 / 6
    R, c = _rotation(torch.tensor([0.3, 0.2, 0.1], **F64)), torch.tensor([0.0, 0.0, 0.3], **F64)
    v, w = torch.zeros(3, **F64), torch.tensor([0.0, 0.0, 3.0], **F64)
    dt, gravity = 1e-3, torch.tensor([0.0, 0.0, -G], **F64)
    for _ in range(1200):
        v_origin = v - torch.linalg.cross(w, c)
        wrench, _, _ = contact_wrenches(plan, R[None], c[None], v_origin[None], w[None], slot_mass=torch.tensor([m], **F64))
        f, torque = wrench[0, :3], wrench[0, 3:] - torch.linalg.cross(c, wrench[0, :3])  # torque about the CoM
        Iw = R @ inertia @ R.T
        v = v + dt * (f / m + gravity)
        w = w + dt * torch.linalg.solve(Iw, torque - torch.linalg.cross(w, Iw @ w))
        c = c + dt * v
        R = _rotation(dt * w) @ R
    assert w.norm().item() < 1e-3 and v.norm().item() < 1e-3
    assert abs(abs(R[2]).max().item() - 1.0) < 1e-6  # a face down
    assert 0.0 < h - c[2].item() < 1e-3
