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
with composite inertias. The contacts' ``Lambda`` (36 entries each) are summed over the
subtrees in the same matmul as the wrenches, and ``[W_j^T; Lambda_j] S_j`` gives the joint
force and the row ``Lambda_j S_j`` in one product; the Euler step folds the result into
the CRBA's base block and coupling rows (:func:`dynamics.mass_matrix_and_bias`).

Layout
------
The whole stage runs batch-last, the layout of :mod:`torchrbd.algorithms` and of the
stage kinematics: slot poses ``(S, 3, 3, B)``, contacts ``(K, 3, B)``
(:func:`~torchrbd.sim.collision.detect_last`), and the law only on the K' contacts within
the margin in some environment (:class:`_Near`). The batch-first ``contacts`` and
``forces`` of a :class:`StageResult` are views made on first use (reporting).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

import torch

from .. import algorithms as alg
from ..errors import ModelError
from ..model.mjcf import WORLD
from ..model.model import GeomType
from ..algorithms.batchlast import cross, mask_sum, matmul
from ..spatial import quat_to_matrix
from . import dynamics as dyn
from .collision import CollisionGeom, ContactPlan, Contacts, Detection, contacts_first, detect_last, geoms_from_model, model_slot_parent
from .contact import ContactParams, contact_law, pair_mass
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
class _Near:
    """The contacts within the margin (``depth >= -margin``) in some environment, K' of
    the K, batch-last: ``index (K',)`` their rows among the K (None: all of them);
    ``pos, normal (K', 3, B)``; the law's ``forces (K', 3, B)`` (on shape A) and gains
    ``c_n, c_t (K', B)``; ``row (K,)`` the row of each contact among the K' (-1 if not
    near; None: all); ``pushing (K,)`` the force is nonzero in some environment."""

    index: torch.Tensor | None
    row: torch.Tensor | None
    pos: torch.Tensor
    normal: torch.Tensor
    forces: torch.Tensor
    c_n: torch.Tensor
    c_t: torch.Tensor
    pushing: torch.Tensor


