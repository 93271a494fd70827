"""The emulated core device runs the real setup component (fetch, sha256, ONNX export) and the real
policy server, and reports SUCCEEDED only when ping, get_modality_config and get_action work."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from sim2real.dev.sandbox import Sandbox
from sim2real.dev.sandbox.device import PolicyDeviceCheck
from sim2real.orchestration.stages import deployment_components

# integration (not in make test-unit): one sandbox per module (tests/dev/sandbox/conftest.py)
pytestmark = pytest.mark.integration

BUCKET = "sim2real-artifacts-123456789012"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> bytes:
    out = tmp_path_factory.mktemp("ckpt")
    env = {**os.environ, "TASK": "Reacher-v5", "MAX_ITERATIONS": "1", "NUM_ENVS": "2", "OUTPUT_URI": str(out)}
    env.pop("AWS_ENDPOINT_URL", None)
    proc = subprocess.run([sys.executable, "-m", "sim2real.workloads.train"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    return (out / manifest["checkpoint_uri"].rsplit("/", 1)[-1]).read_bytes()


def _deployment(uri: str, sha: str) -> dict:
    """The components the DAGs deploy (the keys the real recipe reads: ModelS3Uri, ModelSha256, Exporter)."""
    plan = {"run_key": "dev", "deploy": {"components": {"com.sim2real.PolicySetup": "1.0.0"}}}
    return {"components": deployment_components(plan, {"model_package_arn": "arn:pkg"},
                                                 {"checkpoint_uri": uri, "sha256": sha})}


def test_device_serves_the_deployed_policy(sb: Sandbox, checkpoint: bytes, tmp_path) -> None:
    sb.client("s3").put_object(Bucket=BUCKET, Key="runs/dev/checkpoints/agent_000001.pt", Body=checkpoint)
    check = PolicyDeviceCheck(sb, tmp_path)
    uri = f"s3://{BUCKET}/runs/dev/checkpoints/agent_000001.pt"
    ok, reason = check(_deployment(uri, hashlib.sha256(checkpoint).hexdigest()), "robot-1")
    assert ok, reason
    assert "ping, get_modality_config and get_action" in reason
    # A tampered artifact (sha256 mismatch) fails the device, as the real setup component would.
    ok, reason = check(_deployment(uri, "0" * 64), "robot-2")
    assert not ok and "sha256" in reason.lower()


def test_device_without_a_policy_in_the_configuration_fails(sb: Sandbox, tmp_path) -> None:
    ok, reason = PolicyDeviceCheck(sb, tmp_path)({"components": {}}, "robot-1")
    assert not ok and "ModelS3Uri/ModelSha256" in reason


def _field_deployment(uri: str, sha: str, deployment_id: str) -> dict:
    """The components both DAGs deploy, the field uploader among them, with the deployment's id."""
    plan = {"run_key": "dev", "deploy": {"components": {"com.sim2real.PolicySetup": "1.0.0",
                                                        "com.sim2real.FieldUploader": "1.0.0"}}}
    return {"deploymentId": deployment_id, "components": deployment_components(
        plan, {"model_package_arn": "arn:aws:sagemaker:us-east-1:123456789012:model-package/sim2real-policies/1"},
        {"checkpoint_uri": uri, "sha256": sha})}


def test_robots_with_the_field_uploader_report_their_field_episodes(sb: Sandbox, checkpoint: bytes, tmp_path) -> None:
    """Each robot runs the task in the gap's world and uploads one valid episode per run to
    field/episodes/<thing>/; the Airflow side's reader accepts them all; an offline robot reports none."""
    from sim2real.dev.sandbox.device import FieldWork
    from sim2real.dev.sandbox.field_robot import NAMED_GAPS
    from sim2real.orchestration.field import collect_field_episodes, field_summary

    sb.client("s3").put_object(Bucket=BUCKET, Key="runs/dev/checkpoints/agent_000001.pt", Body=checkpoint)
    uri, sha = f"s3://{BUCKET}/runs/dev/checkpoints/agent_000001.pt", hashlib.sha256(checkpoint).hexdigest()
    check = PolicyDeviceCheck(sb, tmp_path, FieldWork(task_id="Reacher-v5", episodes=4, bucket=BUCKET,
                                                      gap=NAMED_GAPS["severe"]))
    sb.faults["field_offline"] = ["robot-3"]
    started = "2000-01-01T00:00:00Z"
    for thing in ("robot-1", "robot-2", "robot-3"):
        ok, reason = check(_field_deployment(uri, sha, "d-canary"), thing)
        assert ok, reason
    for thread in check.field_threads:
        thread.join(timeout=120)
    # a deployment without the uploader: the robot reports nothing (it has no way to)
    ok, _ = check(_deployment(uri, sha), "robot-4")
    assert ok and len(check.field_threads) == 3
    got = collect_field_episodes(sb.client("s3"), BUCKET, "", model_version=sha, deployment_ids=["d-canary"],
                                 thing_names=["robot-1", "robot-2", "robot-3"], not_before=started,
                                 not_after="2100-01-01T00:00:00Z")
    assert sorted({e["thing_name"] for e in got.accepted}) == ["robot-1", "robot-2"] and len(got.accepted) == 8
    assert sum(got.refused.values()) == 0
    summary = field_summary(got.accepted)[sha]
    assert summary["n"] == 8 and sorted(summary["robots"]) == ["robot-1", "robot-2"]
    assert sb.events.find("greengrass", "field", thing="robot-3")[0].message.endswith("offline: no field episode")
    ran = sb.events.find("greengrass", "field", thing="robot-1")[0]
    assert ran.data["episodes"] == 4 and ran.data["uploaded"] == 4


