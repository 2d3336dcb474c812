"""``gs.Scene``: entities, options and the step pipeline.

One ``scene.step()`` advances every entity by ``dt`` in ``substeps`` integrator
steps. Each integrator stage runs, on plain tensors:

1. the contact stage (:mod:`torchrbd.sim.contact_stage`, planned once in
   ``build()``): generalized contact forces per entity (and, for the Euler step,
   their implicit damping), or None when collisions are off or no entity has
   collision geoms;
2. per entity, :func:`torchrbd.sim.dynamics.acceleration` (mass matrix and bias,
   control, passive and contact forces, solve, joint-limit constraint);

and the integrator (:mod:`torchrbd.sim.integrators`) combines the stages.
With ``SimOptions(requires_grad=True)`` the whole step is recorded by autograd.
"""

from __future__ import annotations

import uuid
import warnings
from dataclasses import dataclass

import torch

from ..errors import InputError, SimulationError
from . import dynamics as dyn
from .contact_stage import ContactStage
from .entity import RigidEntity
from .integrators import INTEGRATORS
from .materials import Rigid
from .morphs import Morph
from .options import RigidOptions, SimOptions
from .runtime import default_device, ensure_initialized, float_dtype


@dataclass
class SimState:
    """A snapshot of a scene (``scene.get_state()``), accepted by ``scene.reset(state)``.

    ``entities[i]`` is ``(qpos (B, n_qs), dofs velocity (B, n_dofs), base pose (B, 7))``
    of entity ``i`` (tensors as they are, graph included; ``B = max(n_envs, 1)``).
    """

    scene: "Scene"
    t: int
    entities: list