@dataclass(frozen=True)
class StageResult:
    """One evaluation of the contact stage.

    ``contacts``/``forces (B, K, 3)`` as :func:`~torchrbd.sim.contact.contact_forces`
    (force on shape A; batch-first views, made on first use); ``loads[d]``: the
    :class:`~torchrbd.sim.dynamics.ContactLoad` on dynamic entity ``d`` (None when no
    contact acts on it). ``detection``: the batch-last contacts of
    :func:`~torchrbd.sim.collision.detect_last`.
    """

    loads: list
    detection: Detection
    near: _Near

    @cached_property
    def contacts(self) -> Contacts:
        return contacts_first(self.detection.plan, *self.detection.rows())

    @cached_property
    def forces(self) -> torch.Tensor:
        f = self.near.forces
        if self.near.index is not None:
            K, B = self.detection.depth.shape
            f = f.new_zeros(K, 3, B).index_copy(0, self.near.index, f)
        return f.movedim(-1, 0)

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
    twist_row: tuple  # (row_a, row_b) (K,) long: see _twist_rows; row_b None when no shape B moves
    n_slot_pairs: int
    _pose_cache: dict = field(default_factory=dict, compare=False, repr=False)
    _mass_cache: dict = field(default_factory=dict, compare=False, repr=False)

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
            model = e._host_model  # the plan is made on the CPU, then moved to the scene's device
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
        host = ContactPlan.build(  # on the CPU, where its indices are read below
            geoms, exclude=exclude, self_collision=opts.enable_self_collision, slot_parent=parents,
            dtype=scene.dtype, device="cpu",
        )
        plan = host.to(device=scene.device)
        tc = max(opts.contact_timeconst, 2.0 * scene.substep_dt)
        params = ContactParams(timeconst=tc, dampratio=opts.contact_dampratio)
        t = dict(dtype=scene.dtype, device=scene.device)
        long = dict(dtype=torch.long, device=scene.device)
        sa, sb = host.contact_slot_a.tolist(), host.contact_slot_b.tolist()
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
        pair = host.pair_geom[host.contact_pair].tolist()
        ent = [cg.entity for cg in geoms]
        ent = [x if x >= 0 else -1 for x in ent]  # world geoms: the static world
        row = _twist_rows(out, len(parents))
        return cls(
            plan=plan, params=params, members=tuple(out), n_slots=len(parents),
            geom_a=tuple(plan.geom_names[a] for a, _ in pair), geom_b=tuple(plan.geom_names[b] for _, b in pair),
            link_a=tuple(links[a] for a, _ in pair), link_b=tuple(links[b] for _, b in pair),
            entity_a=torch.tensor([ent[a] for a, _ in pair], **long),
            entity_b=torch.tensor([ent[b] for _, b in pair], **long),
            twist_row=_contact_twist_rows(row, sa, sb, long),
            n_slot_pairs=int(host.contact_slot_pair.max()) + 1 if host.n_contacts else 0,
        )

    # ------------------------------------------------------------ one stage
    def evaluate(self, scene, statics, ctrls, state, implicit: bool, kinematics=None) -> StageResult:
        """Contacts, forces and the :class:`~torchrbd.sim.dynamics.ContactLoad` of every
        dynamic entity at ``state``, batch-last throughout.

        ``statics``/``ctrls``/``state``: per dynamic entity (``scene._dynamic()``
        order), as the integrators pass them; ``implicit``: also the damping of the
        Euler step; ``kinematics``: their :func:`~torchrbd.sim.dynamics.stage_kinematics`
        if already computed.
        """
        if kinematics is None:
            kinematics = [dyn.stage_kinematics(*a, *x) for a, x in zip(zip(statics, ctrls), state)]
        R, p, twists = self._slots(scene, kinematics)
        detection = detect_last(self.plan, R, p)
        near = self._near(detection, twists, self._contact_mass(statics))
        loads = [None] * len(statics)
        for m in self.members:
            if m.dynamic >= 0 and m.contact.numel():
                loads[m.dynamic] = _entity_load(m, statics[m.dynamic].floating, kinematics[m.dynamic], near, implicit)
        return StageResult(loads, detection, near)

    def _slots(self, scene, kinematics):
        """Batch-last world poses of all slots, ``R (S, 3, 3, B)``, ``p (S, 3, B)``, and
        the :class:`_Twists` of the S' slots of the dynamic entities (rows: see
        ``twist_row``), None without any."""
        B = scene._B
        Rs, ps, twists, origins = [], [], [], []
        for m in self.members:
            if m.dynamic < 0:
                R, p = self._immovable_pose(scene.entities[m.entity])
                Rs.append(R.expand(1, 3, 3, B))
                ps.append(p.expand(1, 3, B))
                continue
            sk = kinematics[m.dynamic]
            p0 = sk.p0.T.contiguous()[None]
            Rs.append(sk.kin.R)
            ps.append(sk.kin.p + p0)
            twists.append(sk.body_twists())
            origins.append(p0.expand(m.nbody, 3, B))
        if not twists:
            return _cat(Rs), _cat(ps), None
        origin = origins[0][:1] if len(origins) == 1 else torch.cat(origins)
        return _cat(Rs), _cat(ps), _Twists(_cat(twists), origin)

    def _near(self, detection: Detection, twists, mass) -> _Near:
        """The contact law on the contacts within the margin (see :class:`_Near`): they
        alone can push. The others give exactly zero (value and gradient: the smoothed
        ReLU and its slope are 0 there)."""
        plan, K = self.plan, detection.depth.shape[0]
        index = (detection.depth >= -self.params.margin).any(1).nonzero()[:, 0] if dyn.compacts(detection.depth) else None
        row = None
        if index is None or index.numel() == K:
            index = None
        else:
            row = torch.full((K,), -1, dtype=index.dtype, device=index.device)
            row = row.index_copy(0, index, torch.arange(index.numel(), device=index.device))
        pick = (lambda x: x) if index is None else (lambda x: x.index_select(0, index))  # noqa: E731
        pos, normal, depth = detection.rows(index)
        velocity = _relative_velocity(twists, *(r if r is None else pick(r) for r in self.twist_row), pos)
        forces, c_n, c_t = contact_law(
            depth, normal, velocity, pick(plan.contact_friction)[:, None], pick(plan.contact_slot_pair),
            pick(mass)[:, None], self.params, dim=1, n_pairs=self.n_slot_pairs,
        )
        pushing = c_n.ne(0).any(1)  # c_n > 0 exactly where the normal force is
        if index is not None:
            pushing = pushing.new_zeros(K).index_copy(0, index, pushing)
        return _Near(index, row, pos, normal, forces, c_n, c_t, pushing)

    def _contact_mass(self, statics) -> torch.Tensor:
        """(K,) effective mass of every contact (see the module docstring), kept while the
        entities' ``link_mass`` tensors stay the same objects and need no gradient."""
        masses = [statics[m.dynamic].kd.model.link_mass if m.dynamic >= 0 else None for m in self.members]
        key = tuple(id(x) for x in masses)
        hit = self._mass_cache.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], masses)):
            return hit[1]
        out = pair_mass(self.plan.contact_slot_a, self.plan.contact_slot_b, self._slot_mass(statics))
        if not any(x is not None and x.requires_grad for x in masses):
            self._mass_cache.clear()
            self._mass_cache[key] = (masses, out)
        return out

    def _slot_mass(self, statics) -> torch.Tensor:
        """(S,) the mass of each slot: its entity's total mass, infinite when immovable."""
        t = dict(dtype=self.plan.geom_rot.dtype, device=self.plan.geom_rot.device)
        out = []
        for m in self.members:
            if m.dynamic < 0:
                out.append(torch.full((1,), torch.inf, **t))
                continue
            st = statics[m.dynamic]
            total = st.kd.model.link_mass.sum().to(**t)
            if st.floating:
                out.append(total.expand(m.nbody))
            else:  # the root body of a fixed base is immovable
                out += [torch.full((1,), torch.inf, **t), total.expand(m.nbody - 1)]
        return torch.cat(out)

    def _immovable_pose(self, entity):
        """``R (1, 3, 3, b)``, ``p (1, 3, b)`` (batch-last, ``b`` 1 or B) of an entity
        without dofs, cached while its base pose tensor stays the same object (setters
        and ``reset`` replace it)."""
        key = (entity.idx, torch.is_grad_enabled())
        hit = self._pose_cache.get(key)
        if hit is None or hit[0] is not entity._base_pose:
            pose = entity._base_pose.reshape(-1, 7)
            hit = (entity._base_pose, quat_to_matrix(pose[:, 3:7]).permute(1, 2, 0)[None], pose[:, :3].T[None])
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
    host = dict(dtype=torch.float64, device="cpu")  # (the contact plan is made on the CPU)
    rot, pos = geom.rot.to(**host), geom.pos.to(**host)
    model = entity._host_model
    if WORLD not in model._link_index:
        return rot, pos
    k = model._link_index[WORLD]
    Rl, pl = model.link_rot[k].to(**host), model.link_pos[k].to(**host)
    base = entity._host_pose
    Rb = quat_to_matrix(base[3:7])
    return Rb @ Rl @ rot, Rb @ (Rl @ pos + pl) + base[:3]


