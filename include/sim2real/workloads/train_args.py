"""The trainer's settings: environment variables and CLI flags (``sim2real-train``), and the device it trains on.

:func:`parse_args` reads the settings of :mod:`sim2real.workloads.train` (its module docstring has the table:
TASK, MAX_ITERATIONS, NUM_ENVS, ...), CLI flags of the same name in kebab case overriding the environment, and
checks them; :func:`select_device` picks the torch device of one process from ``DEVICE`` and the torchrun
environment (WORLD_SIZE, LOCAL_RANK). Bad input raises :class:`UsageError` (the trainer's exit code 2).
"""

from __future__ import annotations

import argparse
import os

from sim2real.contract import env_vars as ev
from sim2real.workloads.tasks import get_task

DEVICE_CHOICES = ("auto", "cuda", "cpu")


class UsageError(Exception):
    """Bad arguments / environment: reported on stderr with exit code 2."""


def _env_int(name: str, default: int | None) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r} is not an integer") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse env + CLI flags (flags win) into a namespace; validate.

    :raises UsageError: missing TASK/MAX_ITERATIONS/OUTPUT_URI, non-integers, non-positive values,
        unknown or Isaac-Lab-only task.
    """
    parser = argparse.ArgumentParser(prog="sim2real-train", description="PPO (skrl) on gymnasium MuJoCo tasks")
    parser.add_argument("--task", default=os.environ.get(ev.TASK))
    parser.add_argument("--max-iterations", type=int, default=None)
    parser.add_argument("--num-envs", type=int, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--output-uri", default=os.environ.get(ev.OUTPUT_URI))
    parser.add_argument("--checkpoint-interval", type=int, default=None)
    parser.add_argument("--time-budget-seconds", type=float, default=None)
    parser.add_argument("--run-key", default=os.environ.get(ev.RUN_KEY, ""))
    parser.add_argument("--image-digest", default=os.environ.get(ev.IMAGE_DIGEST) or None)
    parser.add_argument("--device", default=os.environ.get(ev.DEVICE) or "auto")
    parser.add_argument("--digest-interval", type=int, default=None)
    args = parser.parse_args(argv)

    if args.max_iterations is None:
        args.max_iterations = _env_int(ev.MAX_ITERATIONS, None)
    if args.num_envs is None:
        args.num_envs = _env_int(ev.NUM_ENVS, 8)
    if args.seed is None:
        args.seed = _env_int(ev.SEED, 0)
    if args.checkpoint_interval is None:
        args.checkpoint_interval = _env_int(ev.CHECKPOINT_INTERVAL, None)
    if args.digest_interval is None:
        args.digest_interval = _env_int(ev.DIGEST_INTERVAL, 0)
    if args.time_budget_seconds is None:
        raw = os.environ.get(ev.TIME_BUDGET_SECONDS, "").strip()
        if raw:
            try:
                args.time_budget_seconds = float(raw)
            except ValueError:
                raise UsageError(f"TIME_BUDGET_SECONDS={raw!r} is not a number") from None

    missing = [n for n, v in (("TASK", args.task), ("MAX_ITERATIONS", args.max_iterations),
                              ("OUTPUT_URI", args.output_uri)) if v in (None, "")]
    if missing:
        raise UsageError(f"missing required setting(s): {', '.join(missing)} (set the env var or the --kebab-case flag)")
    if args.max_iterations < 1:
        raise UsageError(f"MAX_ITERATIONS must be >= 1, got {args.max_iterations}")
    if args.num_envs < 1:
        raise UsageError(f"NUM_ENVS must be >= 1, got {args.num_envs}")
    if args.checkpoint_interval is None:
        args.checkpoint_interval = max(1, args.max_iterations // 10)
    if args.checkpoint_interval < 1:
        raise UsageError(f"CHECKPOINT_INTERVAL must be >= 1 iteration, got {args.checkpoint_interval}")
    if args.digest_interval < 0:
        raise UsageError(f"DIGEST_INTERVAL must be >= 0 (0: off), got {args.digest_interval}")
    args.device = str(args.device).strip().lower()
    if args.device not in DEVICE_CHOICES:
        raise UsageError(f"DEVICE must be one of {', '.join(DEVICE_CHOICES)}, got {args.device!r}")
    if args.time_budget_seconds is not None and args.time_budget_seconds <= 0:
        raise UsageError(f"TIME_BUDGET_SECONDS must be > 0, got {args.time_budget_seconds}")
    try:
        args.spec = get_task(args.task, kind="gymnasium")
    except ValueError as err:
        raise UsageError(str(err)) from None
    return args


def select_device(requested: str, *, cuda_available: bool, cuda_count: int, world_size: int, local_rank: int) -> str:
    """The torch device this process trains on.

    ``auto``: ``cuda:<local_rank>`` when CUDA is available, else ``cpu``. ``cuda``: the same, refused without CUDA.
    ``cpu``: ``cpu``, refused when ``world_size > 1`` (skrl's multi-process path is NCCL, GPUs only). With CUDA,
    ``local_rank`` must name a visible GPU (torchrun's ``--nproc_per_node`` above the GPU count would otherwise put
    two ranks on one GPU, or fail deep inside NCCL).

    :raises UsageError: when the request cannot be met.
    """
    if world_size > 1 and not cuda_available:
        raise UsageError(
            f"WORLD_SIZE={world_size} but no CUDA device: skrl initialises NCCL for multi-process training, which "
            "needs GPUs. On CPU run one process (PROC_PER_NODE=1, one node) and scale with NUM_ENVS instead."
        )
    if requested == "cpu":
        if world_size > 1:
            raise UsageError(f"DEVICE=cpu with WORLD_SIZE={world_size}: multi-process training runs on GPUs (NCCL); "
                             "use one process for CPU training")
        return "cpu"
    if not cuda_available:
        if requested == "cuda":
            raise UsageError("DEVICE=cuda but torch sees no CUDA device")
        return "cpu"
    if not 0 <= local_rank < max(cuda_count, 1):
        raise UsageError(f"LOCAL_RANK={local_rank} but only {cuda_count} CUDA device(s) are visible: run at most "
                         f"{cuda_count} process(es) per node (PROC_PER_NODE)")
    return f"cuda:{local_rank}"


def _device_for_this_process(requested: str) -> str:
    """:func:`select_device` from the torchrun env (WORLD_SIZE, LOCAL_RANK); imports torch, not skrl."""
    import torch

    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
    available = torch.cuda.is_available()
    return select_device(requested, cuda_available=available, cuda_count=torch.cuda.device_count() if available else 0,
                         world_size=world, local_rank=local_rank)
