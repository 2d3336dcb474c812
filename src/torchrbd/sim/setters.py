"""Setters of :class:`~torchrbd.sim.entity.RigidEntity` (a mixin): state, gains,
force ranges, inertial parameters and control commands.

Writes are out of place (see :mod:`torchrbd.sim.indexing`), so tensors already
in the autograd graph are never modified."""

from __future__ import annotations

import torch

from ..errors import InputError
from ..spatial import quat_multiply
from . import dynamics as dyn
from .indexing import as_index, as_value, write


class EntitySetters:
    def _anchored(self, value):
        """Constants written into the state stay connected to the graph (through a
        scene-owned zero leaf), so every getter's result can be backpropagated."""
        if self.scene.requires_grad and not value.requires_grad:
            return value + self._anchor
        return value

    def _set_state(self, which, value, rows, cols, zero_velocity):
        value = self._anchored(value)
        if which == "qpos":
            self._qpos = write(self._qpos, value, rows, cols)
        elif which == "vel":
            self._vel = write(self._vel, value, rows, cols)
        else:
            self._base_pose = write(self._base_pose, value, rows, cols)
        if zero_velocity and self.n_dofs:
            n = self.scene._B if rows is None else len(rows)
            zeros = torch.zeros(n, self.n_dofs, dtype=self._vel.dtype, device=self._vel.device)
            self._vel = write(self._vel, self._anchored(zeros), rows, None)

    def set_qpos(self, qpos, qs_idx_local=None, envs_idx=None, zero_velocity: bool = True):
        """Set generalized positions (``[p, quat wxyz, q]`` for a floating base); by
        default also zero the entity's velocities in those envs."""
        self._need_built("set_qpos")
        rows = self._rows(envs_idx, "set_qpos")
        cols = as_index(qs_idx_local, self.n_qs, "qs_idx_local", self._name("set_qpos"))
        with self._grad_ctx():
            v = self._value(qpos, "set_qpos", "qpos", rows, self.n_qs if cols is None else len(cols))
            self._set_state("qpos", v, rows, cols, zero_velocity)

    def set_dofs_position(self, position, dofs_idx_local=None, envs_idx=None, zero_velocity: bool = True):
        """Set dof positions (floating base: ``[p, rotation vector]`` first); by default
        also zero the entity's velocities in those envs."""
        self._need_built("set_dofs_position")
        rows = self._rows(envs_idx, "set_dofs_position")
        cols = as_index(dofs_idx_local, self.n_dofs, "dofs_idx_local", self._name("set_dofs_position"))
        with self._grad_ctx():
            v = self._value(position, "set_dofs_position", "position", rows, self.n_dofs if cols is None else len(cols))
            touches_rot = self.floating and (cols is None or bool(((cols >= 3) & (cols < 6)).any()))
            if not touches_rot:
                qcols = None if cols is None else cols + (cols >= 6).long() * (1 if self.floating else 0)
                self._set_state("qpos", v, rows, qcols, zero_velocity)
            else:
                current = self._qpos if rows is None else self._qpos[rows.to(self._qpos.device)]
                dpos = write(self._dofs_position(current), v, None, cols)
                self._set_state("qpos", self._qpos_from_dofs(dpos), rows, None, zero_velocity)

    def set_dofs_velocity(self, velocity, dofs_idx_local=None, envs_idx=None):
        """Set dof velocities (floating base: world linear and angular velocity first)."""
        self._need_built("set_dofs_velocity")
        rows = self._rows(envs_idx, "set_dofs_velocity")
        cols = as_index(dofs_idx_local, self.n_dofs, "dofs_idx_local", self._name("set_dofs_velocity"))
        with self._grad_ctx():
            v = self._value(velocity, "set_dofs_velocity", "velocity", rows, self.n_dofs if cols is None else len(cols))
            self._set_state("vel", v, rows, cols, False)

    def _set_base(self, value, lo, hi, method, envs_idx, zero_velocity, relative=False):
        self._need_built(method)
        rows = self._rows(envs_idx, method)
        with self._grad_ctx():
            v = self._value(value, method, "value", rows, hi - lo)
            cols = torch.arange(lo, hi)
            target = "qpos" if self.floating else "pose"
            if relative:
                cur = (self._qpos if self.floating else self._base_pose)[:, lo:hi]
                cur = cur if rows is None else cur[rows.to(cur.device)]
                v = cur + v if hi - lo == 3 else quat_multiply(v, cur)
            self._set_state(target, v, rows, cols, zero_velocity and self.floating)

    def set_pos(self, pos, envs_idx=None, zero_velocity: bool = True, relative: bool = False):
        """Move the base to world position ``pos`` (3,) (a fixed base too)."""
        self._set_base(pos, 0, 3, "set_pos", envs_idx, zero_velocity, relative)

    def set_quat(self, quat_wxyz, envs_idx=None, zero_velocity: bool = True, relative: bool = False):
        """Set the base orientation (wxyz) (a fixed base too)."""
        self._set_base(quat_wxyz, 3, 7, "set_quat", envs_idx, zero_velocity, relative)

    # ------------------------------------------------------------- gains
    def _set_param(self, log, value, dofs_idx_local, envs_idx, method, what):
        self._need_built(method)
        rows = self._rows(envs_idx, method)
        cols = as_index(dofs_idx_local, self.n_dofs, "dofs_idx_local", self._name(method))
        with self._grad_ctx():
            v = self._value(value, method, what, rows, self.n_dofs if cols is None else len(cols))
            log.write(v, rows, cols)

    def set_dofs_kp(self, kp, dofs_idx_local=None, envs_idx=None):
        """Position gains of ``control_dofs_position`` (default 100)."""
        self._set_param(self._kp, kp, dofs_idx_local, envs_idx, "set_dofs_kp", "kp")

    def set_dofs_kv(self, kv, dofs_idx_local=None, envs_idx=None):
        """Velocity gains of ``control_dofs_position`` / ``control_dofs_velocity`` (default 10)."""
        self._set_param(self._kv, kv, dofs_idx_local, envs_idx, "set_dofs_kv", "kv")

    def set_dofs_force_range(self, lower, upper, dofs_idx_local=None, envs_idx=None):
        """Bounds of every control force (default: the model's effort limits, else unbounded)."""
        self._set_param(self._lo, lower, dofs_idx_local, envs_idx, "set_dofs_force_range", "lower")
        self._set_param(self._hi, upper, dofs_idx_local, envs_idx, "set_dofs_force_range", "upper")

    def _set_inertial(self, key, value, links_idx_local, method, trailing):
        self._need_built(method)
        cols = as_index(links_idx_local, self.n_links, "links_idx_local", self._name(method))
        k = self.n_links if cols is None else len(cols)
        sc = self.scene
        with self._grad_ctx():
            v = as_value(value, sc, sc.dtype, sc.device, self._name(method), key)
            if tuple(v.shape) != (k, *trailing):
                raise InputError(f"{self._name(method)}: {key} has shape {tuple(v.shape)}, expected {(k, *trailing)}")
            self._inertial[key].write(v if sc.requires_grad else v.detach(), cols, None)
            self._apply_inertial()

    def set_links_inertial_mass(self, mass, links_idx_local=None):
        """Link masses (k,), kg; may require grad (shared by all envs)."""
        self._set_inertial("mass", mass, links_idx_local, "set_links_inertial_mass", ())

    def set_links_com(self, com, links_idx_local=None):
        """Link centres of mass (k, 3) in the link frames, m."""
        self._set_inertial("com", com, links_idx_local, "set_links_com", (3,))

    def set_links_inertia(self, inertia, links_idx_local=None):
        """Link rotational inertias (k, 3, 3) about the CoM in link axes, kg m^2."""
        self._set_inertial("inertia", inertia, links_idx_local, "set_links_inertia", (3, 3))

    # ------------------------------------------------------------- control
    def _set_control(self, mode, value, dofs_idx_local, envs_idx, method, what):
        self._need_built(method)
        rows = self._rows(envs_idx, method)
        cols = as_index(dofs_idx_local, self.n_dofs, "dofs_idx_local", self._name(method))
        with self._grad_ctx():
            v = self._value(value, method, what, rows, self.n_dofs if cols is None else len(cols))
            modes = torch.full(v.shape, mode, dtype=torch.long, device=v.device)
            self._mode = write(self._mode, modes, rows, cols)
            self._has_position = mode == dyn.POSITION or (
                self._has_position and bool((self._mode == dyn.POSITION).any())
            )
            if mode == dyn.FORCE:
                self._force = write(self._force, v, rows, cols)
            elif mode == dyn.VELOCITY:
                self._vel_target = write(self._vel_target, v, rows, cols)
            else:
                self._pos_target = write(self._pos_target, v, rows, cols)
                self._vel_target = write(self._vel_target, torch.zeros_like(v), rows, cols)

    def control_dofs_force(self, force, dofs_idx_local=None, envs_idx=None):
        """Apply generalized forces (N, N m) from the next step on (until changed)."""
        self._set_control(dyn.FORCE, force, dofs_idx_local, envs_idx, "control_dofs_force", "force")

    def control_dofs_velocity(self, velocity, dofs_idx_local=None, envs_idx=None):
        """Track dof velocities with ``kv (v* - v)``."""
        self._set_control(dyn.VELOCITY, velocity, dofs_idx_local, envs_idx, "control_dofs_velocity", "velocity")

    def control_dofs_position(self, position, dofs_idx_local=None, envs_idx=None):
        """Track dof positions with ``kp (q* - q) - kv v`` (clamped to the force range)."""
        self._set_control(dyn.POSITION, position, dofs_idx_local, envs_idx, "control_dofs_position", "position")

