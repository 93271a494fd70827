"""Setup component: fetch, sha256 check, export hook, ready marker, idempotency."""

from __future__ import annotations

import hashlib
import json
import tarfile

import boto3
import pytest
import torch
from edge_helpers import STATE_DIM, export_onnx, make_mlp
from moto import mock_aws

from sim2real.edge.setup_component import ModelIntegrityError, SetupError, main, run_setup


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_local_setup_then_idempotent(onnx_model, tmp_path, caplog):
    work = tmp_path / "work"
    first = run_setup(str(onnx_model), sha(onnx_model), work, model_package_arn="arn:aws:sagemaker:x")
    assert first["changed"] is True
    marker = json.loads((work / "ready.json").read_text())
    assert marker["model_path"] == str(work / "model.onnx") and marker["sha256"] == sha(onnx_model)
    assert marker["engine_path"] is None and marker["engine_precision"] == "fp16"  # no TensorRT here
    assert marker["model_package_arn"] == "arn:aws:sagemaker:x" and marker["created_at"].endswith("Z")
    caplog.set_level("INFO")
    second = run_setup(str(onnx_model), sha(onnx_model).upper(), work)
    assert second["changed"] is False and second["created_at"] == marker["created_at"]
    assert "already set up" in caplog.text and "nothing to do" in caplog.text
    third = run_setup(str(onnx_model), sha(onnx_model), work, engine_precision="fp32")  # new input -> redo
    assert third["changed"] is True and third["engine_precision"] == "fp32"


def test_sha_mismatch_refused(onnx_model, tmp_path):
    work = tmp_path / "work"
    with pytest.raises(ModelIntegrityError, match="sha256 mismatch .* expected 0000"):
        run_setup(f"file://{onnx_model}", "0" * 64, work)
    assert not (work / "ready.json").exists() and not list((work / "source").iterdir())
    assert main(["--model-uri", str(onnx_model), "--sha256", "0" * 64, "--work-dir", str(work)]) == 3


def test_changed_model_invalidates_marker(onnx_model, tmp_path):
    work = tmp_path / "work"
    run_setup(str(onnx_model), sha(onnx_model), work)
    other = export_onnx(make_mlp(seed=1), tmp_path / "other.onnx")
    with pytest.raises(ModelIntegrityError):
        run_setup(str(other), sha(onnx_model), work)
    assert not (work / "ready.json").exists()  # a failed redo never leaves the old marker claiming readiness


@pytest.mark.parametrize("sha256, uri, match", [
    ("abc", "x.onnx", "64 hex digits"),
    ("0" * 64, "", "ModelS3Uri is empty"),
    ("0" * 64, "https://example.com/m.onnx", "unsupported model URI scheme"),
])
def test_bad_inputs(tmp_path, sha256, uri, match):
    with pytest.raises(SetupError, match=match):
        run_setup(uri, sha256, tmp_path)


def test_s3_download(onnx_model, tmp_path, monkeypatch):
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="artifacts")
        s3.upload_file(str(onnx_model), "artifacts", "runs/k/vla/policy.onnx")
        out = run_setup("s3://artifacts/runs/k/vla/policy.onnx", sha(onnx_model), tmp_path / "w", s3_client=s3)
        assert out["onnx_sha256"] == sha(onnx_model)
        with pytest.raises(SetupError, match="cannot download s3://artifacts/missing.onnx"):
            run_setup("s3://artifacts/missing.onnx", sha(onnx_model), tmp_path / "w2", s3_client=s3)


def test_checkpoint_needs_exporter_and_uses_it(tmp_path):
    ckpt = tmp_path / "agent_000010.pt"
    torch.save(make_mlp(seed=2).state_dict(), ckpt)
    with pytest.raises(SetupError, match="torch checkpoint and no exporter"):
        run_setup(str(ckpt), sha(ckpt), tmp_path / "w")
    calls = []

    def exporter(checkpoint, onnx_path):
        calls.append(checkpoint)
        m = make_mlp()
        m.load_state_dict(torch.load(checkpoint))
        export_onnx(m, onnx_path, STATE_DIM)

    out = run_setup(str(ckpt), sha(ckpt), tmp_path / "w", exporter=exporter)
    assert calls and out["sha256"] == sha(ckpt) and out["onnx_sha256"] != sha(ckpt)


def test_tarball_with_one_onnx(onnx_model, tmp_path):
    tgz = tmp_path / "model.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(onnx_model, arcname="export/policy.onnx")
    out = run_setup(str(tgz), sha(tgz), tmp_path / "w")
    assert out["onnx_sha256"] == sha(onnx_model)


def test_not_onnx_refused(tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(SetupError, match="not a valid ONNX model"):
        run_setup(str(bad), sha(bad), tmp_path / "w")
