"""Publish an Isaac Lab skrl run the way the project trainer publishes its own, and find the checkpoint to resume.

Isaac Lab's ``scripts/reinforcement_learning/skrl/train.py`` writes only to its own log directory
(``logs/skrl/<experiment directory>/<%Y-%m-%d_%H-%M-%S>_<algorithm>_<framework>[_<name>]/``, relative to its
working directory): ``checkpoints/agent_<step>.pt`` (skrl ``write_checkpoint``: the whole agent's modules, one
``torch.save``'d dict), ``checkpoints/best_agent.pt``, TensorBoard event files in the run directory itself and
``params/{agent,env}.yaml`` (the configs it ran with). ``<step>`` is skrl's timestep counter: vectorised
environment steps since *that process* started (skrl writes a checkpoint when ``step % checkpoint_interval == 0``).
This module turns such a run into the layout :mod:`sim2real.workloads.train` writes, so the DAG's checkpoint
sensor, the evaluator and the export read both the same way.

**Publish** (default mode)::

    python -m sim2real.workloads.publish --log-dir DIR --output-uri URI --task T [--run-key K] [--image-digest D]
        [--resumed-from URI] [--max-iterations N] [--since EPOCH_S] [--if-present | --wait-for-manifest S]

1. *Which checkpoint* (the rule): every directory named ``checkpoints`` under ``--log-dir`` (searched
   recursively) holding at least one ``agent_<integer>.pt`` is one run. The **newest run** wins: the one whose
   directory name starts with the latest ``YYYY-MM-DD_HH-MM-SS`` timestamp (Isaac Lab's naming; ties and
   untimestamped names are broken by the newest checkpoint file's modification time). Within that run the
   **highest step** ``agent_<step>.pt`` is taken. ``best_agent.pt`` and ``<module>_<step>.pt`` files
   (skrl ``store_separately``) are ignored. Runs older than the newest are never mixed in: a fresh run started
   from ``--checkpoint`` restarts skrl's step counter at 0, so its steps are lower than the old run's. With
   ``--since EPOCH_S`` (the launcher passes its start time) checkpoint files modified before it are ignored.
2. *Step numbering*: with ``--resumed-from <uri of agent_<S>.pt>`` (the checkpoint this run started from) the
   published step is ``S + step``, so numbering keeps growing across resumes; otherwise it is ``step``.
3. *Upload*: the checkpoint goes to ``<OUTPUT_URI>/agent_<step:06d>.pt`` and only then its sidecar
   ``agent_<step:06d>.pt.sha256`` (``"<hex>  <name>\\n"``, like the trainer's; **a checkpoint is complete iff
   its sidecar exists and matches**). Skipped when the destination already holds a matching sidecar and object.
   The run directory's TensorBoard event files go to ``<OUTPUT_URI>/tensorboard/<run directory name>/``.
4. *Manifest* ``<OUTPUT_URI>/manifest.json``, written LAST (storage.write_bytes: local tmp + rename, S3 one
   PutObject), same schema as the trainer's (``checkpoint_manifest``, :mod:`sim2real.contract.schemas`) plus
   ``"trainer": "isaaclab-skrl"``, ``step``,
   ``rollouts``, ``num_envs`` and ``source_checkpoint``:

   * ``iteration`` = ``step // rollouts`` and ``timesteps`` = ``step * num_envs`` (environment steps of one
     rank's environments, as the trainer counts them), with ``rollouts`` (``agent.rollouts``) and ``num_envs``
     (``scene.num_envs``) read from the run's ``params/agent.yaml`` / ``params/env.yaml``. When a value cannot
     be read: ``iteration`` = ``step`` and ``timesteps`` = ``step`` (``rollouts`` / ``num_envs`` recorded as
     null), so the numbers stay monotonic.
   * ``mean_reward``: the TensorBoard scalar ``Reward / Total reward (mean)`` (skrl's tag) of the run directory,
     read with tensorboard's ``EventAccumulator``: the last value logged at or before the checkpoint's step
     (else the last value); null when there is none or the events cannot be read.
   * ``library_versions``: torch, skrl, gymnasium, mujoco, plus isaaclab / isaaclab_rl / isaacsim when their
     distributions are installed (``importlib.metadata``; nothing is imported).
   * ``completed``: false only when ``--max-iterations`` is given and ``iteration`` is below it.

   **Idempotent**: when the existing manifest already names the same checkpoint URI and sha256, nothing is
   rewritten (``created_at`` stays); a second publish of the same log dir changes no object.

   When the log dir has no checkpoint: with ``--resumed-from`` (the run had nothing left to train) the manifest
   points at that checkpoint; otherwise exit 1, or exit 0 with a note when ``--if-present`` is given (on a
   multi-node job only the node that ran global rank 0 has checkpoints: skrl lets only rank 0 write, and
   torchrun's c10d rendezvous assigns group ranks in host-address order, not by Batch node index).

   The main node of a multi-node job runs with ``--wait-for-manifest SECONDS --since EPOCH_S`` instead: when it
   has no checkpoint it waits for a manifest created at or after ``EPOCH_S`` (the launch time) to appear, since
   its exit ends the Batch job and stops the other nodes; timeout → exit 1.

   Only rank 0 publishes: with ``RANK`` set to anything but 0 the command prints a note and exits 0.

**Resume discovery**::

    python -m sim2real.workloads.publish --find-resume DEST_DIR --output-uri URI [--task T]

finds the newest complete checkpoint under OUTPUT_URI (:func:`sim2real.workloads.checkpoints.find_latest_complete_checkpoint`:
highest ``agent_<n>.pt`` whose sidecar matches the object's sha256), downloads it into DEST_DIR, and prints
shell assignments for the launcher (values quoted with :func:`shlex.quote`)::

    RESUME_URI=s3://b/runs/k/checkpoints/agent_004800.pt
    RESUME_PATH=/tmp/x/agent_004800.pt
    RESUME_STEP=4800
    RESUME_ITERATION=200        # empty when neither a manifest nor the round's variables give it
    RESUME_SHA256=<hex>

or the same names with empty values when there is nothing to resume. ``RESUME_ITERATION`` comes from
``step // rollouts`` with ``rollouts`` from the existing ``manifest.json`` (published by an earlier attempt);
without one (a retraining round's first attempt: ``prepare_run`` copied only the checkpoint and its sidecar),
from ``SIM2REAL_RESUMED_ITERATION`` when the checkpoint found is ``SIM2REAL_RESUMED_CHECKPOINT_URI``'s.
A manifest naming another task → exit 2 (use a fresh OUTPUT_URI).

Settings default to the environment like the trainer's: ``OUTPUT_URI``, ``TASK``, ``RUN_KEY``, ``IMAGE_DIGEST``,
``MAX_ITERATIONS``. Exit codes: 0 published / nothing to do; 1 no checkpoint found; 2 bad input.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import shlex
import sys
from dataclasses import dataclass
from typing import Any

from sim2real.contract import storage

PREFIX = "[sim2real-publish]"
MANIFEST_NAME = "manifest.json"
SCHEMA_VERSION = 1
TRAINER = "isaaclab-skrl"
REWARD_TAG = "Reward / Total reward (mean)"  # skrl agents/torch/base.py record_transition
_SKRL_CKPT_RE = re.compile(r"^agent_(\d+)\.pt$")
_TIMESTAMP_RE = re.compile(r"^(\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2})")
_EVENTS_PREFIX = "events.out.tfevents."
_EXTRA_DISTRIBUTIONS = ("isaaclab", "isaaclab_rl", "isaaclab_tasks", "isaacsim")


class UsageError(Exception):
    """Bad arguments or an OUTPUT_URI that belongs to another task: exit code 2."""


class NothingToPublish(Exception):
    """The log dir holds no skrl checkpoint: exit code 1 (0 with ``--if-present``)."""


@dataclass(frozen=True)
class LocalCheckpoint:
    """One skrl checkpoint in an Isaac Lab log dir.

    :ivar path: the ``agent_<step>.pt`` file.
    :ivar step: skrl's timestep counter of the run that wrote it (from the file name).
    :ivar run_dir: the run directory (parent of ``checkpoints/``): TensorBoard events and ``params/`` live there.
    """

    path: str
    step: int
    run_dir: str


def checkpoint_name(step: int) -> str:
    """``agent_<step:06d>.pt``, the name published under OUTPUT_URI."""
    return f"agent_{step:06d}.pt"


def step_of(uri_or_path: str) -> int:
    """The integer in an ``agent_<n>.pt`` name (published or skrl's). :raises UsageError: another name."""
    name = str(uri_or_path).rstrip("/").rsplit("/", 1)[-1]
    match = _SKRL_CKPT_RE.match(name)
    if not match:
        raise UsageError(f"{uri_or_path!r} is not an agent_<step>.pt checkpoint")
    return int(match.group(1))


def _run_sort_key(run_dir: str, newest_mtime: float) -> tuple[str, float]:
    match = _TIMESTAMP_RE.match(os.path.basename(run_dir.rstrip(os.sep)))
    return (match.group(1) if match else "", newest_mtime)


def find_newest_checkpoint(log_dir: str, since: float | None = None) -> LocalCheckpoint | None:
    """The checkpoint to publish from an Isaac Lab skrl log dir (rule in the module docstring), or None.

    :param log_dir: e.g. ``/workspace/isaaclab/logs/skrl`` (any ancestor of the run directories).
    :param since: epoch seconds; checkpoint files modified before it (earlier attempts) are ignored.
    :raises UsageError: ``log_dir`` is not a directory.
    """
    if not os.path.isdir(log_dir):
        raise UsageError(f"--log-dir {log_dir!r} is not a directory")
    runs: list[tuple[tuple[str, float], str, list[tuple[int, str]]]] = []
    for root, dirs, files in os.walk(log_dir):
        dirs.sort()
        if os.path.basename(root) != "checkpoints":
            continue
        found = [(int(m.group(1)), os.path.join(root, f)) for f in files if (m := _SKRL_CKPT_RE.match(f))]
        if since is not None:
            found = [(step, path) for step, path in found if os.path.getmtime(path) >= since]
        if not found:
            continue
        run_dir = os.path.dirname(root)
        newest_mtime = max(os.path.getmtime(p) for _, p in found)
        runs.append((_run_sort_key(run_dir, newest_mtime), run_dir, found))
    if not runs:
        return None
    _key, run_dir, found = max(runs, key=lambda r: r[0])
    step, path = max(found)
    return LocalCheckpoint(path=path, step=step, run_dir=run_dir)


def _yaml_load(text: str) -> Any:
    """``yaml.safe_load`` that turns unknown tags (Isaac Lab's dump_yaml writes tuples etc. as python tags) into
    plain mappings/lists/strings instead of failing; nothing is constructed from a tag."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def construct_any(loader, _suffix, node):
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node, deep=True)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        return loader.construct_scalar(node)

    Loader.add_multi_constructor("", construct_any)
    return yaml.load(text, Loader=Loader)  # noqa: S506 - a SafeLoader subclass


def _read_yaml(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = _yaml_load(fh.read())
    except Exception as err:  # noqa: BLE001 - a missing/odd config only drops derived numbers
        print(f"{PREFIX} note: cannot read {path}: {type(err).__name__}: {err}", file=sys.stderr)
        return None
    return data if isinstance(data, dict) else None


def _positive_int(value: Any) -> int | None:
    try:
        out = int(value)
    except (TypeError, ValueError):
        return None
    return out if out > 0 else None


def run_params(run_dir: str) -> tuple[int | None, int | None]:
    """``(rollouts, num_envs)`` from Isaac Lab's ``params/agent.yaml`` (``agent.rollouts``) and
    ``params/env.yaml`` (``scene.num_envs``) in ``run_dir``; ``None`` for what cannot be read."""
    agent = _read_yaml(os.path.join(run_dir, "params", "agent.yaml")) or {}
    env = _read_yaml(os.path.join(run_dir, "params", "env.yaml")) or {}
    rollouts = _positive_int((agent.get("agent") or {}).get("rollouts")) if isinstance(agent.get("agent"), dict) \
        else None
    num_envs = _positive_int((env.get("scene") or {}).get("num_envs")) if isinstance(env.get("scene"), dict) \
        else None
    return rollouts, num_envs


def mean_reward_from_events(run_dir: str, step: int) -> float | None:
    """Last ``Reward / Total reward (mean)`` scalar at or before ``step`` (else the last one) in the event
    files directly in ``run_dir``, via tensorboard's ``EventAccumulator``; None when absent/unreadable."""
    if not any(n.startswith(_EVENTS_PREFIX) for n in os.listdir(run_dir)):
        return None
    try:
        from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

        acc = EventAccumulator(run_dir, size_guidance={SCALARS: 0})
        acc.Reload()
        if REWARD_TAG not in acc.Tags().get("scalars", []):
            return None
        events = acc.Scalars(REWARD_TAG)
    except Exception as err:  # noqa: BLE001 - the reward is informative; a bad event file must not block publishing
        print(f"{PREFIX} note: cannot read TensorBoard events in {run_dir}: {type(err).__name__}: {err}",
              file=sys.stderr)
        return None
    if not events:
        return None
    upto = [e for e in events if e.step <= step]
    value = float((upto or events)[-1].value)
    return None if math.isnan(value) or math.isinf(value) else round(value, 6)


def library_versions() -> dict[str, str]:
    """torch/skrl/gymnasium/mujoco versions (``"unknown"`` when absent) plus the Isaac Lab/Sim distributions
    that are installed (absent ones are left out)."""
    import importlib.metadata as md

    from sim2real.workloads.train_env import library_versions as trainer_versions

    out = trainer_versions()
    for name in _EXTRA_DISTRIBUTIONS:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            continue
    return out


def _read_manifest(output_uri: str) -> dict[str, Any] | None:
    try:
        data = json.loads(storage.read_bytes(storage.join(output_uri, MANIFEST_NAME)))
    except FileNotFoundError:
        return None
    except json.JSONDecodeError:
        print(f"{PREFIX} note: existing {storage.join(output_uri, MANIFEST_NAME)} is not JSON; it will be replaced",
              file=sys.stderr)
        return None
    return data if isinstance(data, dict) else None


def _sidecar_matches(uri: str, sha: str) -> bool:
    try:
        recorded = storage.read_bytes(uri + ".sha256").decode().strip().split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return recorded == sha and storage.exists(uri) and storage.sha256_uri(uri) == sha


def upload_checkpoint(local_path: str, output_uri: str, step: int) -> tuple[str, str, bool]:
    """Upload ``local_path`` as ``<output_uri>/agent_<step:06d>.pt``, then its sidecar.

    :return: ``(uri, sha256, uploaded)``; ``uploaded`` is False when a matching complete copy was already there.
    """
    sha = storage.sha256_file(local_path)
    name = checkpoint_name(step)
    uri = storage.join(output_uri, name)
    if _sidecar_matches(uri, sha):
        return uri, sha, False
    storage.upload_file(local_path, uri)
    storage.write_bytes(uri + ".sha256", f"{sha}  {name}\n".encode())
    return uri, sha, True


def upload_tensorboard(run_dir: str, output_uri: str) -> str:
    """Copy the event files directly in ``run_dir`` to ``<output_uri>/tensorboard/<run dir name>/``.

    :return: the ``tensorboard/`` URI recorded in the manifest.
    """
    run_name = os.path.basename(os.path.normpath(run_dir))
    for name in sorted(os.listdir(run_dir)):
        path = os.path.join(run_dir, name)
        if name.startswith(_EVENTS_PREFIX) and os.path.isfile(path):
            storage.upload_file(path, storage.join(output_uri, "tensorboard", run_name, name))
    return storage.join(output_uri, "tensorboard") + "/"


def publish(*, log_dir: str, output_uri: str, task: str, run_key: str = "", image_digest: str | None = None,
            resumed_from: str | None = None, max_iterations: int | None = None,
            if_present: bool = False, since: float | None = None) -> dict[str, Any]:
    """Publish the newest checkpoint of an Isaac Lab skrl log dir to ``output_uri`` (see the module docstring).

    :return: the manifest now at ``<output_uri>/manifest.json``.
    :param since: epoch seconds: ignore checkpoints written before it (the launcher passes its start time, so
        runs of earlier attempts left in a persistent log dir are never published again).
    :param if_present: another node may hold the checkpoints: with none here, raise NothingToPublish even
        when ``resumed_from`` is given (never write a manifest from a node that did not train rank 0).
    :raises NothingToPublish: no checkpoint in ``log_dir`` and no ``resumed_from`` (or ``if_present``).
    :raises UsageError: bad ``log_dir`` / ``resumed_from``; the existing manifest names another task.
    """
    offset = step_of(resumed_from) if resumed_from else 0
    existing = _read_manifest(output_uri)
    if existing and existing.get("task") not in (None, task):
        raise UsageError(f"OUTPUT_URI {output_uri} holds a manifest of task {existing.get('task')!r}, not {task!r}; "
                         "use a fresh OUTPUT_URI")
    local = find_newest_checkpoint(log_dir, since)
    if local is None and (if_present or not resumed_from):
        raise NothingToPublish(f"no skrl checkpoint (checkpoints/agent_<step>.pt) under {log_dir}")

    if local is not None:
        step = offset + local.step
        uri, sha, uploaded = upload_checkpoint(local.path, output_uri, step)
        print(f"{PREFIX} checkpoint {local.path} -> {uri} ({'uploaded' if uploaded else 'already there'})",
              flush=True)
        tensorboard_uri = upload_tensorboard(local.run_dir, output_uri)
        rollouts, num_envs = run_params(local.run_dir)
        mean_reward = mean_reward_from_events(local.run_dir, local.step)
        source = local.path
    else:  # nothing trained in this attempt: the resumed checkpoint is the result
        assert resumed_from is not None
        step, uri = offset, resumed_from
        sha = storage.sha256_uri(uri)
        tensorboard_uri = storage.join(output_uri, "tensorboard") + "/"
        prev = existing if existing and existing.get("checkpoint_uri") == uri else {}
        rollouts, num_envs = _positive_int(prev.get("rollouts")), _positive_int(prev.get("num_envs"))
        mean_reward = prev.get("mean_reward")
        source = uri

    if existing and existing.get("checkpoint_uri") == uri and existing.get("sha256") == sha:
        print(f"{PREFIX} manifest {storage.join(output_uri, MANIFEST_NAME)} already names {uri}; unchanged",
              flush=True)
        return existing

    iteration = step // rollouts if rollouts else step
    timesteps = step * num_envs if num_envs else step
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "run_key": run_key,
        "task": task,
        "checkpoint_uri": uri,
        "sha256": sha,
        "iteration": iteration,
        "timesteps": timesteps,
        "mean_reward": mean_reward,
        "library_versions": library_versions(),
        "image_digest": image_digest,
        "resumed_from": resumed_from,
        "created_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "tensorboard_uri": tensorboard_uri,
        "rollouts": rollouts,
        "num_envs": num_envs,
        "completed": not (max_iterations is not None and iteration < max_iterations),
        "trainer": TRAINER,
        "step": step,
        "source_checkpoint": source,
    }
    storage.write_bytes(storage.join(output_uri, MANIFEST_NAME), json.dumps(manifest, indent=2).encode())
    print(f"{PREFIX} manifest {storage.join(output_uri, MANIFEST_NAME)} iteration={iteration} step={step} "
          f"sha256={sha}", flush=True)
    return manifest


