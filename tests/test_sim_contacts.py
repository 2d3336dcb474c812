"""Contacts in the simulator (torchrbd.sim.contact_stage wired into scene.step):
falling, resting and sliding primitives with the default contact law, a humanoid and a
quadruped on the floor, the force mapping against KinDynComputations Jacobians,
batching, checkpointed rollouts and get_contacts."""

import math

import pytest
import torch

import torchrbd.models
import torchrbd.sim as gs
from torchrbd.sim import contact_stage, dynamics

G = 9.81


pytestmark = pytest.mark.usefixtures("sim_float64_one_thread")


def _scene(dt=1e-3, requires_grad=False, **rigid):
    return gs.Scene(
        sim_options=gs.options.SimOptions(dt=dt, requires_grad=requires_grad),
        rigid_options=gs.options.RigidOptions(**rigid),
    )


def _plain(x):
    return x.as_subclass(torch.Tensor)


def _tilt(quat) -> float:
    """Angle (rad) between the body z axis and the world z axis."""
    w, x, y, z = _plain(quat).tolist()
    return math.acos(max(-1.0, min(1.0, 1 - 2 * (x * x + y * y))))


# ------------------------------------------------------------ primitives, default law
def test_dropped_sphere_touches_down_on_time_and_rests_at_its_radius():
    scene = _scene(dt=1e-3)
    ball = scene.add_entity(gs.morphs.Sphere(radius=0.1, pos=(0, 0, 1)))
    scene.add_entity(gs.morphs.Plane())
    scene.build()
    zs = []
    for _ in range(1000):  # touches at 0.43 s, bounces 7 mm (the law's restitution), rests from 0.65 s
        scene.step()
        zs.append(ball.get_pos()[2].item())
    touchdown = next(i + 1 for i, z in enumerate(zs) if z <= 0.1) * 1e-3  # the surface reaches the plane
    assert touchdown == pytest.approx(math.sqrt(2 * 0.9 / G), abs=0.02)  # measured: 0.428 vs 0.4284
    assert abs(zs[-1] - 0.1) < 0.01  # measured: 0.6 mm below the radius
    assert max(zs[-200:]) - min(zs[-200:]) < 1e-5  # at rest
    c = ball.get_contacts()
    assert c["valid_mask"].tolist() == [True] and c["link_b"] == ["plane"]
    assert c["force"][0, 2].item() == pytest.approx(ball.get_mass().item() * G, rel=1e-6)


def test_box_resting_on_the_plane_penetrates_less_than_a_millimetre():
    scene = _scene(dt=1e-3)  # default contact parameters
    box = scene.add_entity(gs.morphs.Box(size=(0.1, 0.1, 0.1), pos=(0, 0, 0.05)))  # 1 kg
    scene.add_entity(gs.morphs.Plane())
    scene.build()
    assert box.get_mass().item() == pytest.approx(1.0)
    depth = []
    for t in range(500):
        scene.step()
        if t % 10 == 0:
            depth.append(box.get_contacts()["penetration"].max().item())
    assert 0 < max(depth) < 1e-3  # measured: 0.58 mm (the law's g tc^2 with the smoothed activation)
    c = box.get_contacts()
    assert c["valid_mask"].sum().item() == 4  # the four bottom corners
    total = c["force"][c["valid_mask"]].sum(0)
    assert total[2].item() == pytest.approx(G, rel=1e-3) and total[:2].abs().max().item() < 1e-6


def _slide(v0, requires_grad=False, mu=0.5):
    """Distance a 10 cm box (1 kg) slides on the plane after being given v0 (m/s) along x."""
    scene = _scene(dt=2e-3, requires_grad=requires_grad)
    mat = gs.materials.Rigid(friction=mu)  # a pair uses the larger friction: set both
    box = scene.add_entity(gs.morphs.Box(size=(0.1, 0.1, 0.1), pos=(0, 0, 0.05)), material=mat)
    scene.add_entity(gs.morphs.Plane(), material=mat)
    scene.build()
    for _ in range(10):
        scene.step()
    x0 = box.get_pos()[0]
    e = torch.zeros(6, dtype=torch.float64)
    e[0] = 1.0
    box.set_dofs_velocity(v0 * e)
    for _ in range(225):  # stops after v0 / (mu g) = 0.41 s
        scene.step()
    return box.get_pos()[0] - x0, box


