"""GR00TFinetune: the training image's entry point (SageMaker training-job contract).

Runs in ``containers/groot/training`` (Isaac-GR00T at a pinned commit, ``GROOT_HOME``):

1. Reads the job's contract: hyperparameters (``/opt/ml/input/config/hyperparameters.json``:
   ``embodiment_tag``, ``groot_version``, ``max_steps``, ``global_batch_size``, ``num_gpus``, ``save_steps``;
   a tag the GR00T version lacks, or an unknown version, is refused before training, exit 2), the
   ``dataset`` and ``model`` channels (``SM_CHANNEL_*``), ``SM_MODEL_DIR`` and the checkpoint
   directory (``LocalPath`` of ``/opt/ml/input/config/checkpointconfig.json``, which SageMaker
   restores from ``CheckpointConfig.S3Uri`` before the job starts and syncs back while it runs).
2. Resumes: GR00T's trainer is pointed at the checkpoint directory as its ``output_dir`` and
   calls ``trainer.train(resume_from_checkpoint=True)``, so the newest complete ``checkpoint-N``
   restored there (a retried training job of the same pipeline execution) is picked up; the
   step found is logged and written to ``inference_metadata.json``.
3. Gets the Hugging Face token at run time (:mod:`sim2real.workloads.groot.hf_auth`: ``HF_TOKEN_SECRET_ID``,
   Secrets Manager, or ``HF_TOKEN_SSM_PARAMETER``, SSM SecureString) and hands it to the trainer's environment
   only; it is never logged, written or sent to MLflow. A version with a gated backbone (N1.7) and no token
   is refused before training (exit 2).
4. Launches ``gr00t/experiment/launch_finetune.py`` (``torch.distributed.run --standalone``
   when more than one GPU).
5. Exports the newest checkpoint (weights, config, ``processor/``, ``experiment_cfg/``) and
   ``inference_metadata.json`` (embodiment, the dataset's ``meta/modality.json``, action horizon, and
   ``modality_layout``: the model's :class:`sim2real.contract.modality.ModalityLayout` with each camera's
   frame size from the dataset's ``meta/info.json``, what the robot's policy server checks frames
   against) into ``SM_MODEL_DIR``; SageMaker uploads it to S3 as ``model.tar.gz``. A dataset whose
   layout cannot be built (a camera without a readable frame size, ...) is refused before training
   (exit 2).

Experiment tracking (:mod:`sim2real.workloads.tracking`): with ``MLFLOW_TRACKING_URI`` and ``MLFLOW_RUN_ID`` set
(the pipeline's training environment: the DAG run's ``vla_finetune`` child run), the job logs the
hyperparameters and the GPUs used as params, then the Hugging Face Trainer's log history of the newest
checkpoint (``trainer_state.json`` ``log_history``: ``loss``, ``grad_norm``, ``learning_rate``, ... per
``step``) as metrics, in batches, and ends the run FINISHED (FAILED when the trainer failed). Tracking never
decides the job's outcome.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sim2real.contract import groot
from sim2real.workloads.export import dataset_layout
from sim2real.workloads.groot.hf_auth import hf_token

CONFIG_DIR = Path("/opt/ml/input/config")
DEFAULT_CHECKPOINT_DIR = Path("/opt/ml/checkpoints")
CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
#: Files that mark a checkpoint written completely (the HF Trainer writes trainer_state.json last).
COMPLETE_MARKERS = ("trainer_state.json",)
ACTION_HORIZON = 16
DEFAULTS = {"embodiment_tag": "new_embodiment", "max_steps": 10000, "global_batch_size": 32,
            "num_gpus": 8, "save_steps": 2000, "groot_version": groot.DEFAULT_VERSION}

Runner = Callable[[list[str], dict[str, str], str], int]


def _hp_value(raw: Any) -> Any:
    """SageMaker writes every hyperparameter as a JSON string; decode when it is JSON."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def read_hyperparameters(config_dir: Path = CONFIG_DIR) -> dict[str, Any]:
    """Hyperparameters with defaults, ints cast (``embodiment_tag`` and ``groot_version`` kept strings)."""
    path = config_dir / "hyperparameters.json"
    raw = json.loads(path.read_text()) if path.exists() else {}
    hp = dict(DEFAULTS)
    hp.update({k: _hp_value(v) for k, v in raw.items()})
    hp["embodiment_tag"] = str(hp["embodiment_tag"])
    hp["groot_version"] = str(hp["groot_version"] or groot.DEFAULT_VERSION)
    for key in ("max_steps", "global_batch_size", "num_gpus", "save_steps"):
        hp[key] = int(hp[key])
    return hp


