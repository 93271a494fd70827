"""``sim2real-train``: PPO (skrl 2.1.1) on vectorised gymnasium MuJoCo environments.

Time-limit truncations are bootstrapped from the real final observation of the episode
(:class:`sim2real.workloads.ppo.TimeLimitBootstrapPPO`; the envs autoreset in gymnasium's ``SAME_STEP`` mode).

Run as ``sim2real-train`` or ``python -m sim2real.workloads.train`` (what ``distributed_run.bash``
launches under torchrun). Arguments come from the environment, so AWS Batch
``containerOverrides``/``nodeOverrides`` drive it; CLI flags of the same name in kebab case override:

=====================  ===========================================================  ==========
env                    meaning                                                      default
=====================  ===========================================================  ==========
TASK                   gymnasium id from :mod:`sim2real.workloads.tasks`            required
MAX_ITERATIONS         iterations to reach (counted across resumes)                 required
NUM_ENVS               vectorised environments in this process                      8
SEED                   seed (skrl ``set_seed``; env ``i`` resets with seed+i)       0
OUTPUT_URI             ``s3://bucket/runs/<key>/checkpoints/`` or a local/EFS dir   required
CHECKPOINT_INTERVAL    iterations between checkpoints (the last is always saved)    max(1, MAX_ITERATIONS // 10)
TIME_BUDGET_SECONDS    stop before this wall time, still save checkpoint+manifest   none
RUN_KEY                recorded in the manifest                                     ""
IMAGE_DIGEST           recorded in the manifest                                     null
DEVICE                 ``auto`` (``cuda:LOCAL_RANK`` when CUDA is there, else       auto
                       ``cpu``), ``cuda`` or ``cpu``; WORLD_SIZE > 1 needs CUDA
DIGEST_INTERVAL        every N iterations (and at the last one) each rank prints    0 (off)
                       the sha256 of its policy/value parameters (see below)
MLFLOW_TRACKING_URI    MLflow tracking server (http(s) or SageMaker MLflow ARN);    none (off)
                       with ``MLFLOW_RUN_ID`` etc., see below
=====================  ===========================================================  ==========

**Iteration**: one PPO rollout of ``rollouts`` vectorised steps (each step advances every one of the
``NUM_ENVS`` environments once), followed by one PPO update (``learning_epochs`` × ``mini_batches``).
``rollouts`` is per task (:data:`sim2real.workloads.tasks.TASKS`, 64 for Reacher-v5). Hence
``timesteps = iterations × rollouts × NUM_ENVS`` (environment steps summed over environments; with a
constant NUM_ENVS across resumes).

**Outputs** (under OUTPUT_URI, which is the run's checkpoint directory):

* ``tensorboard/`` — skrl's TensorBoard event files (one file per process start), uploaded at each checkpoint;
* ``agent_<iteration:06d>.pt`` — checkpoint (format: :mod:`sim2real.workloads.policy`);
* ``agent_<iteration:06d>.pt.sha256`` — sidecar with the checkpoint's hex sha256, written only after
  the checkpoint is fully written/uploaded. **A checkpoint is complete iff its sidecar exists and matches**;
* ``manifest.json`` — written LAST, once, atomically (local: tmp + rename; S3: one PutObject), pointing at
  the final checkpoint (schema: ``checkpoint_manifest`` in :mod:`sim2real.contract.schemas`).

**Experiment tracking** (:mod:`sim2real.workloads.tracking`; off without ``MLFLOW_TRACKING_URI``): rank 0 logs
the run's params (settings, PPO hyperparameters, library versions), per-iteration metrics (``mean_reward``,
``timesteps``, ``iteration_s``, ``env_steps_per_s``, step = iteration, sent in batches) and, at the end, the
final checkpoint (``checkpoint/agent_<n>.pt``) and ``manifest.json`` as artefacts into the MLflow run
``MLFLOW_RUN_ID`` (a resumed job continues the same run and curve). Tracking errors never stop training, and an
unreachable tracking server never holds it: the calls are sent from a background thread and the end waits for
them for a bounded time; what was not recorded is in the manifest's ``tracking`` entry.

Only rank 0 (``RANK`` env, default 0) writes anything. **Auto-resume**: at start, the newest complete
checkpoint under OUTPUT_URI is loaded (agent modules incl. optimizer and normalisers) and training continues
from its iteration; ``resumed_from`` in the manifest names it. If it already reached MAX_ITERATIONS, only the
manifest is (re)written.

**Progress**: rank 0 prints one line per iteration to stdout::

    [sim2real] iteration=12/40 timesteps=6144 mean_reward=-20.100 elapsed_s=15.2 eta_s=35.0

``mean_reward`` is the mean return of the last (≤100) episodes completed during training (stochastic
policy), ``nan`` before the first one ends; ``elapsed_s`` counts from this process's start of training;
``eta_s`` extrapolates this process's mean iteration time to ``MAX_ITERATIONS``, or to the time budget when
that comes first (:func:`sim2real.contract.progress.eta_seconds`). ``timesteps`` counts this rank's environments
only. Every rank prints its device once (``[sim2real] rank=0 local_rank=0 world_size=2 device=cuda:0``) and,
at the end, rank 0 prints the throughput of the whole group (all ranks' environments), on one line::

    [sim2real] throughput world_size=2 num_envs_per_rank=64 iterations=20 env_steps=163840 wall_s=40.1
        env_steps_per_s=4085.8 steady_env_steps_per_s=4120.3

``steady_env_steps_per_s`` leaves out this process's first iteration (CUDA/NCCL warm-up); ``wall_s`` is the
training loop only (rollouts + updates, checkpoint writes included), not imports, env creation or resume.

**Parameter digests** (``DIGEST_INTERVAL=N``): after the PPO update of every N-th iteration and of the last one,
every rank prints::

    [sim2real] rank=1 iteration=10 params_sha256=<hex> preprocessors_sha256=<hex>

``params_sha256`` is :func:`sim2real.workloads.policy.state_digest` of the policy and value models (bit-exact);
``preprocessors_sha256`` the same over the running observation/value standardisers. In a distributed run rank 0
then gathers every rank's digests and prints ``[sim2real] digests iteration=10 world_size=2 params_match=true
preprocessors_match=false``. The parameters must match (skrl broadcasts them at start and all-reduces the
gradients); the standardisers are per rank in skrl 2.1.1 (each updates on its own environments' data and only
rank 0's are checkpointed), so they are expected to differ.

**Distributed**: with ``WORLD_SIZE > 1`` skrl initialises NCCL at import (and ``torch.cuda.set_device(LOCAL_RANK)``);
each rank models on ``cuda:LOCAL_RANK``, steps its own ``NUM_ENVS`` environments (seed ``SEED + RANK``, skrl's
``set_seed``) and all-reduces the gradients. On a machine without CUDA, ``WORLD_SIZE > 1`` (or ``DEVICE=cpu``
with it) is refused (exit 2) before skrl is imported. A single process uses ``cuda:LOCAL_RANK`` too when CUDA is
there (``DEVICE=cpu`` keeps it on the CPU).

Exit codes: 0 done; 2 bad input (message on stderr).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import math
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from sim2real.contract import storage
from sim2real.contract.progress import PREFIX, eta_seconds, format_progress
from sim2real.workloads.checkpoints import (MANIFEST_NAME, SCHEMA_VERSION, _sync_tensorboard, checkpoint_name,
                                            find_latest_complete_checkpoint)
from sim2real.workloads.train_args import UsageError, _device_for_this_process, parse_args
from sim2real.workloads.train_env import _make_env, build_agent, library_versions, wrap_for_device


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Train per ``args`` (from :func:`parse_args`); return the manifest dict written by rank 0 (``{}`` on other ranks).

    :raises UsageError: WORLD_SIZE > 1 without CUDA; OUTPUT_URI holding another task's checkpoints.
    """
    device_name = _device_for_this_process(args.device)  # before skrl's import, which starts NCCL when WORLD_SIZE > 1
    import numpy as np
    import torch
    from skrl.trainers.torch import StepTrainer
    from skrl.utils import set_seed

    from sim2real.workloads.policy import state_digest

    rank = int(os.environ.get("RANK", "0") or 0)
    local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    world_size = torch.distributed.get_world_size() if distributed else 1
    is_writer = rank == 0
    spec = args.spec
    rollouts = int(spec.ppo["rollouts"])
    out = args.output_uri
    local_out = not storage.is_s3(out)
    if local_out and is_writer:
        os.makedirs(out, exist_ok=True)

    device = torch.device(device_name)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)  # small MLPs: intra-op threads cost more than they give (2-core measurement)
    print(f"{PREFIX} rank={rank} local_rank={local_rank} world_size={world_size} device={device}", flush=True)

    staging = tempfile.mkdtemp(prefix="sim2real-train-")
    tb_dir = os.path.join(out, "tensorboard") if local_out else os.path.join(staging, "tensorboard")
    versions = library_versions()
    tracker = _open_tracker(args, spec, versions, world_size) if is_writer else None
    kept: dict[str, str] = {}  # the newest checkpoint's local copy, for the tracking artefact

    try:
        set_seed(args.seed)
        env = wrap_for_device(_make_env(args.task, args.num_envs), device)
        agent = build_agent(spec, env, device, tb_dir, write_tb=is_writer)

        latest = find_latest_complete_checkpoint(out)
        start_iteration, start_timesteps, resumed_from = 0, 0, None
        resume_modules = None
        if latest is not None:
            iteration, uri, _sha = latest
            from sim2real.workloads.policy import load_checkpoint

            resume_modules = load_checkpoint(uri)
            start_iteration = int(resume_modules["sim2real"]["iteration"])
            start_timesteps = int(resume_modules["sim2real"]["timesteps"])
            resumed_from = uri
            if resume_modules["sim2real"].get("task") != args.task:
                raise UsageError(
                    f"OUTPUT_URI {out} holds checkpoints of task {resume_modules['sim2real'].get('task')!r}, not "
                    f"{args.task!r}; use a fresh OUTPUT_URI"
                )

        total_steps = args.max_iterations * rollouts
        trainer = StepTrainer(env=env, agents=agent, cfg={
            "timesteps": total_steps, "headless": True, "disable_progressbar": True,
            "close_environment_at_exit": False,
        })
        if resume_modules is not None:
            for name, module in agent.checkpoint_modules.items():
                if name in resume_modules and module is not None:
                    module.load_state_dict(resume_modules[name])
            print(f"{PREFIX} resumed from {resumed_from} at iteration {start_iteration}", flush=True)

        returns = collections.deque(maxlen=100)
        running = np.zeros(args.num_envs, dtype=np.float64)
        iteration, timesteps = start_iteration, start_timesteps
        last_saved: tuple[int, str, str] | None = latest
        t0 = time.monotonic()
        iter_times: list[float] = []

        def report_digests(it: int) -> None:
            modules = agent.checkpoint_modules
            params = state_digest({k: modules.get(k) for k in ("policy", "value")})
            pre = state_digest({k: m for k, m in modules.items() if "preprocessor" in k})
            print(f"{PREFIX} rank={rank} iteration={it} params_sha256={params} preprocessors_sha256={pre}", flush=True)
            if distributed:
                gathered: list[Any] = [None] * world_size
                torch.distributed.all_gather_object(gathered, (rank, params, pre))
                if is_writer:
                    params_match = len({g[1] for g in gathered}) == 1
                    pre_match = len({g[2] for g in gathered}) == 1
                    print(f"{PREFIX} digests iteration={it} world_size={world_size} "
                          f"params_match={str(params_match).lower()} preprocessors_match={str(pre_match).lower()}",
                          flush=True)

        def mean_reward() -> float:
            return float(np.mean(returns)) if returns else float("nan")

        def save(it: int) -> tuple[int, str, str]:
            modules = {name: agent._get_internal_value(m) for name, m in agent.checkpoint_modules.items()
                       if m is not None}
            modules["sim2real"] = {
                "format": 1, "task": args.task, "iteration": it, "timesteps": timesteps,
                "rollouts": rollouts, "num_envs": args.num_envs, "seed": args.seed,
                "hidden": list(spec.hidden), "obs_dim": int(env.observation_space.shape[0]),
                "act_dim": int(env.action_space.shape[0]),
                "action_low": [float(x) for x in env.action_space.low],
                "action_high": [float(x) for x in env.action_space.high],
                "mean_reward": mean_reward(), "run_key": args.run_key, "library_versions": versions,
            }
            local = os.path.join(staging, checkpoint_name(it))
            torch.save(modules, local)
            sha = storage.sha256_file(local)
            uri = storage.join(out, checkpoint_name(it))
            storage.upload_file(local, uri)
            storage.write_bytes(uri + ".sha256", f"{sha}  {checkpoint_name(it)}\n".encode())
            if tracker is not None and tracker.enabled:  # keep the newest copy: logged as an artefact at the end
                if kept.get("path") and os.path.exists(kept["path"]):
                    os.unlink(kept["path"])
                kept["path"] = local
            else:
                os.unlink(local)
            _sync_tensorboard(agent, tb_dir, out, local_out)
            return it, uri, sha

        step = start_iteration * rollouts
        while iteration < args.max_iterations:
            it_start = time.monotonic()
            for _ in range(rollouts):
                _obs, rewards, terminated, truncated, _infos = trainer.train(timestep=step, timesteps=total_steps)
                step += 1
                running += rewards.view(-1).cpu().numpy()
                done = (terminated | truncated).view(-1).cpu().numpy()
                for i in np.nonzero(done)[0]:
                    returns.append(float(running[i]))
                    running[i] = 0.0
            iteration += 1
            timesteps += rollouts * args.num_envs
            iter_times.append(time.monotonic() - it_start)
            elapsed = time.monotonic() - t0
            per_iter = elapsed / len(iter_times)
            eta = eta_seconds(elapsed_s=elapsed, iterations_done=len(iter_times), max_iterations=len(iter_times)
                              + args.max_iterations - iteration, time_budget_s=args.time_budget_seconds)
            if is_writer:
                print(format_progress(iteration=iteration, max_iterations=args.max_iterations, timesteps=timesteps,
                                      mean_reward=mean_reward(), elapsed_s=elapsed, eta_s=eta), flush=True)
                if tracker is not None:
                    tracker.log_metrics({"mean_reward": mean_reward(), "timesteps": timesteps,
                                         "iteration_s": iter_times[-1], "elapsed_s": elapsed,
                                         "env_steps_per_s": world_size * rollouts * args.num_envs / iter_times[-1]
                                         if iter_times[-1] > 0 else None}, step=iteration)
            out_of_time = (args.time_budget_seconds is not None
                           and elapsed + per_iter > args.time_budget_seconds and iteration < args.max_iterations)
            if args.time_budget_seconds is not None and torch.distributed.is_available() \
                    and torch.distributed.is_initialized():
                # every rank must stop at the same iteration (the update all-reduces): rank 0 decides
                flag = torch.tensor([1 if out_of_time else 0], device=device)
                torch.distributed.broadcast(flag, src=0)
                out_of_time = bool(flag.item())
            if is_writer and (iteration % args.checkpoint_interval == 0 or iteration == args.max_iterations
                              or out_of_time):
                last_saved = save(iteration)
            if args.digest_interval and (iteration % args.digest_interval == 0 or iteration == args.max_iterations
                                         or out_of_time):
                report_digests(iteration)
            if out_of_time:
                print(f"{PREFIX} time budget {args.time_budget_seconds:.1f}s reached at iteration {iteration}: "
                      "stopping early", flush=True)
                break

        if is_writer and iter_times:
            print(throughput_line(world_size=world_size, num_envs=args.num_envs, rollouts=rollouts,
                                  iter_times=iter_times, wall_s=time.monotonic() - t0), flush=True)

        if not is_writer:
            env.close()
            return {}
        assert last_saved is not None  # max_iterations >= 1: rank 0 saved at least the final checkpoint
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "run_key": args.run_key,
            "task": args.task,
            "checkpoint_uri": last_saved[1],
            "sha256": last_saved[2],
            "iteration": last_saved[0],
            "timesteps": timesteps,
            "mean_reward": None if math.isnan(mean_reward()) else round(mean_reward(), 6),
            "library_versions": versions,
            "image_digest": args.image_digest,
            "resumed_from": resumed_from,
            "created_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "tensorboard_uri": storage.join(out, "tensorboard") + "/",
            "rollouts": rollouts,
            "num_envs": args.num_envs,
            "completed": iteration >= args.max_iterations,
        }
        if manifest["mean_reward"] is None and resume_modules is not None and iteration == start_iteration:
            prev = resume_modules["sim2real"].get("mean_reward")
            manifest["mean_reward"] = None if prev is None or math.isnan(prev) else prev
        if tracker is not None:  # bounded (sim2real.workloads.tracking); what it could not record goes in the manifest
            tracked = _close_tracker(tracker, manifest, staging, kept.get("path"))
            tracker = None
            if tracked is not None:
                manifest["tracking"] = tracked
        storage.write_bytes(storage.join(out, MANIFEST_NAME), json.dumps(manifest, indent=2).encode())
        print(f"{PREFIX} manifest {storage.join(out, MANIFEST_NAME)} iteration={manifest['iteration']} "
              f"sha256={manifest['sha256']}", flush=True)
        env.close()
        return manifest
    except BaseException:
        if tracker is not None:
            tracker.finish("FAILED")
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _open_tracker(args: argparse.Namespace, spec, versions: dict[str, str], world_size: int):
    """The MLflow run logger of this training job (rank 0), its params logged; tracking off without a URI.

    :raises UsageError: a malformed ``MLFLOW_TRACKING_URI`` or ``SIM2REAL_MLFLOW_FLUSH_EVERY``.
    """
    from sim2real.contract.tracking import RUN_KEY_TAG
    from sim2real.workloads.tracking import run_logger_from_env

    try:
        tracker = run_logger_from_env(stage="rl_training", run_name=f"rl_training {args.run_key or args.task}",
                                      tags={RUN_KEY_TAG: args.run_key or None})
    except ValueError as err:
        raise UsageError(str(err)) from None
    params = {
        "task": args.task, "max_iterations": args.max_iterations, "num_envs": args.num_envs, "seed": args.seed,
        "checkpoint_interval": args.checkpoint_interval, "time_budget_seconds": args.time_budget_seconds,
        "world_size": world_size, "hidden": list(spec.hidden), "initial_log_std": spec.initial_log_std,
        **{f"ppo.{k}": v for k, v in sorted(dict(spec.ppo).items())},
        **{f"version.{k}": v for k, v in versions.items()},
    }
    tracker.log_params(params)
    tracker.set_tags({"image_digest": args.image_digest})
    return tracker


