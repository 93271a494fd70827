"""SmokeEval: load the fine-tuned checkpoint offline and check that it returns valid action chunks.

Runs in the smoke-eval image (``containers/groot/smoke_eval``) as the pipeline's ``SmokeEval``
step. ``--model`` is what GR00TFinetune exported (SageMaker's ``model.tar.gz``, or the directory
it unpacks to). The policy is built from the checkpoint with no network access:

* a GR00T checkpoint → ``gr00t.policy.gr00t_policy.Gr00tPolicy(embodiment_tag, model_path, device=...)``
  (Isaac-GR00T's own loader, installed in the image);
* a stand-in checkpoint (``sim2real_standin_policy.json`` + ``.npz``, :class:`StandInPolicy`) →
  a small numpy policy with the same interface (``modality_configs``, ``get_action``), used where
  GR00T cannot run (tests, the local sandbox).

One batched observation is made from the policy's modality config (video ``(B, T, H, W, 3)``
uint8 with (H, W) the frame size ``inference_metadata.json``'s ``modality_layout`` declares, 224x224
without one; state ``(B, T, D)`` float32 with ``D`` from the checkpoint's ``inference_metadata.json``,
language ``[[instruction]]``) and ``get_action`` is called ``--calls`` times. Checks: every
action key is an array of shape ``(B, horizon, D)`` with ``horizon == --action-horizon`` (16),
``D`` as the modality says, and only finite values.

``--groot-version`` names the generation; an embodiment tag it lacks fails the check with the reason. The
Hugging Face token (``HF_TOKEN_SECRET_ID``: :mod:`sim2real.workloads.groot.hf_auth`) is read at start for a gated
backbone or processor (N1.7's ``nvidia/Cosmos-Reason2-2B``) and masked in the report.

Writes ``<output>/smoke.json`` — ``{"passed": bool, "reason": str, ...}`` — which the
``SmokeGate`` condition reads (``passed``) and the ``SmokeFailed`` step quotes (``reason``).
The job exits 0 whenever it could write the report, so a failed check routes the execution to
``SmokeFailed`` with its reason instead of failing the step with a stack trace.
"""

from __future__ import annotations

import argparse
import json
import os
import tarfile
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sim2real.contract import groot
from sim2real.workloads.groot.hf_auth import hf_token, redact

STANDIN_CONFIG = "sim2real_standin_policy.json"
STANDIN_WEIGHTS = "sim2real_standin_policy.npz"
STANDIN_FORMAT = "sim2real-standin-policy/1"
METADATA_FILE = "inference_metadata.json"
DEFAULT_IMAGE_SIZE = (224, 224)


@dataclass
class ModalityConfig:
    """The two fields of GR00T's ``ModalityConfig`` the smoke check uses."""

    modality_keys: list[str]
    delta_indices: list[int] = field(default_factory=lambda: [0])


