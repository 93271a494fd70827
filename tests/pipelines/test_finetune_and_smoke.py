"""GR00TFinetune's entry script (resume, HF token, export) and SmokeEval on a stand-in checkpoint.

GR00T itself cannot be loaded here: the trainer is a stand-in runner that writes checkpoints the
way GR00T's trainer does (``checkpoint-N/`` with ``trainer_state.json``), and the checkpoint is
the stand-in policy format (same ``modality_configs`` / ``get_action`` interface). The loading,
resume, export, unpacking and checking code is the real code.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import boto3
import numpy as np
import pytest
from moto import mock_aws

from sim2real.workloads.groot import finetune_entry as fe
from sim2real.workloads.groot import smoke_eval as se

MODALITY = {"state": {"single_arm": {"start": 0, "end": 5}, "gripper": {"start": 5, "end": 6}},
            "action": {"single_arm": {"start": 0, "end": 5}, "gripper": {"start": 5, "end": 6}},
            "video": {"front": {"original_key": "observation.images.front"}}}
#: The dataset's meta/info.json features (LeRobot v2.1: a camera's shape is [height, width, channels]).
FEATURES = {"observation.state": {"dtype": "float32", "shape": [6], "names": None},
            "action": {"dtype": "float32", "shape": [6], "names": None},
            "observation.images.front": {"dtype": "video", "shape": [480, 640, 3],
                                         "names": ["height", "width", "channels"]}}


def _job(tmp_path: Path, hp: dict | None = None, checkpoint_local: str | None = None) -> tuple[dict, Path]:
    config = tmp_path / "config"
    config.mkdir()
    (config / "hyperparameters.json").write_text(json.dumps({k: json.dumps(v) for k, v in (hp or {
        "embodiment_tag": "new_embodiment", "max_steps": 300, "global_batch_size": 32, "num_gpus": 8,
        "save_steps": 100}).items()}))
    ckpt = Path(checkpoint_local or tmp_path / "checkpoints")
    (config / "checkpointconfig.json").write_text(json.dumps({"LocalPath": str(ckpt), "S3Path": "s3://b/x"}))
    dataset = tmp_path / "data" / "dataset"
    (dataset / "meta").mkdir(parents=True)
    (dataset / "meta" / "modality.json").write_text(json.dumps(MODALITY))
    (dataset / "meta" / "info.json").write_text(json.dumps({"codebase_version": "v2.1", "features": FEATURES}))
    env = {"SM_CHANNEL_DATASET": str(dataset), "SM_CHANNEL_MODEL": str(tmp_path / "data" / "model"),
           "SM_MODEL_DIR": str(tmp_path / "model"), "GROOT_HOME": str(tmp_path), "SIM2REAL_GPUS": "1",
           "SIM2REAL_RUN_KEY": "run-1", "PATH": "/usr/bin:/bin"}
    return env, config


def _fake_trainer(steps: list[int], calls: list):
    """Writes checkpoints like GR00T's HF trainer would (resuming is the trainer's job; recorded)."""

    def run(cmd, env, cwd):
        output = Path(cmd[cmd.index("--output-dir") + 1])
        calls.append({"cmd": cmd, "env": env, "cwd": cwd, "existing": sorted(p.name for p in output.iterdir())})
        for step in steps:
            ck = output / f"checkpoint-{step}"
            se.write_standin_checkpoint(ck, modality=MODALITY, seed=step)
            (ck / "config.json").write_text("{}")
            (ck / "optimizer.pt").write_bytes(b"x")
            (ck / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        (output / "processor").mkdir(exist_ok=True)
        (output / "processor" / "processor_config.json").write_text("{}")
        return 0

    return run


def test_fresh_run_launches_groot_and_exports(tmp_path):
    env, config = _job(tmp_path)
    calls: list = []
    assert fe.main([], env=dict(env, HF_TOKEN="hf_secret"), runner=_fake_trainer([100, 300], calls),
                   config_dir=config) == 0
    cmd = calls[0]["cmd"]
    assert cmd[1] == "gr00t/experiment/launch_finetune.py"  # one GPU visible: no torchrun
    assert cmd[cmd.index("--output-dir") + 1] == str(tmp_path / "checkpoints")
    assert cmd[cmd.index("--max-steps") + 1] == "300" and cmd[cmd.index("--num-gpus") + 1] == "1"
    assert cmd[cmd.index("--dataset-path") + 1] == env["SM_CHANNEL_DATASET"]
    assert calls[0]["cwd"] == str(tmp_path) and calls[0]["env"]["HF_TOKEN"] == "hf_secret"
    assert calls[0]["existing"] == []
    model = tmp_path / "model"
    meta = json.loads((model / "inference_metadata.json").read_text())
    assert meta["step"] == 300 and meta["checkpoint"] == "checkpoint-300" and meta["resumed_from_step"] is None
    assert meta["modality"] == MODALITY and meta["action_horizon"] == 16 and meta["run_key"] == "run-1"
    # the layout the robot's server checks requests against, each camera's frame size from meta/info.json
    assert meta["modality_layout"]["video"] == [{"key": "front", "height": 480, "width": 640}]
    assert meta["modality_layout"]["state"] == [{"key": "single_arm", "width": 5}, {"key": "gripper", "width": 1}]
    assert meta["modality_layout"]["action_horizon"] == 16
    assert (model / se.STANDIN_CONFIG).exists() and (model / "processor/processor_config.json").exists()
    assert not (model / "optimizer.pt").exists()


def test_restored_checkpoint_is_resumed_and_a_partial_one_ignored(tmp_path):
    env, config = _job(tmp_path)
    ckpt = tmp_path / "checkpoints"
    (ckpt / "checkpoint-200").mkdir(parents=True)
    (ckpt / "checkpoint-200" / "trainer_state.json").write_text("{}")
    (ckpt / "checkpoint-250").mkdir()  # cut off mid-write: no trainer_state.json
    assert fe.latest_checkpoint(ckpt)[0] == 200
    calls: list = []
    assert fe.main([], env=env, runner=_fake_trainer([300], calls), config_dir=config) == 0
    assert calls[0]["existing"] == ["checkpoint-200", "checkpoint-250"]  # the trainer sees what SageMaker restored
    assert json.loads((tmp_path / "model/inference_metadata.json").read_text())["resumed_from_step"] == 200


def test_multi_gpu_uses_torchrun_and_trainer_failure_propagates(tmp_path):
    env, config = _job(tmp_path)
    calls: list = []
    code = fe.main(["train"], env=dict(env, SIM2REAL_GPUS="8"),
                   runner=lambda cmd, e, cwd: calls.append(cmd) or 3, config_dir=config)
    assert code == 3
    assert calls[0][1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=8"]
    assert not (tmp_path / "model" / "inference_metadata.json").exists()


def test_dataset_without_readable_frame_sizes_refused_before_training(tmp_path, capsys):
    env, config = _job(tmp_path)
    unnamed = {**FEATURES, "observation.images.front": {**FEATURES["observation.images.front"], "names": None}}
    (Path(env["SM_CHANNEL_DATASET"]) / "meta" / "info.json").write_text(json.dumps({"features": unnamed}))
    calls: list = []
    assert fe.main([], env=env, runner=lambda cmd, e, cwd: calls.append(cmd) or 0, config_dir=config) == 2
    assert calls == []  # no GPU time spent
    assert "'observation.images.front': names None do not say which of the shape [480, 640, 3]" in capsys.readouterr().err


def test_fewer_visible_gpus_than_requested(tmp_path):
    env, config = _job(tmp_path)
    calls: list = []
    fe.main([], env=dict(env, SIM2REAL_GPUS="4"), runner=_fake_trainer([300], calls), config_dir=config)
    assert calls[0]["cmd"][calls[0]["cmd"].index("--num-gpus") + 1] == "4"


@mock_aws
def test_hf_token_from_ssm_securestring_and_secrets_manager():
    boto3.client("ssm", region_name="us-east-1").put_parameter(
        Name="/groot/hf-token", Value="hf_from_ssm", Type="SecureString")
    sm = boto3.client("secretsmanager", region_name="us-east-1")
    sm.create_secret(Name="groot/hf", SecretString=json.dumps({"HF_TOKEN": "hf_from_secret"}))
    sm.create_secret(Name="groot/plain", SecretString="hf_plain\n")
    factory = lambda: boto3.session.Session(region_name="us-east-1")  # noqa: E731
    assert fe.hf_token({"HF_TOKEN_SSM_PARAMETER": "/groot/hf-token"}, factory) == "hf_from_ssm"
    assert fe.hf_token({"HF_TOKEN_SECRET_ID": "groot/hf", "HF_TOKEN_SSM_PARAMETER": "/x"}, factory) == "hf_from_secret"
    assert fe.hf_token({"HF_TOKEN_SECRET_ID": "groot/plain"}, factory) == "hf_plain"
    assert fe.hf_token({}, factory) is None


def _exported_tarball(tmp_path: Path, **standin) -> Path:
    model = tmp_path / "export"
    se.write_standin_checkpoint(model, modality=MODALITY, **standin)
    (model / "inference_metadata.json").write_text(json.dumps({"embodiment_tag": "new_embodiment", "modality": MODALITY}))
    tarball = tmp_path / "model.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:  # as SageMaker packs SM_MODEL_DIR
        for item in model.iterdir():
            tar.add(item, arcname=item.name)
    return tarball


def test_smoke_passes_on_a_valid_checkpoint_tarball(tmp_path):
    report = se.smoke(_exported_tarball(tmp_path), embodiment_tag="new_embodiment", action_horizon=16)
    assert report["passed"] is True, report
    assert report["format"] == "standin" and report["calls"] == 3
    assert report["action_shapes"] == {"gripper": [1, 16, 1], "single_arm": [1, 16, 5]}


def test_smoke_fails_with_reason_on_wrong_horizon(tmp_path):
    report = se.smoke(_exported_tarball(tmp_path, action_horizon=8), embodiment_tag="new_embodiment")
    assert report["passed"] is False
    assert "action horizon 8, expected 16" in report["reason"]


def test_smoke_fails_on_non_finite_actions(tmp_path):
    tarball = _exported_tarball(tmp_path)
    model = tmp_path / "nan"
    with tarfile.open(tarball) as tar:
        tar.extractall(model, filter="data")
    with np.load(model / se.STANDIN_WEIGHTS) as npz:
        weights = {k: npz[k] for k in npz.files}
    weights["gripper.bias"][3] = np.nan
    np.savez(model / se.STANDIN_WEIGHTS, **weights)
    report = se.smoke(model, embodiment_tag="new_embodiment")
    assert report["passed"] is False and "gripper: 1 non-finite values" in report["reason"]


def test_check_actions_shapes():
    good = {"a": np.zeros((1, 16, 3), np.float32)}
    assert se.check_actions(good, batch=1, horizon=16, action_dims={"a": 3}) == []
    assert se.check_actions({"a": np.zeros((16, 3))}, batch=1, horizon=16, action_dims={})[0].startswith("a: shape")
    assert "action dim 3, expected 4" in se.check_actions(good, batch=1, horizon=16, action_dims={"a": 4})[0]
    assert se.check_actions({}, batch=1, horizon=16, action_dims={})


def test_smoke_cli_writes_report_even_when_the_model_cannot_load(tmp_path):
    """A GR00T checkpoint where Isaac-GR00T is absent: the report says why; the job still exits 0."""
    model = tmp_path / "gr00t-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    out = tmp_path / "smoke"
    run = subprocess.run([sys.executable, "-m", "sim2real.workloads.groot.smoke_eval", "--model", str(model),
                          "--output", str(out), "--action-horizon", "16"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    report = json.loads((out / "smoke.json").read_text())
    assert report["passed"] is False and report["format"] == "gr00t"
    assert "ModuleNotFoundError" in report["reason"] and "gr00t" in report["reason"]


def test_finetune_export_feeds_smoke_eval(tmp_path):
    """The training entry's export, packed as SageMaker does, passes the smoke check."""
    env, config = _job(tmp_path)
    assert fe.main([], env=env, runner=_fake_trainer([300], []), config_dir=config) == 0
    tarball = tmp_path / "model.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        for item in (tmp_path / "model").iterdir():
            tar.add(item, arcname=item.name)
    out = tmp_path / "smoke"
    assert se.main(["--model", str(tarball), "--output", str(out)]) == 0
    report = json.loads((out / "smoke.json").read_text())
    assert report["passed"] is True and report["reason"] == "ok"


