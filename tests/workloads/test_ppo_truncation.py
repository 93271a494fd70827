"""Time-limit truncation in the trainer's PPO: value targets bootstrap from the real final observation.

Real gymnasium Reacher-v5 vector envs (SAME_STEP autoreset, every episode truncated at step 50), the trainer's
own agent (:func:`sim2real.workloads.train_env.build_agent`) and skrl's StepTrainer, at toy scale (no PPO update).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sim2real.workloads.ppo import MissingFinalObservationError, TimeLimitBootstrapPPO
from sim2real.workloads.tasks import get_task
from sim2real.workloads.train_env import _make_env, build_agent, wrap_for_device

NUM_ENVS = 3
EPISODE_STEPS = 50  # Reacher-v5 max_episode_steps


def _value(agent, observations: torch.Tensor) -> torch.Tensor:
    """V(s) exactly as skrl's PPO computes it for bootstrapping (standardised input, de-standardised output)."""
    with torch.no_grad():
        values, _ = agent.value.act({"observations": agent._observation_preprocessor(observations), "states": None},
                                    role="value")
        return agent._value_preprocessor(values, inverse=True)


@pytest.fixture()
def rollout(tmp_path):
    """One whole episode per env plus one step of the next, recorded by the trainer's agent."""
    from skrl.trainers.torch import StepTrainer
    from skrl.utils import set_seed

    set_seed(7)
    env = wrap_for_device(_make_env("Reacher-v5", NUM_ENVS), torch.device("cpu"))
    agent = build_agent(get_task("Reacher-v5"), env, torch.device("cpu"), str(tmp_path / "tb"), write_tb=False)
    assert agent.cfg.rollouts > EPISODE_STEPS + 1  # no update inside the episode: memory holds raw transitions
    trainer = StepTrainer(env=env, agents=agent, cfg={"timesteps": 1000, "headless": True,
                                                      "disable_progressbar": True, "close_environment_at_exit": False})
    steps = []
    for t in range(EPISODE_STEPS + 1):
        next_obs, rewards, terminated, truncated, infos = trainer.train(timestep=t, timesteps=1000)
        steps.append((next_obs.clone(), rewards.clone(), terminated.clone(), truncated.clone(), infos))
    yield agent, steps
    env.close()


def test_truncated_steps_bootstrap_from_final_obs_never_from_the_reset_observation(rollout):
    agent, steps = rollout
    assert isinstance(agent, TimeLimitBootstrapPPO) and agent.cfg.time_limit_bootstrap
    gamma = agent.cfg.discount_factor
    stored = agent.memory.get_tensor_by_name("rewards")[: len(steps)]  # (steps, envs, 1)
    stored_truncated = agent.memory.get_tensor_by_name("truncated")[: len(steps)]

    last = EPISODE_STEPS - 1
    reset_obs, rewards, terminated, truncated, infos = steps[last]
    assert truncated.all() and not terminated.any()
    final_obs = torch.as_tensor(np.stack(infos["final_obs"]), dtype=torch.float32)
    # the rewards the trainer's loop sees (and sums into episode returns) are the env's, not the bootstrapped ones
    # (Reacher-v5 reward = reward_dist + reward_ctrl, gymnasium reacher_v5.py _get_rew)
    raw = infos["final_info"]["reward_dist"] + infos["final_info"]["reward_ctrl"]
    assert torch.allclose(rewards.view(-1), torch.as_tensor(raw, dtype=torch.float32), atol=1e-5)
    assert not torch.allclose(final_obs, reset_obs)  # SAME_STEP: next_obs is already the next episode's start
    expected = rewards + gamma * _value(agent, final_obs)
    from_reset = rewards + gamma * _value(agent, reset_obs)
    assert torch.allclose(stored[last], expected, atol=1e-5)
    assert not torch.allclose(stored[last], from_reset, atol=1e-3)  # what skrl's own time_limit_bootstrap stores
    assert stored_truncated[last].all()

    # every other step (within an episode, and the next episode's first) is stored as is: no bootstrap at all
    for t, (_obs, rewards, _term, truncated, _infos) in enumerate(steps):
        if t != last:
            assert not truncated.any()
            assert torch.equal(stored[t], rewards)