def _close_tracker(tracker, manifest: dict[str, Any], staging: str, checkpoint_path: str | None) -> dict | None:
    """Log the final checkpoint and the manifest as artefacts and end the run (FINISHED), waiting at most the
    tracker's close timeout; :return: the tracker's summary (``None``: tracking off)."""
    tracker.set_tags({"checkpoint_uri": manifest["checkpoint_uri"], "checkpoint_sha256": manifest["sha256"],
                      "completed": str(manifest["completed"]).lower(), "resumed_from": manifest["resumed_from"]})
    if checkpoint_path and os.path.exists(checkpoint_path):
        tracker.log_artifact(checkpoint_path, "checkpoint")
    path = os.path.join(staging, MANIFEST_NAME)
    with open(path, "w") as fh:
        json.dump(manifest, fh, indent=2)
    tracker.log_artifact(path)
    tracker.finish("FINISHED")
    return tracker.summary()


def throughput_line(*, world_size: int, num_envs: int, rollouts: int, iter_times: list[float], wall_s: float) -> str:
    """The ``[sim2real] throughput ...`` line: environment steps of all ranks per second of the training loop.

    :param iter_times: this process's per-iteration times (rollout + update), in order.
    :param wall_s: the training loop's wall time (iterations plus checkpoint writes).
    """
    per_iter = world_size * num_envs * rollouts
    steps = per_iter * len(iter_times)
    rate = steps / wall_s if wall_s > 0 else float("nan")
    steady_time = sum(iter_times[1:])
    steady = per_iter * (len(iter_times) - 1) / steady_time if len(iter_times) > 1 and steady_time > 0 else float("nan")
    return (f"{PREFIX} throughput world_size={world_size} num_envs_per_rank={num_envs} iterations={len(iter_times)} "
            f"env_steps={steps} wall_s={wall_s:.2f} env_steps_per_s={rate:.1f} steady_env_steps_per_s={steady:.1f}")


def main(argv: list[str] | None = None) -> int:
    """Console script ``sim2real-train``. :return: process exit code (0 ok, 2 bad input)."""
    try:
        args = parse_args(argv)
        run(args)
    except UsageError as err:
        print(f"{PREFIX} error: {err}", file=sys.stderr, flush=True)
        return 2
    finally:
        _close_process_group()
    return 0


def _close_process_group() -> None:
    """Tear down the process group skrl opened (WORLD_SIZE > 1), so NCCL shuts down cleanly at exit."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
