"""``RigidEntity``: one robot or rigid body of a scene, with Genesis-style accessors.

Every getter returns a ``gs.Tensor`` of the scene (connected to the autograd
graph when ``SimOptions(requires_grad=True)``); every setter accepts tensors,
arrays or lists, optional ``dofs_idx_local`` (``qs_idx_local``,
``links_idx_local``) and ``envs_idx``. With ``scene.build(n_envs=N)`` values
carry a leading ``N`` (or ``len(envs_idx)``) dimension; with ``n_envs=0`` they
do not.

Layout (see :mod:`torchrbd.sim.dynamics`): a floating base has ``qpos = [p (3),
quat wxyz (4), q (n)]`` and dof velocities ``[v (3), w (3), qd (n)]`` (base-origin
velocity and angular velocity in world axes). A floating base's *dof positions*
are ``[p (3), rotation vector (3), q (n)]`` (same size as the velocities).
"""

from __future__ import annotations

import copy
import dataclasses
import math

import torch

from ..errors import InputError, ModelError, SimulationError, checkable
from ..kindyn import KinDynComputations
from . import dynamics as dyn
from .getters import EntityGetters
from .indexing import WriteLog, as_index, as_value, shaped
from .setters import EntitySetters
from .tensor import wrap

DEFAULT_KP, DEFAULT_KV = 100.0, 10.0


class RigidLink:
    """A link of an entity (``entity.links``, ``entity.get_link(name)``)."""

    def __init__(self, entity, name: str, idx_local: int):
        self.entity, self.name, self.idx_local = entity, name, idx_local

    def __repr__(self):
        return f"RigidLink({self.name!r}, idx_local={self.idx_local})"


class RigidJoint:
    """A joint of an entity: ``dofs_idx_local`` (its velocity entries), ``qs_idx_local``
    (its qpos entries); ``dof_idx_local`` / ``q_idx_local`` is an int for 1-dof joints."""

    def __init__(self, entity, name: str, kind: str, dofs: list, qs: list):
        self.entity, self.name, self.type = entity, name, kind
        self.dofs_idx_local, self.qs_idx_local = dofs, qs
        self.n_dofs, self.n_qs = len(dofs), len(qs)

    @property
    def dof_idx_local(self):
        return self.dofs_idx_local[0] if self.n_dofs == 1 else self.dofs_idx_local

    @property
    def q_idx_local(self):
        return self.qs_idx_local[0] if self.n_qs == 1 else self.qs_idx_local

    def __repr__(self):
        return f"RigidJoint({self.name!r}, type={self.type!r}, dofs_idx_local={self.dofs_idx_local})"


