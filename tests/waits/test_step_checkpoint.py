"""checkpoint_manifest_step: a manifest check plus DescribeJobs of the training job -> Step."""

from __future__ import annotations

from sim2real.orchestration.waits.checkpoint import checkpoint_manifest_step
from sim2real.orchestration.waits.core import WaitState

STATE = WaitState(params={"manifest_uri": "s3://b/runs/r/checkpoints/manifest.json", "batch_job_id": "j-1"})


def test_manifest_there_succeeds():
    assert checkpoint_manifest_step({"manifest_exists": True}, STATE).outcome == "success"


def test_job_failed_first_fails_else_retry():
    step = checkpoint_manifest_step({"manifest_exists": False, "jobs": [{"status": "FAILED", "statusReason": "OOM"}]},
                                    STATE)
    assert step.outcome == "failure" and "j-1" in step.reason and "OOM" in step.reason
    assert checkpoint_manifest_step({"manifest_exists": False, "jobs": [{"status": "RUNNING"}]}, STATE).outcome == "retry"
    assert checkpoint_manifest_step({"manifest_exists": False}, STATE).outcome == "retry"


def test_errors():
    assert checkpoint_manifest_step({"Error": {"Code": "SlowDown"}}, STATE).outcome == "retry"
    assert checkpoint_manifest_step({"Error": {"Code": "ThrottlingException"}}, STATE).outcome == "retry"
    step = checkpoint_manifest_step({"Error": {"Code": "AccessDenied", "Message": "no"}}, STATE)
    assert step.outcome == "failure" and step.payload["manifest_uri"].endswith("manifest.json")