def test_sliding_box_stops_at_the_coulomb_distance_with_a_correct_gradient():
    mu, v = 0.5, 2.0
    v0 = torch.tensor(v, dtype=torch.float64, requires_grad=True)
    dist, box = _slide(v0, requires_grad=True, mu=mu)
    assert box.get_vel().norm().item() < 0.01  # stopped (rocks by ~1 mm/s after the stop)
    expect = v * v / (2 * mu * G)
    assert _plain(dist).item() == pytest.approx(expect, rel=0.1)  # measured: +0.65%
    dist.backward()
    eps = 1e-3
    plus, minus = (_plain(_slide(torch.tensor(v + d, dtype=torch.float64))[0]).item() for d in (eps, -eps))
    fd = (plus - minus) / (2 * eps)
    assert v0.grad.item() == pytest.approx(fd, rel=0.05)  # measured: 0.40888 vs 0.40888 (5e-9 relative)
    assert fd == pytest.approx(v / (mu * G), rel=0.1)


def test_rk4_also_rests_a_sphere():
    scene = _scene(dt=2e-3, integrator=gs.integrator.RK4)
    ball = scene.add_entity(gs.morphs.Sphere(radius=0.1, pos=(0, 0, 0.12)))
    scene.add_entity(gs.morphs.Plane())
    scene.build()
    for _ in range(120):
        scene.step()
    assert abs(ball.get_pos()[2].item() - 0.1) < 1e-3 and ball.get_vel().norm().item() < 1e-3


# ------------------------------------------------------------ robots on the floor
def test_humanoid_dropped_on_the_floor_settles():
    scene = _scene(dt=2e-3)  # the file's own timestep
    robot = scene.add_entity(gs.morphs.MJCF(file=str(torchrbd.models.path("humanoid", "mjcf"))))
    scene.add_entity(gs.morphs.Plane())
    scene.build()
    assert robot.get_pos()[2].item() == pytest.approx(1.15)  # soles 4 cm above the floor
    speed = []
    for _ in range(1500):  # 3 s
        scene.step()
        speed.append(robot.get_vel().norm().item())
    qpos, vel = _plain(robot.get_qpos()), _plain(robot.get_dofs_velocity())
    assert torch.isfinite(qpos).all() and torch.isfinite(vel).all()
    # settled: over the last 0.25 s the base moves slower than 5 cm/s, above the floor
    assert max(speed[-125:]) < 0.05 and robot.get_pos()[2].item() > 0
    c = robot.get_contacts()
    assert c["valid_mask"].any() and c["penetration"].max().item() < 0.01


def test_quadruped_stands_on_its_legs_under_the_default_pd():
    scene = _scene(dt=4e-3)
    robot = scene.add_entity(
        gs.morphs.URDF(file=str(torchrbd.models.path("quadruped")), pos=(0, 0, 0.45), euler=(3, 4, 0))
    )  # straight legs reach 0.42 m below the trunk: feet 1-3 cm above the floor, slightly tilted
    scene.add_entity(gs.morphs.Plane())
    scene.build()
    gap = -robot.get_contacts()["penetration"].max().item()
    assert 0.005 < gap < 0.03
    joints = list(range(6, robot.n_dofs))
    # default gains kp = 100 N m/rad, kv = 10 N m s/rad (Genesis's) holding every joint at 0
    robot.control_dofs_position(torch.zeros(len(joints)), dofs_idx_local=joints)
    heights, tilts = [], []
    for _ in range(1250):  # 5 s
        scene.step()
        heights.append(robot.get_pos()[2].item())
        tilts.append(_tilt(robot.get_quat()))
    assert min(heights[100:]) > 0.3 and max(tilts) < 0.2  # measured: 0.418 m, tilt <= 0.09 rad
    c = robot.get_contacts()
    on_floor = {link for link, v in zip(c["link_a"], c["valid_mask"].tolist()) if v}
    assert on_floor == {"FL_foot", "FR_foot", "RL_foot", "RR_foot"}
    assert set(c["link_b"]) == {"plane"}


