"""Emulated robots in the field: the deployed policy runs episodes of the real MuJoCo task in a world that differs
from the simulation it was trained and evaluated in (a documented, configurable *domain gap*), and reports each
episode as a real robot does (:class:`sim2real.edge.field_recorder.FieldRecorder`, then
:func:`~sim2real.edge.field_recorder.upload_spool` to the sandbox's S3).

The robot's control loop: observation (with the gap's sensor noise) → ``get_action`` over the GR00T protocol to the
robot's own policy server (:class:`sim2real.edge.policy_server.PolicyServer` serving the ONNX export the setup
component wrote) → the first action of the returned chunk, applied ``action_delay_steps`` control steps late through
the gap's weaker or stronger actuators. The outcome is the task's own success function
(:func:`sim2real.workloads.tasks.get_task`), the action latency the client's round trip. So the field success rate
the loop measures honestly differs from the simulation's when the gap is not zero.

The gap (:class:`DomainGap`) changes the MuJoCo model of ``gymnasium.make(task)`` in place before the episodes:
``body_mass`` (every body, kg) and ``geom_friction[:, 0]`` (sliding friction, every geom) scaled, the actuators'
``gear[:, 0]`` scaled (torque per unit of action); facts from MuJoCo's ``mjModel`` documentation
(https://mujoco.readthedocs.io/en/stable/APIreference/APItypes.html#mjmodel).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

#: The limits of each gap field (inclusive): a value outside is refused with its name and the range.
GAP_LIMITS: dict[str, tuple[float, float]] = {
    "mass_scale": (0.1, 10.0), "friction_scale": (0.1, 10.0), "actuator_gain_scale": (0.1, 10.0),
    "action_delay_steps": (0, 20), "observation_noise_std": (0.0, 1.0),
}


@dataclass(frozen=True)
class DomainGap:
    """How the emulated robots' world differs from the simulation.

    :ivar mass_scale: every body's mass is multiplied by this (1 = as simulated).
    :ivar friction_scale: every geom's sliding friction is multiplied by this.
    :ivar actuator_gain_scale: every actuator's gear (torque per unit of action) is multiplied by this.
    :ivar action_delay_steps: an action is applied this many control steps after the observation it answers
        (the first steps apply zeros).
    :ivar observation_noise_std: standard deviation of the Gaussian noise added to every observation element (in the
        observation's units).
    """

    mass_scale: float = 1.0
    friction_scale: float = 1.0
    actuator_gain_scale: float = 1.0
    action_delay_steps: int = 0
    observation_noise_std: float = 0.0

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any] | None) -> DomainGap:
        """A gap from its JSON form (missing fields: no gap in that respect).

        :raises ValueError: an unknown field, a value of the wrong type or outside :data:`GAP_LIMITS` (named).
        """
        doc = dict(doc or {})
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(doc) - set(known))
        if unknown:
            raise ValueError(f"domain gap: unknown field(s) {unknown}; known: {sorted(known)}")
        for name, value in doc.items():
            integer = name == "action_delay_steps"
            if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
                raise ValueError(f"domain gap: {name} must be {'an integer' if integer else 'a number'}, "
                                 f"got {value!r}")
            low, high = GAP_LIMITS[name]
            if not low <= value <= high:
                raise ValueError(f"domain gap: {name} = {value} is outside [{low}, {high}]")
        return cls(**doc)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def apply(self, env: Any) -> None:
        """Change the MuJoCo model of ``env`` (a gymnasium MuJoCo environment) in place."""
        model = env.unwrapped.model
        model.body_mass[:] = model.body_mass * self.mass_scale
        model.geom_friction[:, 0] = model.geom_friction[:, 0] * self.friction_scale
        model.actuator_gear[:, 0] = model.actuator_gear[:, 0] * self.actuator_gain_scale


#: Gaps the demo names (``make demo DEMO_ARGS=--field-gap=...``): none, one a good policy tolerates, one it does not.
NAMED_GAPS: dict[str, DomainGap] = {
    "none": DomainGap(),
    "mild": DomainGap(mass_scale=1.2, friction_scale=1.2, observation_noise_std=0.002),
    "severe": DomainGap(actuator_gain_scale=0.3, action_delay_steps=3, observation_noise_std=0.05),
}


def recording_settings(task_id: str) -> tuple[str, float]:
    """What a recorder with ``record_data`` names an emulated robot's episodes with: the task string (the gymnasium
    id: the workloads' tasks carry no language instruction) and the frames per second, one frame per control step
    (``1 / env.unwrapped.dt``; gymnasium's MuJoCo environments: ``dt = model.opt.timestep * frame_skip``)."""
    import gymnasium

    env = gymnasium.make(task_id)
    try:
        return task_id, 1.0 / float(env.unwrapped.dt)
    finally:
        env.close()


def run_field_episodes(*, model_path: str | Path, task_id: str, episodes: int, seed: int, gap: DomainGap,
                       recorder: Any, timeout_ms: int = 5000) -> list[bool]:
    """Run ``episodes`` episodes of ``task_id`` with the ONNX policy ``model_path`` served over the GR00T protocol,
    in the world ``gap`` describes, and record each with ``recorder`` (a :class:`FieldRecorder`): per step the action
    latency, the observation the policy got (with the gap's noise) and the action applied (after the gap's delay).

    :param seed: episode ``i`` resets the environment with ``seed + i`` (the noise uses ``seed`` too).
    :return: each episode's success (the task's success function on its last step), in order.
    :raises KeyError: ``task_id`` is not a gymnasium task the workloads know. The policy server's and the client's
        errors (:mod:`sim2real.edge.policy_client`) propagate; episodes recorded before stay spooled.
    """
    import gymnasium
    import numpy as np

    from sim2real.edge.policy_client import PolicyClient
    from sim2real.edge.policy_server import PolicyServer
    from sim2real.workloads.tasks import get_task

    spec = get_task(task_id, kind="gymnasium")
    rng = np.random.default_rng(seed)
    env = gymnasium.make(task_id)
    gap.apply(env)
    handle = PolicyServer(model_path, host="127.0.0.1", port=0).start_in_thread()
    outcomes: list[bool] = []
    try:
        with PolicyClient("127.0.0.1", handle.port, timeout_ms=timeout_ms) as client:
            width = int(env.action_space.shape[0])
            for i in range(episodes):
                obs, info = env.reset(seed=seed + i)
                pending: deque = deque([np.zeros(width, np.float32)] * gap.action_delay_steps)
                recorder.start_episode()
                length, terminated, truncated = 0, False, False
                while not (terminated or truncated):
                    sensed = np.asarray(obs, np.float32)
                    if gap.observation_noise_std:
                        sensed = sensed + rng.normal(0.0, gap.observation_noise_std, sensed.shape).astype(np.float32)
                    started = time.perf_counter()
                    actions, _ = client.get_action({"state": {"observation": sensed[None, None, :]}})
                    latency_ms = (time.perf_counter() - started) * 1000.0
                    pending.append(np.asarray(actions["action"][0, 0], np.float32))
                    applied = pending.popleft()
                    # what the robot's sensors gave the policy, and the action its actuators got (the data a
                    # recorder with record_data keeps)
                    recorder.record_step(latency_ms, observation_state=sensed, action=applied)
                    obs, _, terminated, truncated, info = env.step(applied)
                    length += 1
                success = bool(spec.success(observation=obs, info=info, terminated=bool(terminated),
                                            truncated=bool(truncated), length=length))
                recorder.end_episode(success, "task_success_fn")
                outcomes.append(success)
    finally:
        handle.stop()
        env.close()
    return outcomes
