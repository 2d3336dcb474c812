"""The adam-compatible facade: :class:`KinDynComputations`.

It checks and broadcasts arguments, moves the model to the inputs' dtype and
device, calls the pure algorithms (which work in the world frame) and converts
results to the chosen velocity representation. The representation is a setting
of the facade only; the algorithms receive it explicitly.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from . import algorithms as alg
from .algorithms import representation as rep_
from .algorithms.representation import Representations
from .errors import InputError, ModelError
from .model import Model, load_urdf
from .spatial import homogeneous, matvec

_SPECS = {
    "base_transform": (4, 4),
    "joint_positions": ("n",),
    "base_velocity": (6,),
    "joint_velocities": ("n",),
    "joint_torques": ("n",),
    "base_acceleration": (6,),
    "joint_accelerations": ("n",),
}


class KinDynComputations:
    """Kinematics and dynamics of one robot, batched over leading dimensions.

    Args:
        model: URDF path or XML string, a ``mujoco.MjModel``, or a :class:`~torchrbd.model.Model`.
        joints_name_list: order of the joint coordinates; movable joints not listed
            are locked at 0. ``None``: every movable joint in depth-first tree order.
        dtype, device: where non-tensor inputs (lists, numpy arrays) are placed
            (default float64, CPU). Tensor inputs keep their own dtype and device.
        gravity: (3,) gravity in m/s^2; default 9.80665 along -z for URDF,
            ``opt.gravity`` for MuJoCo models.
        root_link: force the base link of a URDF (default: the root of the tree).

    Generalized velocities are ``[base velocity (6); joint velocities (n)]`` with
    the base velocity in the representation set by
    :meth:`set_frame_velocity_representation` (MIXED by default).
    """

    def __init__(self, model, joints_name_list=None, root_link=None, *, dtype=None, device=None, gravity=None):
        if isinstance(model, Model):
            if joints_name_list is not None and list(joints_name_list) != list(model.joint_names):
                raise ModelError("joints_name_list cannot reorder an already built Model; load the file again")
            m = model
        elif _is_mujoco_model(model):
            from .model import from_mujoco_model

            m = from_mujoco_model(model, joints_name_list)
        elif isinstance(model, (str, os.PathLike)):
            if isinstance(model, str) and model.lstrip().startswith("<mujoco"):
                raise ModelError("got an MJCF string; use KinDynComputations.from_mjcf(path)")
            if not isinstance(model, str) or not model.lstrip().startswith("<"):
                if Path(model).suffix.lower() == ".xml":
                    from .model import load_mjcf

                    m = load_mjcf(model, joints_name_list)
                else:
                    m = load_urdf(model, joints_name_list, root_link=root_link)
            else:
                m = load_urdf(model, joints_name_list, root_link=root_link)
        else:
            raise ModelError(
                f"cannot build a model from {type(model).__name__}; expected a URDF path or string, "
                "a mujoco.MjModel or a torchrbd Model"
            )
        if gravity is not None:
            m = m.replace(gravity=torch.as_tensor(gravity, dtype=torch.float64).reshape(3))
        self._dtype = dtype or torch.float64
        self._device = torch.device(device) if device is not None else torch.device("cpu")
        self._set_model(m.to(self._dtype, self._device))
        self.representation = Representations.MIXED_REPRESENTATION

    # ----------------------------------------------------------- constructors
    @classmethod
    def from_urdf(cls, urdf, joints_name_list=None, root_link=None, **kw):
        return cls(urdf, joints_name_list, root_link, **kw)

    @classmethod
    def from_mujoco_model(cls, mj_model, joints_name_list=None, **kw):
        return cls(mj_model, joints_name_list, **kw)

    @classmethod
    def from_mjcf(cls, path, joints_name_list=None, **kw):
        from .model import load_mjcf

        return cls(load_mjcf(path, joints_name_list), **kw)

    # ----------------------------------------------------------- model state
    def _set_model(self, model: Model):
        self._model = model
        self._cache = {}

    @property
    def model(self) -> Model:
        return self._model

    @property
    def NDoF(self) -> int:
        return self._model.n

    @property
    def joints_name_list(self) -> list:
        return list(self._model.joint_names)

    @property
    def frame_names(self) -> list:
        return self._model.frame_names()

    def set_frame_velocity_representation(self, representation: Representations) -> None:
        """Choose BODY_FIXED, MIXED (default) or INERTIAL_FIXED for every later call."""
        if not isinstance(representation, Representations):
            raise InputError(f"expected a torchrbd.Representations member, got {representation!r}")
        self.representation = representation

    def get_total_mass(self) -> torch.Tensor:
        return self._model.link_mass.sum()

    @property
    def gravity(self) -> torch.Tensor:
        """(3,) gravity acceleration, m/s^2."""
        return self._model.gravity

    @gravity.setter
    def gravity(self, g):
        self._set_model(self._model.replace(gravity=torch.as_tensor(g).to(self._model.gravity).reshape(3)))

    @property
    def g(self) -> torch.Tensor:
        """adam's 6D gravity ``[g; 0]``."""
        return torch.cat([self.gravity, torch.zeros_like(self.gravity)])

    def get_inertial_parameters(self) -> dict:
        """Per link (``model.link_names`` order): mass (nlink,), com (nlink, 3) in the
        link frame, inertia (nlink, 3, 3) about the CoM in link axes."""
        m = self._model
        return {"mass": m.link_mass, "com": m.link_com, "inertia": m.link_inertia}

    def set_inertial_parameters(self, mass=None, com=None, inertia=None) -> None:
        """Replace link inertial parameters (tensors, may require grad; shapes as
        :meth:`get_inertial_parameters`). Gradients flow from every later result."""
        changes = {}
        for key, field, shape in (
            ("mass", "link_mass", (self._model.nlink,)),
            ("com", "link_com", (self._model.nlink, 3)),
            ("inertia", "link_inertia", (self._model.nlink, 3, 3)),
        ):
            value = locals()[key]
            if value is None:
                continue
            value = torch.as_tensor(value)
            if tuple(value.shape) != shape:
                raise InputError(f"{key}: expected shape {shape}, got {tuple(value.shape)}")
            changes[field] = value
        self._set_model(self._model.replace(**changes))

    # ------------------------------------------------------------- plumbing
    def _model_for(self, dtype, device) -> Model:
        key = (dtype, str(device))
        if key not in self._cache:
            model = self._model.to(dtype, device)
            if any(getattr(model, f).requires_grad for f in model.tensor_fields()):
                return model  # keep the conversion in each call's graph
            self._cache[key] = model
        return self._cache[key]

    def _inputs(self, **named):
        """Check, broadcast and flatten named arguments.

        Returns (model, batch_shape, dict of (B, *spec) tensors)."""
        n = self._model.n
        tensors = {k: v for k, v in named.items() if isinstance(v, torch.Tensor)}
        ref = next(iter(tensors.values()), None)
        dtype = ref.dtype if ref is not None else self._dtype
        device = ref.device if ref is not None else self._device
        out, batch = {}, []
        for name, value in named.items():
            spec = tuple(n if s == "n" else s for s in _SPECS[name])
            if not isinstance(value, torch.Tensor):
                try:
                    value = torch.as_tensor(value, dtype=dtype, device=device)
                except (TypeError, ValueError, RuntimeError) as e:
                    raise InputError(f"{name}: cannot convert {type(value).__name__} to a tensor ({e})") from None
            if not value.is_floating_point():
                raise InputError(f"{name}: expected a floating-point tensor, got dtype {value.dtype}")
            if value.dtype != dtype:
                raise InputError(
                    f"{name}: dtype {value.dtype} differs from {dtype} of the other arguments; "
                    "convert explicitly (torchrbd never casts silently)"
                )
            if value.device != device:
                raise InputError(f"{name}: on device {value.device}, the other arguments are on {device}")
            k = len(spec)
            if value.dim() < k or tuple(value.shape[value.dim() - k :]) != spec:
                raise InputError(
                    f"{name}: expected shape (..., {', '.join(map(str, spec))}), got {tuple(value.shape)}"
                    + (f" (the model has {n} joint coordinates)" if "n" in _SPECS[name] else "")
                )
            out[name] = value
            batch.append(value.shape[: value.dim() - k])
        try:
            batch_shape = torch.broadcast_shapes(*batch)
        except RuntimeError:
            shapes = ", ".join(f"{k}: {tuple(b)}" for k, b in zip(out, batch))
            raise InputError(f"batch shapes do not broadcast ({shapes})") from None
        B = 1
        for s in batch_shape:
            B *= s
        flat = {}
        for name, value in out.items():
            spec = value.shape[value.dim() - len(_SPECS[name]) :]
            flat[name] = value.expand(*batch_shape, *spec).reshape(B, *spec)
        return self._model_for(dtype, device), tuple(batch_shape), flat

    @staticmethod
    def _out(x, batch_shape):
        return x.reshape(*batch_shape, *x.shape[1:])

    def _state(self, model, H, q):
        R, p = H[:, :3, :3], H[:, :3, 3]
        kin = alg.forward(model, R, p, q)
        return kin, R, p

    def _frame(self, model, name):
        return model.frame(name)  # raises FrameNotFoundError with suggestions

    # ----------------------------------------------------------- kinematics
    def forward_kinematics(self, frame: str, base_transform, joint_positions) -> torch.Tensor:
        """world_H_frame (..., 4, 4)."""
        model, bs, a = self._inputs(base_transform=base_transform, joint_positions=joint_positions)
        self._frame(model, frame)
        kin, _, _ = self._state(model, a["base_transform"], a["joint_positions"])
        _, R, p = alg.frame_pose(model, kin, frame)
        return self._out(homogeneous(R, p), bs)

    def link_poses(self, base_transform, joint_positions) -> torch.Tensor:
        """world_H_link (..., nlink, 4, 4) for every link, in ``model.link_names`` order."""
        model, bs, a = self._inputs(base_transform=base_transform, joint_positions=joint_positions)
        kin, _, _ = self._state(model, a["base_transform"], a["joint_positions"])
        R, p = alg.link_poses(model, kin)
        return self._out(homogeneous(R, p), bs)

    def _jacobian(self, model, kin, R, p, frame, rep):
        body, RF, pF = alg.frame_pose(model, kin, frame)
        J = alg.jacobian_inertial(model, kin, body)
        X = rep_.frame_X(rep, RF, pF)
        T = rep_.base_T(rep, R, p)
        if X is not None:
            J = X @ J
        if T is not None:
            J = torch.cat([J[..., :6] @ T, J[..., 6:]], -1)
        return J

    def jacobian(self, frame: str, base_transform, joint_positions) -> torch.Tensor:
        """(..., 6, 6+n): frame velocity (in the representation) from the generalized velocity."""
        model, bs, a = self._inputs(base_transform=base_transform, joint_positions=joint_positions)
        self._frame(model, frame)
        kin, R, p = self._state(model, a["base_transform"], a["joint_positions"])
        return self._out(self._jacobian(model, kin, R, p, frame, self.representation), bs)

    def relative_jacobian(self, frame: str, joint_positions) -> torch.Tensor:
        """(..., 6, n): joint columns of the Jacobian with the base at the world origin
        (the frame's velocity relative to the base, in base-aligned coordinates)."""
        q = joint_positions
        eye = torch.eye(4, dtype=q.dtype if isinstance(q, torch.Tensor) else self._dtype,
                        device=q.device if isinstance(q, torch.Tensor) else self._device)
        return self.jacobian(frame, eye, q)[..., 6:]

    def jacobian_dot(self, frame: str, base_transform, joint_positions, base_velocity, joint_velocities):
        """(..., 6, 6+n) time derivative of :meth:`jacobian` along the given velocity."""
        model, bs, a = self._inputs(
            base_transform=base_transform, joint_positions=joint_positions,
            base_velocity=base_velocity, joint_velocities=joint_velocities,
        )
        self._frame(model, frame)
        rep = self.representation
        kin, R, p = self._state(model, a["base_transform"], a["joint_positions"])
        nu, qd = a["base_velocity"], a["joint_velocities"]
        V0 = rep_.to_inertial(rep, R, p, nu)
        body, RF, pF = alg.frame_pose(model, kin, frame)
        J = alg.jacobian_inertial(model, kin, body)
        Jd = alg.jacobian_dot_inertial(model, kin, body, V0, qd)
        X, T = rep_.frame_X(rep, RF, pF), rep_.base_T(rep, R, p)
        if X is not None:
            VF = matvec(J, torch.cat([V0, qd], -1))
            Jd = rep_.frame_X_dot(rep, RF, pF, VF) @ J + X @ Jd
            J = X @ J
        if T is not None:
            Td = rep_.base_T_dot(rep, R, p, nu)
            Jd = torch.cat([Jd[..., :6] @ T + J[..., :6] @ Td, Jd[..., 6:]], -1)
        return self._out(Jd, bs)

    def CoM_position(self, base_transform, joint_positions) -> torch.Tensor:
        """(..., 3) centre of mass in the world frame."""
        model, bs, a = self._inputs(base_transform=base_transform, joint_positions=joint_positions)
        kin, _, _ = self._state(model, a["base_transform"], a["joint_positions"])
        com, _ = alg.center_of_mass(model, kin.R, kin.p)
        return self._out(com, bs)

    def CoM_jacobian(self, base_transform, joint_positions) -> torch.Tensor:
        """(..., 3, 6+n): CoM velocity in world axes from the generalized velocity
        in the chosen representation (as iDynTree and Pinocchio)."""
        model, bs, a = self._inputs(base_transform=base_transform, joint_positions=joint_positions)
        kin, R, p = self._state(model, a["base_transform"], a["joint_positions"])
        M, _, _ = self._mass_matrix_inertial(model, kin)
        com, mass = alg.center_of_mass(model, kin.R, kin.p)
        h = rep_.momentum_X(rep_.INERTIAL, R, com) @ M[:, :6]
        return self._out(self._to_rep_columns(h, R, p, self.representation)[:, :3] / mass, bs)

    # ------------------------------------------------------------- dynamics
    def _mass_matrix_inertial(self, model, kin):
        Iw = alg.world_inertias(model, kin.R, kin.p)
        M, Ic = alg.mass_matrix_inertial(model, kin, Iw)
        if model.armature is not None and model.n:
            arm = torch.diag_embed(model.armature)
            M = M + torch.nn.functional.pad(arm, (6, 0, 6, 0))
        return M, Iw, Ic

    @staticmethod
    def _to_rep_columns(A, R, p, rep):
        """Right-multiply the base columns of A (B, r, 6+n) by T."""
        T = rep_.base_T(rep, R, p)
        return A if T is None else torch.cat([A[..., :6] @ T, A[..., 6:]], -1)

    @staticmethod
    def _to_rep_forces(tau, R, p, rep):
        """Generalized forces (B, 6+n) from inertial to ``rep``: base part T^T F."""
        T = rep_.base_T(rep, R, p)
        return tau if T is None else torch.cat([matvec(T.transpose(-1, -2), tau[:, :6]), tau[:, 6:]], -1)

    def _mass_matrix_rep(self, model, kin, R, p, rep):
        M, Iw, _ = self._mass_matrix_inertial(model, kin)
        M = self._to_rep_columns(M, R, p, rep)
        return self._to_rep_columns(M.transpose(-1, -2), R, p, rep), M, Iw

    def mass_matrix(self, base_transform, joint_positions) -> torch.Tensor:
        """(..., 6+n, 6+n) joint-space inertia (CRBA) in the chosen representation."""
        model, bs, a = self._inputs(base_transform=base_transform, joint_positions=joint_positions)
        kin, R, p = self._state(model, a["base_transform"], a["joint_positions"])
        return self._out(self._mass_matrix_rep(model, kin, R, p, self.representation)[0], bs)

    def centroidal_momentum_matrix(self, base_transform, joint_positions) -> torch.Tensor:
        """(..., 6, 6+n): momentum about the CoM, [linear; angular]; world axes
        (MIXED, INERTIAL) or base axes (BODY_FIXED)."""
        model, bs, a = self._inputs(base_transform=base_transform, joint_positions=joint_positions)
        kin, R, p = self._state(model, a["base_transform"], a["joint_positions"])
        M, _, _ = self._mass_matrix_inertial(model, kin)
        com, _ = alg.center_of_mass(model, kin.R, kin.p)
        rep = self.representation
        h = rep_.momentum_X(rep, R, com) @ M[:, :6]
        return self._out(self._to_rep_columns(h, R, p, rep), bs)

    def _rnea(self, model, kin, R, p, nu, qd, base_acc, qdd, gravity=True, velocity=True, wrenches=None):
        rep = self.representation
        Iw = alg.world_inertias(model, kin.R, kin.p)
        V0 = rep_.to_inertial(rep, R, p, nu) if velocity else torch.zeros_like(nu)
        A0 = rep_.to_inertial(rep, R, p, base_acc) if base_acc is not None else torch.zeros_like(nu)
        if velocity:
            A0 = A0 + rep_.base_T_dot_nu(rep, R, p, nu)
        if gravity:
            A0 = A0 - torch.cat([model.gravity, torch.zeros_like(model.gravity)])
        qd_ = qd if velocity else torch.zeros_like(qd)
        qdd_ = qdd if qdd is not None else torch.zeros_like(qd)
        tau = alg.rnea_inertial(model, kin, Iw, V0, A0, qd_, qdd_)
        tau = self._to_rep_forces(tau, R, p, rep)
        if qdd is not None and model.armature is not None and model.n:
            tau = tau + torch.nn.functional.pad(model.armature * qdd, (6, 0))
        if wrenches:
            tau = tau - self._wrench_forces(model, kin, R, p, wrenches)
        return tau

    def _wrench_forces(self, model, kin, R, p, wrenches: dict):
        """sum_F J_F^T w_F (B, 6+n) for wrenches (B, 6) in the representation."""
        total = 0
        for frame, w in wrenches.items():
            J = self._jacobian(model, kin, R, p, frame, self.representation)
            total = total + matvec(J.transpose(-1, -2), w)
        return total

    def _wrenches(self, external_wrenches, bs, model, ref):
        if not external_wrenches:
            return None
        B = ref.shape[0]
        out = {}
        for frame, w in external_wrenches.items():
            model.frame(frame)
            w = torch.as_tensor(w, dtype=ref.dtype, device=ref.device)
            if w.shape[-1:] != (6,):
                raise InputError(f"external_wrenches[{frame!r}]: expected shape (..., 6), got {tuple(w.shape)}")
            try:
                out[frame] = w.expand(*bs, 6).reshape(B, 6)
            except RuntimeError:
                raise InputError(
                    f"external_wrenches[{frame!r}]: batch shape {tuple(w.shape[:-1])} does not broadcast to {bs}"
                ) from None
        return out

    def bias_force(self, base_transform, joint_positions, base_velocity, joint_velocities) -> torch.Tensor:
        """(..., 6+n) h = C(q, nu) nu + G(q)."""
        model, bs, a = self._inputs(
            base_transform=base_transform, joint_positions=joint_positions,
            base_velocity=base_velocity, joint_velocities=joint_velocities,
        )
        kin, R, p = self._state(model, a["base_transform"], a["joint_positions"])
        h = self._rnea(model, kin, R, p, a["base_velocity"], a["joint_velocities"], None, None)
        return self._out(h, bs)

    def coriolis_term(self, base_transform, joint_positions, base_velocity, joint_velocities) -> torch.Tensor:
        """(..., 6+n) C(q, nu) nu (no gravity)."""
        model, bs, a = self._inputs(
            base_transform=base_transform, joint_positions=joint_positions,
            base_velocity=base_velocity, joint_velocities=joint_velocities,
        )
        kin, R, p = self._state(model, a["base_transform"], a["joint_positions"])
        h = self._rnea(model, kin, R, p, a["base_velocity"], a["joint_velocities"], None, None, gravity=False)
        return self._out(h, bs)

    def gravity_term(self, base_transform, joint_positions) -> torch.Tensor:
        """(..., 6+n) G(q)."""
        model, bs, a = self._inputs(base_transform=base_transform, joint_positions=joint_positions)
        kin, R, p = self._state(model, a["base_transform"], a["joint_positions"])
        B = a["joint_positions"].shape[0]
        z6 = torch.zeros(B, 6, dtype=R.dtype, device=R.device)
        h = self._rnea(model, kin, R, p, z6, a["joint_positions"], None, None, velocity=False)
        return self._out(h, bs)

    def rnea(
        self, base_transform, joint_positions, base_velocity, joint_velocities,
        base_acceleration, joint_accelerations, external_wrenches=None,
    ) -> torch.Tensor:
        """(..., 6+n) generalized forces ``M nudot + h - sum J^T w`` (full inverse dynamics).

        ``base_acceleration`` is the time derivative of the base velocity in the
        chosen representation; ``external_wrenches`` maps frame names to (..., 6)
        wrenches in the same representation.
        """
        model, bs, a = self._inputs(
            base_transform=base_transform, joint_positions=joint_positions,
            base_velocity=base_velocity, joint_velocities=joint_velocities,
            base_acceleration=base_acceleration, joint_accelerations=joint_accelerations,
        )
        kin, R, p = self._state(model, a["base_transform"], a["joint_positions"])
        w = self._wrenches(external_wrenches, bs, model, a["joint_positions"])
        tau = self._rnea(
            model, kin, R, p, a["base_velocity"], a["joint_velocities"],
            a["base_acceleration"], a["joint_accelerations"], wrenches=w,
        )
        return self._out(tau, bs)

    def aba(
        self, base_transform, joint_positions, base_velocity, joint_velocities, joint_torques,
        external_wrenches=None,
    ) -> torch.Tensor:
        """(..., 6+n) ``[base acceleration; joint accelerations]`` of the free-floating
        robot: solves ``M a + h = [0; tau] + sum J^T w`` (CRBA + batched Cholesky)."""
        model, bs, a = self._inputs(
            base_transform=base_transform, joint_positions=joint_positions,
            base_velocity=base_velocity, joint_velocities=joint_velocities, joint_torques=joint_torques,
        )
        kin, R, p = self._state(model, a["base_transform"], a["joint_positions"])
        w = self._wrenches(external_wrenches, bs, model, a["joint_positions"])
        M = self._mass_matrix_rep(model, kin, R, p, self.representation)[0]
        h = self._rnea(model, kin, R, p, a["base_velocity"], a["joint_velocities"], None, None, wrenches=w)
        rhs = torch.nn.functional.pad(a["joint_torques"], (6, 0)) - h
        L = torch.linalg.cholesky(M)
        acc = torch.cholesky_solve(rhs.unsqueeze(-1), L).squeeze(-1)
        return self._out(acc, bs)


KinDynComputationsBatch = KinDynComputations


def _is_mujoco_model(obj) -> bool:
    return type(obj).__name__ == "MjModel" and type(obj).__module__.startswith("mujoco")