def test_robots_record_their_episodes_data_when_their_configuration_says_so(sb: Sandbox, checkpoint: bytes,
                                                                           tmp_path) -> None:
    """RecordData: on for the canary group's robots (FieldWork.record_data_groups, as the demo sets it), and a
    deployment's merge of the uploader's configuration decides over it. Each recorded episode's data file is in
    field/data/<thing>/ with the sha256 its summary names, which S3 returns as ChecksumSHA256 (HeadObject)."""
    import base64

    import pyarrow as pa
    import pyarrow.parquet as pq

    from sim2real.contract.field import data_key
    from sim2real.dev.sandbox.device import FIELD_UPLOADER, FieldWork

    s3 = sb.client("s3")
    s3.put_object(Bucket=BUCKET, Key="runs/dev/checkpoints/agent_000001.pt", Body=checkpoint)
    uri, sha = f"s3://{BUCKET}/runs/dev/checkpoints/agent_000001.pt", hashlib.sha256(checkpoint).hexdigest()
    check = PolicyDeviceCheck(sb, tmp_path, FieldWork(task_id="Reacher-v5", episodes=2, bucket=BUCKET,
                                                      record_data_groups=("sim2real-robots-canary",)))
    canary = "arn:aws:iot:us-east-1:123456789012:thinggroup/sim2real-robots-canary"
    recording = {**_field_deployment(uri, sha, "d-rec"), "targetArn": canary}
    off = {**_field_deployment(uri, sha, "d-off"), "targetArn": canary}
    off["components"][FIELD_UPLOADER]["configurationUpdate"] = {"merge": json.dumps({"RecordData": False})}
    for deployment, thing in ((recording, "robot-1"), (off, "robot-2")):
        ok, reason = check(deployment, thing)
        assert ok, reason
    for thread in check.field_threads:
        thread.join(timeout=120)
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix="field/data/robot-2/")  # turned off
    episodes = [e for e in (json.loads(s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read())
                            for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="field/episodes/")["Contents"])
                if e.get("deployment_id") in ("d-rec", "d-off")]  # the module's sandbox holds others' episodes too
    assert sorted(e["thing_name"] for e in episodes) == ["robot-1", "robot-1", "robot-2", "robot-2"]
    for episode in episodes:
        if episode["thing_name"] == "robot-2":
            assert "data_uri" not in episode
            continue
        key = data_key("", "robot-1", episode["episode_id"])
        assert episode["data_uri"] == f"s3://{BUCKET}/{key}" and episode["task"] == "Reacher-v5"
        assert (episode["data_frames"], episode["data_fps"]) == (episode["steps"], 50.0)
        body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        assert hashlib.sha256(body).hexdigest() == episode["data_sha256"]
        head = s3.head_object(Bucket=BUCKET, Key=key, ChecksumMode="ENABLED")
        assert base64.b64decode(head["ChecksumSHA256"]).hex() == episode["data_sha256"]
        table = pq.read_table(pa.BufferReader(body))
        assert table.num_rows == episode["steps"]
        assert {len(v) for v in table.column("observation.state").to_pylist()} == {10}  # Reacher-v5's observation
        assert {len(v) for v in table.column("action").to_pylist()} == {2}
    (ran,) = [e for e in sb.events.find("greengrass", "field", thing="robot-1") if e.data["deployment_id"] == "d-rec"]
    assert ran.data["record_data"] is True and ran.message.endswith("uploaded 2 with their data (LeRobot v2.1)")
