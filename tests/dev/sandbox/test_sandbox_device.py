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