def test_gae_does_not_cross_the_episode_boundary(rollout):
    from skrl.agents.torch.ppo.ppo import compute_gae

    agent, steps = rollout
    n = len(steps)
    memory = agent.memory
    kwargs = dict(rewards=memory.get_tensor_by_name("rewards")[:n], terminated=memory.get_tensor_by_name("terminated")[:n],
                  truncated=memory.get_tensor_by_name("truncated")[:n], values=memory.get_tensor_by_name("values")[:n],
                  discount_factor=agent.cfg.discount_factor, lambda_coefficient=agent.cfg.gae_lambda,
                  time_limit_bootstrap=agent.cfg.time_limit_bootstrap)
    returns_a, _ = compute_gae(**kwargs, last_values=torch.zeros(NUM_ENVS, 1))
    other_values = kwargs["values"].clone()
    other_values[EPISODE_STEPS:] += 100.0  # the next episode's values must not reach the finished episode
    returns_b, _ = compute_gae(**{**kwargs, "values": other_values}, last_values=torch.full((NUM_ENVS, 1), 100.0))
    assert torch.allclose(returns_a[:EPISODE_STEPS], returns_b[:EPISODE_STEPS])
    # the truncated step's return is exactly its bootstrapped reward: r + γ·V(final_obs)
    assert torch.allclose(returns_a[EPISODE_STEPS - 1], kwargs["rewards"][EPISODE_STEPS - 1])


def _init(agent, env) -> None:
    from skrl.trainers.torch import StepTrainer

    StepTrainer(env=env, agents=agent, cfg={"timesteps": 1, "headless": True, "disable_progressbar": True,
                                            "close_environment_at_exit": False})  # calls agent.init
    agent.enable_training_mode(True)


def _synthetic_step(agent, *, terminated, truncated, infos):
    obs = torch.zeros(NUM_ENVS, 10)
    agent.act(obs, None, timestep=0, timesteps=1)
    agent.record_transition(observations=obs, states=None, actions=torch.zeros(NUM_ENVS, 2),
                            rewards=torch.ones(NUM_ENVS, 1), next_observations=torch.ones(NUM_ENVS, 10),
                            next_states=None, terminated=terminated, truncated=truncated, infos=infos,
                            timestep=0, timesteps=1)


def test_terminated_on_the_last_allowed_step_is_not_bootstrapped(tmp_path):
    env = wrap_for_device(_make_env("Reacher-v5", NUM_ENVS), torch.device("cpu"))
    try:
        agent = build_agent(get_task("Reacher-v5"), env, torch.device("cpu"), str(tmp_path / "tb"), write_tb=False)
        _init(agent, env)
        both = torch.tensor([[True], [False], [False]])
        final = [torch.full((10,), 0.5).numpy(), None, None]
        infos = {"final_obs": np.array(final, dtype=object), "_final_obs": np.array([True, False, False])}
        _synthetic_step(agent, terminated=both, truncated=both, infos=infos)
        assert torch.equal(agent.memory.get_tensor_by_name("rewards")[0], torch.ones(NUM_ENVS, 1))
        assert not agent.memory.get_tensor_by_name("truncated")[0].any()
        assert agent.memory.get_tensor_by_name("terminated")[0, 0].item()
    finally:
        env.close()


def test_truncation_without_final_obs_is_refused(tmp_path):
    env = wrap_for_device(_make_env("Reacher-v5", NUM_ENVS), torch.device("cpu"))
    try:
        agent = build_agent(get_task("Reacher-v5"), env, torch.device("cpu"), str(tmp_path / "tb"), write_tb=False)
        _init(agent, env)
        with pytest.raises(MissingFinalObservationError, match="SAME_STEP"):
            _synthetic_step(agent, terminated=torch.zeros(NUM_ENVS, 1, dtype=torch.bool),
                            truncated=torch.tensor([[False], [True], [False]]), infos={})
    finally:
        env.close()
