"""``sim2real-evaluate``: run N seeded episodes of a trained policy and write ``report.json``.

Flags (declared once in :mod:`sim2real.contract.evaluator`, versioned; the report's shape: ``eval_report`` in
:mod:`sim2real.contract.schemas`)::

    sim2real-evaluate [--contract-version V] --manifest-uri URI [--checkpoint-uri URI] --episodes N --seed S
                      --report-uri URI

* ``--manifest-uri``: the trainer's ``manifest.json`` (s3:// or local). Gives the task and the expected sha256.
* ``--checkpoint-uri``: the checkpoint to evaluate; default: the manifest's ``checkpoint_uri``.
* The checkpoint's sha256 is computed (streamed) and compared with the manifest's ``sha256``; a mismatch
  prints a clear message on stderr, writes **no** report and exits with code **3**.
* Episode ``i`` (0-based) resets a fresh ``gymnasium.make(task)`` env with ``seed = S + i`` and runs the
  deterministic policy (skrl's mean action after the observation standardiser, clipped to the action
  bounds: :class:`sim2real.workloads.policy.DeterministicPolicy`) until terminated or truncated.
  Success per episode is the task's definition (:mod:`sim2real.workloads.tasks`) on the last step.
* The success rate's 95 % interval is Wilson's score interval (:func:`wilson_interval`).
* Same checkpoint + same seeds → the same report except ``created_at`` (CPU, one thread, MuJoCo is deterministic).
* Experiment tracking (:mod:`sim2real.workloads.tracking`, only with ``MLFLOW_TRACKING_URI`` set): the run's
  params (episodes, seed, task, checkpoint), the summary metrics (``success_rate``, ``ci95_lower``,
  ``ci95_upper``, ``mean_return``, ``successes``), each episode's ``episode_return`` / ``episode_length`` /
  ``episode_success`` (step = episode index), all in batches, and the artefacts ``report.json`` and
  ``model/policy.onnx`` (the evaluated policy, :func:`sim2real.workloads.export.export_onnx`) go to the MLflow
  run ``MLFLOW_RUN_ID``. Tracking errors never change the exit code or the score; an unreachable tracking server
  holds the evaluation for a bounded time only, and the report's ``tracking`` entry says what was not recorded.

Exit codes: 0 the evaluation ran (whatever the score); 2 bad input (missing manifest/checkpoint, unknown
task); 3 checkpoint sha256 differs from the manifest; 4 the command's ``--contract-version`` is not this
evaluator's (nothing evaluated; stderr names both versions).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import Any

from sim2real.contract import evaluator, storage
from sim2real.contract.stats import wilson_interval
from sim2real.workloads.tasks import get_task

SCHEMA_VERSION = 1
EXIT_BAD_INPUT = evaluator.EXIT_BAD_INPUT
EXIT_SHA_MISMATCH = evaluator.EXIT_SHA_MISMATCH


class ChecksumMismatch(Exception):
    """The checkpoint's bytes do not hash to the manifest's sha256."""


def run_episodes(policy, task: str, seeds: list[int]) -> dict[str, Any]:
    """Run one episode per seed with ``policy`` (observation → action, torch module) on ``gymnasium.make(task)``.

    :return: ``{"returns", "episode_lengths", "success_flags"}`` lists, one entry per seed in order.
    """
    import gymnasium
    import numpy as np
    import torch

    spec = get_task(task, kind="gymnasium")
    env = gymnasium.make(task)
    returns, lengths, flags = [], [], []
    try:
        for seed in seeds:
            obs, info = env.reset(seed=int(seed))
            total, length, terminated, truncated = 0.0, 0, False, False
            while not (terminated or truncated):
                with torch.no_grad():
                    action = policy(torch.as_tensor(np.asarray(obs, dtype=np.float32)).unsqueeze(0))[0].numpy()
                obs, reward, terminated, truncated, info = env.step(action)
                total += float(reward)
                length += 1
            returns.append(total)
            lengths.append(length)
            flags.append(bool(spec.success(observation=obs, info=info, terminated=bool(terminated),
                                           truncated=bool(truncated), length=length)))
    finally:
        env.close()
    return {"returns": returns, "episode_lengths": lengths, "success_flags": flags}


def evaluate(*, manifest_uri: str, checkpoint_uri: str | None, episodes: int, seed: int) -> dict[str, Any]:
    """Verify the checkpoint against the manifest and evaluate it; return the report dict (not written).

    :raises FileNotFoundError: manifest or checkpoint missing.
    :raises ValueError: malformed manifest / unknown task / not a sim2real checkpoint / episodes < 1.
    :raises ChecksumMismatch: sha256 of the checkpoint bytes != manifest ``sha256``.
    """
    import torch

    from sim2real.workloads.policy import deterministic_policy, load_checkpoint

    if episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {episodes}")
    try:
        manifest = json.loads(storage.read_bytes(manifest_uri))
    except json.JSONDecodeError as err:
        raise ValueError(f"manifest {manifest_uri} is not JSON: {err}") from None
    for key in ("task", "sha256", "checkpoint_uri"):
        if not manifest.get(key):
            raise ValueError(f"manifest {manifest_uri} has no {key!r}")
    task = manifest["task"]
    spec = get_task(task, kind="gymnasium")
    checkpoint_uri = checkpoint_uri or manifest["checkpoint_uri"]
    actual = storage.sha256_uri(checkpoint_uri)
    if actual != manifest["sha256"]:
        raise ChecksumMismatch(
            f"checkpoint {checkpoint_uri} has sha256 {actual} but manifest {manifest_uri} records "
            f"{manifest['sha256']}: the checkpoint was changed or is not the one the manifest describes; "
            "re-run training or point --checkpoint-uri at the manifest's checkpoint"
        )
    ckpt = load_checkpoint(checkpoint_uri)
    if ckpt["sim2real"].get("task") != task:
        raise ValueError(f"checkpoint task {ckpt['sim2real'].get('task')!r} != manifest task {task!r}")
    torch.set_num_threads(1)  # bit-for-bit reproducible reports
    policy = deterministic_policy(ckpt)
    seeds = [seed + i for i in range(episodes)]
    result = run_episodes(policy, task, seeds)
    successes = sum(result["success_flags"])
    low, high = wilson_interval(successes, episodes)
    return {
        "schema_version": SCHEMA_VERSION,
        "task": task,
        "checkpoint_uri": checkpoint_uri,
        "checkpoint_sha256": actual,
        "episodes": episodes,
        "successes": successes,
        "success_rate": successes / episodes,
        "ci95": [low, high],
        "ci_method": "wilson",
        "mean_return": sum(result["returns"]) / episodes,
        "episode_lengths": result["episode_lengths"],
        "returns": result["returns"],
        "successes_per_episode": result["success_flags"],
        "seeds": seeds,
        "success_definition": spec.success_definition,
        "policy": "deterministic (mean action)",
        "iteration": ckpt["sim2real"].get("iteration"),
        "manifest_uri": manifest_uri,
        "created_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    }


def main(argv: list[str] | None = None) -> int:
    """Console script ``sim2real-evaluate`` (arguments: :mod:`sim2real.contract.evaluator`).

    :return: exit code (0 ran, 2 bad input, 3 sha256 mismatch, 4 a command of another contract version).
    """
    parser = argparse.ArgumentParser(prog=evaluator.EXECUTABLE, description="Evaluate a sim2real checkpoint")
    evaluator.add_arguments(parser)
    args = parser.parse_args(argv)
    refused = evaluator.version_problem(getattr(args, evaluator.VERSION_FIELD))
    if refused:
        print(f"[sim2real] error: {refused}", file=sys.stderr, flush=True)
        return evaluator.EXIT_CONTRACT_MISMATCH
    try:
        report = evaluate(manifest_uri=args.manifest_uri, checkpoint_uri=args.checkpoint_uri,
                          episodes=args.episodes, seed=args.seed)
    except ChecksumMismatch as err:
        print(f"[sim2real] error: sha256 mismatch: {err}", file=sys.stderr, flush=True)
        return EXIT_SHA_MISMATCH
    except (FileNotFoundError, ValueError) as err:
        print(f"[sim2real] error: {err}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    tracked = track_report(report, json.dumps(report, indent=2))  # bounded: sim2real.workloads.tracking
    if tracked is not None:
        report["tracking"] = tracked
    text = json.dumps(report, indent=2)
    storage.write_bytes(args.report_uri, text.encode())
    print(text, flush=True)
    return 0


def track_report(report: dict[str, Any], text: str) -> dict[str, Any] | None:
    """Log the evaluation to MLflow (see the module docstring); nothing without ``MLFLOW_TRACKING_URI``.

    :return: the tracker's summary (what was and was not recorded), ``None`` when tracking is off."""
    import os
    import tempfile

    from sim2real.contract.tracking import RUN_KEY_TAG
    from sim2real.workloads.tracking import run_logger_from_env

    try:
        tracker = run_logger_from_env(stage="evaluation", run_name=f"evaluation {report['task']}",
                                      tags={RUN_KEY_TAG: os.environ.get("RUN_KEY") or None})
    except ValueError as err:
        print(f"[sim2real] mlflow: {err}; tracking is off for this evaluation", file=sys.stderr, flush=True)
        return None
    if not tracker.enabled:
        return None
    tracker.log_params({"task": report["task"], "episodes": report["episodes"], "seed": report["seeds"][0],
                        "checkpoint_uri": report["checkpoint_uri"], "checkpoint_sha256": report["checkpoint_sha256"],
                        "iteration": report["iteration"], "policy": report["policy"], "ci_method": report["ci_method"]})
    for i, (ret, length, ok) in enumerate(zip(report["returns"], report["episode_lengths"],
                                              report["successes_per_episode"], strict=True)):
        tracker.log_metrics({"episode_return": ret, "episode_length": length, "episode_success": float(ok)}, step=i)
    tracker.log_metrics({"success_rate": report["success_rate"], "ci95_lower": report["ci95"][0],
                         "ci95_upper": report["ci95"][1], "mean_return": report["mean_return"],
                         "successes": report["successes"]}, step=0)
    with tempfile.TemporaryDirectory(prefix="sim2real-eval-track-") as tmp:
        path = os.path.join(tmp, "report.json")
        with open(path, "w") as fh:
            fh.write(text)
        tracker.log_artifact(path)
        try:
            from sim2real.workloads.export import export_onnx

            onnx_path = os.path.join(tmp, "policy.onnx")
            export_onnx(report["checkpoint_uri"], onnx_path, report["task"])
            tracker.log_artifact(onnx_path, "model")
        except Exception as err:  # noqa: BLE001 - the ONNX artefact is extra; the evaluation stands
            print(f"[sim2real] mlflow: ONNX export for the artefact failed: {type(err).__name__}: {err}",
                  file=sys.stderr, flush=True)
        tracker.finish("FINISHED")  # within the folder: the artefacts are sent from it until then
    return tracker.summary()


if __name__ == "__main__":
    sys.exit(main())