def checkpoint_dir(env: Mapping[str, str], config_dir: Path = CONFIG_DIR) -> Path:
    """Where SageMaker restores/syncs checkpoints: ``checkpointconfig.json``'s ``LocalPath``,
    else ``SIM2REAL_CHECKPOINT_DIR``, else ``/opt/ml/checkpoints``."""
    path = config_dir / "checkpointconfig.json"
    if path.exists():
        local = json.loads(path.read_text()).get("LocalPath")
        if local:
            return Path(local)
    return Path(env.get("SIM2REAL_CHECKPOINT_DIR") or DEFAULT_CHECKPOINT_DIR)


def latest_checkpoint(directory: Path) -> tuple[int, Path] | None:
    """The newest complete ``checkpoint-N`` under ``directory`` as ``(N, path)``, or ``None``.

    A checkpoint without ``trainer_state.json`` (cut off mid-write by an interruption) is skipped.
    """
    found = []
    if directory.is_dir():
        for child in directory.iterdir():
            match = CHECKPOINT_RE.match(child.name)
            if match and child.is_dir() and all((child / m).exists() for m in COMPLETE_MARKERS):
                found.append((int(match.group(1)), child))
    return max(found) if found else None


def launch_command(hp: Mapping[str, Any], *, dataset: Path, base_model: Path, output_dir: Path,
                   gpus: int, python: str = sys.executable) -> list[str]:
    """The GR00T fine-tune command line (``launch_finetune.py``'s tyro flags)."""
    script = "gr00t/experiment/launch_finetune.py"
    head = ([python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}", script]
            if gpus > 1 else [python, script])
    args = ["--base-model-path", str(base_model), "--dataset-path", str(dataset),
            "--embodiment-tag", str(hp["embodiment_tag"]), "--output-dir", str(output_dir),
            "--global-batch-size", str(hp["global_batch_size"]), "--max-steps", str(hp["max_steps"]),
            "--save-steps", str(hp["save_steps"]), "--num-gpus", str(gpus)]
    modality_config = dataset / "modality_config.py"
    if modality_config.exists():
        args += ["--modality-config-path", str(modality_config)]
    return head + args


def visible_gpus() -> int:
    """GPUs torch sees (0 without torch or CUDA)."""
    try:
        import torch

        return int(torch.cuda.device_count())
    except ImportError:
        return 0


