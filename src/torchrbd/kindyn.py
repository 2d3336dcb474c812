"""The adam-compatible facade: :class:`KinDynComputations`.

It checks and broadcasts arguments, moves the model to the inputs' dtype and
device, calls the pure algorithms (which work in the world frame) and converts
results to the chosen velocity representation. The representation is a setting
of the facade only; the algorithms receive it explicitly.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import types
from pathlib import Path

import torch

from . import algorithms as alg
from .algorithms import representation as rep_
from .algorithms.representation import Representations
from .errors import InputError, ModelError
from .model import Model, load_urdf
from .algorithms import placement
from .algorithms.batchlast import DENSE_BELOW, batch_last_grad, to_batch_first, writes_into_buffers
from .algorithms import (
    center_of_mass_grad, forward_dynamics, frame_transform_grad, frame_twists, jacobian_base, jacobian_grad,
    link_frames,
)
from .chunking import in_chunks, needs_grad
from .inference import call_in_inference_mode, normal_tensors, result_buffer
from .spatial import homogeneous

_SPECS = {
    "base_transform": (4, 4),
    "joint_positions": ("n",),
    "base_velocity": (6,),
    "joint_velocities": ("n",),
    "joint_torques": ("n",),
    "base_acceleration": (6,),
    "joint_accelerations": ("n",),
}


def _spec(name: str, n: int) -> tuple:
    """The trailing shape of argument ``name`` for a model of ``n`` coordinates."""
    spec = _SPECS[name]
    return (n,) if spec == ("n",) else spec


_tree_sweep = in_chunks(_SPECS)  # long CPU batches without gradients: see torchrbd.chunking


def _own_code(fn):
    """A copy of function ``fn`` with a code object of its own. Dynamo keeps compiled
    variants per code object, at most ``torch._dynamo.config.recompile_limit`` (8), and
    past that runs the function eagerly after one logged warning. The public methods
    are all the same wrapper of :func:`_inference`: without a copy each, 8 variants
    (method, dtype, batch length, gradients) served every compiled method, and a ninth
    ran eagerly."""
    own = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    own.__kwdefaults__ = fn.__kwdefaults__
    return functools.update_wrapper(own, fn)  # name, doc, annotations; signature through __wrapped__


def _with_own_code(method):
    """The bound ``method`` rebound to an :func:`_own_code` copy of its function: each
    compiled copy (:meth:`KinDynComputations.compiled`) keeps its own variants."""
    return types.MethodType(_own_code(method.__func__), method.__self__)


def _inference(method):
    """Decorator of a public method: an eager call that needs no gradient runs under
    ``torch.inference_mode`` and returns normal tensors (see :mod:`torchrbd.inference`)."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        if torch.compiler.is_compiling() or torch.is_inference_mode_enabled():
            return method(self, *args, **kwargs)
        tensors = []
        for a in (*args, *kwargs.values()):
            if isinstance(a, torch.Tensor):
                tensors.append(a)
            elif isinstance(a, dict):  # external wrenches
                tensors.extend(w for w in a.values() if isinstance(w, torch.Tensor))
        if needs_grad(self, tensors):
            return method(self, *args, **kwargs)
        return call_in_inference_mode(method, self, *args, **kwargs)
    return _own_code(run)  # each method its own dynamo cache, see _own_code


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
            m = m.replace(gravity=_gravity_vector(gravity).to(torch.float64))
        self._dtype = dtype or torch.float64
        self._device = torch.device(device) if device is not None else torch.device("cpu")
        self._set_model(m.to(self._dtype, self._device))
        self._prepare_models()  # a few ms: then even torch.compile(kd.method) reads the model's constants
        self.representation = Representations.MIXED_REPRESENTATION

    # -------------------------------------------------------- compiled path
    _COMPILED = (
        "forward_kinematics", "jacobian", "jacobian_dot", "CoM_position", "CoM_jacobian", "mass_matrix",
        "centroidal_momentum_matrix", "bias_force", "coriolis_term", "gravity_term", "rnea", "aba",
        "link_poses", "link_velocities", "mass_matrix_and_bias_force",
    )

    # One frame's pose, Jacobian and its rate are a short chain of tiny products: told
    # to store every intermediate, inductor emits vectorised loops over the batch
    # instead of recomputing sin/cos and strided loads inside each entry (3x faster at
    # B=1024; the same setting makes the whole-tree algorithms slower, so it is per
    # method). Their joints' local transforms are then one library product
    # (``const_lmatmul(..., fuse=False)``; jacobian_dot 0.93x the time with both).
    _SHORT_CHAINS = {name: {"realize_opcount_threshold": 1} for name in ("forward_kinematics", "jacobian", "jacobian_dot")}

    # On CPU the compiled graph's wrapper (buffer allocation, kernel calls) in C++ rather
    # than Python: iCub, in-process A/B against the Python wrapper, B = 1: M 0.64x, h
    # 0.72x, aba 0.71x, aba forward+backward 0.76x, J 0.65x the time; B = 1024: aba 0.95x,
    # aba forward+backward 0.945x, M and h 1.02x (noise).
    # Without inductor's size asserts: the C++ wrapper checks every input's and every
    # library call's sizes and strides at each call (iCub's aba: 123 checks, each building
    # a std::stringstream), where dynamo's guards have already matched the inputs and the
    # tests check the one custom operator's fake shapes against its results. iCub, paired
    # in-process A/B (an identical control 0.985-1.003x): B = 1 M 0.925x, h 0.911x, aba
    # 0.905x, J 0.918x the time; B = 64 0.95-0.98x; B = 1024 0.96-1.01x (noise).
    _CPU_OPTIONS = {"cpp_wrapper": True, "size_asserts": False}

    # Inductor stores a value that more than ``realize_reads_threshold`` (4) others read
    # instead of recomputing it in each. The compiled tree sweeps on CPU are bound by
    # memory traffic (iCub at B = 1024: the bias force's buffers take 26 MB, aba's 50 MB),
    # and at 8 they store fewer. iCub, one process, interleaved against 4 and against an
    # identical control (0.98-1.04x): B = 1024 M 0.88-1.00x (0.92x in the longest run),
    # h 0.84-0.92x; B = 4096 M 0.97x, h 0.91x; B = 1 1.01-1.05x. At 6 no change; at 12
    # and 24 h 1.3x, aba 1.2x. The centroidal momentum matrix 0.87x at B = 1024 and 4096,
    # the CoM Jacobian 0.89x and 0.83x (controls 0.98-0.99x), both 1.04-1.05x at B = 1.
    # Not aba: 0.93-0.98x at B = 1024 but 1.06x at 4096, and its backward 1.03-1.06x.
    _CPU_SWEEPS = {name: {"realize_reads_threshold": 8} for name in (
        "mass_matrix", "bias_force", "coriolis_term", "gravity_term", "rnea", "mass_matrix_and_bias_force",
        "centroidal_momentum_matrix", "CoM_jacobian",
    )}

    def compiled(self, **compile_kwargs) -> "KinDynComputations":
        """A copy whose methods run through ``torch.compile`` (opt-in; same results).

        The first call for each input shape compiles (seconds to a minute); later
        calls with the same shapes reuse the compiled code. Changing the velocity
        representation or the model later triggers a recompile. On CPU, inductor drives
        its kernels from C++ (``cpp_wrapper``; pass ``options={"cpp_wrapper": False}``
        for its Python wrapper), without its per-call size asserts (``size_asserts``).
        With inductor, the methods do not guard on module globals
        (see :func:`_non_global_guards`): after patching one, call ``torch._dynamo.reset()``.
        """
        import copy

        other = copy.copy(self)
        other._cache = dict(self._cache)
        other._compiled = True
        other._prepare_models()
        cpu = self._model.body_rot.device.type == "cpu"
        if cpu:
            _quiet_proxy_executor_notes()
        for name in self._COMPILED:
            kwargs = dict(compile_kwargs)
            inductor = kwargs.get("backend", "inductor") == "inductor" and "mode" not in kwargs
            if inductor:
                options = {**self._CPU_OPTIONS, **self._CPU_SWEEPS.get(name, {})} if cpu else {}
                options.update(self._SHORT_CHAINS.get(name, {}), guard_filter_fn=_non_global_guards)
                kwargs["options"] = {**options, **kwargs.get("options", {})}
            setattr(other, name, torch.compile(_with_own_code(getattr(other, name)), **kwargs))
        return other

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
    _compiled = False  # set on the copies made by compiled()

    def _set_model(self, model: Model):
        self._model = model
        self._cache = {}
        if self._compiled:
            self._prepare_models()

    def _prepare_models(self):
        """Convert the model to the default dtype and device now and compute every
        derived constant of the models converted so far (:func:`~torchrbd.algorithms.prepare`):
        compiled code then reads them instead of rebuilding them in each call (a
        conversion made while tracing cannot be stored). A compiled copy also converts
        the model to the other floating dtype (float32 or float64) on its device: float32
        inputs to a compiled float64 copy otherwise converted the model and rebuilt its
        constants in each call (iCub, B = 1024: forward kinematics 1.9x, the Jacobian
        1.44x, the bias force 1.25x the time of a float32 copy)."""
        dtypes = [self._dtype] + ([torch.float32, torch.float64] if self._compiled else [])
        for model in (*self._cache.values(), *(self._model_for(d, self._device) for d in dtypes)):
            alg.prepare(model)

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
        self.representation = representation

    @property
    def representation(self) -> Representations:
        """The velocity representation of every later call (a ``Representations`` member)."""
        return self._representation

    @representation.setter
    def representation(self, representation: Representations) -> None:
        if not isinstance(representation, Representations):
            raise InputError(f"expected a torchrbd.Representations member, got {representation!r}")
        self._representation = representation
        # what the methods read: its value string, which torch.compile guards by value
        # (see algorithms/representation.py)
        self._rep = representation.value

    def get_total_mass(self) -> torch.Tensor:
        return self._model.link_mass.sum()

    @property
    def gravity(self) -> torch.Tensor:
        """(3,) gravity acceleration, m/s^2."""
        return self._model.gravity

    @gravity.setter
    def gravity(self, g):
        self._set_model(self._model.replace(gravity=_gravity_vector(g).to(self._model.gravity)))

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
        key = (str(dtype), str(device))  # (strings: dynamo could not name a dict entry keyed by a dtype)
        if key not in self._cache:
            trained = [f for f in self._model.tensor_fields() if getattr(self._model, f).requires_grad]
            if trained:
                return self._trained_model_for(trained, dtype, device)
            model = normal_tensors(self._model.to)(dtype, device)  # (the cache keeps it)
            if torch.compiler.is_compiling():
                # storing a model made while tracing is a side effect dynamo cannot
                # replay (a graph break): the compiled graph converts on each call
                return model
            # a compiled copy's models are prepared for tracing as they are made
            self._cache[key] = alg.prepare(model) if self._compiled else model
        return self._cache[key]

    def _trained_model_for(self, trained: list, dtype, device) -> Model:
        """:meth:`_model_for` a model whose fields ``trained`` require grad: their
        conversion stays in each call's graph, while the other fields are converted
        once and kept (a call on a GPU made a host-to-device copy of each of them)."""
        model = self._model
        if model.body_rot.dtype == dtype and model.body_rot.device == torch.device(device):
            return model  # the trained fields are taken as they are
        key = (str(dtype), str(device), "constants")
        constants = self._cache.get(key)
        if constants is None:
            detached = model.with_fields(model.has_armature, **{f: getattr(model, f).detach() for f in trained})
            constants = normal_tensors(detached.to)(dtype, device)
            if not torch.compiler.is_compiling():  # (a side effect dynamo cannot replay)
                self._cache[key] = constants
        converted = {f: getattr(model, f).to(dtype=dtype, device=device) for f in trained}
        return constants.with_fields(model.has_armature, **converted)

    def _inputs(self, **named):
        """Check, broadcast and flatten named arguments.

        Returns (model, batch_shape, dict of (B, *spec) tensors)."""
        n = self._model.n
        ref = next((v for v in named.values() if isinstance(v, torch.Tensor)), None)
        dtype = ref.dtype if ref is not None else self._dtype
        device = ref.device if ref is not None else self._device
        out, batch = {}, []
        for name, value in named.items():
            spec = _spec(name, n)
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
            if value is not ref and value.device != device:
                raise InputError(f"{name}: on device {value.device}, the other arguments are on {device}")
            shape, k = value.shape, len(spec)
            if len(shape) < k or shape[len(shape) - k:] != spec:
                raise InputError(
                    f"{name}: expected shape (..., {', '.join(map(str, spec))}), got {tuple(shape)}"
                    + (f" (the model has {n} joint coordinates)" if "n" in _SPECS[name] else "")
                )
            out[name] = value
            batch.append(shape[: len(shape) - k])
        try:
            first = batch[0]
            batch_shape = first if all(b == first for b in batch) else torch.broadcast_shapes(*batch)
        except RuntimeError:
            shapes = ", ".join(f"{k}: {tuple(b)}" for k, b in zip(out, batch))
            raise InputError(f"batch shapes do not broadcast ({shapes})") from None
        B = math.prod(batch_shape)
        flat = {}
        for name, value in out.items():
            spec = value.shape[value.dim() - len(_SPECS[name]) :]
            if len(batch_shape) == 1 and value.shape[0] == B and value.dim() == 1 + len(spec):
                flat[name] = value  # already (B, *spec): no view operators
            else:
                flat[name] = value.expand(*batch_shape, *spec).reshape(B, *spec)
        return self._model_for(dtype, device), tuple(batch_shape), flat

    @staticmethod
    def _out(x, batch_shape):
        """Batch-last (..., B) result -> (*batch_shape, ...), contiguous (a copy unless x
        already has batch-first memory): a user's ``.view`` or next product should not
        meet batch-last strides. The copy of a large result is made into a normal tensor
        under the method's inference mode (:func:`~torchrbd.inference.result_buffer`)."""
        if x.shape[-1] > 1:
            moved = placement.to_batch_first(x, out=result_buffer(x, x.shape[-1], *x.shape[:-1]))
            if moved is not None:
                return moved.reshape(*batch_shape, *moved.shape[1:])
        x = to_batch_first(x)
        if not x.is_contiguous():
            out = result_buffer(x, *x.shape)
            x = x.contiguous() if out is None else out.copy_(x)
        return x.reshape(*batch_shape, *x.shape[1:])

    @staticmethod
    def _bl(x):
        """(B, k) argument -> (k, B), contiguous so that every later result is batch-last in memory."""
        return x.transpose(0, 1).contiguous()

    def _state(self, model, a, frame=None, subspaces=True, every=True):
        """Forward kinematics of the flattened inputs with the base placed at the origin
        (see :mod:`torchrbd.algorithms.representation`: positions in ``kin`` are relative
        to the base). Returns (kin, base R (3, 3, B), base position pB (3, B)).
        ``subspaces`` False: no motion subspaces (``kin.S`` None, or unused for a frame).
        With ``frame``, only the bodies from the base to that frame's body
        (:func:`~torchrbd.algorithms.chain_forward`, which takes ``subspaces`` and ``every``)."""
        R, pB = self._base_pose(a)
        if frame is None:
            return alg.forward(model, R, torch.zeros_like(pB), self._bl(a["joint_positions"]), subspaces), R, pB
        body = model.frame(frame)[0]
        # a transposed view: the chain gathers its own coordinates' rows, batch-last, in one copy
        q = a["joint_positions"].transpose(0, 1)
        return alg.chain_forward(model, R, torch.zeros_like(pB), q, body, subspaces, every), R, pB

    @staticmethod
    def _base_pose(a):
        """The base's rotation (3, 3, B) and position (3, B), batch-last views of one
        transposing copy of the flattened inputs' base transforms."""
        Hb = a["base_transform"][:, :3].permute(1, 2, 0).contiguous()  # (3, 4, B)
        return Hb[:, :3], Hb[:, 3]

    # ----------------------------------------------------------- kinematics
    @_inference
    def forward_kinematics(self, frame: str, base_transform, joint_positions) -> torch.Tensor:
        """world_H_frame (..., 4, 4)."""
        model, bs, a = self._inputs(base_transform=base_transform, joint_positions=joint_positions)
        model.frame(frame)  # raises FrameNotFoundError with suggestions
        H, q = a["base_transform"], a["joint_positions"]
        if frame_transform_grad.applies(model, frame, H, q):  # a backward by the chain's twists
            return frame_transform_grad.frame_transform(model, H, q, frame).reshape(*bs, 4, 4)
        # fewer operators than the chain's kinematics; compiled, only the long batches'
        # grouped products (iCub, B = 1024, in-process A/Bs: 0.57-0.60x the time by pairs
        # of joints, then 0.94x that by groups), as
        # inductor fuses the chain's multiply-adds of short ones better than library products
        if not torch.compiler.is_compiling() or H.shape[0] >= DENSE_BELOW:
            return alg.frame_transforms(model, H, q, frame).reshape(*bs, 4, 4)
        kin, _, pB = self._state(model, a, frame, every=False)
        _, R, r = alg.frame_pose(model, kin, frame)
        H = homogeneous(to_batch_first(R), to_batch_first(r + pB))
        return H.reshape(*bs, 4, 4)

    @_inference
    @_tree_sweep
    def link_poses(self, base_transform, joint_positions) -> torch.Tensor:
        """world_H_link (..., nlink, 4, 4) for every link, in ``model.link_names`` order."""
        model, bs, a = self._inputs(base_transform=base_transform, joint_positions=joint_positions)
        kin, _, pB = self._state(model, a, subspaces=False)
        if link_frames.applies(model, kin.X, pB):  # (each run of a body's links one product, into the result)
            return link_frames.link_transforms(model, kin.X, pB).reshape(*bs, model.nlink, 4, 4)
        R, r = alg.link_poses(model, kin)
        H = homogeneous(to_batch_first(R), to_batch_first(r + pB))
        return H.reshape(*bs, model.nlink, 4, 4)

    @_inference
    @_tree_sweep
    def link_velocities(self, base_transform, joint_positions, base_velocity, joint_velocities) -> torch.Tensor:
        """(..., nlink, 6) every link's velocity in the representation, ``model.link_names``
        order: what ``jacobian(link) @ [base_velocity; joint_velocities]`` gives for each
        link, from one sweep of the tree (each body's twist the base's plus the running
        sum of its joints' ``S qd``) rather than a Jacobian per link."""
        model, bs, a = self._inputs(
            base_transform=base_transform, joint_positions=joint_positions,
            base_velocity=base_velocity, joint_velocities=joint_velocities,
        )
        kin, R, p = self._state(model, a)
        V0 = rep_.to_internal(self._rep, R, p, self._bl(a["base_velocity"]))
        V, _ = alg.body_velocities(model, kin, V0, self._bl(a["joint_velocities"]))  # (nb, 6, B) about O
        if link_frames.applies(model, V, kin.R, kin.p, p):  # (each run of a body's links one product, into the result)
            return link_frames.link_velocities(model, self._rep, kin.R, kin.p, V, p).reshape(*bs, model.nlink, 6)
        R_l, r_l = alg.link_poses(model, kin)
        V_l = V.index_select(0, alg.topology(model).link_body)
        return self._out(rep_.velocities_to_rep(self._rep, V_l, R_l, r_l, p), bs)

    @_inference
    def jacobian(self, frame: str, base_transform, joint_positions) -> torch.Tensor:
        """(..., 6, 6+n): frame velocity (in the representation) from the generalized velocity."""
        model, bs, a = self._inputs(base_transform=base_transform, joint_positions=joint_positions)
        model.frame(frame)
        q, rep = a["joint_positions"].transpose(0, 1), self._rep  # q (n, B), a view
        with_rule = jacobian_grad.applies(model, frame, a["base_transform"], a["joint_positions"])
        if with_rule or frame_twists.applies(model, frame, q):  # eager batches: the chain's joints in groups
            R, pB = self._base_pose(a)
            about = pB.neg() if rep == rep_.INERTIAL else None
            if with_rule:
                def place(chain, cols, origin, RF):  # (a backward by the twists' running sums)
                    return self._jacobian_in_rep(model, chain, cols, origin, RF, R)
                J = jacobian_grad.frame_jacobian(model, frame, R, a["joint_positions"], place, about, rep == rep_.BODY)
                return J.reshape(*bs, *J.shape[1:])
            chain, cols, origin, RF = frame_twists.frame_twists(model, R, q, frame, about=about, rotation=rep == rep_.BODY)
            return self._out(self._jacobian_in_rep(model, chain, cols, origin, RF, R), bs)
        kin, R, p = self._state(model, a, frame, subspaces=False)  # (made about the point the representation takes)
        return self._out(self._frame_jacobian(model, kin, R, p, frame), bs)

    def _frame_jacobian(self, model, kin, R, p, frame):
        """(6, 6+n, B) Jacobian of ``frame`` in the representation from chain kinematics
        (:func:`~torchrbd.algorithms.chain_forward` or ``chain_rows``; ``kin.S`` is not
        read): the chain's joints' twists about the point whose velocity the
        representation gives (for INERTIAL_FIXED the world origin, relative to the base
        at -p), then :meth:`_jacobian_in_rep`."""
        if self._rep == rep_.INERTIAL:
            return self._jacobian_in_rep(model, kin.chain, self._chain_twists(model, kin, p.neg()), None, None, R)
        _, RF, origin = alg.frame_pose(model, kin, frame, rotation=self._rep == rep_.BODY)  # (MIXED needs no R_F)
        return self._jacobian_in_rep(model, kin.chain, self._chain_twists(model, kin, origin), origin, RF, R)

    def _jacobian_in_rep(self, model, chain, cols, origin, RF, R):
        """(6, 6+n, B) a frame's Jacobian in the representation from its chain's columns
        ``cols`` (k, 6, B), the twists about the point the representation takes (world
        axes), the frame's origin ``origin`` relative to the base (3, B; None for
        INERTIAL_FIXED), its rotation ``RF`` (BODY_FIXED only) and the base's ``R``.
        Only the base columns and the chain's are nonzero: the base block is what a base
        velocity adds at that point, both are scattered into place."""
        rep = self._rep
        if rep == rep_.INERTIAL:
            # twists about the world origin, from the base's twist about it: the base block is 1,
            # whatever the frame (iCub's l_sole: see docs/performance.md)
            return self._chain_scatter(model, chain, jacobian_base.identity(cols), cols)
        if rep == rep_.BODY:  # MIXED's pieces turned into the frame's axes
            return self._chain_scatter(model, chain, *rep_.body_frame_jacobian(cols, RF, origin, R))
        # X maps a twist about O to the same twist about the frame origin: the base block is X itself
        return self._chain_scatter(model, chain, jacobian_base.mixed(origin), cols)

    @staticmethod
    def _chain_twists(model, kin, origin):
        """(k, 6, B) the unit twists of the chain's joints about the point ``origin``
        (3, B), which is given like the chain kinematics' positions ``kin.p``
        (see :func:`~torchrbd.algorithms.motion_subspaces`)."""
        chain = kin.chain
        if not len(chain):
            return origin.new_zeros(0, 6, origin.shape[-1])
        return alg.motion_subspaces(model, kin.R, kin.p, chain.bodies, origin=origin)

    @staticmethod
    def _chain_scatter(model, chain, base, chain_cols):
        """(6, 6+n, B) Jacobian-shaped, a view of batch-first memory: the base block
        ``base`` (a :class:`~.algorithms.jacobian_base.BaseRows`) over the base columns,
        the chain's columns ``chain_cols`` (k, 6, B) in place, zeros elsewhere, written
        batch-first, so that the result needs no transposing copy.
        Where results may be written into buffers (:func:`~.algorithms.batchlast.writes_into_buffers`:
        eager, nothing differentiated): from ``placement.PAYS_FROM`` numbers, one pass of
        the C loop zeroes each block of configurations' rows and copies the base block's
        values and the chain's columns into them (:func:`~.algorithms.placement.place_zeroed`;
        iCub's l_sole, B = 1024, against a zero fill and two placing calls: float32
        0.94-0.96x the time, float64 0.98-0.99x); otherwise a zero-filled result into
        which the base block and the chain's runs of consecutive columns are copied
        (0.82-0.86x the time of the concatenation below at B = 1024, 0.68x at B = 64).
        With gradients, one concatenation of the base, the chain's runs and zero blocks
        between them, which autograd, the ``torch.func`` transforms and inductor take as
        one operator."""
        B, N = chain_cols.shape[-1], 6 + model.n
        in_buffers = writes_into_buffers(base.like, chain_cols)
        if in_buffers and placement.applies(chain_cols, B * 6 * N):  # (the C loop: zeros, base and chain in one pass)
            out = result_buffer(chain_cols, B, 6, N, one_pass=True)
            out = chain_cols.new_empty(B, 6, N) if out is None else out
            chain_part = (chain_cols.reshape(6 * chain_cols.shape[0], B), chain.jacobian_columns)
            if placement.place_zeroed(out.view(B, 6 * N), (*base.parts(N), chain_part)):
                return out.permute(1, 2, 0)
        base = base.block()
        if in_buffers:
            out = result_buffer(base, B, 6, N)
            out = base.new_zeros(B, 6, N) if out is None else out.zero_()
            out[:, :, :6].copy_(base.permute(2, 0, 1))
            cols = chain_cols.permute(2, 1, 0)  # (B, 6, k)
            for col, k, length in chain.runs:
                out[:, :, col:col + length].copy_(cols[:, :, k:k + length])
            return out.permute(1, 2, 0)
        chain_cols, base = batch_last_grad(chain_cols), batch_last_grad(base)
        cols = chain_cols.permute(2, 1, 0)  # (B, 6, k)
        zero = base.new_zeros(())
        pieces, at = [base.permute(2, 0, 1)], 6
        for col, k, length in chain.runs:
            if col > at:
                pieces.append(zero.expand(B, 6, col - at))
            pieces.append(cols[:, :, k:k + length])
            at = col + length
        if at < N:
            pieces.append(zero.expand(B, 6, N - at))
        # (a large result straight into a normal tensor under the method's inference mode)
        return torch.cat(pieces, 2, out=result_buffer(base, B, 6, N)).permute(1, 2, 0)

    def relative_jacobian(self, frame: str, joint_positions) -> torch.Tensor:
        """(..., 6, n): joint columns of the Jacobian with the base at the world origin
        (the frame's velocity relative to the base, in base-aligned coordinates)."""
        q = joint_positions
        ref = q if isinstance(q, torch.Tensor) else None
        eye = torch.eye(4, dtype=ref.dtype if ref is not None else self._dtype,
                        device=ref.device if ref is not None else self._device)
        return self.jacobian(frame, eye, q)[..., 6:].contiguous()

    @_inference
    def jacobian_dot(self, frame: str, base_transform, joint_positions, base_velocity, joint_velocities):
        """(..., 6, 6+n) time derivative of :meth:`jacobian` along the given velocity."""
        model, bs, a = self._inputs(
            base_transform=base_transform, joint_positions=joint_positions,
            base_velocity=base_velocity, joint_velocities=joint_velocities,
        )
        model.frame(frame)
        rep = self._rep
        q = a["joint_positions"].transpose(0, 1)  # (n, B), a view
        if frame_twists.applies(model, frame, q):  # the chain's twists about O and the frame's pose by groups
            R, p = self._base_pose(a)
            chain, S, pF, RF = frame_twists.frame_twists(model, R, q, frame, about=torch.zeros_like(p), rotation=rep == rep_.BODY)
            kin = alg.Kinematics(R=None, p=None, S=S, chain=chain)
        else:
            kin, R, p = self._state(model, a, frame)
            RF = pF = None  # (the frame's pose, made below where the representation needs it)
        nu, qd = self._bl(a["base_velocity"]), self._bl(a["joint_velocities"])
        V0 = rep_.to_internal(rep, R, p, nu)
        rates, VF = alg.chain_column_rates(kin, V0, qd)  # (the chain's; the base's six columns are constant)
        if rep == rep_.INERTIAL:  # J's base block is 1 (see _frame_jacobian): only the chain's columns move
            chain = rep_.twists_to_rep(rep, rates, None, p)
            return self._out(self._chain_scatter(model, kin.chain, jacobian_base.zeros(chain), chain), bs)
        if pF is None:
            _, RF, pF = alg.frame_pose(model, kin, frame, rotation=rep == rep_.BODY)
        if rep == rep_.BODY:
            base, chain = rep_.body_frame_jacobian_rate(kin.S, rates, RF, pF, VF, R, V0)
        else:
            base, chain = rep_.mixed_frame_jacobian_rate(kin.S, rates, pF, VF, V0)
        return self._out(self._chain_scatter(model, kin.chain, base, chain), bs)

    @_inference
    @_tree_sweep
    def CoM_position(self, base_transform, joint_positions) -> torch.Tensor:
        """(..., 3) centre of mass in the world frame."""
        model, bs, a = self._inputs(base_transform=base_transform, joint_positions=joint_positions)
        if center_of_mass_grad.applies(model, a["base_transform"], a["joint_positions"]):  # a backward by twists
            return center_of_mass_grad.com(model, a["base_transform"], a["joint_positions"]).reshape(*bs, 3)
        kin, _, pB = self._state(model, a, subspaces=False)
        com, _ = alg.center_of_mass(model, kin)
        return self._out(com + pB, bs)

    @_inference
    @_tree_sweep
    def CoM_jacobian(self, base_transform, joint_positions) -> torch.Tensor:
        """(..., 3, 6+n): CoM velocity in world axes from the generalized velocity
        in the chosen representation (as iDynTree and Pinocchio)."""
        model, bs, a = self._inputs(base_transform=base_transform, joint_positions=joint_positions)
        kin, R, p = self._state(model, a)
        lin = alg.linear_momentum_rows(model, kin)  # linear momentum = total mass x CoM velocity
        lin = rep_.base_columns_times_T(self._rep, lin, R, p)
        return self._out(lin / model.link_mass.sum(), bs)

    # ------------------------------------------------------------- dynamics
    @staticmethod
    def _momentum_rows(model, kin):
        """(6, 6+n, B) first rows of M in MIXED: the map from the MIXED generalized
        velocity to the momentum about the base origin (world axes)."""
        Mbb, F, _ = alg.mass_matrix_top(model, kin, alg.world_inertias(model, kin))
        return torch.cat([Mbb, F.transpose(0, 1)], 1)

    @staticmethod
    def _mass_matrix(model, kin, R, p, rep, keep_inertia=False):
        """(B, 6+n, 6+n) M in ``rep`` (batch-first, contiguous), and the world inertias
        (None unless ``keep_inertia``: otherwise the sums may overwrite them)."""
        inertia = alg.world_inertias(model, kin)
        M = alg.mass_matrix(model, kin, inertia, T=rep_.base_map(rep, R, p), own_inertia=not keep_inertia)
        return M, inertia if keep_inertia else None

    @_inference
    @_tree_sweep
    def mass_matrix(self, base_transform, joint_positions) -> torch.Tensor:
        """(..., 6+n, 6+n) joint-space inertia (CRBA) in the chosen representation."""
        model, bs, a = self._inputs(base_transform=base_transform, joint_positions=joint_positions)
        kin, R, p = self._state(model, a)
        M, _ = self._mass_matrix(model, kin, R, p, self._rep)
        return M.reshape(*bs, *M.shape[1:])

    @_inference
    @_tree_sweep
    def centroidal_momentum_matrix(self, base_transform, joint_positions) -> torch.Tensor:
        """(..., 6, 6+n): momentum about the CoM, [linear; angular]; world axes
        (MIXED, INERTIAL) or base axes (BODY_FIXED)."""
        model, bs, a = self._inputs(base_transform=base_transform, joint_positions=joint_positions)
        kin, R, p = self._state(model, a)
        com, _ = alg.center_of_mass(model, kin)
        rep = self._rep
        h = self._momentum_rows(model, kin)
        h = rep_.momentum_to_centroidal(rep, h.transpose(0, 1), R, com).transpose(0, 1)
        h = rep_.base_columns_times_T(rep, h, R, p)
        return self._out(h, bs)

    def _rnea(self, model, kin, R, p, nu, qd, nud=None, qdd=None, *, gravity=True, inertia=None, wrenches=None):
        """Generalized forces (6+n, B) in the representation; arguments batch-last."""
        rep = self._rep
        inertia = inertia if inertia is not None else alg.world_inertias(model, kin)
        V0 = rep_.to_internal(rep, R, p, nu)
        A0 = rep_.T_dot_nu(rep, nu)
        if nud is not None:
            A0 = A0 + rep_.to_internal(rep, R, p, nud)
        if gravity:
            A0 = A0 - alg.gravity_twist(model)
        tau = alg.rnea_mixed(model, kin, inertia, V0, A0, qd, qdd)
        armature = qdd is not None and model.armature is not None
        if rep != rep_.MIXED or armature:  # (MIXED: T = 1, the base rows as they are)
            base = rep_.rows_times_T(rep, tau[None, :6], R, p)[0]
            joints = tau[6:]
            if armature:
                joints = joints + model.armature[:, None] * qdd
            tau = torch.cat([base, joints], 0)
        if wrenches:
            tau = tau - self._wrench_forces(model, kin, R, p, wrenches)
        return tau

    def _wrench_forces(self, model, kin, R, p, wrenches: dict):
        """sum_F J_F^T w_F (6+n, B) for wrenches (6, B) in the representation."""
        total = 0
        for frame, w in wrenches.items():
            J = self._frame_jacobian(model, alg.chain_rows(model, kin, model.frame(frame)[0]), R, p, frame)
            total = total + torch.einsum("rcb,rb->cb", J, w)
        return total

    def _wrenches(self, external_wrenches, bs, model, ref):
        """Check and flatten a {frame: (..., 6)} dict to {frame: (6, B)}."""
        if not external_wrenches:
            return None
        B = ref.shape[0]
        out = {}
        for frame, w in external_wrenches.items():
            model.frame(frame)
            if isinstance(w, torch.Tensor) and (w.dtype != ref.dtype or w.device != ref.device):
                raise InputError(
                    f"external_wrenches[{frame!r}]: {w.dtype} on {w.device}, the other arguments are "
                    f"{ref.dtype} on {ref.device}; convert explicitly (torchrbd never casts silently)"
                )
            try:
                w = torch.as_tensor(w, dtype=ref.dtype, device=ref.device)
            except (TypeError, ValueError, RuntimeError) as e:
                raise InputError(f"external_wrenches[{frame!r}]: cannot convert to a tensor ({e})") from None
            if w.shape[-1:] != (6,):
                raise InputError(f"external_wrenches[{frame!r}]: expected shape (..., 6), got {tuple(w.shape)}")
            try:
                out[frame] = w.expand(*bs, 6).reshape(B, 6).transpose(0, 1)
            except RuntimeError:
                raise InputError(
                    f"external_wrenches[{frame!r}]: batch shape {tuple(w.shape[:-1])} does not broadcast to {bs}"
                ) from None
        return out

    def _velocity_inputs(self, base_transform, joint_positions, base_velocity, joint_velocities, **more):
        model, bs, a = self._inputs(
            base_transform=base_transform, joint_positions=joint_positions,
            base_velocity=base_velocity, joint_velocities=joint_velocities, **more,
        )
        kin, R, p = self._state(model, a)
        return model, bs, a, kin, R, p

    @_inference
    @_tree_sweep
    def bias_force(self, base_transform, joint_positions, base_velocity, joint_velocities) -> torch.Tensor:
        """(..., 6+n) h = C(q, nu) nu + G(q)."""
        model, bs, a, kin, R, p = self._velocity_inputs(base_transform, joint_positions, base_velocity, joint_velocities)
        h = self._rnea(model, kin, R, p, self._bl(a["base_velocity"]), self._bl(a["joint_velocities"]))
        return self._out(h, bs)

    @_inference
    @_tree_sweep
    def mass_matrix_and_bias_force(self, base_transform, joint_positions, base_velocity, joint_velocities):
        """``(M, h)`` as :meth:`mass_matrix` and :meth:`bias_force`, sharing one forward
        kinematics (what a simulator step needs)."""
        model, bs, a, kin, R, p = self._velocity_inputs(base_transform, joint_positions, base_velocity, joint_velocities)
        M, inertia = self._mass_matrix(model, kin, R, p, self._rep, keep_inertia=True)
        h = self._rnea(model, kin, R, p, self._bl(a["base_velocity"]), self._bl(a["joint_velocities"]), inertia=inertia)
        return M.reshape(*bs, *M.shape[1:]), self._out(h, bs)

    @_inference
    @_tree_sweep
    def coriolis_term(self, base_transform, joint_positions, base_velocity, joint_velocities) -> torch.Tensor:
        """(..., 6+n) C(q, nu) nu (no gravity)."""
        model, bs, a, kin, R, p = self._velocity_inputs(base_transform, joint_positions, base_velocity, joint_velocities)
        h = self._rnea(model, kin, R, p, self._bl(a["base_velocity"]), self._bl(a["joint_velocities"]), gravity=False)
        return self._out(h, bs)

    @_inference
    @_tree_sweep
    def gravity_term(self, base_transform, joint_positions) -> torch.Tensor:
        """(..., 6+n) G(q): from the subtrees' first moments (``algorithms.generalized_gravity``),
        not a Newton-Euler pass at rest."""
        model, bs, a = self._inputs(base_transform=base_transform, joint_positions=joint_positions)
        kin, R, p = self._state(model, a)
        G = rep_.base_columns_times_T(self._rep, alg.generalized_gravity(model, kin)[None], R, p)[0]
        return self._out(G, bs)

    @_inference
    @_tree_sweep
    def rnea(
        self, base_transform, joint_positions, base_velocity, joint_velocities,
        base_acceleration, joint_accelerations, external_wrenches=None,
    ) -> torch.Tensor:
        """(..., 6+n) generalized forces ``M nudot + h - sum J^T w`` (full inverse dynamics).

        ``base_acceleration`` is the time derivative of the base velocity in the
        chosen representation; ``external_wrenches`` maps frame names to (..., 6)
        wrenches in the same representation.
        """
        model, bs, a, kin, R, p = self._velocity_inputs(
            base_transform, joint_positions, base_velocity, joint_velocities,
            base_acceleration=base_acceleration, joint_accelerations=joint_accelerations,
        )
        w = self._wrenches(external_wrenches, bs, model, a["joint_positions"])
        tau = self._rnea(
            model, kin, R, p, self._bl(a["base_velocity"]), self._bl(a["joint_velocities"]),
            self._bl(a["base_acceleration"]), self._bl(a["joint_accelerations"]), wrenches=w,
        )
        return self._out(tau, bs)

    @_inference
    @_tree_sweep
    def aba(
        self, base_transform, joint_positions, base_velocity, joint_velocities, joint_torques,
        external_wrenches=None,
    ) -> torch.Tensor:
        """(..., 6+n) ``[base acceleration; joint accelerations]`` of the free-floating
        robot: solves ``M a + h = [0; tau] + sum J^T w``: the articulated-body algorithm
        for large batches (with gradients, an implicit backward), else the CRBA and a
        batched Cholesky solve (:mod:`~torchrbd.algorithms.forward_dynamics`)."""
        model, bs, a, kin, R, p = self._velocity_inputs(
            base_transform, joint_positions, base_velocity, joint_velocities, joint_torques=joint_torques,
        )
        w = self._wrenches(external_wrenches, bs, model, a["joint_positions"])
        rep = self._rep
        nu, qd = self._bl(a["base_velocity"]), self._bl(a["joint_velocities"])
        # Solve in the internal coordinates (base twist about the base origin, world
        # axes): there M is as well conditioned wherever the robot is, and the base
        # acceleration is converted to the representation afterwards.
        inertia = alg.world_inertias(model, kin)
        g = alg.gravity_twist(model).expand(6, qd.shape[-1])
        V0 = rep_.to_internal(rep, R, p, nu)
        f = torch.cat([torch.zeros_like(nu), self._bl(a["joint_torques"])], 0)
        if w:
            f = f + self._wrench_forces(model, kin, R, p, w)
            if rep != rep_.MIXED:  # (MIXED: the base forces are already internal)
                f = torch.cat([rep_.forces_to_internal(rep, f[:6], R, p), f[6:]], 0)
        try:
            acc = forward_dynamics.accelerations(model, kin, inertia, V0, qd, f, g)
        except torch.linalg.LinAlgError:
            raise ModelError(
                f"{model.name}: the mass matrix is not positive definite at this configuration "
                "(a movable joint that moves no mass or inertia?)"
            ) from None
        return self._out(rep_.acceleration_from_internal(rep, acc, R, p, nu), bs)


