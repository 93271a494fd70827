"""Task registry: which environments the workloads know, and what "success" means for each.

Two kinds of task:

* ``gymnasium``: MuJoCo tasks from gymnasium 1.4 (``gymnasium[mujoco]``) that the project's own
  trainer (:mod:`sim2real.workloads.train`) and evaluator run on CPU nodes and in the local sandbox.
  Each carries a success function evaluated on the **last step** of an episode.
* ``isaaclab``: Isaac Lab task ids. They only run inside the Isaac Lab image
  (``containers/isaaclab/Dockerfile``), through Isaac Lab's own skrl train script; the project trainer
  refuses them with a clear message. Their success terms are listed here for the evaluation step
  that runs in that image, with the source of each.

This module imports nothing heavy (no torch/gymnasium), so anything may read the registry.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

# Reacher-v5 geometry (gymnasium/envs/mujoco/assets/reacher.xml): fingertip sphere radius 0.01 m,
# target sphere radius 0.009 m; arm links 0.1 m + 0.11 m; the target is sampled uniformly in the disc
# of radius 0.2 m (reacher_v5.py reset_model).
REACHER_SUCCESS_DISTANCE_M = 0.05


def _reacher_distance(info: dict[str, Any], observation: Any) -> float:
    # reacher_v5.py _get_rew: info["reward_dist"] = -||fingertip - target|| * reward_dist_weight (default 1,
    # and the registry makes the env with defaults). Fallback: the last two observation entries are the
    # x, y of (fingertip - target) (reacher_v5.py _get_obs); both bodies sit at the same height.
    if "reward_dist" in info:
        return float(-info["reward_dist"])
    return float(math.hypot(float(observation[-2]), float(observation[-1])))


def reacher_success(*, observation: Any, info: dict[str, Any], terminated: bool, truncated: bool, length: int) -> bool:
    """Reacher-v5 success: fingertip-to-target distance at the episode's last step < 0.05 m.

    :param observation: the last observation (10 floats, gymnasium Reacher-v5 layout).
    :param info: the ``info`` dict of the last ``env.step`` (must hold ``reward_dist``, or the
        observation is used).
    :return: True when the final distance is below :data:`REACHER_SUCCESS_DISTANCE_M`.
    """
    return _reacher_distance(info, observation) < REACHER_SUCCESS_DISTANCE_M


def pendulum_success(*, observation: Any, info: dict[str, Any], terminated: bool, truncated: bool, length: int) -> bool:
    """InvertedPendulum-v5 success: the episode reached the 1000-step time limit without terminating.

    Termination means the pole left |angle| <= 0.2 rad or the state became non-finite
    (gymnasium/envs/mujoco/inverted_pendulum_v5.py ``step``); the 1000-step limit is the registered
    ``max_episode_steps`` (gymnasium/envs/__init__.py).
    """
    return (not terminated) and truncated and length >= 1000


# Pusher-v5 geometry (gymnasium/envs/mujoco/assets/pusher.xml): the goal is a flat disc of radius 0.08 m
# (geom size "0.08 0.001 0.1"), the object a cylinder of radius 0.05 m; reset_model puts the goal at (0, 0)
# and the object's centre uniformly in x in [-0.3, 0], y in [-0.2, 0.2] at more than 0.17 m from the goal.
PUSHER_SUCCESS_DISTANCE_M = 0.08


def _pusher_planar_distance(observation: Any) -> float:
    # pusher_v5.py _get_obs: [..., tips_arm xyz (14:17), object xyz (17:20), goal xyz (20:23)]. The planar
    # distance is used: the object's and the goal's centres sit at different heights (-0.275 vs -0.323 m), which
    # info["reward_dist"] (a 3-D distance) includes.
    return float(math.hypot(float(observation[17]) - float(observation[20]),
                            float(observation[18]) - float(observation[21])))


def pusher_success(*, observation: Any, info: dict[str, Any], terminated: bool, truncated: bool, length: int) -> bool:
    """Pusher-v5 success: at the episode's last step the object's centre lies on the goal disc.

    :param observation: the last observation (23 floats, gymnasium Pusher-v5 layout).
    :return: True when the planar object-to-goal distance is below :data:`PUSHER_SUCCESS_DISTANCE_M`.
    """
    return _pusher_planar_distance(observation) < PUSHER_SUCCESS_DISTANCE_M


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One task the workloads know.

    :ivar task_id: gymnasium / Isaac Lab id (what ``TASK`` holds).
    :ivar kind: ``"gymnasium"`` (runs in the project trainer, CPU) or ``"isaaclab"`` (Isaac Lab image only).
    :ivar success_definition: the human-readable definition copied into every evaluation report.
    :ivar source: where the definition's facts come from.
    :ivar success: ``f(observation=, info=, terminated=, truncated=, length=) -> bool`` on the episode's
        last step (``None`` for Isaac Lab tasks: evaluated by Isaac Lab's own scripts).
    :ivar ppo: PPO hyper-parameters the project trainer uses for this task (``rollouts`` is the number of
        vectorised steps per iteration; see :mod:`sim2real.workloads.train`).
    :ivar hidden: hidden layer sizes of the policy and value MLPs.
    :ivar initial_log_std: initial log std of the Gaussian policy.
    """

    task_id: str
    kind: str
    success_definition: str
    source: str
    success: Callable[..., bool] | None = None
    ppo: dict[str, Any] = dataclasses.field(default_factory=dict)
    hidden: tuple[int, ...] = (64, 64)
    initial_log_std: float = 0.0