class RigidEntity(EntityGetters, EntitySetters):
    """Created by :meth:`Scene.add_entity`; usable once the scene is built.

    This module holds the build, the internal state and the argument checks;
    the public getters and setters live in :mod:`.getters` and :mod:`.setters`."""

    def __init__(self, scene, idx: int, morph, material):
        self.scene, self.idx, self.morph, self.material = scene, idx, morph, material
        self.uid = f"{scene.uid}.{idx}"
        self._built = False

    def __repr__(self):
        state = f"n_dofs={self.n_dofs}, n_links={self.n_links}" if self._built else "not built"
        return f"RigidEntity({type(self.morph).__name__}, {state})"

    # ================================================================ build
    def _build(self):
        sc = self.scene
        loaded = self.morph.load(self.material)
        self._kd = KinDynComputations(loaded.model, dtype=sc.dtype, device=sc.device, gravity=sc.sim_options.gravity)
        # the model as loaded (CPU, float64) and the base pose at build, for the contact
        # plan, which is made on the CPU from the links' placements
        self._host_model = loaded.model
        self._host_pose = torch.cat([loaded.base_pos, loaded.base_quat]).to(dtype=torch.float64, device="cpu")
        model = self._kd.model
        self.floating = bool(loaded.floating)
        self.n_joints = model.n
        self.n_dofs = model.n + (6 if self.floating else 0)
        self.n_qs = model.n + (7 if self.floating else 0)
        self.n_links = model.nlink
        self._contact_excludes = loaded.contact_excludes
        B, nv = sc._B, self.n_dofs
        t = dict(dtype=sc.dtype, device=sc.device)
        pose0 = torch.cat([loaded.base_pos, loaded.base_quat]).to(**t)
        q0 = loaded.joint_q0.to(**t)
        qpos0 = torch.cat([pose0, q0]) if self.floating else q0
        self._qpos_init = qpos0.expand(B, self.n_qs).clone()
        self._pose_init = pose0.expand(B, 7).clone()
        self._default_inertial = self._kd.get_inertial_parameters()
        # per-dof parameters, rebuilt from their write logs on reset
        effort = model.effort if model.n else torch.zeros(0, **t)
        hi = torch.cat([torch.full((6 if self.floating else 0,), math.inf, **t), effort])
        self._kp = WriteLog(torch.full((B, nv), DEFAULT_KP, **t))
        self._kv = WriteLog(torch.full((B, nv), DEFAULT_KV, **t))
        self._lo = WriteLog(-hi.expand(B, nv))
        self._hi = WriteLog(hi.expand(B, nv))
        self._inertial = {k: WriteLog(v) for k, v in self._default_inertial.items()}
        self.links = [RigidLink(self, name, i) for i, name in enumerate(model.link_names)]
        off_v, off_q = (6, 7) if self.floating else (0, 0)
        self.joints = [RigidJoint(self, "root_joint", "free", list(range(6)), list(range(7)))] if self.floating else []
        kinds = {1: "revolute", 2: "prismatic"}
        for k, name in enumerate(model.joint_names):
            body = model.body_dof.index(k)
            self.joints.append(RigidJoint(self, name, kinds[int(model.joint_type[body])], [off_v + k], [off_q + k]))
        self._statics_cache = None
        self._built = True
        self._reset(None)
        self._check_mass_matrix()

    def _check_mass_matrix(self):
        if self.n_dofs == 0:
            return
        with torch.no_grad():
            M = self._mass_matrix(self._qpos, self._vel)
            if checkable(M) and not bool((torch.linalg.eigvalsh(M) > 0).all()):
                raise ModelError(
                    f"{self.morph!r}: the mass matrix is not positive definite at the initial configuration; "
                    "some joint moves links without mass or inertia (give them <inertial> data or armature)"
                )

    # ================================================================ internals
    def _statics(self) -> dyn.EntityStatics:
        if self._statics_cache is None:
            m, opts = self._kd.model, self.scene.rigid_options
            z = torch.zeros(0, dtype=self.scene.dtype, device=self.scene.device)
            lower = m.lower if m.n else z
            upper = m.upper if m.n else z
            has_lo, has_up = torch.isfinite(lower), torch.isfinite(upper)
            self._statics_cache = dyn.EntityStatics(
                kd=self._kd,
                floating=self.floating,
                n=m.n,
                damping=m.damping if m.n else z,
                stiffness=m.stiffness if m.n else z,
                lower=torch.where(has_lo, lower, 0.0),
                upper=torch.where(has_up, upper, 0.0),
                has_lower=has_lo,
                has_upper=has_up,
                limited=bool(opts.enable_joint_limit and m.n and self._has_limits()),
                limit_timeconst=max(opts.joint_limit_timeconst, 2 * self.scene.substep_dt),
                limit_dampratio=opts.joint_limit_dampratio,
            )
        return self._statics_cache

    def _has_limits(self) -> bool:
        """Whether some joint has a finite position limit (read from the model as loaded,
        on the CPU: no device synchronisation)."""
        host = self._host_model
        return bool(torch.isfinite(host.lower).any() or torch.isfinite(host.upper).any())

    def _statics_with(self, mass, com, inertia) -> dyn.EntityStatics:
        """Statics whose model uses the given inertial parameters (for checkpointed
        segments, which must see the tensors they were handed)."""
        kd = copy.copy(self._kd)
        kd.set_inertial_parameters(mass=mass, com=com, inertia=inertia)
        return dataclasses.replace(self._statics(), kd=kd)

    def _control(self) -> dyn.EntityControl:
        return dyn.EntityControl(
            mode=self._mode, force=self._force, pos_target=self._pos_target, vel_target=self._vel_target,
            kp=self._kp.value, kv=self._kv.value, lo=self._lo.value, hi=self._hi.value,
            base_pose=None if self.floating else self._base_pose,
            has_position=self._has_position,
        )

    def _apply_inertial(self):
        self._kd.set_inertial_parameters(**{k: log.value for k, log in self._inertial.items()})
        self._statics_cache = None

    def _reset(self, state):
        """Initial (or given) state as fresh leaves; controls cleared; parameters rebuilt."""
        sc = self.scene
        B, nv = sc._B, self.n_dofs
        if state is None:
            qpos, vel, pose = self._qpos_init, torch.zeros(B, nv, dtype=sc.dtype, device=sc.device), self._pose_init
        else:
            qpos, vel, pose = state
        self._qpos = qpos.detach().clone().requires_grad_(sc.requires_grad)
        self._vel = vel.detach().clone().requires_grad_(sc.requires_grad)
        self._base_pose = pose.detach().clone().requires_grad_(sc.requires_grad)
        self._anchor = torch.zeros((), dtype=sc.dtype, device=sc.device, requires_grad=sc.requires_grad)
        zeros = torch.zeros(B, nv, dtype=sc.dtype, device=sc.device)
        self._mode = torch.zeros(B, nv, dtype=torch.long, device=sc.device)
        self._has_position = False  # some dof in POSITION mode (kept in step with _mode)
        self._force, self._pos_target, self._vel_target = zeros, zeros, zeros
        with torch.set_grad_enabled(sc.requires_grad):
            for log in (self._kp, self._kv, self._lo, self._hi, *self._inertial.values()):
                log.rebuild()
            self._apply_inertial()

    def _state(self):
        return self._qpos, self._vel, self._base_pose

    def _base(self, qpos):
        return dyn.base_pose(self._statics(), qpos, self._base_pose)

    def _mass_matrix(self, qpos, vel):
        R, p, _ = self._base(qpos)
        st = self._statics()
        nu = vel[:, :6] if self.floating else None
        return dyn.mass_and_bias(self._kd, R, p, dyn.joints(st, qpos), nu, dyn.joints(st, vel), self.floating)[0]

    # ---------------------------------------------------------- arguments
    def _name(self, method):
        return f"{type(self.morph).__name__} entity {self.idx}: {method}"

    def _need_built(self, method):
        if not self._built:
            raise SimulationError(f"{self._name(method)} needs a built scene; call scene.build() first")

    def _rows(self, envs_idx, method):
        if self.scene.n_envs == 0:
            if envs_idx is not None:
                raise InputError(f"{self._name(method)}: envs_idx given but the scene was built with n_envs=0")
            return None
        return as_index(envs_idx, self.scene.n_envs, "envs_idx", self._name(method))

    def _value(self, value, method, what, rows, n_cols, trailing=()):
        sc = self.scene
        v = as_value(value, sc, sc.dtype, sc.device, self._name(method), what)
        n_rows = sc._B if rows is None else len(rows)
        v = shaped(v, sc.n_envs > 0, n_rows, n_cols, self._name(method), what, trailing)
        return v if sc.requires_grad else v.detach()

    def _out(self, x, rows):
        """Select envs of a (B, ...) tensor, drop the env dim for n_envs=0, wrap."""
        if rows is not None:
            x = x[rows.to(x.device)]
        if self.scene.n_envs == 0:
            x = x[0]
        return wrap(x.clone(), self.scene)

    def _grad_ctx(self):
        return torch.set_grad_enabled(self.scene.requires_grad)
