"""Approver: decides only after the package exists and someone polled it."""

from __future__ import annotations

import time

from sandbox_helpers import wait_until

from sim2real.dev.sandbox import Approver, Sandbox

import pytest

# integration (not in make test-unit): one sandbox per module (tests/dev/sandbox/conftest.py)
pytestmark = pytest.mark.integration

PIPELINE, GROUP = "sim2real-groot-finetune", "sim2real-groot-models"


def _start(sb: Sandbox, run_key: str) -> None:
    sb.client("sagemaker").start_pipeline_execution(
        PipelineName=PIPELINE, PipelineExecutionDisplayName=run_key, PipelineParameters=[{"Name": "RunKey", "Value": run_key}])


def _package(sb: Sandbox, run_key: str) -> str:
    def find():
        for e in sb.events.find("sagemaker", "model-package", run_key=run_key):
            return e.data["arn"]
        return None

    return wait_until(find)


def test_approves_only_after_the_sensor_polls(sb: Sandbox) -> None:
    approver = Approver(sb, GROUP, run_key="run-appr-1", poll_seconds=0.05)
    approver.start()
    _start(sb, "run-appr-1")
    arn = _package(sb, "run-appr-1")
    wait_until(lambda: sb.events.find("approver", "waiting", arn=arn))
    time.sleep(0.3)  # give the approver several polls: it must still be waiting
    assert approver.result is None
    sm = sb.client("sagemaker")
    assert sm.describe_model_package(ModelPackageName=arn)["ModelApprovalStatus"] == "PendingManualApproval"
    # the approval sensor's poll (an outside request) releases it
    wait_until(lambda: sm.describe_model_package(ModelPackageName=arn)["ModelApprovalStatus"] == "Approved")
    approver.join(timeout=10)
    assert approver.result == {"model_package_arn": arn, "decision": "Approved", "description": approver.description}
    described = sm.describe_model_package(ModelPackageName=arn)
    assert described["CustomerMetadataProperties"]["sim2real:run-key"] == "run-appr-1"


def test_reject_fault(sb: Sandbox) -> None:
    sb.faults["reject_model_package"] = True
    approver = Approver(sb, GROUP, run_key="run-appr-2", description="smoke eval too low", poll_seconds=0.05)
    assert approver.decision == "Rejected"
    approver.start()
    _start(sb, "run-appr-2")
    arn = _package(sb, "run-appr-2")
    sm = sb.client("sagemaker")
    wait_until(lambda: sm.describe_model_package(ModelPackageName=arn)["ModelApprovalStatus"] == "Rejected")
    assert sm.describe_model_package(ModelPackageName=arn)["ApprovalDescription"] == "smoke eval too low"
    approver.join(timeout=10)
