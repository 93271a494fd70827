"""CheckpointManifestSensor and CheckpointManifestTrigger on a local path and on S3 (moto server:
``s3://`` goes through ObjectStoragePath / s3fs, which needs a real endpoint)."""

from __future__ import annotations

import hashlib
import json

import boto3
import pytest
from airflow.providers.common.compat.sdk import AirflowFailException, TaskDeferred
from sim2real.orchestration.sensors.checkpoint import CheckpointManifestSensor
from sim2real.orchestration.triggers.checkpoint import CheckpointManifestTrigger

from operator_helpers import first_event

REGION = "us-east-1"
BUCKET = "sim2real-artifacts-123456789012"
PREFIX = "runs/rk-1/checkpoints"
CKPT = b"fake torch checkpoint bytes" * 1000


def manifest(checkpoint_uri: str, sha: str | None = None, task: str = "Reacher-v5") -> dict:
    return {
        "schema_version": 1,
        "run_key": "rk-1",
        "task": task,
        "checkpoint_uri": checkpoint_uri,
        "sha256": sha if sha is not None else hashlib.sha256(CKPT).hexdigest(),
        "iteration": 40,
        "timesteps": 40960,
        "mean_reward": -12.3,
    }


def write_local(tmp_path, **kw) -> str:
    ckpt = tmp_path / "agent_000040.pt"
    ckpt.write_bytes(CKPT)
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest(str(ckpt), **kw)))
    return str(path)


def sensor(uri: str, **kw) -> CheckpointManifestSensor:
    return CheckpointManifestSensor(task_id="checkpoint", manifest_uri=uri, poke_interval=0, timeout=5, **kw)


def test_local_manifest_verified(aws_env, tmp_path):
    uri = write_local(tmp_path)
    result = sensor(uri, expected_task="Reacher-v5").execute({})
    assert result["verified_sha256"] is True and result["iteration"] == 40
    assert result["sha256"] == hashlib.sha256(CKPT).hexdigest()
    # file:// form works too
    assert sensor("file://" + uri).execute({})["verified_sha256"] is True


def test_sha_mismatch_fails_with_both_hashes(aws_env, tmp_path):
    wrong = "0" * 64
    uri = write_local(tmp_path, sha=wrong)
    with pytest.raises(AirflowFailException) as err:
        sensor(uri).execute({})
    assert wrong in str(err.value) and hashlib.sha256(CKPT).hexdigest() in str(err.value)


@pytest.mark.parametrize(
    ("kw", "sensor_kw", "fragment"),
    [
        ({"sha": ""}, {}, "no valid sha256"),
        ({"task": "Ant-v5"}, {"expected_task": "Reacher-v5"}, "expected 'Reacher-v5'"),
    ],
    ids=["no-sha", "task-mismatch"],
)
def test_invalid_manifest_fails(aws_env, tmp_path, kw, sensor_kw, fragment):
    uri = write_local(tmp_path, **kw)
    with pytest.raises(AirflowFailException, match=fragment):
        sensor(uri, **sensor_kw).execute({})


def test_missing_manifest_defers_then_trigger_fires(aws_env, tmp_path):
    uri = str(tmp_path / "manifest.json")
    op = sensor(uri)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, CheckpointManifestTrigger)
    path, kwargs = trigger.serialize()
    assert path == "sim2real.orchestration.triggers.checkpoint.CheckpointManifestTrigger"
    assert CheckpointManifestTrigger(**kwargs).serialize() == (path, kwargs)
    write_local(tmp_path)
    event = first_event(trigger)
    assert event["status"] == "success" and event["manifest_uri"] == uri and uri in event["message"]
    assert op.execute_complete({}, event)["verified_sha256"] is True
    with pytest.raises(AirflowFailException, match="job x is FAILED"):
        op.execute_complete({}, {"status": "failure", "manifest_uri": uri, "message": "job x is FAILED"})


def _s3(endpoint):
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=endpoint)
    s3.create_bucket(Bucket=BUCKET)
    return s3


def test_s3_manifest_verified_and_mismatch(moto_server):
    s3 = _s3(moto_server)
    ckpt_uri = f"s3://{BUCKET}/{PREFIX}/agent_000040.pt"
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/agent_000040.pt", Body=CKPT)
    uri = f"s3://{BUCKET}/{PREFIX}/manifest.json"
    op = sensor(uri, expected_task="Reacher-v5")
    assert op.poke({}) is False
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/manifest.json", Body=json.dumps(manifest(ckpt_uri)).encode())
    assert op.execute({})["verified_sha256"] is True
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/agent_000040.pt", Body=CKPT + b"tampered")
    with pytest.raises(AirflowFailException, match="sha256 mismatch"):
        sensor(uri).execute({})


def _failed_job(endpoint) -> str:
    kw = {"region_name": REGION, "endpoint_url": endpoint}
    role = boto3.client("iam", **kw).create_role(RoleName="r", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    batch = boto3.client("batch", **kw)
    ce = batch.create_compute_environment(
        computeEnvironmentName="ce1", type="UNMANAGED", state="ENABLED", serviceRole=role
    )["computeEnvironmentArn"]
    batch.create_job_queue(
        jobQueueName="q1", state="ENABLED", priority=1, computeEnvironmentOrder=[{"order": 1, "computeEnvironment": ce}]
    )
    batch.register_job_definition(
        jobDefinitionName="jd", type="container", containerProperties={"image": "busybox", "vcpus": 1, "memory": 128}
    )
    job_id = batch.submit_job(jobName="train", jobQueue="q1", jobDefinition="jd")["jobId"]
    batch.terminate_job(jobId=job_id, reason="Host EC2 (instance i-0123456789abcdef0) terminated.")
    from moto.batch.models import batch_backends
    from moto.core import DEFAULT_ACCOUNT_ID

    job = batch_backends[DEFAULT_ACCOUNT_ID][REGION]._jobs[job_id]
    job.status = "FAILED"
    return job_id


def test_failed_batch_job_fails_early_sync_and_trigger(moto_server):
    _s3(moto_server)
    job_id = _failed_job(moto_server)
    uri = f"s3://{BUCKET}/{PREFIX}/manifest.json"
    with pytest.raises(AirflowFailException, match=f"AWS Batch job {job_id} is FAILED"):
        sensor(uri, batch_job_id=job_id).execute({})
    event = first_event(CheckpointManifestTrigger(manifest_uri=uri, batch_job_id=job_id, poke_interval=0))
    assert event["status"] == "failure" and job_id in event["message"] and "FAILED" in event["message"]
