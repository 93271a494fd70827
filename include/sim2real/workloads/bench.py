"""Throughput benchmark of the trainer's environment loop (``make bench``: 1 vs 8 vectorised envs)."""

from __future__ import annotations

import tempfile
import time


def env_steps_per_second(num_envs: int, seconds: float, task: str = "Reacher-v5", seed: int = 0) -> float:
    """Environment steps per second of the trainer's loop, measured for about ``seconds`` of wall time.

    Builds exactly what :mod:`sim2real.workloads.train` builds (gymnasium ``make_vec`` sync env with
    ``num_envs`` copies, skrl gymnasium wrapper, PPO agent, skrl ``StepTrainer``, one torch thread) and runs
    whole trainer steps (policy inference + env step + transition recording, and the PPO update every
    ``rollouts`` steps, so updates are included at their real share). Nothing is written.

    :param num_envs: vectorised environments (>= 1).
    :param seconds: wall time to measure for (> 0; rounded up to whole trainer steps).
    :return: env steps per second, summed over environments (``trainer steps × num_envs / elapsed``).
    :raises ValueError: ``num_envs < 1`` or ``seconds <= 0``.
    """
    if num_envs < 1 or seconds <= 0:
        raise ValueError(f"need num_envs >= 1 and seconds > 0, got {num_envs}, {seconds}")
    import torch
    from skrl.envs.wrappers.torch import wrap_env
    from skrl.trainers.torch import StepTrainer
    from skrl.utils import set_seed

    from sim2real.workloads.tasks import get_task
    from sim2real.workloads.train import _make_env, build_agent

    spec = get_task(task, kind="gymnasium")
    torch.set_num_threads(1)
    set_seed(seed)
    env = wrap_env(_make_env(task, num_envs), wrapper="gymnasium")
    with tempfile.TemporaryDirectory(prefix="sim2real-bench-") as tmp:
        agent = build_agent(spec, env, torch.device("cpu"), f"{tmp}/tb", write_tb=False)
        trainer = StepTrainer(env=env, agents=agent, cfg={
            "timesteps": 10**9, "headless": True, "disable_progressbar": True, "close_environment_at_exit": False,
        })
        trainer.train(timestep=0, timesteps=10**9)  # warm-up: first reset, lazy allocations
        steps = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            trainer.train(timestep=steps + 1, timesteps=10**9)
            steps += 1
        elapsed = time.perf_counter() - start
    env.close()
    return steps * num_envs / elapsed


if __name__ == "__main__":
    for n in (1, 8):
        print(f"num_envs={n} env_steps_per_second={env_steps_per_second(n, 5.0):.0f}")
