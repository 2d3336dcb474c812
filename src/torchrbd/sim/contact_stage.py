"""The scene's contact stage: collision geoms -> generalized contact forces per entity.

Built once by ``scene.build()`` (:meth:`ContactStage.build`), evaluated at every
integrator stage (:meth:`ContactStage.evaluate`), on plain tensors:

    slot poses and velocities (the stage's forward kinematics of every entity,
    shared with the dynamics: dynamics.stage_kinematics)
      -> detect (collision.py) -> contact point velocities -> forces (contact.py)
      -> per dynamic entity a ContactLoad (dynamics.py): the generalized force J^T f
         and, for the Euler step, the damping matrix J^T D J, both in body-level
         form, never through per-contact Jacobians (see below)

Slots
-----
Every entity with collision geoms gets one *slot* per body of its model (body ``i``
of an entity is slot ``offset + i``); an entity without dofs (``Plane``, a fixed
primitive) has one body, posed by its base pose. Those bodies and the root body of
a fixed base are *immovable*: infinite mass, and never paired with each other (nor
with the static world). MJCF geoms on the link ``"world"``
(the file's world body and static scenery) are static: slot ``-1``, placed once at
build time (a fixed base moved later does not move them).

Candidate pairs (:meth:`~torchrbd.sim.collision.ContactPlan.build`): every pair of
geoms on different slots, except pairs of immovable slots (or the static world),
MJCF ``contype``/``conaffinity`` and ``<contact><exclude>``, and, unless
``RigidOptions(enable_self_collision=True)``, pairs within one entity (with it:
pairs of non-adjacent bodies). World geoms of an MJCF file count as an
entity of their own, so they touch the file's robot as in MuJoCo.

Friction: ``gs.materials.Rigid(friction=...)`` of the entity, else the geom's own
(MJCF ``friction[0]``), else 1; a pair uses the larger of its two (MuJoCo's rule).

Effective mass: the contact law (``contact.py``) needs the mass its soft constraint
acts on. Each contact uses ``m_a m_b / (m_a + m_b)`` with ``m`` the *total mass of
the entity* (the mass a foot holds up); immovable slots and the world have infinite mass.

Force mapping
-------------
The kinematics run with the base placed at the origin, as in
:mod:`torchrbd.algorithms`: ``kin.S`` holds each joint's twist about the base
origin ``p_B`` (world axes), so body ``b`` moves with the twist
``V_b = nu + sum_{j in support(b)} S_j qd_j`` about ``p_B`` (``nu`` the MIXED base
velocity, 0 for a fixed base). A contact point ``x`` on body ``b`` therefore has the
velocity ``J(x) [nu; qd]`` with, for ``r = x - p_B``,

    base columns  [I3, -[r]x]          joint columns  S_lin,j + S_ang,j x r  (j in support(b))

and a force ``f`` there gives the generalized force ``J(x)^T f`` (``[f; r x f]`` on the
base: the MIXED base wrench). Shape A of a contact gets ``+f``, shape B ``-f``.

No ``J`` is formed: with ``W_k = [f_k; r_k x f_k]`` the contact's wrench about ``p_B``,
``J^T f = [sum_k W_k; S_j . sum_{k moved by j} W_k]`` -- the backward pass of the
RNEA, one matmul of the contacts' wrenches with the (Ke, n) support mask.

Implicit contact damping (Euler)
--------------------------------
The law is a penalty with a stiff damper; explicit, it limits ``dt`` to about the
time constant over the number of touching bodies, and much less for a light link
of a heavy robot (whose effective mass is far below the entity mass). As MuJoCo's
Euler does for joint damping, the Euler step treats the contact's velocity
dependence implicitly: with ``D_k = c_n n n^T + c_t (I - n n^T)`` the derivative of the
contact force with respect to the point velocity (normal: ``c_n = (2 m / tc) w s'`` while
the normal force is positive; tangential: the secant gain of regularised Coulomb
friction ``c_t = mu f_n / sqrt(|v_t|^2 + v_eps^2)``), it solves
``(M + dt (D + Kv + J^T D J)) a = f``. Only each entity's own block is implicit; the
coupling between two moving entities stays explicit (stable: it damps their relative
velocity). RK4 uses the forces explicitly.

``J^T D J`` is built as the CRBA builds M: writing ``J_k = P_k [nu; S qd]`` with
``P = [1, -[r]x]`` (body twist about ``p_B`` -> point velocity), each contact gives the
6x6 matrix ``Lambda_k = P^T D P = c_t P^T P + (c_n - c_t) u u^T``, ``u = [n; r x n]``
(``P^T P`` is the spatial inertia of a unit point mass at ``r``), and then
``J^T D J = [[Lambda, Lambda_j S_j], [., S_a . Lambda_b S_b]]`` with ``Lambda`` the sum
over all contacts and ``Lambda_j`` over those moved by ``j`` (``a`` supporting ``b``), as
with composite inertias. ``Lambda`` is linear in 32 parameters per contact, which are
summed over the subtrees in the same matmul as the wrenches; the Euler step folds the
result into the CRBA's base block and coupling rows (:func:`dynamics.mass_matrix_and_bias`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .. import algorithms as alg
from ..errors import ModelError
from ..model.mjcf import WORLD
from ..model.model import GeomType
from ..algorithms.batchlast import cross
from ..spatial import quat_to_matrix
from . import dynamics as dyn
from .collision import CollisionGeom, ContactPlan, Contacts, detect, geoms_from_model, model_slot_parent
from .contact import ContactParams, contact_forces_and_gains, contact_mass, contact_velocities
from .morphs import MJCF


@dataclass(frozen=True)
class _Member:
    """An entity with collision geoms: its slots and the contacts acting on it.

    ``contact (Ke,)`` indices into the K contacts where one side is this entity,
    ``sign (Ke,)`` +1 for shape A, -1 for shape B; ``support (Ke, n)`` 1 where joint
    coordinate j moves that side's body; ``joint_support (n, n)`` 1 where coordinate a
    moves the body of coordinate b.
    """

    entity: int  # index in scene.entities
    dynamic: int  # index among scene._dynamic(), -1 for an entity without dofs
    offset: int  # slot of body 0
    nbody: int
    contact: torch.Tensor
    sign: torch.Tensor
    support: torch.Tensor
    joint_support: torch.Tensor


@dataclass(frozen=True)
class StageResult:
    """One evaluation of the contact stage.

    ``contacts``/``forces (B, K, 3)`` as :func:`~torchrbd.sim.contact.contact_forces`
    (force on shape A); ``loads[d]``: the :class:`~torchrbd.sim.dynamics.ContactLoad` on
    dynamic entity ``d`` (None when no contact acts on it).
    """

    contacts: Contacts
    forces: torch.Tensor
    loads: list

    @property
    def generalized(self) -> list:
        """Per dynamic entity: (B, nv) generalized contact force, or None."""
        return [None if x is None else x.generalized for x in self.loads]

    @property
    def damping(self) -> list:
        """Per dynamic entity: (B, nv, nv) ``J^T D J`` of the Euler step, or None."""
        return [None if x is None else x.damping for x in self.loads]


@dataclass(frozen=True)
class ContactStage:
    """The contact plan of a scene and how its slots map to entities (fixed at build).

    Per contact (K): ``geom_a/geom_b``, ``link_a/link_b`` names and
    ``entity_a/entity_b`` (long, -1 for the static world) of its two shapes.
    """

    plan: ContactPlan
    params: ContactParams
    members: tuple
    n_slots: int
    geom_a: tuple
    geom_b: tuple
    link_a: tuple
    link_b: tuple
    entity_a: torch.Tensor
    entity_b: torch.Tensor
    _pose_cache: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def n_contacts(self) -> int:
        return self.plan.n_contacts

    # ------------------------------------------------------------ build
    @classmethod
    def build(cls, scene) -> "ContactStage | None":
        """The stage of a scene whose entities are built; None when collisions are off
        or no entity has a collision geom."""
        opts = scene.rigid_options
        if not opts.enable_collision:
            return None
        dynamic = {e.idx: d for d, e in enumerate(scene._dynamic())}
        geoms, links, parents, exclude, fixed_slots = [], [], [], set(), [-1]
        members = []  # (entity, nbody, offset)
        for e in scene.entities:
            model = e._kd.model
            _check_meshes(e)
            is_mjcf = isinstance(e.morph, MJCF)
            world = [g for g in model.geoms if is_mjcf and g.link == WORLD]
            own = [g for g in model.geoms if not (is_mjcf and g.link == WORLD)]
            friction = e.material.friction
            for g in world:
                rot, pos = _world_geom_pose(e, g)
                geoms.append(CollisionGeom(g, -1, rot, pos, entity=-2 - e.idx, friction=friction))
                links.append(WORLD)
            if not own:
                continue
            offset = len(parents)
            for cg in geoms_from_model(model.replace(geoms=tuple(own)), slot_offset=offset, entity=e.idx):
                geoms.append(dataclasses.replace(cg, friction=friction) if friction is not None else cg)
                links.append(cg.geom.link)
            parents.extend(model_slot_parent(model, offset))
            if e.idx not in dynamic or not e.floating:  # the root body of a fixed base does not move
                fixed_slots.append(offset)
            for la, lb in getattr(e, "_contact_excludes", ()):
                sa, sb = _link_slot(model, la, offset), _link_slot(model, lb, offset)
                if sa is not None and sb is not None:
                    exclude.add((sa, sb))
            members.append((e, model.nbody, offset))
        if not geoms:
            return None
        exclude.update((a, b) for a in fixed_slots for b in fixed_slots if a != b)  # immovable pairs
        plan = ContactPlan.build(
            geoms, exclude=exclude, self_collision=opts.enable_self_collision, slot_parent=parents,
            dtype=scene.dtype, device=scene.device,
        )
        tc = max(opts.contact_timeconst, 2.0 * scene.substep_dt)
        params = ContactParams(timeconst=tc, dampratio=opts.contact_dampratio)
        t = dict(dtype=scene.dtype, device=scene.device)
        long = dict(dtype=torch.long, device=scene.device)
        sa, sb = plan.contact_slot_a.tolist(), plan.contact_slot_b.tolist()
        out = []
        for e, nb, offset in members:
            topo = alg.topology(e._kd.model)
            body_support = topo.ancestor[:, topo.body_of_dof].to(**t)  # (nbody, n)
            rows = [(k, s - offset, 1.0) for k, s in enumerate(sa) if offset <= s < offset + nb]
            rows += [(k, s - offset, -1.0) for k, s in enumerate(sb) if offset <= s < offset + nb]
            k_idx = torch.tensor([r[0] for r in rows], **long)
            body = torch.tensor([r[1] for r in rows], **long)
            out.append(_Member(
                entity=e.idx, dynamic=dynamic.get(e.idx, -1), offset=offset, nbody=nb, contact=k_idx,
                sign=torch.tensor([r[2] for r in rows], **t), support=body_support[body],
                joint_support=body_support[topo.body_of_dof].T.contiguous(),
            ))
        pair = plan.pair_geom[plan.contact_pair].tolist()
        ent = [cg.entity for cg in geoms]
        ent = [x if x >= 0 else -1 for x in ent]  # world geoms: the static world
        return cls(
            plan=plan, params=params, members=tuple(out), n_slots=len(parents),
            geom_a=tuple(plan.geom_names[a] for a, _ in pair), geom_b=tuple(plan.geom_names[b] for _, b in pair),
            link_a=tuple(links[a] for a, _ in pair), link_b=tuple(links[b] for _, b in pair),
            entity_a=torch.tensor([ent[a] for a, _ in pair], **long),
            entity_b=torch.tensor([ent[b] for _, b in pair], **long),
        )

    # ------------------------------------------------------------ one stage
    def evaluate(self, scene, statics, ctrls, state, implicit: bool, kinematics=None) -> StageResult:
        """Contacts, forces and the :class:`~torchrbd.sim.dynamics.ContactLoad` of every
        dynamic entity at ``state``.

        ``statics``/``ctrls``/``state``: per dynamic entity (``scene._dynamic()``
        order), as the integrators pass them; ``implicit``: also the damping of the
        Euler step; ``kinematics``: their :func:`~torchrbd.sim.dynamics.stage_kinematics`
        if already computed.
        """
        if kinematics is None:
            kinematics = [dyn.stage_kinematics(*a, *x) for a, x in zip(zip(statics, ctrls), state)]
        B = scene._B
        poses, vels, masses = [], [], []
        for m in self.members:
            if m.dynamic < 0:
                R, p = self._immovable_pose(scene.entities[m.entity], B)
                zero = torch.zeros_like(p)
                poses.append((R, p))
                vels.append((zero, zero))
                masses.append(torch.full((1,), torch.inf, dtype=p.dtype, device=p.device))
                continue
            st, sk = statics[m.dynamic], kinematics[m.dynamic]
            R, p, v_origin, w = _slot_states(sk)
            poses.append((R, p))
            vels.append((v_origin, w))
            total = st.kd.model.link_mass.sum()
            if st.floating:
                masses.append(total.expand(m.nbody))
            else:  # the root body of a fixed base is immovable
                masses.append(torch.cat([torch.full((1,), torch.inf, dtype=p.dtype, device=p.device),
                                         total.expand(m.nbody - 1)]))
        R = torch.cat([x[0] for x in poses], 1)
        p = torch.cat([x[1] for x in poses], 1)
        contacts = detect(self.plan, R, p)
        v_origin, w = (torch.cat([v[i] for v in vels], 1) for i in (0, 1))
        forces, c_n, c_t, pushing = _near_contact_forces(contacts, v_origin, w, torch.cat(masses), self.params)
        coeffs = (c_n, c_t) if implicit else None
        loads = [None] * len(statics)
        for m in self.members:
            if m.dynamic >= 0 and m.contact.numel():
                loads[m.dynamic] = _entity_load(m, statics[m.dynamic].floating, kinematics[m.dynamic],
                                                contacts, forces, coeffs, pushing)
        return StageResult(contacts, forces, loads)

    def _immovable_pose(self, entity, B: int):
        """``R (B, 1, 3, 3)``, ``p (B, 1, 3)`` of an entity without dofs, cached while its
        base pose tensor stays the same object (setters and ``reset`` replace it)."""
        key = (entity.idx, torch.is_grad_enabled())
        hit = self._pose_cache.get(key)
        if hit is None or hit[0] is not entity._base_pose:
            pose = entity._base_pose.expand(B, 7)
            hit = (entity._base_pose, quat_to_matrix(pose[:, 3:7])[:, None], pose[:, None, :3])
            self._pose_cache[key] = hit
        return hit[1], hit[2]

    # ------------------------------------------------------------ reporting
    def entity_contacts(self, scene, entity, result: StageResult, with_entity=None) -> dict:
        """The contacts acting on ``entity`` (see ``RigidEntity.get_contacts``), batch-first (B, ...)."""
        member = next((m for m in self.members if m.entity == entity.idx), None)
        t = dict(dtype=scene.dtype, device=scene.device)
        if member is None:
            k_idx, sign = torch.zeros(0, dtype=torch.long, device=scene.device), torch.zeros(0, **t)
        else:
            k_idx, sign = member.contact, member.sign
        side_a = (sign > 0).tolist()
        ks = k_idx.tolist()
        other_e = [(self.entity_b if a else self.entity_a)[k].item() for k, a in zip(ks, side_a)]
        keep = [i for i, other in enumerate(other_e) if with_entity is None or other == with_entity.idx]
        sel = torch.tensor(keep, dtype=torch.long, device=scene.device)
        k_idx, sign = k_idx[sel], sign[sel]
        c, B = result.contacts, scene._B
        pos = c.pos[:, k_idx] if k_idx.numel() else torch.zeros(B, 0, 3, **t)
        normal = c.normal[:, k_idx] * sign[:, None] if k_idx.numel() else torch.zeros(B, 0, 3, **t)
        force = result.forces[:, k_idx] * sign[:, None] if k_idx.numel() else torch.zeros(B, 0, 3, **t)
        depth = c.depth[:, k_idx] if k_idx.numel() else torch.zeros(B, 0, **t)
        names = lambda a_side, b_side: [(a_side if side_a[i] else b_side)[ks[i]] for i in keep]  # noqa: E731
        return {
            "position": pos,
            "normal": normal,
            "force": force,
            "penetration": depth,
            "valid_mask": (force * normal).sum(-1) > 0,
            "link_a": names(self.link_a, self.link_b),
            "link_b": names(self.link_b, self.link_a),
            "geom_a": names(self.geom_a, self.geom_b),
            "geom_b": names(self.geom_b, self.geom_a),
            "entity_b": torch.tensor([other_e[i] for i in keep], dtype=torch.long, device=scene.device),
        }


# ----------------------------------------------------------------- pieces
def _world_geom_pose(entity, geom):
    """world_H_geom (float64) of an MJCF world geom: as in the file for a floating
    model; through the build-time base pose for a fixed one (``world`` is its root)."""
    rot, pos = geom.rot.to(torch.float64), geom.pos.to(torch.float64)
    model = entity._kd.model
    if WORLD not in model._link_index:
        return rot, pos
    k = model._link_index[WORLD]
    Rl, pl = model.link_rot[k].to(torch.float64), model.link_pos[k].to(torch.float64)
    base = entity._pose_init[0].to(torch.float64)
    Rb = quat_to_matrix(base[3:7])
    return Rb @ Rl @ rot, Rb @ (Rl @ pos + pl) + base[:3]


def _check_meshes(entity):
    """Raise ModelError naming a collision mesh file that does not exist."""
    for g in entity._kd.model.geoms:
        if g.type == GeomType.MESH and g.vertices is None and g.mesh_file and not Path(g.mesh_file).is_file():
            source = getattr(entity.morph, "file", type(entity.morph).__name__)
            raise ModelError(
                f"{source}: collision mesh {g.mesh_file!r} of link {g.link!r} not found (expected a mesh file "
                "trimesh can read); fix the path or load the morph with collision=False"
            )


def _link_slot(model, link: str, offset: int):
    """Slot of a link (-1 for the MJCF world), None for an unknown name."""
    if link == WORLD and WORLD not in model._link_index:
        return -1
    k = model._link_index.get(link)
    return None if k is None else offset + model.link_body[k]


def _slot_states(sk: dyn.StageKinematics):
    """World poses and velocities of the bodies of one dynamic entity, batch-first:
    ``R (B, nb, 3, 3)``, ``p (B, nb, 3)`` and the body twists about the world origin
    ``v_origin, w (B, nb, 3)`` (as :func:`~torchrbd.sim.contact.contact_velocities` wants)."""
    R = sk.kin.R.permute(3, 0, 1, 2)
    p = sk.kin.p.permute(2, 0, 1) + sk.p0[:, None]
    V = sk.body_twists().permute(2, 0, 1)  # (B, nb, 6) [v at p0; w]
    w = V[..., 3:]
    v_origin = V[..., :3] - torch.linalg.cross(w, sk.p0[:, None].expand_as(w))
    return R, p, v_origin, w


def _entity_load(m: _Member, floating: bool, sk: dyn.StageKinematics, contacts: Contacts, forces, coeffs,
                 pushing):
    """The :class:`~torchrbd.sim.dynamics.ContactLoad` of member ``m`` (see the module
    docstring): each contact's wrench about ``p0`` and, with ``coeffs = (c_n, c_t) (B, K)``,
    the parameters of its damping matrix ``Lambda``; both summed over the subtree of
    every joint in one matmul with the support mask (only the joints that move some
    pushing contact: the others get 0). ``pushing (K,)``: see :func:`_near_contact_forces`."""
    k, sign, support = _active(m, pushing)
    cols = [contacts.pos.index_select(1, k) - sk.p0[:, None], forces.index_select(1, k) * sign[:, None]]
    if coeffs is not None:
        c_n, c_t = coeffs[0].index_select(1, k), coeffs[1].index_select(1, k)
        cols += [contacts.normal.index_select(1, k), c_t[..., None], (c_n - c_t)[..., None]]
    x = torch.cat(cols, -1).permute(1, 2, 0).contiguous()  # (Ke, 6 or 11, B)
    r, f = x[:, 0:3], x[:, 3:6]
    per_contact = torch.cat([f, cross(r, f)], 1)  # wrenches [f; r x f] (Ke, 6, B)
    if coeffs is not None:
        per_contact = torch.cat([per_contact, _damping_parameters(r, x[:, 6:9], x[:, 9:10], x[:, 10:11])], 1)
    Ke, width, B = per_contact.shape
    moved = support.any(0).nonzero()[:, 0]  # joints moving some pushing contact
    S = sk.S.index_select(0, moved)
    subtree = (support[:, moved].T @ per_contact.reshape(Ke, width * B)).reshape(-1, width, B)
    joint = _scatter_joints(moved, (S * subtree[:, :6]).sum(1), sk.n)
    total = per_contact.sum(0)
    if coeffs is None:
        return dyn.ContactLoad(floating, sk.S, m.joint_support, total[:6], joint)
    rows = _scatter_joints(moved, _damping_times(subtree[:, 6:], S), sk.n)  # Lambda_j S_j (n, 6, B)
    lam_base = _damping_matrix(total[None, 6:])[0]
    return dyn.ContactLoad(floating, sk.S, m.joint_support, total[:6], joint, lam_base, rows)


def _scatter_joints(index, x, n: int):
    """``x (len(index), ...)`` placed at rows ``index`` of n rows, zeros elsewhere."""
    if index.numel() == n:
        return x
    return x.new_zeros((n,) + x.shape[1:]).index_copy(0, index, x)


def _active(m: _Member, pushing):
    """``(contact, sign, support)`` of ``m`` restricted to the contacts that push in some
    environment (``pushing (K,)`` bool). The others have zero force and zero damping gains
    in every environment (and zero gradient: their normal force is clamped from below
    zero, or their depth is beyond the margin), so they are dropped from the sums; the
    value is the same."""
    keep = pushing.index_select(0, m.contact).nonzero()[:, 0]
    if keep.numel() == m.contact.numel():
        return m.contact, m.sign, m.support
    return m.contact[keep], m.sign[keep], m.support[keep]


def _upper_pairs(k: int):
    return [(i, j) for i in range(k) for j in range(i, k)]


_PAIRS3, _PAIRS6 = _upper_pairs(3), _upper_pairs(6)
_DAMPING_PARAMETERS = 1 + 3 + 1 + len(_PAIRS3) + len(_PAIRS6)  # a, a r, a |r|^2, a r r^T, b u u^T


def _damping_parameters(r, n, a, b):
    """(Ke, 32, B) parameters of the contacts' damping matrices (see :func:`_damping_matrix`)
    from ``r, n (Ke, 3, B)`` (contact point from ``p0``, normal) and ``a = c_t``,
    ``b = c_n - c_t`` (Ke, 1, B). Linear in ``(a, b)``, so sums of them are the
    parameters of sums of matrices."""
    u = torch.cat([n, cross(r, n)], 1)
    ar, bu = a * r, b * u
    i3, j3 = zip(*_PAIRS3)
    i6, j6 = zip(*_PAIRS6)
    return torch.cat([a, ar, (ar * r).sum(1, keepdim=True), ar[:, i3] * r[:, j3], bu[:, i6] * u[:, j6]], 1)


def _parameter_map() -> torch.Tensor:
    """(36, 32) constant A with ``vec(Lambda) = A params``: with ``D = a 1 + b n n^T`` and
    ``P = [1, -[r]x]`` (twist about ``p0`` -> velocity of the point ``p0 + r``),
    ``Lambda = P^T D P = a P^T P + b u u^T``, ``u = P^T n = [n; r x n]``, where
    ``P^T P = [[1, -[r]x], [[r]x, |r|^2 1 - r r^T]]`` (the spatial inertia of a unit
    point mass at ``r``)."""
    A = torch.zeros(6, 6, _DAMPING_PARAMETERS, dtype=torch.float64)
    AR, R2, RR, UU = 1, 4, 5, 5 + len(_PAIRS3)
    for i in range(3):
        A[i, i, 0] = 1.0  # a 1
        A[3 + i, 3 + i, R2] = 1.0  # a |r|^2 1
        for c in range(3):
            if i != c:  # [r]x[i, c] = +-r_k, k the third axis
                k = 3 - i - c
                sign = 1.0 if (i, c) in ((2, 1), (0, 2), (1, 0)) else -1.0
                A[3 + i, c, AR + k] = sign
                A[i, 3 + c, AR + k] = -sign
    for p, (i, j) in enumerate(_PAIRS3):
        A[3 + i, 3 + j, RR + p] -= 1.0
        if i != j:
            A[3 + j, 3 + i, RR + p] -= 1.0
    for p, (i, j) in enumerate(_PAIRS6):
        A[i, j, UU + p] = 1.0
        A[j, i, UU + p] = 1.0
    return A.reshape(36, -1)


_PARAMETER_MAP = _parameter_map()


def _symmetric_index(pairs, k: int) -> torch.Tensor:
    """(k * k,) index of each entry of a symmetric k x k matrix (row-major) in its
    storage as the upper ``pairs``."""
    where = {p: i for i, p in enumerate(pairs)}
    return torch.tensor([where[(min(r, c), max(r, c))] for r in range(k) for c in range(k)])


_FULL3, _FULL6 = _symmetric_index(_PAIRS3, 3), _symmetric_index(_PAIRS6, 6)


def _symmetric_times(upper, index, x):
    """``A x`` (k, d, B) for symmetric matrices stored as ``upper`` (k, ., B) (see
    :func:`_symmetric_index`) and vectors ``x`` (k, d, B)."""
    d = x.shape[1]
    full = upper.index_select(1, index.to(upper.device)).unflatten(1, (d, d))
    return (full * x[:, None]).sum(2)


def _damping_times(params, S):
    """``Lambda S`` (k, 6, B) for damping parameters (k, 32, B) and twists S (k, 6, B),
    without the dense map of :func:`_damping_matrix`: ``a P^T P`` applied as a spatial
    inertia ``[a S_l - h x S_a; h x S_l + (a |r|^2 - a r r^T) S_a]`` (``h = a r``), plus
    ``(b u u^T) S``."""
    a, h, r2, rr, uu = params[:, 0:1], params[:, 1:4], params[:, 4:5], params[:, 5:11], params[:, 11:]
    Sl, Sa = S[:, :3], S[:, 3:]
    ang = cross(h, Sl) + r2 * Sa - _symmetric_times(rr, _FULL3, Sa)
    return torch.cat([a * Sl - cross(h, Sa), ang], 1) + _symmetric_times(uu, _FULL6, S)


def _damping_matrix(params):
    """(k, 6, 6, B) damping matrices ``Lambda`` from their parameters (k, 32, B)."""
    return torch.matmul(_PARAMETER_MAP.to(params), params).unflatten(1, (6, 6))


def _near_contact_forces(contacts: Contacts, v_origin, w, slot_mass, params: ContactParams):
    """:func:`~torchrbd.sim.contact.contact_forces_and_gains` of all K contacts:
    ``forces (B, K, 3)``, ``c_n, c_t (B, K)``, evaluated only on the contacts within
    the margin (``depth >= -margin``) in some environment. The others give exactly zero
    (value and gradient: the smoothed ReLU and its slope are 0 there) and add nothing
    to the shared weights. Also ``pushing (K,)``: the force is nonzero in some environment."""
    K = contacts.depth.shape[-1]
    near = (contacts.depth >= -params.margin).any(0).nonzero()[:, 0]
    sub = contacts if near.numel() == K else _subset(contacts, near)
    vel_a, vel_b = contact_velocities(sub, v_origin, w)
    out = contact_forces_and_gains(sub, vel_a, vel_b, params, contact_mass(sub, slot_mass))
    pushing = out[0].ne(0).any(-1).any(0)
    if sub is contacts:
        return (*out, pushing)
    out = tuple(x.new_zeros(x.shape[:1] + (K,) + x.shape[2:]).index_copy(1, near, x) for x in out)
    return (*out, torch.zeros(K, dtype=torch.bool, device=near.device).index_copy(0, near, pushing))


def _subset(contacts: Contacts, k: torch.Tensor) -> Contacts:
    """The contacts ``k (K',)`` of ``contacts`` (B, K, ...), slot pairs renumbered."""
    slot_pair = torch.unique(contacts.slot_pair[k], return_inverse=True)[1]
    return Contacts(
        pos=contacts.pos.index_select(1, k), normal=contacts.normal.index_select(1, k),
        depth=contacts.depth.index_select(1, k), slot_a=contacts.slot_a[k], slot_b=contacts.slot_b[k],
        friction=contacts.friction[k], pair=contacts.pair[k], slot_pair=slot_pair,
    )
