"""Contact detection (torchrbd.sim.collision): analytic kernels, MuJoCo cross-check,
gradients (incl. at zero distance), fixed shapes across batches, pair filtering."""

import math

import pytest
import torch

from torchrbd.model.model import Geom, GeomType
from torchrbd.sim.collision import (
    CollisionGeom,
    ContactPlan,
    detect,
    geom_poses,
    geoms_from_model,
    ground_plane,
    model_slot_parent,
)

F64 = dict(dtype=torch.float64)
I3 = torch.eye(3, **F64)
Z3 = torch.zeros(3, **F64)


def rotvec(w) -> torch.Tensor:
    """Rotation matrix of a rotation vector (Rodrigues), differentiable for w != 0."""
    w = torch.as_tensor(w, **F64)
    th = torch.sqrt((w * w).sum())
    if float(th.detach()) == 0.0:
        return I3.clone()
    k = w / th
    zero = torch.zeros_like(th)
    K = torch.stack([torch.stack([zero, -k[2], k[1]]), torch.stack([k[2], zero, -k[0]]), torch.stack([-k[1], k[0], zero])])
    return I3 + torch.sin(th) * K + (1 - torch.cos(th)) * K @ K


def geom(t, size, name="g", **kw) -> Geom:
    return Geom(name, "link", t, size, I3, Z3, **kw)


def pair_plan(ga: Geom, gb: Geom | None = None, **kw):
    """Plan of ``ga`` on slot 0 against ``gb`` on slot 1 (or the ground plane)."""
    other = ground_plane() if gb is None else CollisionGeom(gb, 1, entity=2)
    return ContactPlan.build([CollisionGeom(ga, 0, entity=1), other], **kw)


def poses(*pairs):
    """Stack (R, p) of slots."""
    R = torch.stack([torch.as_tensor(r, **F64) for r, _ in pairs])
    p = torch.stack([torch.as_tensor(q, **F64) for _, q in pairs])
    return R, p


SPHERE = geom(GeomType.SPHERE, (0.1,))
BOX = geom(GeomType.BOX, (0.1, 0.2, 0.3))
CAPSULE = geom(GeomType.CAPSULE, (0.05, 0.2))
CYLINDER = geom(GeomType.CYLINDER, (0.1, 0.2))
BOX_MESH_VERTS = torch.tensor([[x, y, z] for x in (-0.1, 0.1) for y in (-0.2, 0.2) for z in (-0.3, 0.3)], **F64)
MESH = geom(GeomType.MESH, (), vertices=BOX_MESH_VERTS)


# ------------------------------------------------------------ against the plane


@pytest.mark.parametrize("z", [0.05, 0.1, 0.3])
def test_sphere_plane_depth_normal_pos(z):
    plan = pair_plan(SPHERE)
    c = detect(plan, I3[None], torch.tensor([[0.3, -0.2, z]], **F64))
    assert c.depth.shape == (1,)
    assert c.depth.item() == pytest.approx(0.1 - z)
    assert torch.allclose(c.normal[0], torch.tensor([0.0, 0.0, 1.0], **F64))
    assert torch.allclose(c.pos[0], torch.tensor([0.3, -0.2, (z - 0.1) / 2], **F64))
    assert c.slot_a.tolist() == [0] and c.slot_b.tolist() == [-1]


def test_tilted_static_plane():
    Rp = rotvec([0.3, 0.0, 0.0])
    ground = CollisionGeom(geom(GeomType.PLANE, ()), -1, Rp, torch.tensor([0.0, 0.0, 0.5], **F64), entity=0)
    plan = ContactPlan.build([ground, CollisionGeom(SPHERE, 0, entity=1)])
    n = Rp[:, 2]
    centre = torch.tensor([0.0, 0.0, 0.5], **F64) + 0.07 * n
    c = detect(plan, I3[None], centre[None])
    assert c.depth.item() == pytest.approx(0.03)
    assert torch.allclose(c.normal[0], n)