def find_resume(output_uri: str, dest_dir: str, task: str | None = None) -> dict[str, Any] | None:
    """Newest complete checkpoint under ``output_uri``, downloaded into ``dest_dir``.

    :return: ``{"uri", "path", "step", "iteration" (int or None), "sha256"}`` or None when there is none.
    :raises UsageError: the existing manifest names a task other than ``task``.
    """
    from sim2real.workloads.checkpoints import find_latest_complete_checkpoint

    existing = _read_manifest(output_uri)
    if task and existing and existing.get("task") not in (None, task):
        raise UsageError(f"OUTPUT_URI {output_uri} holds a manifest of task {existing.get('task')!r}, not {task!r}; "
                         "use a fresh OUTPUT_URI")
    latest = find_latest_complete_checkpoint(output_uri)
    if latest is None:
        return None
    step, uri, sha = latest
    path = storage.download_file(uri, os.path.join(dest_dir, checkpoint_name(step)))
    if storage.sha256_file(path) != sha:
        raise RuntimeError(f"downloaded {uri} to {path} but its sha256 differs from {sha}; retry")
    rollouts = _positive_int((existing or {}).get("rollouts"))
    iteration = step // rollouts if rollouts else _seeded_iteration(step)
    return {"uri": uri, "path": path, "step": step, "iteration": iteration, "sha256": sha}


