"""A known fake Hugging Face token, served by (moto) Secrets Manager, run through every code path that handles it:
the trigger-time plan and the pipeline definition (only the secret's name), the fine-tune's entry (logs, MLflow
params/metrics/tags, the exported model and checkpoints), the smoke check (its report, with a loader failure that
quotes the token). The token must reach GR00T's process environment and appear nowhere else."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from sim2real.orchestration.pipelines import groot as pipeline
from sim2real.orchestration.stages.run import plan_run
from sim2real.workloads import tracking
from sim2real.workloads.groot import finetune_entry as fe
from sim2real.workloads.groot import smoke_eval as se

from tests.orchestration.stages.test_stages import PARAMS
from tests.orchestration.environments import VERSIONED_ENVIRONMENT as VERSIONED
from tests.pipelines.golden_env import KWARGS
from tests.pipelines.test_finetune_and_smoke import _fake_trainer, _job

FAKE = "hf_FAKEleakcanary0123456789abcdefXYZ"
SECRET = "sim2real-groot/hf-token"


class _RecordingClient:
    """What ``RunLogger`` sends to MLflow (``log_batch`` / ``set_terminated``), kept as text."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def log_batch(self, run_id, metrics=(), params=(), tags=()):
        self.sent.append(repr((run_id, list(metrics), list(params), list(tags))))

    def set_terminated(self, run_id, status):
        self.sent.append(repr((run_id, status)))


def _files_text(*roots: Path) -> str:
    return "\n".join(p.read_bytes().decode("latin-1") for root in roots for p in sorted(root.rglob("*")) if p.is_file())


@pytest.fixture
def secret(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        boto3.client("secretsmanager").create_secret(Name=SECRET, SecretString=json.dumps({"HF_TOKEN": FAKE}))
        yield


def test_the_token_reaches_only_the_groot_process_environment(tmp_path, secret, monkeypatch, capfd, caplog):
    caplog.set_level(logging.DEBUG)  # botocore included: its DEBUG lines must not carry the secret either
    client = _RecordingClient()
    monkeypatch.setattr(tracking, "run_logger_from_env",
                        lambda **kw: tracking.RunLogger(client, "run-1", flush_every=1))
    # trigger time: the plan (the run's lineage) and the definition name the secret, never its value
    plan = plan_run(dag_id="d", run_id="r", params={**PARAMS, "groot_version": "n1.7", "hf_token_secret_id": SECRET},
                    env=VERSIONED)
    assert plan["vla"]["parameters"]["HfTokenSecretId"] == SECRET
    records = [json.dumps(plan), pipeline.pipeline_definition_json(**KWARGS)]

    env, config = _job(tmp_path, {"embodiment_tag": "new_embodiment", "groot_version": "n1.7", "max_steps": 300,
                                  "global_batch_size": 32, "num_gpus": 1, "save_steps": 100})
    calls: list = []
    code = fe.main([], env=dict(env, HF_TOKEN_SECRET_ID=SECRET, MLFLOW_TRACKING_URI="http://mlflow.invalid"),
                   runner=_fake_trainer([100, 300], calls), config_dir=config)
    assert code == 0
    assert calls[0]["env"]["HF_TOKEN"] == FAKE  # positive control: GR00T's process got it
    assert "key='groot_version', value='n1.7'" in "".join(client.sent)  # MLflow got the params

    # the smoke check resolves it too, and masks it in a loader failure that quotes it
    monkeypatch.setenv("HF_TOKEN_SECRET_ID", SECRET)
    monkeypatch.delenv("HF_TOKEN", raising=False)

    def failing_loader(*args, **kwargs):
        raise PermissionError(f"401 Client Error for https://huggingface.co/nvidia/Cosmos-Reason2-2B (token {FAKE})")

    monkeypatch.setattr(se, "load_policy", failing_loader)
    assert se.main(["--model", str(tmp_path / "model"), "--output", str(tmp_path / "smoke"),
                    "--groot-version", "n1.7"]) == 0
    assert os.environ.get("HF_TOKEN") == FAKE  # handed to GR00T's loader in the job's own process
    monkeypatch.delenv("HF_TOKEN")
    report = json.loads((tmp_path / "smoke" / "smoke.json").read_text())
    assert not report["passed"] and "401 Client Error" in report["reason"] and "***" in report["reason"]

    out, err = capfd.readouterr()
    written = _files_text(tmp_path / "model", tmp_path / "checkpoints", tmp_path / "smoke")
    logged = "\n".join(f"{r.name} {r.getMessage()} {r.args!r}" for r in caplog.records)
    for where, text in {"stdout": out, "stderr": err, "log records": logged, "MLflow": "\n".join(client.sent),
                        "written files": written, "plan and definition": "\n".join(records)}.items():
        assert FAKE not in text, f"the Hugging Face token leaked into {where}"
    assert logged  # the log records were captured (botocore's among them)


def test_n17_without_a_token_refuses_before_training(tmp_path, capfd):
    env, config = _job(tmp_path, {"embodiment_tag": "new_embodiment", "groot_version": "n1.7"})
    calls: list = []
    assert fe.main([], env=env, runner=_fake_trainer([100], calls), config_dir=config) == 2
    assert calls == [] and "gated nvidia/Cosmos-Reason2-2B" in capfd.readouterr().err


def test_a_tag_the_version_lacks_refuses_before_training(tmp_path, capfd):
    env, config = _job(tmp_path, {"embodiment_tag": "gr1", "groot_version": "n1.7"})
    calls: list = []
    assert fe.main([], env=dict(env, HF_TOKEN=FAKE), runner=_fake_trainer([100], calls), config_dir=config) == 2
    err = capfd.readouterr().err
    assert calls == [] and "embodiment_tag 'gr1' is not a GR00T N1.7 embodiment" in err and FAKE not in err


def test_smoke_check_refuses_a_tag_the_version_lacks(tmp_path):
    report = se.smoke(tmp_path, embodiment_tag="gr1", groot_version="n1.7")
    assert not report["passed"] and report["reason"].startswith("embodiment_tag 'gr1' is not a GR00T N1.7")