def test_points_on_a_moving_plane_match_the_generic_kernel():
    """The batch-last points-vs-plane path of detect gives the generic kernel's contacts
    and gradients, for a tilted plane on a moving slot and leading dims (2, 3)."""
    from torchrbd.sim import collision

    plan = pair_plan(CAPSULE, geom(GeomType.PLANE, ()))
    g = torch.Generator().manual_seed(0)
    R = torch.stack([rotvec(0.4 * torch.randn(3, generator=g, **F64)) for _ in range(12)]).reshape(2, 3, 2, 3, 3)
    p = (0.2 * torch.randn(2, 3, 2, 3, generator=g, **F64)).requires_grad_(True)
    fast = detect(plan, R, p)
    Rg, pg = geom_poses(plan, R, p)
    grp = plan.groups[0]
    Ra, pa, Rb, pb = Rg[..., grp.geom_a, :, :], pg[..., grp.geom_a, :], Rg[..., grp.geom_b, :, :], pg[..., grp.geom_b, :]
    pos, normal, depth = collision._part_points(grp, "a", Ra, pa, Rb, pb)
    torch.testing.assert_close(fast.pos, pos.reshape(2, 3, 2, 3), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fast.normal, normal.reshape(2, 3, 2, 3), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fast.depth, depth.reshape(2, 3, 2), rtol=1e-12, atol=1e-12)
    (g_fast,) = torch.autograd.grad((fast.depth ** 2).sum() + fast.pos.sum(), p)
    (g_ref,) = torch.autograd.grad((depth ** 2).sum() + pos.sum(), p)
    torch.testing.assert_close(g_fast, g_ref, rtol=1e-12, atol=1e-12)


def _generic_contacts(plan, R, p):
    """Every group of ``plan`` through its batch-first kernels (no points-vs-plane fast
    path), in contact order: (pos, normal, depth)."""
    from torchrbd.sim import collision

    Rg, pg = geom_poses(plan, R, p)
    out = [], [], []
    for g in plan.groups:
        Ra, pa, Rb, pb = Rg[..., g.geom_a, :, :], pg[..., g.geom_a, :], Rg[..., g.geom_b, :, :], pg[..., g.geom_b, :]
        parts = [collision._PARTS[part](g, Ra, pa, Rb, pb) for part in g.parts]
        for i, x in enumerate(out):
            x.append(torch.cat([o[i] for o in parts], -2 if i < 2 else -1).flatten(-3 if i < 2 else -2, -2 if i < 2 else -1))
    return tuple(torch.cat(x, -2 if i < 2 else -1) for i, x in enumerate(out))


def test_merged_plane_points_match_the_generic_kernels():
    """detect runs the points-vs-plane groups of several shapes and planes (a static
    ground and a tilted plane on a moving slot) as one batch-last block and puts them
    back among the other groups' contacts: same contacts and gradients as the generic
    kernels. A static sphere against the moving plane keeps the generic path."""
    from torchrbd.sim import collision

    tilted = CollisionGeom(geom(GeomType.PLANE, (), name="tilted"), 3, rotvec([0.2, -0.1, 0.0]), torch.tensor([0.1, 0.0, -0.05], **F64), entity=4)
    world_ball = CollisionGeom(geom(GeomType.SPHERE, (0.08,), name="world_ball"), -1, I3, torch.tensor([0.5, 0.2, 0.1], **F64), entity=5)
    gs = [CollisionGeom(BOX, 0, entity=1), ground_plane(), CollisionGeom(SPHERE, 1, entity=2),
          CollisionGeom(CAPSULE, 2, rotvec([0.0, 0.7, 0.0]), torch.tensor([0.0, 0.1, 0.0], **F64), entity=3), tilted, world_ball]
    plan = ContactPlan.build(gs)
    assert plan.on_plane is not None and plan.order is not None and plan.on_plane.plane_slot.numel() == 2
    assert len(plan.on_plane.groups) < len([g for g in plan.groups if collision._on_plane(g)])  # the static ball
    g = torch.Generator().manual_seed(1)
    R = torch.stack([rotvec(0.5 * torch.randn(3, generator=g, **F64)) for _ in range(5 * 4)]).reshape(5, 4, 3, 3)
    p = (0.15 * torch.randn(5, 4, 3, generator=g, **F64)).requires_grad_(True)
    c = detect(plan, R, p)
    ref = _generic_contacts(plan, R, p)
    for x, y in zip((c.pos, c.normal, c.depth), ref):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)
    assert (c.depth > 0).any() and (c.depth < 0).any()
    (g_fast,) = torch.autograd.grad((c.depth ** 2).sum() + (c.pos * c.normal).sum(), p)
    (g_ref,) = torch.autograd.grad((ref[2] ** 2).sum() + (ref[0] * ref[1]).sum(), p)
    torch.testing.assert_close(g_fast, g_ref, rtol=1e-12, atol=1e-12)