class StandInPolicy:
    """A numpy policy with GR00T's policy interface, loaded from a stand-in checkpoint directory.

    Per action key: ``action = tanh(state_t @ W + b)`` reshaped to ``(B, horizon, D)``, where
    ``state_t`` is the last state step of every state key, concatenated.
    """

    def __init__(self, config: dict[str, Any], weights: dict[str, np.ndarray]):
        if config.get("format") != STANDIN_FORMAT:
            raise ValueError(f"not a stand-in checkpoint (format {config.get('format')!r})")
        self.config = config
        self.weights = weights
        self.modality_configs = {name: ModalityConfig(list(m["modality_keys"]), list(m["delta_indices"]))
                                 for name, m in config["modality_configs"].items()}

    @classmethod
    def load(cls, model_dir: Path) -> StandInPolicy:
        """Load ``sim2real_standin_policy.json`` and its ``.npz`` from ``model_dir``."""
        config = json.loads((model_dir / STANDIN_CONFIG).read_text())
        with np.load(model_dir / STANDIN_WEIGHTS) as npz:
            weights = {k: npz[k] for k in npz.files}
        return cls(config, weights)

    def get_action(self, observation: dict[str, Any], options: dict[str, Any] | None = None
                   ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Return ``({action_key: (B, horizon, D)}, {})`` like ``Gr00tPolicy.get_action``."""
        state = np.concatenate([np.asarray(observation["state"][k], dtype=np.float32)[:, -1, :]
                                for k in self.modality_configs["state"].modality_keys], axis=-1)
        horizon = len(self.modality_configs["action"].delta_indices)
        actions = {}
        for key in self.modality_configs["action"].modality_keys:
            w, b = self.weights[f"{key}.weight"], self.weights[f"{key}.bias"]
            out = np.tanh(state @ w + b)
            actions[key] = out.reshape(state.shape[0], horizon, -1).astype(np.float32)
        return actions, {}


def write_standin_checkpoint(model_dir: Path, *, modality: dict[str, Any], embodiment_tag: str = "new_embodiment",
                             action_horizon: int = 16, seed: int = 0, video_keys: list[str] | None = None) -> Path:
    """Write a stand-in checkpoint (config + random weights) whose dims follow ``modality``
    (LeRobot/GR00T ``meta/modality.json``: ``{"state": {key: {"start", "end"}}, "action": {...}}``)."""
    rng = np.random.default_rng(seed)
    state_dims = {k: int(v["end"]) - int(v["start"]) for k, v in modality["state"].items()}
    action_dims = {k: int(v["end"]) - int(v["start"]) for k, v in modality["action"].items()}
    videos = video_keys if video_keys is not None else sorted(modality.get("video", {}))
    config = {
        "format": STANDIN_FORMAT,
        "embodiment_tag": embodiment_tag,
        "modality_configs": {
            "video": {"modality_keys": videos, "delta_indices": [0]},
            "state": {"modality_keys": sorted(state_dims), "delta_indices": [0]},
            "action": {"modality_keys": sorted(action_dims), "delta_indices": list(range(action_horizon))},
            "language": {"modality_keys": ["annotation.human.task_description"], "delta_indices": [0]},
        },
    }
    total_state = sum(state_dims.values())
    weights = {}
    for key, dim in sorted(action_dims.items()):
        weights[f"{key}.weight"] = rng.normal(scale=0.1, size=(total_state, action_horizon * dim)).astype(np.float32)
        weights[f"{key}.bias"] = np.zeros(action_horizon * dim, dtype=np.float32)
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / STANDIN_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True))
    np.savez(model_dir / STANDIN_WEIGHTS, **weights)
    return model_dir


def unpack(model: Path, work: Path) -> Path:
    """The model directory: ``model`` itself, or ``model.tar.gz`` (file or inside ``model``) unpacked."""
    tarball = model if model.is_file() else model / "model.tar.gz"
    if not tarball.is_file():
        return model
    target = work / "model"
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as tar:
        tar.extractall(target, filter="data")
    return target


def _resolve_embodiment(tag: str) -> Any:
    from gr00t.data.embodiment_tags import EmbodimentTag

    try:
        return EmbodimentTag(tag)
    except ValueError:
        return EmbodimentTag[tag.upper()]


def load_policy(model_dir: Path, embodiment_tag: str, device: str | None = None) -> Any:
    """Load the policy from a checkpoint directory (stand-in format, else GR00T).

    :raises ImportError: a GR00T checkpoint where Isaac-GR00T is not installed.
    """
    if (model_dir / STANDIN_CONFIG).exists():
        return StandInPolicy.load(model_dir)
    from gr00t.policy.gr00t_policy import Gr00tPolicy  # first: fails fast where GR00T is absent
    import torch

    device = device or ("cuda:0" if torch.cuda.is_available() else "cpu")
    return Gr00tPolicy(embodiment_tag=_resolve_embodiment(embodiment_tag), model_path=str(model_dir),
                       device=device, strict=True)


def _dims(metadata: dict[str, Any], modality: str) -> dict[str, int]:
    spec = (metadata.get("modality") or {}).get(modality) or {}
    return {k: int(v["end"]) - int(v["start"]) for k, v in spec.items() if "start" in v and "end" in v}


def _frame_sizes(metadata: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """``{camera: (height, width)}`` the checkpoint's ``modality_layout`` declares (the training data's)."""
    video = (metadata.get("modality_layout") or {}).get("video") or []
    return {v["key"]: (int(v["height"]), int(v["width"])) for v in video if isinstance(v, dict) and "height" in v}


def make_observation(policy: Any, metadata: dict[str, Any], *, batch: int = 1, seed: int = 0,
                     image_size: tuple[int, int] | None = None, instruction: str = "smoke test") -> dict:
    """One batched observation shaped by the policy's modality config and the checkpoint's dims.

    Frames are ``image_size`` (H, W) when given, else the size the checkpoint's ``modality_layout``
    declares for the camera (the training data's, what the robot sends), else :data:`DEFAULT_IMAGE_SIZE`.

    :raises ValueError: a state key whose dimension the metadata does not give.
    """
    rng = np.random.default_rng(seed)
    configs = policy.modality_configs
    state_dims = _dims(metadata, "state")
    sizes = _frame_sizes(metadata)
    obs: dict[str, dict[str, Any]] = {"video": {}, "state": {}, "language": {}}
    for key in configs["video"].modality_keys:
        frames = len(configs["video"].delta_indices)
        short = key.split(".", 1)[1] if key.startswith("video.") else key
        size = image_size or sizes.get(key) or sizes.get(short) or DEFAULT_IMAGE_SIZE
        obs["video"][key] = rng.integers(0, 256, size=(batch, frames, *size, 3), dtype=np.uint8)
    for key in configs["state"].modality_keys:
        short = key.split(".", 1)[1] if key.startswith("state.") else key
        dim = state_dims.get(key, state_dims.get(short))
        if dim is None:
            raise ValueError(f"state key {key!r}: no dimension in {METADATA_FILE} 'modality.state'")
        obs["state"][key] = rng.normal(scale=0.1, size=(batch, len(configs["state"].delta_indices), dim)).astype(np.float32)
    for key in configs["language"].modality_keys:
        obs["language"][key] = [[instruction] for _ in range(batch)]
    return obs


def check_actions(actions: Any, *, batch: int, horizon: int, action_dims: dict[str, int]) -> list[str]:
    """Problems with one ``get_action`` result (empty when the chunk is valid)."""
    if not isinstance(actions, dict) or not actions:
        return [f"get_action returned {type(actions).__name__}, not a non-empty dict of action arrays"]
    problems = []
    for key, value in sorted(actions.items()):
        arr = np.asarray(value)
        if arr.ndim != 3:
            problems.append(f"{key}: shape {arr.shape}, expected (batch, horizon, dim)")
            continue
        if arr.shape[0] != batch:
            problems.append(f"{key}: batch {arr.shape[0]}, expected {batch}")
        if arr.shape[1] != horizon:
            problems.append(f"{key}: action horizon {arr.shape[1]}, expected {horizon}")
        short = key.split(".", 1)[1] if key.startswith("action.") else key
        want = action_dims.get(key, action_dims.get(short))
        if want is not None and arr.shape[2] != want:
            problems.append(f"{key}: action dim {arr.shape[2]}, expected {want}")
        if not np.issubdtype(arr.dtype, np.number):
            problems.append(f"{key}: dtype {arr.dtype} is not numeric")
        elif not np.all(np.isfinite(arr)):
            problems.append(f"{key}: {int(np.size(arr) - np.isfinite(arr).sum())} non-finite values")
    return problems


def smoke(model: Path, *, embodiment_tag: str, action_horizon: int = 16, calls: int = 3,
          device: str | None = None, groot_version: str = groot.DEFAULT_VERSION,
          hf_token: str | None = None) -> dict[str, Any]:
    """Run the smoke check; return the report (never raises for a model problem).

    ``groot_version``: the generation the checkpoint was fine-tuned from; a tag it lacks fails the check with the
    reason (:func:`sim2real.contract.groot.embodiment_problem`). ``hf_token``: masked in the report's reason and
    traceback (:func:`sim2real.workloads.groot.hf_auth.redact`)."""
    calls = max(1, int(calls))
    report: dict[str, Any] = {"passed": False, "reason": "", "action_horizon": action_horizon,
                              "embodiment_tag": embodiment_tag, "groot_version": groot_version, "calls": 0}
    try:
        problem = groot.embodiment_problem(groot_version, embodiment_tag)
    except ValueError as exc:
        problem = str(exc)
    if problem:
        report["reason"] = problem
        return report
    with tempfile.TemporaryDirectory(prefix="sim2real-smoke-") as tmp:
        try:
            model_dir = unpack(model, Path(tmp))
            metadata_path = model_dir / METADATA_FILE
            metadata = json.loads(metadata_path.read_text()) if metadata_path.exists() else {}
            report["format"] = "standin" if (model_dir / STANDIN_CONFIG).exists() else "gr00t"
            started = time.monotonic()
            policy = load_policy(model_dir, metadata.get("embodiment_tag") or embodiment_tag, device)
            report["load_seconds"] = round(time.monotonic() - started, 3)
            action_dims = _dims(metadata, "action")
            shapes: dict[str, list[int]] = {}
            latencies = []
            for call in range(calls):
                obs = make_observation(policy, metadata, seed=call)
                started = time.monotonic()
                actions, _info = policy.get_action(obs)
                latencies.append(time.monotonic() - started)
                problems = check_actions(actions, batch=1, horizon=action_horizon, action_dims=action_dims)
                report["calls"] = call + 1
                if problems:
                    report["reason"] = f"call {call + 1}: " + "; ".join(problems)
                    return report
                shapes = {k: list(np.asarray(v).shape) for k, v in sorted(actions.items())}
            report.update(passed=True, reason="ok", action_shapes=shapes,
                          latency_ms_max=round(1000 * max(latencies), 3))
        except Exception as exc:  # noqa: BLE001 - every model problem becomes the gate's reason
            report["reason"] = redact(f"{type(exc).__name__}: {exc}", hf_token)[:900]
            report["traceback"] = redact(traceback.format_exc(limit=5), hf_token)[-2000:]
    return report


def main(argv: list[str] | None = None) -> int:
    """CLI for the processing job: write ``<output>/smoke.json``; exit 0 once it is written."""
    parser = argparse.ArgumentParser(description="Load a fine-tuned checkpoint offline and check its action chunks")
    parser.add_argument("--model", type=Path, required=True, help="model.tar.gz or model directory")
    parser.add_argument("--output", type=Path, required=True, help="directory for smoke.json")
    parser.add_argument("--embodiment-tag", default="new_embodiment")
    parser.add_argument("--action-horizon", type=int, default=16)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--device", default=None, help="torch device for GR00T (default: cuda:0 when present)")
    parser.add_argument("--groot-version", default=groot.DEFAULT_VERSION,
                        help=f"GR00T generation of the checkpoint, one of {list(groot.VERSIONS)}")
    args = parser.parse_args(argv)
    token = hf_token(os.environ)  # HF_TOKEN_SECRET_ID: a gated processor/backbone (N1.7) loads with it
    if token:
        os.environ["HF_TOKEN"] = token
    report = smoke(args.model, embodiment_tag=args.embodiment_tag, action_horizon=args.action_horizon,
                   calls=args.calls, device=args.device, groot_version=args.groot_version, hf_token=token)
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "smoke.json").write_text(json.dumps(report, indent=2, sort_keys=True))
    print("SmokeEval:", "PASSED" if report["passed"] else "FAILED", "-", report["reason"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