def _check_meshes(entity):
    """Raise ModelError naming a collision mesh file that does not exist."""
    for g in entity._host_model.geoms:
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


def _twist_rows(members, n_slots: int) -> list:
    """Per slot: its row among the S' slots of the dynamic entities (in member order),
    S' for a slot that does not move (an entity without dofs); index -1 (the static
    world) maps to S' too."""
    moving = sum(m.nbody for m in members if m.dynamic >= 0)
    row, count = [moving] * (n_slots + 1), 0
    for m in members:
        if m.dynamic >= 0:
            row[m.offset:m.offset + m.nbody] = range(count, count + m.nbody)
            count += m.nbody
    return row


def _contact_twist_rows(row, slot_a, slot_b, long) -> tuple:
    """``twist_row`` of :class:`ContactStage` from the slots' rows and the contacts' slots."""
    row_a, row_b = ([row[s] for s in side] for side in (slot_a, slot_b))
    still = row[-1]
    return torch.tensor(row_a, **long), None if all(x == still for x in row_b) else torch.tensor(row_b, **long)


def _cat(parts):
    return parts[0] if len(parts) == 1 else torch.cat(parts, 0)


class _Twists(NamedTuple):
    """The twists ``[v; w] (S', 6, B)`` of the moving slots, each about its entity's base
    origin ``origin (S', 3, B)`` (or ``(1, 3, B)``, shared by all rows), world axes."""

    twist: torch.Tensor
    origin: torch.Tensor

    def at(self, rows, pos):
        """(K', 3, B) velocity of the points ``pos (K', 3, B)`` moving with slot rows ``rows (K',)``."""
        twist = self.twist.index_select(0, rows)
        origin = self.origin if self.origin.shape[0] == 1 else self.origin.index_select(0, rows)
        v, w = twist.split_with_sizes([3, 3], 1)
        return v + cross(w, pos - origin)

    def padded(self) -> "_Twists":
        """With a last row at rest (the rows of the slots that do not move)."""
        pad = lambda x: torch.cat([x, x.new_zeros((1,) + x.shape[1:])])  # noqa: E731
        return _Twists(pad(self.twist), self.origin if self.origin.shape[0] == 1 else pad(self.origin))