def test_plane_depths_without_placing_the_points_match_all_contacts():
    """Points on a single plane: detect_last gives the depths without placing the points
    and places only the rows asked for; same values and gradients as all contacts."""
    from torchrbd.sim import collision

    gs = [CollisionGeom(BOX, 0, entity=1), CollisionGeom(SPHERE, 1, entity=1),  # one entity: no box-sphere pair
          CollisionGeom(CAPSULE, 1, rotvec([0.3, 0.0, 0.0]), torch.tensor([0.0, 0.2, 0.0], **F64), entity=1),
          CollisionGeom(geom(GeomType.PLANE, ()), 2, rotvec([0.1, 0.2, 0.0]), torch.tensor([0.0, 0.0, 0.02], **F64), entity=3)]
    plan = ContactPlan.build(gs)
    g = torch.Generator().manual_seed(2)
    R = torch.stack([rotvec(0.5 * torch.randn(3, generator=g, **F64)) for _ in range(4 * 3)]).reshape(4, 3, 3, 3)
    R = R.permute(1, 2, 3, 0).contiguous().requires_grad_(True)  # (S, 3, 3, N) batch-last
    p = (0.15 * torch.randn(3, 3, 4, generator=g, **F64)).requires_grad_(True)
    det = collision.detect_last(plan, R, p)
    assert det.full is None
    full = collision._all_contacts(plan, R, p)
    rows = torch.tensor([7, 0, 9])
    for x, y in zip(det.rows(rows), full):
        torch.testing.assert_close(x, y.index_select(0, rows), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(det.depth, full[2], rtol=1e-12, atol=1e-12)
    grads = [torch.autograd.grad((d ** 2).sum(), (R, p)) for d in (det.depth, full[2])]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_box_plane_rotated():
    th = 0.4  # about x: the lowest corners are at -(b sin + c cos)
    b, cz = 0.2, 0.3
    low = b * math.sin(th) + cz * math.cos(th)
    plan = pair_plan(BOX)
    c = detect(plan, rotvec([th, 0, 0])[None], torch.tensor([[0.0, 0.0, low - 0.01]], **F64))
    assert c.depth.shape == (8,)
    assert c.depth.max().item() == pytest.approx(0.01)
    assert int((c.depth > 0).sum()) == 2  # the two corners of the lowest edge
    assert torch.allclose(c.normal, torch.tensor([0.0, 0.0, 1.0], **F64).expand(8, 3))


def test_capsule_plane_tilted():
    th = 0.5  # tilt about y
    plan = pair_plan(CAPSULE)
    zc = 0.2 * math.cos(th) + 0.05 - 0.02
    c = detect(plan, rotvec([0, th, 0])[None], torch.tensor([[0.0, 0.0, zc]], **F64))
    assert c.depth.shape == (2,)
    assert c.depth.max().item() == pytest.approx(0.02)
    assert c.depth.min().item() == pytest.approx(0.02 - 2 * 0.2 * math.cos(th))


def test_cylinder_plane_upright_lying_tilted():
    plan = pair_plan(CYLINDER)  # r = 0.1, half length 0.2
    c = detect(plan, I3[None], torch.tensor([[0.0, 0.0, 0.19]], **F64))  # upright
    assert c.depth.shape == (6,)
    assert sorted(c.depth.tolist())[-3:] == pytest.approx([0.01] * 3)
    bottom = c.pos[c.depth > 0]
    assert torch.allclose(bottom.mean(0)[:2], torch.zeros(2, **F64), atol=1e-12)  # a centred triangle
    c = detect(plan, rotvec([math.pi / 2, 0, 0])[None], torch.tensor([[0.0, 0.0, 0.09]], **F64))  # lying
    assert int((c.depth > 0).sum()) == 2
    assert c.depth.max().item() == pytest.approx(0.01)
    th = 0.3  # tilted: deepest rim point at zc - h cos - r sin
    zc = 0.2 * math.cos(th) + 0.1 * math.sin(th) - 0.005
    c = detect(plan, rotvec([th, 0, 0])[None], torch.tensor([[0.0, 0.0, zc]], **F64))
    assert c.depth.max().item() == pytest.approx(0.005)


def test_mesh_plane_matches_box_and_caps_hull():
    R, p = rotvec([0.2, -0.4, 0.1])[None], torch.tensor([[0.0, 0.0, 0.25]], **F64)
    box = detect(pair_plan(BOX), R, p).depth
    mesh = detect(pair_plan(MESH), R, p).depth
    assert torch.allclose(box.sort().values, mesh.sort().values)
    torch.manual_seed(0)
    cloud = torch.nn.functional.normalize(torch.randn(500, 3, **F64), dim=1) * 0.1  # all on the hull
    plan = pair_plan(geom(GeomType.MESH, (), vertices=cloud))
    c = detect(plan, I3[None], torch.tensor([[0.0, 0.0, 0.095]], **F64))
    assert c.depth.shape == (64,)
    assert 0.0 < c.depth.max().item() <= 0.005 + 1e-12


def test_mesh_scale_from_size():
    plan = pair_plan(geom(GeomType.MESH, (2.0, 2.0, 2.0), vertices=BOX_MESH_VERTS))
    c = detect(plan, I3[None], torch.tensor([[0.0, 0.0, 0.55]], **F64))
    assert c.depth.max().item() == pytest.approx(0.05)


def test_mesh_from_file(tmp_path):
    trimesh = pytest.importorskip("trimesh")
    path = tmp_path / "box.stl"
    trimesh.creation.box(extents=(0.2, 0.4, 0.6)).export(path)
    from_file = geom(GeomType.MESH, (1.0, 1.0, 1.0), mesh_file=str(path))
    R, p = rotvec([0.2, -0.4, 0.1])[None], torch.tensor([[0.0, 0.0, 0.25]], **F64)
    box = detect(pair_plan(BOX), R, p).depth
    assert torch.allclose(box.sort().values, detect(pair_plan(from_file), R, p).depth.sort().values)


# --------------------------------------------------------- between primitives


def test_sphere_sphere():
    big = geom(GeomType.SPHERE, (0.2,))
    plan = pair_plan(SPHERE, big)  # same type: the first geom is A
    R, p = poses((I3, [0.25, 0.0, 0.0]), (I3, [0.0, 0.0, 0.0]))
    c = detect(plan, R, p)
    assert c.depth.item() == pytest.approx(0.05)
    assert torch.allclose(c.normal[0], torch.tensor([1.0, 0.0, 0.0], **F64))
    assert torch.allclose(c.pos[0], torch.tensor([0.175, 0.0, 0.0], **F64))


def test_capsule_capsule_crossed_and_parallel():
    plan = pair_plan(CAPSULE, CAPSULE)  # r = 0.05, half length 0.2
    along_x, along_y = rotvec([0, math.pi / 2, 0]), rotvec([math.pi / 2, 0, 0])
    c = detect(plan, *poses((along_x, [0.0, 0.0, 0.08]), (along_y, [0.0, 0.0, 0.0])))
    assert c.depth.item() == pytest.approx(0.02)
    assert torch.allclose(c.normal[0], torch.tensor([0.0, 0.0, 1.0], **F64))
    assert torch.allclose(c.pos[0], torch.tensor([0.0, 0.0, 0.04], **F64))
    # crossed but the closest point is an end of A (A shifted along its axis)
    c = detect(plan, *poses((along_x, [0.3, 0.0, 0.08]), (along_y, [0.0, 0.0, 0.0])))
    assert c.depth.item() == pytest.approx(0.1 - math.hypot(0.1, 0.08))
    # parallel, overlapping on x in [-0.1, 0.2]: contact at the overlap's middle
    c = detect(plan, *poses((along_x, [0.1, 0.09, 0.0]), (along_x, [-0.1, 0.0, 0.0])))
    assert c.depth.item() == pytest.approx(0.01)
    assert torch.allclose(c.normal[0], torch.tensor([0.0, 1.0, 0.0], **F64))
    assert torch.allclose(c.pos[0], torch.tensor([0.0, 0.045, 0.0], **F64))


def test_sphere_capsule():
    plan = pair_plan(CAPSULE, SPHERE)
    c = detect(plan, *poses((I3, [0.0, 0.0, 0.0]), (I3, [0.12, 0.0, 0.1])))
    assert c.depth.item() == pytest.approx(0.03)
    assert torch.allclose(c.normal[0], torch.tensor([-1.0, 0.0, 0.0], **F64))  # from the sphere to A


@pytest.mark.parametrize(
    "centre, depth, normal",  # normal: the box's outward normal, box frame
    [
        ([0.0, 0.0, 0.35], 0.05, [0, 0, 1]),  # above the top face
        ([0.15, 0.25, 0.0], 0.1 - math.hypot(0.05, 0.05), [1, 1, 0]),  # beside a vertical edge
        ([0.0, 0.15, 0.0], 0.15, [0, 1, 0]),  # centre inside: nearest face +y, 0.05 below it
    ],
)
def test_sphere_box(centre, depth, normal):
    plan = pair_plan(BOX, SPHERE)  # normal from the sphere (B) to the box (A)
    Rb = rotvec([0.1, 0.2, 0.3])
    c = detect(plan, *poses((Rb, [1.0, 2.0, 3.0]), (I3, Rb @ torch.tensor(centre, **F64) + torch.tensor([1.0, 2.0, 3.0], **F64))))
    assert c.depth.item() == pytest.approx(depth)
    n = -Rb @ torch.nn.functional.normalize(torch.tensor(normal, **F64), dim=0)
    assert torch.allclose(c.normal[0], n)


def test_box_box_corners_and_edges():
    cube = geom(GeomType.BOX, (0.1, 0.1, 0.1))
    plan = pair_plan(cube, cube)
    up = torch.tensor([0.0, 0.0, 1.0], **F64)
    # a smaller box A sunk 1 cm into B's top face: A's bottom corners are inside B
    small = geom(GeomType.BOX, (0.05, 0.05, 0.05))
    c = detect(pair_plan(small, cube), *poses((rotvec([0, 0, 0.3]), [0.0, 0.0, 0.14]), (I3, Z3)))
    assert c.depth.shape == (40,)  # 8 + 8 corners, 12 + 12 edges
    assert c.depth[:8].max().item() == pytest.approx(0.01) and int((c.depth[:8] > 0).sum()) == 4
    assert torch.allclose(c.normal[c.depth > 0], up.expand(int((c.depth > 0).sum()), 3))
    # equal cubes twisted by 0.5 rad: no corner is inside the other cube, edges cross
    c = detect(plan, *poses((rotvec([0, 0, 0.5]), [0.0, 0.0, 0.19]), (I3, Z3)))
    assert c.depth[:16].max() < 0
    inside = c.depth > 0
    assert c.depth.max().item() == pytest.approx(0.01) and int(inside.sum()) >= 4
    assert torch.allclose(c.normal[inside], up.expand(int(inside.sum()), 3))


def test_capsule_across_box_uses_the_closest_segment_point():
    plate = geom(GeomType.BOX, (0.1, 0.1, 0.05))
    long = geom(GeomType.CAPSULE, (0.03, 0.5))
    plan = pair_plan(plate, long)
    c = detect(plan, *poses((I3, [0.0, 0.0, 0.0]), (rotvec([0, math.pi / 2, 0]), [0.02, 0.0, 0.07])))
    assert c.depth.shape == (3,)
    assert c.depth[:2].max() < 0  # both ends hang outside the box
    assert c.depth[2].item() == pytest.approx(0.01)
    assert torch.allclose(c.normal[2], torch.tensor([0.0, 0.0, -1.0], **F64))  # from the capsule to the box


@pytest.mark.parametrize("roll", [0.0, 0.2, 0.39])
def test_cylinder_lying_on_a_box_at_any_roll(roll):
    table = geom(GeomType.BOX, (0.5, 0.5, 0.05))
    plan = pair_plan(CYLINDER, table)  # r = 0.1, half length 0.2
    lying = rotvec([roll, 0.0, 0.0]) @ rotvec([0.0, math.pi / 2, 0.0])  # axis along x, rolled
    c = detect(plan, *poses((lying, [0.0, 0.0, 0.05 + 0.1 - 0.004]), (I3, Z3)))
    assert c.depth.max().item() == pytest.approx(0.004)  # the side line, exact whatever the roll
    deep = c.depth > 0.003
    assert torch.allclose(c.normal[deep], torch.tensor([0.0, 0.0, 1.0], **F64).expand(int(deep.sum()), 3))


def test_cylinder_sphere_and_mesh_sphere():
    c = detect(pair_plan(CYLINDER, SPHERE), *poses((I3, Z3), (I3, [0.15, 0.0, 0.1])))
    assert c.depth.item() == pytest.approx(0.05)
    c = detect(pair_plan(MESH, SPHERE), *poses((I3, Z3), (I3, [0.0, 0.0, 0.35])))
    assert c.depth.item() == pytest.approx(0.05)
    assert torch.allclose(c.normal[0], torch.tensor([0.0, 0.0, -1.0], **F64))


def test_every_pair_type_is_supported_and_finite():
    types = [SPHERE, CAPSULE, BOX, CYLINDER, MESH]
    gs = [ground_plane()] + [CollisionGeom(g, i, entity=i) for i, g in enumerate(types + types)]
    plan = ContactPlan.build(gs)
    assert plan.n_pairs == 10 + 45
    torch.manual_seed(1)
    R = torch.stack([rotvec(torch.randn(3)) for _ in range(10)])
    c = detect(plan, R, 0.2 * torch.randn(10, 3, **F64))
    for x in (c.pos, c.normal, c.depth):
        assert torch.isfinite(x).all()
    assert torch.allclose(c.normal.norm(dim=-1), torch.ones(plan.n_contacts, **F64))


# ------------------------------------------------------------ against MuJoCo

_MJ = {GeomType.SPHERE: "sphere", GeomType.CAPSULE: "capsule", GeomType.BOX: "box", GeomType.CYLINDER: "cylinder"}


def _mj_depth(ga, Ra, pa, gb, Rb, pb):
    """Deepest MuJoCo penetration (-dist) of A and B (B None: plane), or None."""
    mujoco = pytest.importorskip("mujoco")

    import numpy as np

    def body(g, R, p):
        q = np.zeros(4)
        mujoco.mju_mat2Quat(q, R.reshape(-1).numpy().copy())
        size = " ".join(str(s) for s in g.size)
        pos = " ".join(str(float(x)) for x in p)
        return f'<body pos="{pos}" quat="{" ".join(map(str, q))}"><freejoint/><geom type="{_MJ[g.type]}" size="{size}"/></body>'

    other = '<geom type="plane" size="0 0 1"/>' if gb is None else body(gb, Rb, pb)
    xml = f"<mujoco><worldbody>{other}{body(ga, Ra, pa)}</worldbody></mujoco>"
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    return None if d.ncon == 0 else float(-d.contact.dist[: d.ncon].min())


@pytest.mark.parametrize(
    "ga, gb",
    [
        (SPHERE, None),
        (CAPSULE, None),
        (BOX, None),
        (CYLINDER, None),
        (SPHERE, geom(GeomType.SPHERE, (0.15,))),
        (CAPSULE, SPHERE),
        (CAPSULE, geom(GeomType.CAPSULE, (0.08, 0.1))),
        (BOX, SPHERE),
        (CYLINDER, SPHERE),
    ],
    ids=lambda g: getattr(g, "type", GeomType.PLANE).name,
)
def test_exact_kernels_match_mujoco(ga, gb):
    pytest.importorskip("mujoco")
    gen = torch.Generator().manual_seed(3)
    plan = pair_plan(ga, gb)
    checked = 0
    for _ in range(12):
        Ra, Rb = rotvec(torch.randn(3, generator=gen, **F64)), rotvec(torch.randn(3, generator=gen, **F64))
        pa = 0.15 * torch.randn(3, generator=gen, **F64)
        pb = torch.zeros(3, **F64)
        if gb is None:
            pa[2] = pa[2].abs() * 0.3  # near the plane
        R, p = poses((Ra, pa), (Rb, pb))
        ref = _mj_depth(ga, Ra, pa, gb, Rb, pb)
        ours = detect(plan, R, p).depth.max().item()
        if ref is None:
            assert ours <= 1e-9
            continue
        assert ours == pytest.approx(ref, abs=1e-6)
        checked += 1
    assert checked >= 3


# --------------------------------------------------------------- gradients


def _contacts_fn(plan, full: bool):
    def f(wa, pa, wb, pb):
        R = torch.stack([rotvec(wa), rotvec(wb)])
        c = detect(plan, R, torch.stack([pa, pb]))
        return (c.depth, c.normal, c.pos) if full else c.depth

    return f


@pytest.mark.parametrize(
    "ga, gb, pa, full",
    [
        (SPHERE, None, [0.1, 0.2, 0.08], True),
        (BOX, None, [0.0, 0.0, 0.2], True),
        (CYLINDER, None, [0.0, 0.0, 0.15], True),
        (CAPSULE, geom(GeomType.CAPSULE, (0.08, 0.1)), [0.05, 0.03, 0.1], True),
        (BOX, SPHERE, [0.05, 0.1, 0.38], True),  # sphere centre below the box
        (BOX, SPHERE, [0.02, 0.05, 0.1], True),  # sphere centre inside
        (MESH, SPHERE, [0.03, 0.02, 0.3], True),
        # kernels with a deepest-point search along segments: the depth only (see collision.py)
        (BOX, geom(GeomType.BOX, (0.1, 0.1, 0.1)), [0.03, 0.02, 0.35], False),
        (BOX, CAPSULE, [0.03, 0.02, 0.3], False),
        (CYLINDER, geom(GeomType.BOX, (0.1, 0.1, 0.1)), [0.03, 0.02, 0.25], False),
        (CYLINDER, CYLINDER, [0.03, 0.02, 0.35], False),
    ],
    ids=lambda x: getattr(x, "type", GeomType.PLANE).name if isinstance(x, (Geom, type(None))) else "",
)
def test_gradcheck_contacts(ga, gb, pa, full):
    plan = pair_plan(ga, gb)
    wa = torch.tensor([0.11, -0.07, 0.05], **F64, requires_grad=True)
    wb = torch.tensor([0.03, 0.09, -0.13], **F64, requires_grad=True)
    pa = torch.tensor(pa, **F64, requires_grad=True)
    pb = torch.tensor([0.01, -0.02, 0.0], **F64, requires_grad=True)
    assert torch.autograd.gradcheck(_contacts_fn(plan, full), (wa, pa, wb, pb), eps=1e-6, atol=1e-6, fast_mode=True)


@pytest.mark.parametrize(
    "ga, gb, Ra, pa",
    [
        (SPHERE, SPHERE, I3, [0.0, 0.0, 0.0]),  # coincident centres
        (CAPSULE, SPHERE, I3, [0.0, 0.0, 0.0]),  # sphere centre on the capsule axis
        (CAPSULE, CAPSULE, rotvec([0.0, math.pi / 2, 0.0]), [0.0, 0.0, 0.0]),  # crossing axes
        (CAPSULE, CAPSULE, I3, [0.0, 0.0, 0.1]),  # coincident parallel axes
        (BOX, SPHERE, I3, [0.0, 0.0, -0.3]),  # sphere centre on the top face
        (CYLINDER, SPHERE, I3, [0.0, 0.0, 0.0]),  # sphere centre on the cylinder axis
        (BOX, CAPSULE, I3, [0.0, 0.0, 0.0]),  # capsule through the box centre
        (SPHERE, None, I3, [0.0, 0.0, 0.1]),  # touching the plane
        (CYLINDER, None, I3, [0.0, 0.0, 0.2]),  # upright: the deepest rim direction is undefined
    ],
)
def test_finite_gradients_at_zero_distance(ga, gb, Ra, pa):
    plan = pair_plan(ga, gb)
    p = torch.tensor([pa, [0.0, 0.0, 0.0]], **F64, requires_grad=True)
    R = torch.stack([Ra, I3]).requires_grad_(True)
    c = detect(plan, R, p)
    (c.depth.sum() + c.normal.sum() + c.pos.sum()).backward()
    assert torch.isfinite(c.depth).all() and torch.isfinite(c.normal).all()
    assert torch.isfinite(p.grad).all() and torch.isfinite(R.grad).all()


# ----------------------------------------------------------- shapes and batches


def test_fixed_shapes_across_batches_and_per_env_equality():
    gs = [ground_plane(), CollisionGeom(BOX, 0, entity=1), CollisionGeom(CAPSULE, 1, entity=2), CollisionGeom(MESH, 2, entity=3)]
    plan = ContactPlan.build(gs)
    K = plan.n_contacts
    torch.manual_seed(2)
    R = torch.stack([torch.stack([rotvec(torch.randn(3)) for _ in range(3)]) for _ in range(6)]).reshape(2, 3, 3, 3, 3)
    p = 0.3 * torch.randn(2, 3, 3, 3, **F64)
    c = detect(plan, R, p)
    assert c.pos.shape == (2, 3, K, 3) and c.normal.shape == (2, 3, K, 3) and c.depth.shape == (2, 3, K)
    assert c.slot_a.shape == c.slot_b.shape == c.friction.shape == c.pair.shape == (K,)
    one = detect(plan, R[1, 2], p[1, 2])
    assert one.depth.shape == (K,)
    assert torch.allclose(one.depth, c.depth[1, 2]) and torch.allclose(one.pos, c.pos[1, 2])
    c32 = detect(plan, R.float(), p.float())
    assert c32.depth.dtype == torch.float32 and torch.allclose(c32.depth.double(), c.depth, atol=1e-5)
    Rg, pg = geom_poses(plan, R, p)
    assert Rg.shape == (2, 3, 4, 3, 3) and torch.allclose(pg[..., 0, :], torch.zeros(3, **F64))


def test_contact_bookkeeping():
    gs = [ground_plane(friction=0.3), CollisionGeom(BOX, 0, entity=1, friction=0.7), CollisionGeom(SPHERE, 1, entity=2, friction=0.2)]
    plan = ContactPlan.build(gs)
    c = detect(plan, torch.eye(3, **F64).expand(2, 3, 3), torch.zeros(2, 3, **F64))
    pairs = {tuple(x) for x in plan.pair_geom.tolist()}
    assert pairs == {(1, 0), (2, 0), (1, 2)}  # (A, B), B of smaller type
    for k in range(plan.n_contacts):
        a, b = plan.pair_geom[c.pair[k]].tolist()
        assert c.slot_a[k] == gs[a].slot and c.slot_b[k] == gs[b].slot
        assert c.friction[k].item() == max(gs[a].friction, gs[b].friction)


# -------------------------------------------------------------- pair filtering


def _plan_pairs(gs, **kw):
    """Candidate pairs as unordered sets."""
    return {frozenset(x) for x in ContactPlan.build(gs, **kw).pair_geom.tolist()}


def P(i, j):
    return frozenset((i, j))


def test_contype_conaffinity():
    a = CollisionGeom(geom(GeomType.SPHERE, (0.1,), contype=1, conaffinity=2), 0, entity=1)
    b = CollisionGeom(geom(GeomType.SPHERE, (0.1,), contype=2, conaffinity=1), 1, entity=2)
    c = CollisionGeom(geom(GeomType.SPHERE, (0.1,), contype=1, conaffinity=1), 2, entity=3)
    d = CollisionGeom(geom(GeomType.SPHERE, (0.1,), contype=0, conaffinity=0), 3, entity=4)
    assert _plan_pairs([a, b, c, d]) == {P(0, 1), P(1, 2), P(0, 2)}
    e = CollisionGeom(geom(GeomType.SPHERE, (0.1,), contype=4, conaffinity=4), 4, entity=5)
    assert _plan_pairs([a, e]) == set()


def test_exclusions_same_slot_static_entity_parent():
    gs = [
        ground_plane(),
        ground_plane(height=1.0),
        CollisionGeom(SPHERE, 0, entity=0),
        CollisionGeom(BOX, 0, entity=0),
        CollisionGeom(CAPSULE, 1, entity=0),
        CollisionGeom(SPHERE, 2, entity=0),
        CollisionGeom(SPHERE, 3, entity=1),
    ]
    pairs = _plan_pairs(gs)  # no self collision: entity 0 vs 1, and everything vs the planes
    assert P(0, 1) not in pairs  # static-static
    assert all(not (pair <= {2, 3, 4, 5}) for pair in pairs)
    assert {P(6, 2), P(6, 3), P(6, 4), P(6, 5), P(0, 2), P(1, 6)} <= pairs
    self_pairs = _plan_pairs(gs, self_collision=True, slot_parent=[-1, 0, 1, -1])
    assert P(2, 3) not in self_pairs  # same slot
    assert P(4, 2) not in self_pairs and P(4, 3) not in self_pairs  # slot 1's parent is slot 0
    assert P(4, 5) not in self_pairs  # slot 2's parent is slot 1
    assert P(5, 2) in self_pairs  # a grandparent is kept
    no_parent_filter = _plan_pairs(gs, self_collision=True, slot_parent=[-1, 0, 1, -1], filter_parent=False)
    assert P(4, 2) in no_parent_filter
    excluded = _plan_pairs(gs, exclude={(3, 0)})
    assert P(6, 2) not in excluded and P(6, 3) not in excluded and P(6, 5) in excluded


def test_geoms_from_urdf_model():
    from torchrbd.model.urdf import load_urdf

    inertial = '<inertial><mass value="1"/><inertia ixx="1" iyy="1" izz="1" ixy="0" ixz="0" iyz="0"/></inertial>'
    urdf = f"""<robot name="r">
      <link name="base">{inertial}<collision><origin xyz="0 0 0.1"/><geometry><box size="0.2 0.2 0.2"/></geometry></collision></link>
      <link name="arm">{inertial}<collision><geometry><sphere radius="0.1"/></geometry></collision></link>
      <link name="tip"><collision><geometry><cylinder radius="0.1" length="0.2"/></geometry></collision></link>
      <joint name="j" type="revolute"><parent link="base"/><child link="arm"/><origin xyz="0 0 0.5"/>
        <axis xyz="0 1 0"/><limit lower="-1" upper="1" effort="1" velocity="1"/></joint>
      <joint name="w" type="fixed"><parent link="arm"/><child link="tip"/><origin xyz="0 0 0.3"/></joint>
    </robot>"""
    model = load_urdf(urdf)
    gs = geoms_from_model(model, slot_offset=1, entity=7)
    assert [g.slot for g in gs] == [1, 2, 2]
    assert torch.allclose(gs[2].pos, torch.tensor([0.0, 0.0, 0.3], **F64))  # tip welded into the arm body
    assert model_slot_parent(model, 1) == [-1, 1]
    plan = ContactPlan.build([ground_plane()] + gs, self_collision=True, slot_parent=[-1] + model_slot_parent(model, 1))
    assert plan.n_pairs == 3  # every geom vs the ground; base-arm is parent/child, arm-tip same body
    c = detect(plan, torch.eye(3, **F64).expand(3, 3, 3), torch.tensor([[9.0, 9, 9], [0, 0, 0], [0, 0, 0.05]], **F64))
    box = plan.contact_slot_a == 1
    assert c.depth[box].max().item() == pytest.approx(0.0)  # box from z = 0 to 0.2
