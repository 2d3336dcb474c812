"""Getters of :class:`~torchrbd.sim.entity.RigidEntity` (a mixin): state, links,
Jacobians, mass matrix, gains and model properties, as ``gs.Tensor``s."""

from __future__ import annotations

import math

import torch

from ..errors import FrameNotFoundError, InputError, JointNotFoundError
from ..spatial import homogeneous, matrix_to_quat, skew
from . import dynamics as dyn
from . import quaternion as quat
from .indexing import as_index, as_value
from .kinematics import link_poses, link_velocities
from .tensor import wrap


class EntityGetters:
    def get_link(self, name: str):
        """The :class:`~torchrbd.sim.entity.RigidLink` called ``name``."""
        self._need_built("get_link")
        for link in self.links:
            if link.name == name:
                return link
        raise FrameNotFoundError(name, [lk.name for lk in self.links], self._kd.model.name)

    def get_joint(self, name: str):
        """The :class:`~torchrbd.sim.entity.RigidJoint` called ``name`` (``"root_joint"``
        for a floating base)."""
        self._need_built("get_joint")
        for j in self.joints:
            if j.name == name:
                return j
        raise JointNotFoundError(name, [j.name for j in self.joints], self._kd.model.name)

    def get_qpos(self, qs_idx_local=None, envs_idx=None):
        """(..., n_qs) generalized positions (or the selected entries)."""
        self._need_built("get_qpos")
        rows = self._rows(envs_idx, "get_qpos")
        cols = as_index(qs_idx_local, self.n_qs, "qs_idx_local", self._name("get_qpos"))
        x = self._qpos if cols is None else self._qpos[:, cols.to(self._qpos.device)]
        return self._out(x, rows)

    def _dofs_position(self, qpos):
        if not self.floating:
            return qpos
        return torch.cat([qpos[:, :3], quat.log(qpos[:, 3:7]), qpos[:, 7:]], -1)

    def _qpos_from_dofs(self, dpos):
        if not self.floating:
            return dpos
        return torch.cat([dpos[:, :3], quat.exp(dpos[:, 3:6]), dpos[:, 6:]], -1)

    def get_dofs_position(self, dofs_idx_local=None, envs_idx=None):
        """(..., k) dof positions (floating base: ``[p, rotation vector]`` first)."""
        self._need_built("get_dofs_position")
        rows = self._rows(envs_idx, "get_dofs_position")
        cols = as_index(dofs_idx_local, self.n_dofs, "dofs_idx_local", self._name("get_dofs_position"))
        with self._grad_ctx():
            x = self._dofs_position(self._qpos)
        return self._out(x if cols is None else x[:, cols.to(x.device)], rows)

    def get_dofs_velocity(self, dofs_idx_local=None, envs_idx=None):
        """(..., k) dof velocities (floating base: world linear, world angular first)."""
        self._need_built("get_dofs_velocity")
        rows = self._rows(envs_idx, "get_dofs_velocity")
        cols = as_index(dofs_idx_local, self.n_dofs, "dofs_idx_local", self._name("get_dofs_velocity"))
        return self._out(self._vel if cols is None else self._vel[:, cols.to(self._vel.device)], rows)

    def _base_part(self, lo, hi, method, envs_idx, velocity=False):
        self._need_built(method)
        rows = self._rows(envs_idx, method)
        if self.floating:
            x = (self._vel if velocity else self._qpos)[:, lo:hi]
        else:
            x = self._base_pose[:, lo:hi]
            if velocity:
                x = 0 * self._base_pose[:, :3]  # a fixed base does not move (still in the graph)
        return self._out(x, rows)

    def get_pos(self, envs_idx=None):
        """(..., 3) world position of the base (root link origin)."""
        return self._base_part(0, 3, "get_pos", envs_idx)

    def get_quat(self, envs_idx=None):
        """(..., 4) base orientation, wxyz."""
        return self._base_part(3, 7, "get_quat", envs_idx)

    def get_vel(self, envs_idx=None):
        """(..., 3) base-origin linear velocity, world axes."""
        return self._base_part(0, 3, "get_vel", envs_idx, velocity=True)

    def get_ang(self, envs_idx=None):
        """(..., 3) base angular velocity, world axes."""
        return self._base_part(3, 6, "get_ang", envs_idx, velocity=True)

    def _links(self, links_idx_local, envs_idx, method, velocities: bool = False):
        """The selected links' world poses ``(R, p)``, or with ``velocities`` their
        velocities ``(v, w)`` (see :mod:`.kinematics`), and the selected rows."""
        self._need_built(method)
        rows = self._rows(envs_idx, method)
        cols = as_index(links_idx_local, self.n_links, "links_idx_local", self._name(method))
        with self._grad_ctx():
            R, p, _ = self._base(self._qpos)
            st = self._statics()
            q = dyn.joints(st, self._qpos)
            if velocities:
                nu = self._vel[:, :6] if self.floating else None
                out = link_velocities(self._kd, R, p, q, nu, dyn.joints(st, self._vel))
            else:
                out = link_poses(self._kd, R, p, q)
        if cols is not None:
            out = tuple(x[:, cols.to(x.device)] for x in out)
        return out, rows

    def get_links_pos(self, links_idx_local=None, envs_idx=None):
        """(..., n_links, 3) world positions of the link frames' origins."""
        (_, p), rows = self._links(links_idx_local, envs_idx, "get_links_pos")
        return self._out(p, rows)

    def get_links_quat(self, links_idx_local=None, envs_idx=None):
        """(..., n_links, 4) world orientations of the link frames, wxyz (w >= 0)."""
        (R, _), rows = self._links(links_idx_local, envs_idx, "get_links_quat")
        with self._grad_ctx():
            return self._out(matrix_to_quat(R), rows)

    def get_links_vel(self, links_idx_local=None, envs_idx=None):
        """(..., n_links, 3) world velocities of the link frames' origins."""
        (v, _), rows = self._links(links_idx_local, envs_idx, "get_links_vel", velocities=True)
        return self._out(v, rows)

    def get_links_ang(self, links_idx_local=None, envs_idx=None):
        """(..., n_links, 3) angular velocities of the links, world axes."""
        (_, w), rows = self._links(links_idx_local, envs_idx, "get_links_ang", velocities=True)
        return self._out(w, rows)

    def get_mass_mat(self, envs_idx=None):
        """(..., n_dofs, n_dofs) mass matrix in the dof-velocity layout (armature included)."""
        self._need_built("get_mass_mat")
        rows = self._rows(envs_idx, "get_mass_mat")
        with self._grad_ctx():
            return self._out(self._mass_matrix(self._qpos, self._vel), rows)

    def get_jacobian(self, link, local_point=None, envs_idx=None):
        """(..., 6, n_dofs) Jacobian of a link (``RigidLink``, name or index): rows
        ``[linear velocity of the link origin (or of local_point, in link axes); angular
        velocity]``, world axes, from the dof velocities."""
        self._need_built("get_jacobian")
        if hasattr(link, "idx_local") and hasattr(link, "name"):  # a RigidLink
            name = link.name
        elif isinstance(link, int):
            name = self.links[as_index(link, self.n_links, "link", self._name("get_jacobian")).item()].name
        else:
            name = self.get_link(str(link)).name
        rows = self._rows(envs_idx, "get_jacobian")
        with self._grad_ctx():
            R, p, _ = self._base(self._qpos)
            H = homogeneous(R, p)
            q = dyn.joints(self._statics(), self._qpos)
            J = self._kd.jacobian(name, H, q)
            if not self.floating:
                J = J[..., 6:]
            if local_point is not None:
                lp = as_value(local_point, self.scene, self.scene.dtype, self.scene.device,
                              self._name("get_jacobian"), "local_point").reshape(3)
                Rl = self._kd.forward_kinematics(name, H, q)[:, :3, :3]
                r = (Rl @ lp)  # (B, 3)
                J = torch.cat([J[:, :3] - skew(r) @ J[:, 3:], J[:, 3:]], -2)
        return self._out(J, rows)

    def get_dofs_kp(self, dofs_idx_local=None, envs_idx=None):
        return self._param_out(self._kp.value, dofs_idx_local, envs_idx, "get_dofs_kp")

    def get_dofs_kv(self, dofs_idx_local=None, envs_idx=None):
        return self._param_out(self._kv.value, dofs_idx_local, envs_idx, "get_dofs_kv")

    def get_dofs_force_range(self, dofs_idx_local=None, envs_idx=None):
        """(lower, upper), each (..., k)."""
        return (self._param_out(self._lo.value, dofs_idx_local, envs_idx, "get_dofs_force_range"),
                self._param_out(self._hi.value, dofs_idx_local, envs_idx, "get_dofs_force_range"))

    def get_dofs_control_force(self, dofs_idx_local=None, envs_idx=None):
        """(..., k) the force the controller applies at the current state (after clamping)."""
        self._need_built("get_dofs_control_force")
        with self._grad_ctx():
            _, _, qc = self._base(self._qpos)
            f = dyn.control_force(self._statics(), self._control(), self._qpos, self._vel, qc)[0]
        return self._param_out(f, dofs_idx_local, envs_idx, "get_dofs_control_force")

    def _joint_prop(self, name):
        m = self._kd.model
        vals = getattr(m, name) if m.n else torch.zeros(0, dtype=self.scene.dtype, device=self.scene.device)
        fill = {"lower": -math.inf, "upper": math.inf}.get(name, 0.0)
        base = torch.full((6 if self.floating else 0,), fill, dtype=vals.dtype, device=vals.device)
        return torch.cat([base, vals]).expand(self.scene._B, self.n_dofs)

    def get_dofs_limit(self, dofs_idx_local=None, envs_idx=None):
        """(lower, upper) joint position limits, each (..., k) (inf when unlimited)."""
        return (self._param_out(self._joint_prop("lower"), dofs_idx_local, envs_idx, "get_dofs_limit"),
                self._param_out(self._joint_prop("upper"), dofs_idx_local, envs_idx, "get_dofs_limit"))

    def get_dofs_damping(self, dofs_idx_local=None, envs_idx=None):
        return self._param_out(self._joint_prop("damping"), dofs_idx_local, envs_idx, "get_dofs_damping")

    def get_dofs_stiffness(self, dofs_idx_local=None, envs_idx=None):
        return self._param_out(self._joint_prop("stiffness"), dofs_idx_local, envs_idx, "get_dofs_stiffness")

    def get_dofs_armature(self, dofs_idx_local=None, envs_idx=None):
        return self._param_out(self._joint_prop("armature"), dofs_idx_local, envs_idx, "get_dofs_armature")

    def _param_out(self, x, dofs_idx_local, envs_idx, method):
        self._need_built(method)
        rows = self._rows(envs_idx, method)
        cols = as_index(dofs_idx_local, self.n_dofs, "dofs_idx_local", self._name(method))
        return self._out(x if cols is None else x[:, cols.to(x.device)], rows)

    def get_links_inertial_mass(self, links_idx_local=None):
        """(k,) link masses, kg (shared by all envs)."""
        self._need_built("get_links_inertial_mass")
        cols = as_index(links_idx_local, self.n_links, "links_idx_local", self._name("get_links_inertial_mass"))
        m = self._inertial["mass"].value
        return wrap((m if cols is None else m[cols.to(m.device)]).clone(), self.scene)

    def get_mass(self):
        """Total mass, kg (scalar)."""
        self._need_built("get_mass")
        return wrap(self._inertial["mass"].value.sum(), self.scene)


    def get_contacts(self, with_entity=None) -> dict:
        """The candidate contacts acting on this entity at the current state.

        A fixed number ``K`` of candidates (every contact the collision plan can
        produce between this entity's geoms and the others'), evaluated now with
        the scene's contact law; ``with_entity`` keeps those with that entity only.
        Side ``a`` is this entity, ``b`` the other one. Tensors carry a leading
        ``n_envs`` dimension when the scene has one:

        * ``position`` (..., K, 3): world point midway between the two surfaces;
        * ``normal`` (..., K, 3): unit, pushing this entity out of the other;
        * ``force`` (..., K, 3): world force on this entity (the other gets ``-force``);
        * ``penetration`` (..., K): depth in m (< 0: separated by that distance);
        * ``valid_mask`` (..., K) bool: the contact is active (pushes: normal force > 0);
        * ``link_a``, ``link_b``, ``geom_a``, ``geom_b``: lists of K names
          (``link_b`` is ``"world"`` for static MJCF world geoms);
        * ``entity_b`` (K,) long: index of the other entity in ``scene.entities``
          (-1 for static world geoms).

        Empty (K = 0) when collisions are disabled or nothing can touch this entity.
        """
        self._need_built("get_contacts")
        sc = self.scene
        if with_entity is not None and getattr(with_entity, "scene", None) is not sc:
            raise InputError(f"{self._name('get_contacts')}: with_entity must be an entity of this scene")
        with self._grad_ctx():
            ents = sc._dynamic()
            statics, ctrls = [e._statics() for e in ents], [e._control() for e in ents]
            result = sc._contact_terms(statics, ctrls, [(e._qpos, e._vel) for e in ents])
            if result is None:
                out = _no_contacts(sc)
            else:
                out = sc._contact_stage.entity_contacts(sc, self, result, with_entity)
        for key, value in out.items():
            if isinstance(value, torch.Tensor) and key != "entity_b":
                out[key] = wrap((value if sc.n_envs else value[0]).contiguous(), sc)  # not views of batch-last memory
        return out


def _no_contacts(scene) -> dict:
    t = dict(dtype=scene.dtype, device=scene.device)
    B = scene._B
    return {
        "position": torch.zeros(B, 0, 3, **t), "normal": torch.zeros(B, 0, 3, **t),
        "force": torch.zeros(B, 0, 3, **t), "penetration": torch.zeros(B, 0, **t),
        "valid_mask": torch.zeros(B, 0, dtype=torch.bool, device=scene.device),
        "link_a": [], "link_b": [], "geom_a": [], "geom_b": [],
        "entity_b": torch.zeros(0, dtype=torch.long, device=scene.device),
    }