@pytest.mark.parametrize("name", ["checkpoint-x", "ckpt-5"])
def test_non_checkpoint_dirs_ignored(tmp_path, name):
    (tmp_path / name).mkdir()
    (tmp_path / name / "trainer_state.json").write_text("{}")
    assert fe.latest_checkpoint(tmp_path) is None


@pytest.mark.parametrize("video_key", ["front", "video.front"])
def test_smoke_observation_frames_have_the_training_data_size(tmp_path, video_key):
    """The smoke check sends frames of the size the checkpoint's modality layout declares (the dataset's,
    what the robot sends), GR00T N1.6 (``front``) or N1.5 (``video.front``) keys alike."""
    policy = se.StandInPolicy.load(se.write_standin_checkpoint(tmp_path / "m", modality=MODALITY,
                                                               video_keys=[video_key]))
    layout = {"video": [{"key": "front", "height": 480, "width": 640}]}
    obs = se.make_observation(policy, {"modality": MODALITY, "modality_layout": layout}, batch=2)
    assert obs["video"][video_key].shape == (2, 1, 480, 640, 3)
    assert se.make_observation(policy, {"modality": MODALITY})["video"][video_key].shape == (1, 1, 224, 224, 3)
    assert se.make_observation(policy, {"modality": MODALITY, "modality_layout": layout},
                               image_size=(8, 8))["video"][video_key].shape == (1, 1, 8, 8, 3)
