"""Trainer benchmarks for ``make bench``: the env loop's throughput (1 vs 8 vectorised envs), and policy quality
after a wall-time budget, ours against Stable-Baselines3 PPO (:mod:`sim2real.workloads.sb3_baseline`).

Quality rows: a trainer runs for the longest budget, snapshots are taken at each budget (ours: the last
checkpoint written at or before that many seconds of training, from a run of ``sim2real-train`` with
``TIME_BUDGET_SECONDS``; SB3: an in-memory copy at that second), and each snapshot is evaluated on the same
100 seeded episodes (seeds 2000..2099) by the project's evaluator loop with the deterministic policy.

CLI (one training run, its result as JSON; what ``make bench`` and the measurements behind the README run)::

    python -m sim2real.workloads.bench quality --trainer ours --task Reacher-v5 --num-envs 8 --seed 3 \
        --seconds 120 --snapshots 60,120 --json-out ours-3.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

from sim2real.contract.progress import parse_progress

EVAL_SEED = 2000
EVAL_EPISODES = 100
_RATE_RE = re.compile(r"^\[sim2real\] throughput .* env_steps=(\d+) wall_s=([\d.]+) env_steps_per_s=([\d.]+)")


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
    from sim2real.workloads.train_env import _make_env, build_agent

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


def evaluate_checkpoint(path: str, task: str, seeds: list[int]) -> dict[str, Any]:
    """Success of a trainer checkpoint's deterministic policy on one episode per seed (the evaluator's loop)."""
    import torch

    from sim2real.workloads.evaluate import run_episodes
    from sim2real.workloads.policy import deterministic_policy, load_checkpoint

    torch.set_num_threads(1)
    out = run_episodes(deterministic_policy(load_checkpoint(path)), task, seeds)
    successes = int(sum(out["success_flags"]))
    return {"successes": successes, "episodes": len(seeds), "success_rate": successes / len(seeds)}


def train_ours(*, task: str, num_envs: int, seed: int, seconds: float, snapshots: list[float],
               eval_seeds: list[int], checkpoint_interval: int = 5,
               train_command: list[str] | None = None) -> dict[str, Any]:
    """Run ``sim2real-train`` for ``seconds`` (``TIME_BUDGET_SECONDS``) and evaluate a checkpoint per snapshot.

    The snapshot at ``s`` seconds is the last checkpoint (every ``checkpoint_interval`` iterations, and the
    final one) whose iteration ended at ``elapsed_s <= s`` in the trainer's progress lines; its actual
    ``elapsed_s`` is reported beside it.

    :param train_command: the trainer's command line (default: this interpreter, ``-m sim2real.workloads.train``).
    :return: ``{"trainer": "ours", "env_steps", "wall_s", "env_steps_per_s", "snapshots": [...]}``.
    :raises RuntimeError: the trainer failed (its output's tail in the message).
    """
    with tempfile.TemporaryDirectory(prefix="sim2real-quality-") as tmp:
        env = {**os.environ, "TASK": task, "NUM_ENVS": str(num_envs), "SEED": str(seed), "OUTPUT_URI": tmp,
               "MAX_ITERATIONS": str(10**7), "CHECKPOINT_INTERVAL": str(checkpoint_interval),
               "TIME_BUDGET_SECONDS": str(seconds), "DEVICE": "cpu"}
        env.pop("AWS_ENDPOINT_URL", None)
        cmd = train_command or [sys.executable, "-m", "sim2real.workloads.train"]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not os.path.exists(os.path.join(tmp, "manifest.json")):
            raise RuntimeError(f"trainer failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        with open(os.path.join(tmp, "manifest.json")) as fh:
            manifest = json.load(fh)
        progress = [(p.iteration, p.timesteps, p.elapsed_s)
                    for p in map(parse_progress, proc.stdout.splitlines()) if p]
        rate = next(m for m in map(_RATE_RE.match, proc.stdout.splitlines()) if m)
        saved = {it for it, _, _ in progress if it % checkpoint_interval == 0} | {int(manifest["iteration"])}
        results = []
        for at in sorted(snapshots):
            written = [p for p in progress if p[0] in saved]
            it, steps, elapsed = ([p for p in written if p[2] <= at + 1e-6] or written[:1])[-1]
            path = os.path.join(tmp, f"agent_{it:06d}.pt")
            results.append({"at_s": at, "elapsed_s": elapsed, "env_steps": steps, "iteration": it,
                            **evaluate_checkpoint(path, task, eval_seeds)})
    return {"trainer": "ours", "task": task, "seed": seed, "num_envs": num_envs, "env_steps": int(rate.group(1)),
            "wall_s": float(rate.group(2)), "env_steps_per_s": float(rate.group(3)), "snapshots": results}


def train_sb3(*, task: str, num_envs: int, seed: int, seconds: float, snapshots: list[float],
              eval_seeds: list[int], python: str | None = None) -> dict[str, Any]:
    """:func:`sim2real.workloads.sb3_baseline.train_and_evaluate` in a fresh interpreter (``python``, default
    ``$SIM2REAL_SB3_PYTHON`` or this one; SB3 may live in its own virtual environment).

    :raises RuntimeError: the baseline failed (its output's tail in the message).
    """
    python = python or os.environ.get("SIM2REAL_SB3_PYTHON") or sys.executable
    with tempfile.TemporaryDirectory(prefix="sim2real-sb3-") as tmp:
        out = os.path.join(tmp, "result.json")
        cmd = [python, "-m", "sim2real.workloads.sb3_baseline", "--task", task, "--seed", str(seed),
               "--num-envs", str(num_envs), "--seconds", str(seconds),
               "--snapshots", ",".join(str(s) for s in snapshots), "--eval-seed", str(eval_seeds[0]),
               "--episodes", str(len(eval_seeds)), "--json-out", out]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"SB3 baseline failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}"
                               f"{proc.stderr[-2000:]}")
        with open(out) as fh:
            return json.load(fh)


def main(argv: list[str] | None = None) -> int:
    """``quality``: one training run's snapshot success as JSON; ``throughput``: the env-loop rates."""
    parser = argparse.ArgumentParser(prog="python -m sim2real.workloads.bench")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("throughput")
    q = sub.add_parser("quality")
    q.add_argument("--trainer", choices=("ours", "sb3"), required=True)
    q.add_argument("--task", default="Reacher-v5")
    q.add_argument("--num-envs", type=int, default=8)
    q.add_argument("--seed", type=int, default=3)
    q.add_argument("--seconds", type=float, required=True)
    q.add_argument("--snapshots", default="")
    q.add_argument("--episodes", type=int, default=EVAL_EPISODES)
    q.add_argument("--json-out", required=True)
    args = parser.parse_args(argv)
    if args.command == "throughput":
        for n in (1, 8):
            print(f"num_envs={n} env_steps_per_second={env_steps_per_second(n, 5.0):.0f}")
        return 0
    snaps = [float(s) for s in args.snapshots.split(",") if s.strip()] or [args.seconds]
    seeds = list(range(EVAL_SEED, EVAL_SEED + args.episodes))
    run = train_ours if args.trainer == "ours" else train_sb3
    result = run(task=args.task, num_envs=args.num_envs, seed=args.seed, seconds=args.seconds, snapshots=snaps,
                 eval_seeds=seeds)
    with open(args.json_out, "w") as fh:
        json.dump(result, fh, indent=2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