# ------------------------------------------------------------ the force mapping
def _penetrating_quadruped(friction=None, **rigid):
    scene = _scene(dt=1e-3, requires_grad=True, **rigid)
    mat = gs.materials.Rigid(friction=friction) if friction is not None else None
    robot = scene.add_entity(
        gs.morphs.URDF(file=str(torchrbd.models.path("quadruped")), pos=(0.1, -0.2, 0.38), euler=(4, -6, 20)),
        material=mat,
    )
    scene.add_entity(gs.morphs.Plane(), material=mat)
    scene.build()
    g = torch.Generator().manual_seed(3)
    q = 0.2 * torch.randn(robot.n_dofs - 6, generator=g, dtype=torch.float64)
    robot.set_dofs_position(q, dofs_idx_local=list(range(6, robot.n_dofs)))
    robot.set_dofs_velocity(0.3 * torch.randn(robot.n_dofs, generator=g, dtype=torch.float64))
    return scene, robot


@pytest.mark.parametrize("integrator", ["Euler", "RK4"])
def test_computing_every_contact_row_gives_the_same_steps(monkeypatch, integrator):
    """Off the CPU a step computes every contact and joint row instead of dropping those
    that cannot push, and the joint-limit correction even when no joint is past a limit
    (``dynamics.compacts``: choosing them would synchronise the
    device). Forced here on the CPU, the penetrating quadruped (some feet touching,
    others not) takes the same 20 steps, and the gradient of its final state with
    respect to a joint torque is the same, as with the rows dropped."""
    def run():
        scene, robot = _penetrating_quadruped(integrator=getattr(gs.integrator, integrator))
        torque = torch.full((robot.n_dofs - 6,), 0.5, dtype=torch.float64, requires_grad=True)
        touching = int(robot.get_contacts()["valid_mask"].sum())
        for _ in range(20):
            robot.control_dofs_force(torque, dofs_idx_local=list(range(6, robot.n_dofs)))
            scene.step()
        qpos, vel = robot.get_qpos(), robot.get_dofs_velocity()
        (grad,) = torch.autograd.grad(qpos[2] + vel.square().sum(), torque)
        return _plain(qpos).detach(), _plain(vel).detach(), _plain(grad), (touching, scene._contact_stage.n_contacts)

    dropped = run()
    monkeypatch.setattr(dynamics, "compacts", lambda x: False)
    every = run()
    touching, contacts = dropped[3]
    assert 0 < touching < contacts  # at the start, some of the contact points touch, the others not
    for a, b in zip(every[:3], dropped[:3]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def _stage(scene, implicit=False):
    ents = scene._dynamic()
    return scene._contact_terms([e._statics() for e in ents], [e._control() for e in ents],
                                [(e._qpos, e._vel) for e in ents], implicit)


def test_generalized_force_is_the_sum_of_link_jacobian_transposes():
    scene, robot = _penetrating_quadruped()
    res = _stage(scene)
    c = robot.get_contacts()
    assert c["valid_mask"].sum() == 7  # three feet and a calf (three rim points) touch
    kd = robot._kd
    qpos = _plain(robot.get_qpos()).detach()
    from torchrbd.spatial import homogeneous, quat_to_matrix, skew

    H = homogeneous(quat_to_matrix(qpos[3:7]), qpos[:3])
    tau = torch.zeros(robot.n_dofs, dtype=torch.float64)
    for link, x, f in zip(c["link_a"], _plain(c["position"]).detach(), _plain(c["force"]).detach()):
        J = kd.jacobian(link, H, qpos[7:])  # MIXED: [velocity of the link origin; angular velocity]
        o = kd.forward_kinematics(link, H, qpos[7:])[:3, 3]
        J_point = J[:3] - skew(x - o) @ J[3:]
        tau = tau + J_point.T @ f
    assert tau.abs().max() > 1.0
    torch.testing.assert_close(res.generalized[0][0].detach(), tau, rtol=1e-10, atol=1e-9)


def test_implicit_damping_is_minus_the_velocity_derivative_without_friction():
    scene, robot = _penetrating_quadruped(friction=0.0)
    ents = scene._dynamic()
    st, ctrl = [e._statics() for e in ents], [e._control() for e in ents]
    qpos, vel = robot._qpos.detach(), robot._vel.detach().clone().requires_grad_(True)
    res = scene._contact_terms(st, ctrl, [(qpos, vel)], implicit=True)
    tau = res.generalized[0][0]
    rows = [torch.autograd.grad(tau[i], vel, retain_graph=True)[0][0] for i in range(robot.n_dofs)]
    dtau = torch.stack(rows)
    assert res.damping[0][0].abs().max() > 100
    torch.testing.assert_close(res.damping[0][0].detach(), -dtau, rtol=1e-9, atol=1e-7)


def _point_jacobians(robot, positions, links):
    """(K, 3, nv) MIXED point Jacobians of the contact points, from KinDynComputations."""
    from torchrbd.spatial import homogeneous, quat_to_matrix, skew

    kd, qpos = robot._kd, _plain(robot.get_qpos()).detach()
    H = homogeneous(quat_to_matrix(qpos[3:7]), qpos[:3])
    out = []
    for link, x in zip(links, positions):
        J = kd.jacobian(link, H, qpos[7:])
        o = kd.forward_kinematics(link, H, qpos[7:])[:3, 3]
        out.append(J[:3] - skew(x - o) @ J[3:])
    return torch.stack(out)


def test_implicit_damping_is_the_sum_of_point_jacobian_products_with_friction():
    scene, robot = _penetrating_quadruped()
    res = _stage(scene, implicit=True)
    c = robot.get_contacts()
    assert all(a_side == link for a_side, link in zip(scene._contact_stage.link_a, c["link_a"]))  # robot is A
    J = _point_jacobians(robot, _plain(c["position"]).detach(), c["link_a"])
    vel_a = (J @ robot._vel[0].detach())[None]
    mass = robot._kd.model.link_mass.sum()
    from torchrbd.sim.contact import contact_forces_and_gains

    _, c_n, c_t = contact_forces_and_gains(res.contacts, vel_a, torch.zeros_like(vel_a), scene._contact_stage.params, mass)
    n = res.contacts.normal[0]
    nn = n[:, :, None] * n[:, None, :]
    D = c_n[0, :, None, None] * nn + c_t[0, :, None, None] * (torch.eye(3, dtype=n.dtype) - nn)
    assert c_t.max() > 100 and (c_n - c_t).abs().max() > 100  # both parts of D count
    expected = torch.einsum("kin,kij,kjm->nm", J, D, J)
    torch.testing.assert_close(res.damping[0][0].detach(), expected, rtol=1e-10, atol=1e-8)


def test_euler_acceleration_folds_the_contact_terms_into_the_mass_matrix():
    import dataclasses

    from torchrbd.sim import dynamics as dyn

    scene, robot = _penetrating_quadruped()
    res = _stage(scene, implicit=True)
    st = dataclasses.replace(robot._statics(), limited=False)
    ctrl, qpos, vel, h = robot._control(), robot._qpos.detach(), robot._vel.detach(), 1e-3
    acc = dyn.acceleration(st, ctrl, qpos, vel, h, res.loads[0])
    R, p, quat = dyn.base_pose(st, qpos, None)
    q, qd = dyn.joints(st, qpos), dyn.joints(st, vel)
    M, bias = dyn.mass_and_bias(robot._kd, R, p, q, vel[:, :6], qd, True)
    tau, kv = dyn.control_force(st, ctrl, qpos, vel, quat)
    tau = tau + torch.nn.functional.pad(dyn.passive_force(st, q, qd), (6, 0)) + res.generalized[0]
    damping = torch.nn.functional.pad(st.damping, (6, 0)) + kv
    M = M + torch.diag_embed(h * damping) + h * res.damping[0]
    torch.testing.assert_close(acc.detach(), torch.linalg.solve(M, tau - bias).detach(), rtol=1e-9, atol=1e-9)


def test_two_moving_bodies_match_the_batch_first_contact_law():
    """A ball pressed into a box resting on the floor, both moving, two environments: the
    stage's contacts and forces (batch-last, only the contacts within the margin) equal
    contact.contact_wrenches on the slot poses; each body's generalized force is its
    wrench; with friction 0 its damping is minus the derivative by its own velocity
    (the coupling to the other moving body stays explicit)."""
    from torchrbd.sim.contact import contact_wrenches
    from torchrbd.spatial import quat_to_matrix

    scene = _scene(dt=1e-3)
    mat = gs.materials.Rigid(friction=0.0)
    box = scene.add_entity(gs.morphs.Box(size=(0.2, 0.1, 0.1), pos=(0, 0, 0.045), euler=(3, -2, 10)), material=mat)
    ball = scene.add_entity(gs.morphs.Sphere(radius=0.05, pos=(0.02, 0.01, 0.13)), material=mat)
    scene.add_entity(gs.morphs.Plane(), material=mat)
    scene.build(n_envs=2)
    g = torch.Generator().manual_seed(4)
    box.set_dofs_velocity(0.3 * torch.randn(2, 6, generator=g, dtype=torch.float64))
    ball.set_dofs_velocity(0.3 * torch.randn(2, 6, generator=g, dtype=torch.float64))
    ents = scene._dynamic()
    qpos = [e._qpos.detach() for e in ents]
    vel = [e._vel.detach().clone().requires_grad_(True) for e in ents]
    res = scene._contact_terms([e._statics() for e in ents], [e._control() for e in ents], list(zip(qpos, vel)), True)

    R = torch.stack([quat_to_matrix(q[:, 3:7]) for q in qpos] + [torch.eye(3, dtype=torch.float64).expand(2, 3, 3)], 1)
    p = torch.stack([q[:, :3] for q in qpos] + [torch.zeros(2, 3, dtype=torch.float64)], 1)
    w = torch.stack([v[:, 3:6] for v in vel] + [torch.zeros(2, 3, dtype=torch.float64)], 1)
    v_origin = torch.stack([v[:, :3] for v in vel] + [torch.zeros(2, 3, dtype=torch.float64)], 1) - torch.linalg.cross(w, p)
    mass = torch.stack([e._kd.model.link_mass.sum() for e in ents] + [torch.tensor(torch.inf, dtype=torch.float64)])
    stage = scene._contact_stage
    wrench, contacts, forces = contact_wrenches(stage.plan, R, p, v_origin, w, stage.params, mass)
    near = (contacts.depth >= -stage.params.margin).any(0)
    assert 0 < near.sum() < stage.n_contacts and (contacts.depth[:, stage.entity_b == ball.idx] > 0).all()
    for x, y in ((res.contacts.pos, contacts.pos), (res.contacts.depth, contacts.depth), (res.forces, forces)):
        torch.testing.assert_close(x.detach(), y.detach(), rtol=1e-12, atol=1e-12)
    for d, e in enumerate(ents):
        F, tau_origin = wrench[:, d, :3], wrench[:, d, 3:]
        expected = torch.cat([F, tau_origin - torch.linalg.cross(p[:, d], F)], -1)  # torque about the body origin
        torch.testing.assert_close(res.generalized[d].detach(), expected.detach(), rtol=1e-12, atol=1e-12)
        for env in range(2):
            rows = [torch.autograd.grad(res.generalized[d][env, i], vel[d], retain_graph=True)[0][env] for i in range(6)]
            torch.testing.assert_close(res.damping[d][env].detach(), -torch.stack(rows), rtol=1e-9, atol=1e-9)
    assert res.damping[1].abs().max() > 100


def test_damping_parameters_give_p_transpose_d_p():
    g = torch.Generator().manual_seed(0)
    r, n = torch.randn(5, 3, 2, generator=g, dtype=torch.float64), torch.randn(5, 3, 2, generator=g, dtype=torch.float64)
    n = n / n.norm(dim=1, keepdim=True)
    a, b = torch.rand(5, 1, 2, generator=g, dtype=torch.float64), torch.randn(5, 1, 2, generator=g, dtype=torch.float64)
    params = contact_stage._damping_parameters(r, n, a, b)
    lam = params.unflatten(1, (6, 6))  # row-major 6 x 6
    S = torch.randn(5, 6, 2, generator=g, dtype=torch.float64)
    torch.testing.assert_close(
        contact_stage._matrix_times(params, S), torch.einsum("kijb,kjb->kib", lam, S), rtol=1e-12, atol=1e-12
    )
    from torchrbd.spatial import skew

    for k in range(5):
        for e in range(2):
            P = torch.cat([torch.eye(3, dtype=torch.float64), -skew(r[k, :, e])], 1)
            D = a[k, 0, e] * torch.eye(3, dtype=torch.float64) + b[k, 0, e] * torch.outer(n[k, :, e], n[k, :, e])
            torch.testing.assert_close(lam[k, :, :, e], P.T @ D @ P, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------ batching, rollout, options
def _boxes(n_envs, requires_grad=False):
    """A box falling on the plane and a ball falling on the box."""
    scene = _scene(dt=2e-3, requires_grad=requires_grad)
    mat = gs.materials.Rigid(friction=0.6)
    box = scene.add_entity(gs.morphs.Box(size=(0.2, 0.1, 0.1), pos=(0, 0, 0.2)), material=mat)
    ball = scene.add_entity(gs.morphs.Sphere(radius=0.05, pos=(0, 0, 0.3)))
    scene.add_entity(gs.morphs.Plane())
    scene.build(n_envs=n_envs)
    return scene, box, ball


def test_n_envs_batched_contacts_equal_single_runs():
    g = torch.Generator().manual_seed(0)
    v_box = 0.2 * torch.randn(3, 6, generator=g, dtype=torch.float64)
    v_ball = 0.1 * torch.randn(3, 6, generator=g, dtype=torch.float64)
    scene, box, ball = _boxes(3)
    box.set_dofs_velocity(v_box)
    ball.set_dofs_velocity(v_ball)
    touched = torch.zeros(3, dtype=torch.bool)
    for t in range(120):
        scene.step()
        if t % 5 == 0:
            touched |= _plain(box.get_contacts(with_entity=ball)["valid_mask"]).any(-1)
    assert touched.sum() >= 2  # the ball hit the box (measured: at 0.18 s in envs 0 and 2)
    with_ball = box.get_contacts(with_entity=ball)
    assert set(with_ball["link_b"]) == {"sphere"} and with_ball["force"].shape == (3, 1, 3)
    assert box.get_contacts()["valid_mask"].any(-1).all()  # every box is on the floor
    # batch-first and contiguous, not views of the stage's batch-last memory
    assert all(v.is_contiguous() for v in box.get_contacts().values() if isinstance(v, torch.Tensor))
    for i in range(3):
        single, b, s = _boxes(0)
        b.set_dofs_velocity(v_box[i])
        s.set_dofs_velocity(v_ball[i])
        for _ in range(120):
            single.step()
        torch.testing.assert_close(_plain(box.get_qpos())[i], _plain(b.get_qpos()), rtol=1e-9, atol=1e-10)
        torch.testing.assert_close(
            _plain(ball.get_dofs_velocity())[i], _plain(s.get_dofs_velocity()), rtol=1e-9, atol=1e-9
        )


def test_1024_environments_step_with_contacts():
    scene, box, ball = _boxes(1024)
    g = torch.Generator().manual_seed(1)
    pos = torch.zeros(1024, 3, dtype=torch.float64)
    pos[:, 2] = 0.045 + 0.01 * torch.rand(1024, generator=g, dtype=torch.float64)  # touching or just above
    box.set_pos(pos)
    scene.step()
    q = _plain(box.get_qpos())
    assert q.shape == (1024, 7) and torch.isfinite(q).all() and torch.isfinite(_plain(ball.get_qpos())).all()
    c = box.get_contacts()
    assert c["valid_mask"].shape[0] == 1024 and c["valid_mask"].any()


def test_checkpointed_rollout_matches_the_step_loop_with_contacts():
    T = 30
    out = {}
    for ck in (None, 10):
        scene, box, ball = _boxes(0, requires_grad=True)
        box.set_pos([0.0, 0.0, 0.052])
        u = (0.5 * torch.ones(T, 6, dtype=torch.float64)).requires_grad_(True)
        qs, vs = scene.rollout({box: u, ball: torch.zeros(T, 6, dtype=torch.float64)}, checkpoint_every=ck)[box]
        loss = _plain(qs[-1]).pow(2).sum() + _plain(vs).pow(2).sum()
        loss.backward()
        out[ck] = (loss.detach(), u.grad.clone())
    assert box.get_contacts()["valid_mask"].any()
    torch.testing.assert_close(out[None][0], out[10][0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out[None][1], out[10][1], rtol=1e-9, atol=1e-12)


def test_collision_options_and_exclusions(tmp_path):
    # collisions off: no stage, free fall through the plane
    scene = _scene(enable_collision=False)
    ball = scene.add_entity(gs.morphs.Sphere(radius=0.1, pos=(0, 0, 0.05)))
    scene.add_entity(gs.morphs.Plane())
    scene.build()
    assert scene._contact_forces([ball._statics()], [ball._control()], [(ball._qpos, ball._vel)]) is None
    assert ball.get_contacts()["position"].shape == (0, 3)
    # MJCF: contype/conaffinity and <contact><exclude>; a floor in the file is static
    xml = tmp_path / "m.xml"
    xml.write_text("""<mujoco><worldbody>
      <geom name="floor" type="plane" size="5 5 0.1"/>
      <body name="a" pos="0 0 0.09"><freejoint/><geom name="ga" type="sphere" size="0.1"/>
        <body name="b" pos="0.3 0 0"><joint type="hinge" axis="0 1 0"/><geom name="gb" type="sphere" size="0.1"/>
          <body name="c" pos="0.3 0 0"><joint type="hinge" axis="0 1 0"/>
            <geom name="gc" type="sphere" size="0.1"/></body>
        </body>
        <body name="d" pos="-0.3 0 0"><joint type="hinge" axis="0 1 0"/>
          <geom name="gd" type="sphere" size="0.1" contype="2" conaffinity="2"/></body>
      </body></worldbody>
      <contact><exclude body1="world" body2="b"/></contact></mujoco>""")
    for self_collision in (False, True):
        scene = _scene(enable_self_collision=self_collision)
        robot = scene.add_entity(gs.morphs.MJCF(file=str(xml)))
        scene.build()
        stage = scene._contact_stage
        pairs = {tuple(sorted((a, b))) for a, b in zip(stage.geom_a, stage.geom_b)}
        expect = {("floor", "ga"), ("floor", "gc")}  # gd: contype 2 vs the floor's 1; b excluded
        if self_collision:
            expect.add(("ga", "gc"))  # a-b and b-c are parent/child; d does not match
        assert pairs == expect
        c = robot.get_contacts()
        assert set(c["link_b"]) == {"world"} | ({"a", "c"} if self_collision else set())
        assert (c["entity_b"] == -1).sum() == 2
    assert contact_stage.ContactStage.build(scene) is not None
    # the root body of a fixed base is immovable: no pairs with the plane
    scene = _scene()
    scene.add_entity(gs.morphs.URDF(file=str(torchrbd.models.path("quadruped")), fixed=True))
    scene.add_entity(gs.morphs.Plane())
    scene.build()
    geoms = set(scene._contact_stage.geom_a) | set(scene._contact_stage.geom_b)
    assert "trunk_geom" not in geoms and {"FL_foot", "FL_hip_geom", "plane_geom"} <= geoms