_REACH_PPO = {
    "rollouts": 64,
    "learning_epochs": 5,
    "mini_batches": 4,
    "discount_factor": 0.95,
    "gae_lambda": 0.95,
    "learning_rate": 1e-3,
    "entropy_loss_scale": 0.0,
    "value_loss_scale": 1.0,
    "ratio_clip": 0.2,
    "value_clip": 0.2,
    "grad_norm_clip": 0.5,
}


_H1_ROUGH_SUCCESS = (
    "episode ends by the time_out term (not by base_contact / illegal contact) and the mean "
    "track_lin_vel_xy_exp reward term stays above a threshold set per evaluation"
)
_H1_ROUGH_SOURCE = (
    "isaaclab_tasks/manager_based/locomotion/velocity/velocity_env_cfg.py (TerminationsCfg: time_out, "
    "base_contact; RewardsCfg: track_lin_vel_xy_exp) and config/h1/rough_env_cfg.py"
)

TASKS: dict[str, TaskSpec] = {
    "Reacher-v5": TaskSpec(
        task_id="Reacher-v5",
        kind="gymnasium",
        success_definition=(
            f"fingertip-to-target distance at the last step of the episode (step 50) < {REACHER_SUCCESS_DISTANCE_M} m, "
            "read from info['reward_dist'] = -distance. 0.05 m is a quarter of the radius of the disc the target is "
            "sampled in (0.2 m) and of the arm's reach (0.21 m); a uniformly random policy ends within it in ~10% "
            "of episodes. The stricter 'fingertip touches target' distance (0.01 + 0.009 m sphere radii, ~0.02 m) "
            "needs far more training than the CPU sandbox budget"
        ),
        source=(
            "gymnasium 1.4 gymnasium/envs/mujoco/reacher_v5.py (_get_rew, reset_model), "
            "assets/reacher.xml (geom sizes), envs/__init__.py (max_episode_steps=50)"
        ),
        success=reacher_success,
        # 10 epochs per update instead of 5: more learning per environment step (2 cores, 32 envs: success
        # >= 0.95 after 30 s of training for 5 of 5 seeds, against 0.85-0.94 with 5 epochs)
        ppo={**_REACH_PPO, "learning_epochs": 10},
        initial_log_std=-0.5,
    ),
    "InvertedPendulum-v5": TaskSpec(
        task_id="InvertedPendulum-v5",
        kind="gymnasium",
        success_definition=(
            "the pole stayed within |angle| <= 0.2 rad for the whole 1000-step episode "
            "(episode truncated by the time limit, never terminated)"
        ),
        source="gymnasium 1.4 gymnasium/envs/mujoco/inverted_pendulum_v5.py (step), envs/__init__.py (max_episode_steps=1000)",
        success=pendulum_success,
        ppo={**_REACH_PPO, "rollouts": 32, "learning_rate": 3e-4},
    ),
    "Pusher-v5": TaskSpec(
        task_id="Pusher-v5",
        kind="gymnasium",
        success_definition=(
            f"planar distance from the object's centre to the goal's centre at the last step of the episode "
            f"(step 100) < {PUSHER_SUCCESS_DISTANCE_M} m, i.e. the object ends on the goal disc (radius 0.08 m); "
            "it starts more than 0.17 m away, so the arm must push it there. Read from the observation "
            "(object xyz at 17:20, goal xyz at 20:23)"
        ),
        source=(
            "gymnasium 1.4 gymnasium/envs/mujoco/pusher_v5.py (_get_obs, reset_model), assets/pusher.xml "
            "(goal geom size 0.08), envs/__init__.py (max_episode_steps=100)"
        ),
        success=pusher_success,
        ppo={**_REACH_PPO, "discount_factor": 0.99},
        hidden=(128, 128),
        initial_log_std=-0.5,
    ),
    "Isaac-Velocity-Rough-H1": TaskSpec(
        task_id="Isaac-Velocity-Rough-H1",
        kind="isaaclab",
        success_definition=_H1_ROUGH_SUCCESS,
        source=(
            "Isaac Lab 3.0's id of the H1 rough-terrain task (isaac-sim/IsaacLab release v3.0.0: task ids without "
            "a version suffix, e.g. the isaaclab_tasks environment tests and `isaaclab train --task "
            "Isaac-Velocity-Rough-H1`; skrl among its RL libraries); same terms as in 2.x, " + _H1_ROUGH_SOURCE
        ),
    ),
    "Isaac-Velocity-Rough-H1-v0": TaskSpec(
        task_id="Isaac-Velocity-Rough-H1-v0",
        kind="isaaclab",
        success_definition=_H1_ROUGH_SUCCESS,
        source=(
            "Isaac Lab 2.x's id (config/h1/__init__.py gym.register), " + _H1_ROUGH_SOURCE
            + "; the workshop trains it with skrl (checkpoint agent_<step>.pt, pretrained agent_72000.pt)"
        ),
    ),
    "Workshop-SO101-Reach-v0": TaskSpec(
        task_id="Workshop-SO101-Reach-v0",
        kind="isaaclab",
        success_definition="end-effector position error to the commanded pose at the episode end below a threshold",
        source=(
            "workshop package exp/workshop/src/workshop/tasks/reach (Isaac Lab reach env: the ee_pose command's "
            "position_error metric, UniformPoseCommand); to be confirmed against the package in the image"
        ),
    ),
    "Workshop-SO101-Lift-v0": TaskSpec(
        task_id="Workshop-SO101-Lift-v0",
        kind="isaaclab",
        success_definition="object within the goal distance of the commanded object pose at the episode end",
        source=(
            "workshop package exp/workshop/src/workshop/tasks/lift (Isaac Lab lift env: object_goal_tracking "
            "reward / object_reached_goal); to be confirmed against the package in the image"
        ),
    ),
}


def get_task(task_id: str, *, kind: str | None = None) -> TaskSpec:
    """Look up ``task_id`` in :data:`TASKS`.

    :param kind: when given, also require the task to be of this kind.
    :raises ValueError: unknown id (the message lists the known ones), or the wrong kind (e.g. an Isaac Lab
        task given to the CPU trainer: the message says to use the Isaac Lab image).
    """
    spec = TASKS.get(task_id)
    if spec is None:
        raise ValueError(f"unknown TASK {task_id!r}; known tasks: {', '.join(sorted(TASKS))}")
    if kind is not None and spec.kind != kind:
        if spec.kind == "isaaclab":
            raise ValueError(
                f"TASK {task_id!r} is an Isaac Lab task: it runs only in the Isaac Lab image "
                "(containers/isaaclab, TRAIN_ENTRYPOINT = Isaac Lab's skrl train script); the CPU trainer runs "
                f"{', '.join(k for k, v in sorted(TASKS.items()) if v.kind == 'gymnasium')}"
            )
        raise ValueError(f"TASK {task_id!r} is a {spec.kind} task, expected {kind}")
    return spec