class Scene:
    """A simulated world.

    Args:
        sim_options: :class:`~torchrbd.sim.options.SimOptions` (dt, substeps,
            gravity, requires_grad).
        rigid_options: :class:`~torchrbd.sim.options.RigidOptions` (integrator,
            collisions, joint limits).
        show_viewer: accepted for Genesis compatibility; there is no viewer
            (True warns). ``viewer_options``/``vis_options``/other Genesis
            keyword arguments are accepted and ignored.
    """

    def __init__(self, sim_options: SimOptions | None = None, rigid_options: RigidOptions | None = None,
                 show_viewer: bool = False, **ignored):
        ensure_initialized()
        self.sim_options = sim_options if sim_options is not None else SimOptions()
        self.rigid_options = rigid_options if rigid_options is not None else RigidOptions()
        if not isinstance(self.sim_options, SimOptions):
            raise InputError(f"sim_options must be gs.options.SimOptions, got {type(self.sim_options).__name__}")
        if not isinstance(self.rigid_options, RigidOptions):
            raise InputError(
                f"rigid_options must be gs.options.RigidOptions, got {type(self.rigid_options).__name__}"
            )
        if show_viewer:
            warnings.warn("torchrbd.sim has no viewer; show_viewer=True is ignored", stacklevel=2)
        self.dtype, self.device = float_dtype(), default_device()
        self.uid = uuid.uuid4().hex[:12]
        self.entities: list[RigidEntity] = []
        self.is_built = False
        self.n_envs, self._B = 0, 1
        self._t = 0
        self._contact_stage = None  # planned by build()

    def __repr__(self):
        return f"Scene(uid={self.uid}, entities={len(self.entities)}, built={self.is_built}, n_envs={self.n_envs})"

    # ------------------------------------------------------------ settings
    @property
    def dt(self) -> float:
        """Time of one ``step()``, s."""
        return self.rigid_options.dt if self.rigid_options.dt is not None else self.sim_options.dt

    @property
    def substeps(self) -> int:
        return self.sim_options.substeps

    @property
    def substep_dt(self) -> float:
        return self.dt / self.substeps

    @property
    def requires_grad(self) -> bool:
        return self.sim_options.requires_grad

    @property
    def t(self) -> int:
        """Number of steps since ``build()`` or the last ``reset()``."""
        return self._t

    @property
    def cur_t(self) -> float:
        """Simulated time since ``build()`` or the last ``reset()``, s."""
        return self._t * self.dt

    # ------------------------------------------------------------ building
    def add_entity(self, morph: Morph, material: Rigid | None = None, **ignored) -> RigidEntity:
        """Add a robot or rigid body (before ``build()``). ``surface``/``vis_mode``...
        are accepted and ignored."""
        if self.is_built:
            raise SimulationError("add_entity after scene.build(); add every entity before building the scene")
        if not isinstance(morph, Morph):
            raise InputError(f"add_entity expects a gs.morphs.* object, got {type(morph).__name__}")
        material = material if material is not None else Rigid()
        if not isinstance(material, Rigid):
            raise InputError(f"add_entity: material must be gs.materials.Rigid, got {type(material).__name__}")
        entity = RigidEntity(self, len(self.entities), morph, material)
        self.entities.append(entity)
        return entity

    def build(self, n_envs: int = 0, **ignored) -> None:
        """Load every entity's model; ``n_envs > 0`` simulates that many environments
        in parallel (a leading dimension on every getter and setter value)."""
        if self.is_built:
            raise SimulationError("scene.build() called twice")
        if int(n_envs) != n_envs or n_envs < 0:
            raise InputError(f"n_envs must be an integer >= 0, got {n_envs!r}")
        self.n_envs, self._B = int(n_envs), max(int(n_envs), 1)
        for entity in self.entities:
            entity._build()
        self._contact_stage = ContactStage.build(self)
        self.is_built = True
        self._t = 0

    def _need_built(self, what: str):
        if not self.is_built:
            raise SimulationError(f"scene.{what}() before scene.build(); build the scene first")

    # ------------------------------------------------------------ pipeline
    def _dynamic(self) -> list[RigidEntity]:
        return [e for e in self.entities if e.n_dofs > 0]

    def _contact_terms(self, statics, ctrls, state, implicit: bool = False, kinematics=None):
        """The contact stage at ``state`` (per dynamic entity, plain tensors): a
        :class:`~torchrbd.sim.contact_stage.StageResult`, or None when ``enable_collision``
        is off or no pair of collision geoms can touch. ``kinematics``: the entities'
        :func:`~torchrbd.sim.dynamics.stage_kinematics` at ``state``, if computed."""
        stage = self._contact_stage
        if stage is None or stage.n_contacts == 0:
            return None
        return stage.evaluate(self, statics, ctrls, state, implicit, kinematics)

    def _contact_forces(self, statics, ctrls, state):
        """Contact stage: generalized contact forces (B, nv) per dynamic entity (None for
        an entity no contact acts on), or None when ``enable_collision`` is off or no
        pair of collision geoms can touch."""
        result = self._contact_terms(statics, ctrls, state)
        return None if result is None else result.generalized

    def _accelerations(self, statics, ctrls, state, h_implicit):
        """One forward kinematics per entity, shared by the contact stage and the dynamics."""
        kin = [dyn.stage_kinematics(s, c, qpos, vel) for s, c, (qpos, vel) in zip(statics, ctrls, state)]
        result = self._contact_terms(statics, ctrls, state, h_implicit is not None, kin)
        loads = [None] * len(statics) if result is None else result.loads
        return [
            dyn.acceleration(s, c, qpos, vel, h_implicit, loads[i], kin[i])
            for i, (s, c, (qpos, vel)) in enumerate(zip(statics, ctrls, state))
        ]

    def _advance(self, statics, ctrls, state):
        """``substeps`` integrator steps of the dynamic entities' states (plain tensors)."""
        integrate = INTEGRATORS[self.rigid_options.integrator.value]

        def accel(st, h_implicit):
            return self._accelerations(statics, ctrls, st, h_implicit)

        for _ in range(self.substeps):
            state = integrate(statics, accel, state, self.substep_dt)
        return state

    def step(self, *args, **ignored) -> None:
        """Advance the simulation by ``dt`` (``update_visualizer``... are ignored)."""
        self._need_built("step")
        ents = self._dynamic()
        if ents:
            with torch.set_grad_enabled(self.requires_grad):
                state = self._advance(
                    [e._statics() for e in ents], [e._control() for e in ents], [(e._qpos, e._vel) for e in ents]
                )
            for e, (qpos, vel) in zip(ents, state):
                e._qpos, e._vel = qpos, vel
        self._t += 1

    def rollout(self, controls, checkpoint_every: int | None = None, mode: str = "force"):
        """Run ``T`` steps with per-step control inputs; see :func:`torchrbd.sim.rollout.rollout`."""
        from .rollout import rollout

        return rollout(self, controls, checkpoint_every=checkpoint_every, mode=mode)

    # ------------------------------------------------------------ state
    def get_state(self) -> SimState:
        """The current state of every entity (see :class:`SimState`)."""
        self._need_built("get_state")
        return SimState(self, self._t, [e._state() for e in self.entities])

    def reset(self, state: SimState | None = None) -> None:
        """Back to the state at ``build()`` (or ``state``), with fresh autograd leaves:
        the next rollout starts a new graph. Control commands are cleared; gains,
        force ranges and inertial parameters set before are kept (re-applied)."""
        self._need_built("reset")
        if state is not None:
            if not isinstance(state, SimState) or state.scene is not self:
                raise InputError("reset(state): state must come from this scene's get_state()")
        for i, e in enumerate(self.entities):
            e._reset(None if state is None else state.entities[i])
        self._t = 0 if state is None else state.t