def _seeded_iteration(step: int) -> int | None:
    """The iteration of the checkpoint a retraining round was seeded with, when ``step`` is that checkpoint's:
    ``SIM2REAL_RESUMED_ITERATION`` for ``SIM2REAL_RESUMED_CHECKPOINT_URI`` (set by the train stage,
    :mod:`sim2real.contract.env_vars`); None when they are unset or name another checkpoint.

    :raises UsageError: ``SIM2REAL_RESUMED_ITERATION`` is not a non-negative integer, or the URI is not an
        ``agent_<n>.pt`` checkpoint.
    """
    from sim2real.contract import env_vars as ev

    seeded = os.environ.get(ev.RESUMED_CHECKPOINT_URI, "").strip()
    raw = os.environ.get(ev.RESUMED_ITERATION, "").strip()
    if not seeded or not raw:
        return None
    if not raw.isdigit():
        raise UsageError(f"{ev.RESUMED_ITERATION}={raw!r} is not a non-negative integer")
    return int(raw) if step_of(seeded) == step else None


def wait_for_manifest(output_uri: str, since: float, timeout_s: float, poll_s: float = 5.0) -> dict[str, Any]:
    """Wait until ``<output_uri>/manifest.json`` exists with ``created_at`` at or after ``since`` (epoch seconds).

    Used on the main node of a multi-node job when another node ran global rank 0 and publishes: the main
    node's exit ends the Batch job (and stops the other nodes), so it must outlive that upload.

    :return: the manifest.
    :raises TimeoutError: not there after ``timeout_s`` seconds.
    """
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        manifest = _read_manifest(output_uri)
        if manifest:
            try:
                created = datetime.datetime.strptime(str(manifest.get("created_at")), "%Y-%m-%dT%H:%M:%S.%fZ")
                created_s = created.replace(tzinfo=datetime.timezone.utc).timestamp()
            except ValueError:
                created_s = -1.0
            if created_s >= since:
                return manifest
        if time.monotonic() >= deadline:
            raise TimeoutError(f"no manifest newer than {since:.0f} (epoch s) at {storage.join(output_uri, MANIFEST_NAME)}"
                               f" after {timeout_s:.0f}s: the node that ran rank 0 did not publish (see its log)")
        time.sleep(poll_s)