def _relative_velocity(twists: _Twists | None, row_a, row_b, pos):
    """(K', 3, B) velocity of the contact points ``pos (K', 3, B)`` on shape A relative to
    shape B, from the moving slots' twists and each side's row among them
    ``row_a, row_b (K',)`` (S': does not move); ``row_b`` None when no shape B moves."""
    if twists is None:
        return torch.zeros_like(pos)
    if row_b is None:
        return twists.at(row_a, pos)
    twists = twists.padded()
    return twists.at(row_a, pos) - twists.at(row_b, pos)


def _entity_load(m: _Member, floating: bool, sk: dyn.StageKinematics, near: _Near, implicit: bool):
    """The :class:`~torchrbd.sim.dynamics.ContactLoad` of member ``m`` (see the module
    docstring): each contact's wrench ``W`` about ``p0`` and, if ``implicit``, its damping
    matrix ``Lambda`` (dense, 36 entries); both summed over the subtree of every joint
    in one matmul with the support mask (only the joints that move some pushing contact:
    the others get 0), then ``[W^T; Lambda] S_j`` in one product."""
    k, sign, support = _active(m, near)
    r = near.pos.index_select(0, k) - sk.p0.T[None]
    f = near.forces.index_select(0, k) * sign[:, None, None]
    per_contact = torch.cat([f, cross(r, f)], 1)  # wrenches [f; r x f] (Ke, 6, B)
    if implicit:
        c_n, c_t = near.c_n.index_select(0, k), near.c_t.index_select(0, k)
        lam = _damping_parameters(r, near.normal.index_select(0, k), c_t[:, None], (c_n - c_t)[:, None])
        per_contact = torch.cat([per_contact, lam], 1)
    if dyn.compacts(per_contact):
        moved = support.any(0).nonzero()[:, 0]  # joints moving some pushing contact
        subtree = mask_sum(support[:, moved].T, per_contact)  # (moved, 6 or 42, B)
        rows = _scatter_joints(moved, _matrix_times(subtree, sk.S.index_select(0, moved)), sk.n)  # (n, 1 or 7, B)
    else:
        rows = _matrix_times(mask_sum(support.T, per_contact), sk.S)  # every joint
    total = per_contact.sum(0)
    if not implicit:
        return dyn.ContactLoad(floating, sk.S, m.joint_support, total, rows[:, 0])
    lam_base = total[6:].unflatten(0, (6, 6))
    return dyn.ContactLoad(floating, sk.S, m.joint_support, total[:6], rows[:, 0], lam_base, rows[:, 1:])


