"""Stable-Baselines3 PPO baseline for ``make bench``: train for a wall-time budget, evaluate snapshots.

Hyper-parameters are rl-baselines3-zoo's for Reacher (``rl_zoo3/hyperparams/ppo.yml``, entry ``Reacher-v2``;
the zoo has no v4/v5 entry): ``VecNormalize`` (observations and rewards, ``gamma=0.9``), ``n_steps=512``,
``batch_size=32``, ``gamma=0.9``, ``learning_rate=1.04019e-4``, ``ent_coef=7.52585e-8``, ``clip_range=0.3``,
``n_epochs=5``, ``gae_lambda=1.0``, ``max_grad_norm=0.9``, ``vf_coef=0.950368``, ``MlpPolicy``. The zoo runs one
environment; here ``num_envs`` (default 8, like the project trainer) ``DummyVecEnv`` copies step in this process.
SB3 bootstraps truncated episodes from ``infos[i]["terminal_observation"]`` itself.

Snapshots (policy weights and the observation normaliser's statistics, copied in memory, never written or
unpickled) are taken at the given seconds of training and evaluated afterwards with the project's evaluator
loop (:func:`sim2real.workloads.evaluate.run_episodes`: deterministic mean action, one fresh env per seed,
the task's success definition), so both trainers are scored by the same code.

Run as ``python -m sim2real.workloads.sb3_baseline --task Reacher-v5 --seed 3 --seconds 120 --snapshots 60,120
--json-out result.json`` (its own interpreter: SB3 may live in another virtual environment).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from typing import Any

#: rl-baselines3-zoo 2.9.2 ``hyperparams/ppo.yml`` ``Reacher-v2`` (``normalize: true`` → VecNormalize).
ZOO_REACHER_PPO: dict[str, Any] = {
    "n_steps": 512, "batch_size": 32, "gamma": 0.9, "learning_rate": 0.000104019, "ent_coef": 7.52585e-08,
    "clip_range": 0.3, "n_epochs": 5, "gae_lambda": 1.0, "max_grad_norm": 0.9, "vf_coef": 0.950368,
}


def train_and_evaluate(*, task: str, seed: int, seconds: float, snapshots: list[float], num_envs: int = 8,
                       eval_seeds: list[int]) -> dict[str, Any]:
    """Train SB3 PPO on ``task`` for ``seconds`` of wall time; evaluate a snapshot at each of ``snapshots``.

    :return: ``{"trainer", "env_steps", "wall_s", "env_steps_per_s", "snapshots": [{"at_s", "env_steps",
        "successes", "episodes", "success_rate"}]}``.
    """
    import numpy as np
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    from sim2real.workloads.evaluate import run_episodes

    torch.set_num_threads(1)
    venv = VecNormalize(make_vec_env(task, n_envs=num_envs, seed=seed), gamma=ZOO_REACHER_PPO["gamma"])
    model = PPO("MlpPolicy", venv, seed=seed, device="cpu", verbose=0, **ZOO_REACHER_PPO)
    pending = sorted(float(s) for s in snapshots)
    taken: list[dict[str, Any]] = []

    class WallClock(BaseCallback):
        def _on_training_start(self) -> None:
            self.t0 = time.monotonic()

        def _on_step(self) -> bool:
            elapsed = time.monotonic() - self.t0
            while pending and elapsed >= pending[0]:
                taken.append({"at_s": pending.pop(0), "elapsed_s": elapsed, "env_steps": int(self.num_timesteps),
                              "policy": copy.deepcopy(model.policy.state_dict()),
                              "obs_rms": copy.deepcopy(venv.obs_rms)})
            return elapsed < seconds

    clock = WallClock()
    model.learn(total_timesteps=10**12, callback=clock)
    wall = time.monotonic() - clock.t0
    steps = int(model.num_timesteps)
    while pending:  # stopped inside an update, just past the budget
        taken.append({"at_s": pending.pop(0), "elapsed_s": wall, "env_steps": steps,
                      "policy": copy.deepcopy(model.policy.state_dict()), "obs_rms": copy.deepcopy(venv.obs_rms)})

    results = []
    for snap in taken:
        model.policy.load_state_dict(snap["policy"])
        rms, clip, eps = snap["obs_rms"], venv.clip_obs, venv.epsilon

        def policy(obs: torch.Tensor, rms=rms, clip=clip, eps=eps) -> torch.Tensor:
            x = np.clip((obs.numpy() - rms.mean) / np.sqrt(rms.var + eps), -clip, clip).astype(np.float32)
            action, _ = model.predict(x, deterministic=True)
            return torch.as_tensor(np.asarray(action, dtype=np.float32))

        out = run_episodes(policy, task, eval_seeds)
        successes = int(sum(out["success_flags"]))
        results.append({"at_s": snap["at_s"], "elapsed_s": round(snap["elapsed_s"], 2), "env_steps": snap["env_steps"],
                        "successes": successes, "episodes": len(eval_seeds),
                        "success_rate": successes / len(eval_seeds)})
    venv.close()
    return {"trainer": "sb3", "task": task, "seed": seed, "num_envs": num_envs, "env_steps": steps,
            "wall_s": round(wall, 2), "env_steps_per_s": steps / wall if wall > 0 else float("nan"),
            "snapshots": results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sim2real-sb3-baseline")
    parser.add_argument("--task", default="Reacher-v5")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--snapshots", default="")
    parser.add_argument("--eval-seed", type=int, default=2000)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--json-out", required=True)
    args = parser.parse_args(argv)
    snaps = [float(s) for s in args.snapshots.split(",") if s.strip()] or [args.seconds]
    result = train_and_evaluate(task=args.task, seed=args.seed, seconds=args.seconds, snapshots=snaps,
                                num_envs=args.num_envs,
                                eval_seeds=list(range(args.eval_seed, args.eval_seed + args.episodes)))
    with open(args.json_out, "w") as fh:
        json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