def export_model(output_dir: Path, model_dir: Path, metadata: dict[str, Any]) -> Path:
    """Copy the newest complete checkpoint (plus ``processor/`` and ``experiment_cfg/`` from the
    run directory when the checkpoint lacks them) into ``model_dir`` with ``inference_metadata.json``.

    :raises FileNotFoundError: no complete checkpoint in ``output_dir``.
    """
    latest = latest_checkpoint(output_dir)
    if latest is None:
        raise FileNotFoundError(f"no complete checkpoint-N under {output_dir}")
    step, path = latest
    model_dir.mkdir(parents=True, exist_ok=True)
    skip = {"optimizer.pt", "scheduler.pt", "rng_state.pth"}  # training state: not needed to serve
    for item in path.iterdir():
        if item.name in skip or item.name.startswith("rng_state"):
            continue
        target = model_dir / item.name
        if item.is_dir():
            shutil.copytree(item, target, dirs_exist_ok=True)
        else:
            shutil.copy2(item, target)
    for name in ("processor", "experiment_cfg"):
        if (output_dir / name).is_dir() and not (model_dir / name).exists():
            shutil.copytree(output_dir / name, model_dir / name)
    meta = dict(metadata, step=step, checkpoint=path.name)
    (model_dir / "inference_metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
    return model_dir


def trainer_history(output_dir: Path) -> list[tuple[int, dict[str, float]]]:
    """``(step, metrics)`` per entry of the newest complete checkpoint's ``trainer_state.json`` ``log_history``
    (the Hugging Face Trainer's logs): every finite number but ``step``; ``[]`` when there is none."""
    import math

    latest = latest_checkpoint(output_dir)
    if latest is None:
        return []
    state = json.loads((latest[1] / "trainer_state.json").read_text())
    out = []
    for entry in state.get("log_history") or []:
        step = entry.get("step")
        metrics = {k: float(v) for k, v in entry.items() if k != "step" and isinstance(v, (int, float))
                   and not isinstance(v, bool) and math.isfinite(float(v))}
        if isinstance(step, int) and metrics:
            out.append((step, metrics))
    return out


def log_trainer_history(logger: Any, output_dir: Path) -> int:
    """Log :func:`trainer_history` to ``logger`` (a :mod:`sim2real.workloads.tracking` run logger; batched by it);
    return the number of entries logged."""
    history = trainer_history(output_dir)
    for step, metrics in history:
        logger.log_metrics(metrics, step)
    logger.flush()
    return len(history)


def _refusal(hp: Mapping[str, Any]) -> str | None:
    """Why the hyperparameters cannot train (an unknown GR00T version, a tag the version lacks), else ``None``."""
    try:
        return groot.embodiment_problem(hp["groot_version"], hp["embodiment_tag"])
    except ValueError as exc:
        return str(exc)


def _run(cmd: list[str], env: dict[str, str], cwd: str) -> int:
    return subprocess.run(cmd, env=env, cwd=cwd, check=False).returncode


def main(argv: list[str] | None = None, *, env: Mapping[str, str] | None = None, runner: Runner = _run,
         config_dir: Path = CONFIG_DIR, session_factory: Callable[[], Any] | None = None) -> int:
    """Train (resuming when a checkpoint was restored) and export; return the exit code."""
    parser = argparse.ArgumentParser(description="GR00T fine-tune entry point (SageMaker training job)")
    parser.add_argument("train", nargs="?", help="ignored: SageMaker passes 'train' to the container")
    parser.parse_args(argv)
    env = dict(os.environ if env is None else env)
    hp = read_hyperparameters(config_dir)
    dataset = Path(env.get("SM_CHANNEL_DATASET", "/opt/ml/input/data/dataset"))
    base_model = Path(env.get("SM_CHANNEL_MODEL", "/opt/ml/input/data/model"))
    model_dir = Path(env.get("SM_MODEL_DIR", "/opt/ml/model"))
    modality_path = dataset / "meta" / "modality.json"
    refused = _refusal(hp)
    if refused:
        print(f"GR00TFinetune: {refused}, nothing trained", file=sys.stderr, flush=True)
        return 2
    try:
        layout = dataset_layout(str(dataset), ACTION_HORIZON).to_dict() if modality_path.exists() else None
    except ValueError as exc:
        print(f"GR00TFinetune: the dataset's modality layout cannot be built, nothing trained: {exc}",
              file=sys.stderr, flush=True)
        return 2
    ckpt = checkpoint_dir(env, config_dir)
    ckpt.mkdir(parents=True, exist_ok=True)
    resumed = latest_checkpoint(ckpt)
    print(f"GR00TFinetune: checkpoint dir {ckpt}: "
          + (f"resuming from {resumed[1].name} (step {resumed[0]})" if resumed else "no checkpoint, starting fresh"),
          flush=True)
    detected = visible_gpus() if env.get("SIM2REAL_GPUS") is None else int(env["SIM2REAL_GPUS"])
    gpus = max(1, min(hp["num_gpus"], detected) if detected else hp["num_gpus"])
    if detected and detected < hp["num_gpus"]:
        print(f"GR00TFinetune: num_gpus={hp['num_gpus']} but {detected} visible; using {detected}", flush=True)
    child_env = dict(env)
    token = hf_token(env, session_factory)
    if token:
        child_env["HF_TOKEN"] = token
    elif groot.release(hp["groot_version"]).needs_hf_token:
        rel = groot.release(hp["groot_version"])
        print(f"GR00TFinetune: GR00T {rel.version} loads the gated {rel.backbone} and no Hugging Face token is "
              "configured (HF_TOKEN_SECRET_ID names none), nothing trained", file=sys.stderr, flush=True)
        return 2
    else:
        print("GR00TFinetune: no Hugging Face token configured (gated backbones will fail to download)", flush=True)
    groot_home = env.get("GROOT_HOME", "/opt/gr00t")
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (groot_home, env.get("PYTHONPATH", "")) if p)
    from sim2real.contract import tracking as tracking_contract
    from sim2real.workloads.tracking import run_logger_from_env

    run_key = env.get("SIM2REAL_RUN_KEY")
    tracker = run_logger_from_env(stage="vla_finetune", run_name=f"vla_finetune {run_key or ''}".strip(),
                                  tags={tracking_contract.RUN_KEY_TAG: run_key}, environ=env)
    tracker.log_params({**hp, "gpus": gpus, **({"resumed_from_step": resumed[0]} if resumed else {})})
    cmd = launch_command(hp, dataset=dataset, base_model=base_model, output_dir=ckpt, gpus=gpus)
    print("GR00TFinetune:", " ".join(cmd), flush=True)
    code = runner(cmd, child_env, groot_home)
    logged = log_trainer_history(tracker, ckpt)
    if tracker.enabled:
        print(f"GR00TFinetune: {logged} trainer log entries logged to MLflow run {tracker.run_id}", flush=True)
    if code != 0:
        print(f"GR00TFinetune: trainer exited {code}", file=sys.stderr, flush=True)
        tracker.finish("FAILED")
        return code
    metadata = {"embodiment_tag": hp["embodiment_tag"], "groot_version": hp["groot_version"],
                "action_horizon": ACTION_HORIZON, "modality_layout": layout,
                "max_steps": hp["max_steps"], "global_batch_size": hp["global_batch_size"], "num_gpus": gpus,
                "resumed_from_step": resumed[0] if resumed else None,
                "run_key": env.get("SIM2REAL_RUN_KEY"),
                "modality": json.loads(modality_path.read_text()) if modality_path.exists() else None}
    try:
        export_model(ckpt, model_dir, metadata)
    except Exception:
        tracker.finish("FAILED")
        raise
    print(f"GR00TFinetune: exported {ckpt} -> {model_dir}", flush=True)
    tracker.finish("FINISHED")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