def _scatter_joints(index, x, n: int):
    """``x (len(index), ...)`` placed at rows ``index`` of n rows, zeros elsewhere."""
    if index.numel() == n:
        return x
    return x.new_zeros((n,) + x.shape[1:]).index_copy(0, index, x)


def _active(m: _Member, near: _Near):
    """``(rows, sign, support)`` of the contacts of ``m`` that push in some environment:
    ``rows`` among the near contacts. The others have zero force and zero damping gains
    in every environment (and zero gradient: their normal force is clamped from below
    zero, or their depth is beyond the margin), so they are dropped from the sums; the
    value is the same."""
    keep = near.pushing.index_select(0, m.contact).nonzero()[:, 0] if dyn.compacts(near.pushing) else None
    k, sign, support = (m.contact, m.sign, m.support) if keep is None or keep.numel() == m.contact.numel() else \
        (m.contact[keep], m.sign[keep], m.support[keep])
    return (k if near.row is None else near.row.index_select(0, k)), sign, support


def _damping_parameters(r, n, a, b):
    """(Ke, 36, B) the contacts' damping matrices ``Lambda`` (6 x 6, row-major) from
    ``r, n (Ke, 3, B)`` (contact point from ``p0``, normal) and ``a = c_t``,
    ``b = c_n - c_t`` (Ke, 1, B): with ``D = a 1 + b n n^T`` and ``P = [1, -[r]x]``
    (twist about ``p0`` -> velocity of the point ``p0 + r``), ``Lambda = P^T D P =
    a P^T P + b u u^T``, ``u = P^T n = [n; r x n]``. Linear in ``(a, b)``, so sums of
    them are the matrices of the sums."""
    u = torch.cat([n, cross(r, n)], 1)
    return torch.addcmul(_point_inertia(a, r), (b * u)[:, :, None], u[:, None]).flatten(1, 2)


def _point_inertia(m, r):
    """(k, 6, 6, B) ``m P^T P = [[m 1, -m [r]x], [m [r]x, m (|r|^2 1 - r r^T)]]``, the
    spatial inertia about ``p0`` of point masses ``m (k, 1, B)`` at ``r (k, 3, B)``,
    stacked from its entries (one pass over the output)."""
    h = m * r  # first moment
    (h0, h1, h2), (g0, g1, g2) = h.unbind(1), (-h).unbind(1)
    c = [row.unbind(1) for row in (h[:, :, None] * r[:, None]).unbind(1)]  # m r r^T
    zero, m0, r2 = torch.zeros_like(h0), m[:, 0], c[0][0] + c[1][1] + c[2][2]
    rows = [
        [m0, zero, zero, zero, h2, g1],
        [zero, m0, zero, g2, zero, h0],
        [zero, zero, m0, h1, g0, zero],
        [zero, g2, h1],
        [h2, zero, g0],
        [g1, h0, zero],
    ]
    for i in range(3):
        rows[3 + i] += [r2 - c[i][j] if i == j else -c[i][j] for j in range(3)]
    return torch.stack([x for row in rows for x in row], 1).unflatten(1, (6, 6))


def _matrix_times(M, S):
    """``M S`` (k, r, B) for matrices stored row-major ``M (k, r * 6, B)`` and twists
    ``S (k, 6, B)``."""
    return matmul(M.unflatten(1, (-1, 6)), S[:, :, None])[:, :, 0]