def _shell_assignments(found: dict[str, Any] | None) -> str:
    found = found or {}
    pairs = [("RESUME_URI", found.get("uri")), ("RESUME_PATH", found.get("path")), ("RESUME_STEP", found.get("step")),
             ("RESUME_ITERATION", found.get("iteration")), ("RESUME_SHA256", found.get("sha256"))]
    return "".join(f"{k}={shlex.quote('' if v is None else str(v))}\n" for k, v in pairs)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """CLI flags, defaulting to OUTPUT_URI / TASK / RUN_KEY / IMAGE_DIGEST / MAX_ITERATIONS from the env.

    :raises UsageError: missing OUTPUT_URI, missing --log-dir/TASK when publishing, bad MAX_ITERATIONS.
    """
    parser = argparse.ArgumentParser(prog="python -m sim2real.workloads.publish",
                                     description="Publish an Isaac Lab skrl run to OUTPUT_URI, or find a checkpoint "
                                                 "to resume from")
    parser.add_argument("--log-dir", help="Isaac Lab skrl log dir (e.g. logs/skrl)")
    parser.add_argument("--output-uri", default=os.environ.get("OUTPUT_URI"))
    parser.add_argument("--task", default=os.environ.get("TASK"))
    parser.add_argument("--run-key", default=os.environ.get("RUN_KEY", ""))
    parser.add_argument("--image-digest", default=os.environ.get("IMAGE_DIGEST") or None)
    parser.add_argument("--resumed-from", default=None, help="URI of the published checkpoint this run started from")
    parser.add_argument("--max-iterations", default=os.environ.get("MAX_ITERATIONS") or None)
    parser.add_argument("--if-present", action="store_true", help="exit 0 when the log dir has no checkpoint")
    parser.add_argument("--wait-for-manifest", type=float, default=None, metavar="SECONDS",
                        help="with no checkpoint here, wait this long for another node's manifest (see --since)")
    parser.add_argument("--since", type=float, default=None, metavar="EPOCH_S",
                        help="ignore local checkpoints modified before this time, and wait only for a manifest "
                             "created at or after it (default for the wait: now)")
    parser.add_argument("--find-resume", metavar="DEST_DIR", default=None,
                        help="download the newest complete checkpoint of OUTPUT_URI into DEST_DIR and print "
                             "RESUME_* shell assignments")
    args = parser.parse_args(argv)
    if not args.output_uri:
        raise UsageError("missing OUTPUT_URI (env or --output-uri)")
    if args.max_iterations is not None:
        try:
            args.max_iterations = int(args.max_iterations)
        except ValueError:
            raise UsageError(f"MAX_ITERATIONS={args.max_iterations!r} is not an integer") from None
    if args.find_resume is None:
        missing = [n for n, v in (("--log-dir", args.log_dir), ("TASK", args.task)) if not v]
        if missing:
            raise UsageError(f"missing {', '.join(missing)}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point. :return: 0 done / nothing to do, 1 no checkpoint to publish, 2 bad input."""
    try:
        args = parse_args(argv)
        if args.find_resume is not None:
            found = find_resume(args.output_uri, args.find_resume, args.task)
            if found:
                print(f"{PREFIX} resume from {found['uri']} (step {found['step']}, iteration "
                      f"{found['iteration']}) -> {found['path']}", file=sys.stderr)
            else:
                print(f"{PREFIX} no complete checkpoint under {args.output_uri}: fresh start", file=sys.stderr)
            sys.stdout.write(_shell_assignments(found))
            return 0
        rank = os.environ.get("RANK", "0").strip() or "0"
        if rank != "0":
            print(f"{PREFIX} RANK={rank}: only rank 0 publishes; nothing to do", file=sys.stderr)
            return 0
        publish(log_dir=args.log_dir, output_uri=args.output_uri, task=args.task, run_key=args.run_key,
                image_digest=args.image_digest, resumed_from=args.resumed_from or None,
                max_iterations=args.max_iterations,
                if_present=args.if_present or args.wait_for_manifest is not None, since=args.since)
        return 0
    except UsageError as err:
        print(f"{PREFIX} error: {err}", file=sys.stderr)
        return 2
    except NothingToPublish as err:
        if args.wait_for_manifest is not None:
            import time

            print(f"{PREFIX} {err}: waiting up to {args.wait_for_manifest:.0f}s for the node that ran rank 0 to "
                  "publish", file=sys.stderr, flush=True)
            try:
                manifest = wait_for_manifest(args.output_uri, args.since if args.since is not None else time.time(),
                                             args.wait_for_manifest)
            except TimeoutError as timeout:
                print(f"{PREFIX} error: {timeout}", file=sys.stderr)
                return 1
            print(f"{PREFIX} manifest published by another node: {manifest.get('checkpoint_uri')}", flush=True)
            return 0
        if args.if_present:
            print(f"{PREFIX} {err}: nothing to publish from this node", file=sys.stderr)
            return 0
        print(f"{PREFIX} error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