KinDynComputationsBatch = KinDynComputations


def _gravity_vector(g) -> torch.Tensor:
    """(3,) gravity from a sequence or tensor of 3 real numbers (InputError otherwise)."""
    try:  # numbers (not tensors) are read as float64, not torch's default float32
        t = g if isinstance(g, torch.Tensor) else torch.as_tensor(g, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError) as err:
        raise InputError(f"gravity: cannot convert {type(g).__name__} to a tensor ({err})") from None
    if t.numel() != 3 or t.is_complex():
        raise InputError(f"gravity: expected 3 real numbers, got shape {tuple(t.shape)} ({t.dtype})")
    return t.reshape(3)


def _is_mujoco_model(obj) -> bool:
    return type(obj).__name__ == "MjModel" and type(obj).__module__.startswith("mujoco")


class _NoProxyExecutorNotes(logging.Filter):
    """Drops inductor's note that an operator without a C++ shim (LAPACK's Cholesky of
    small compiled batches) is called through its proxy executor: that call is the
    intended path of the C++ wrapper, not a problem for the user."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "using proxy executor as fallback" not in record.getMessage()


def _quiet_proxy_executor_notes() -> None:
    logger = logging.getLogger("torch._inductor.ir")
    if not any(isinstance(f, _NoProxyExecutorNotes) for f in logger.filters):
        logger.addFilter(_NoProxyExecutorNotes())


def _non_global_guards(entries) -> list:
    """The guards a compiled method keeps (``torch.compile``'s ``guard_filter_fn``): all
    but those on module globals, which here are the library's own functions and
    constants (and torch's): every call of a compiled method checks its guards, and at a
    batch of one those on globals were about 60% of that check (iCub aba: 13 against
    5 us). Patching a torchrbd or torch global after compiling therefore needs
    ``torch._dynamo.reset()``. Guards on the inputs, on the model and its constants, on
    this object's settings and on grad mode stay."""
    return [not e.is_global for e in entries]
