"""model_package_step: DescribeModelPackage responses (Amazon SageMaker API Reference) -> Step."""

from __future__ import annotations

from sim2real.orchestration.waits.core import WaitState
from sim2real.orchestration.waits.sagemaker import model_package_step

ARN = "arn:aws:sagemaker:us-east-1:123456789012:model-package/g/3"
STATE = WaitState(params={"model_package_group_name": "g", "run_key": "r1"})


def _package(status, **extra):
    return {"ModelPackageArn": ARN, "ModelApprovalStatus": status, **extra}


def test_approved_returns_the_approval_result():
    package = _package("Approved", ApprovalDescription="ok",
                       InferenceSpecification={"Containers": [{"ModelDataUrl": "s3://b/m.tar.gz"}]})
    step = model_package_step(package, STATE)
    assert step.outcome == "success"
    assert step.payload == {"model_package_arn": ARN, "model_data_url": "s3://b/m.tar.gz",
                            "approval_status": "Approved", "approval_description": "ok"}


def test_rejected_fails_with_the_description():
    step = model_package_step(_package("Rejected", ApprovalDescription="drifts"), STATE)
    assert step.outcome == "failure" and "drifts" in step.reason
    assert step.payload["approval_status"] == "Rejected" and step.payload["approval_description"] == "drifts"


def test_pending_unknown_and_not_registered_retry():
    assert model_package_step(_package("PendingManualApproval"), STATE).outcome == "retry"
    assert model_package_step(_package("Archived"), STATE).outcome == "retry"
    step = model_package_step({}, STATE)
    assert step.outcome == "retry" and "no model package for run r1" in step.reason
    assert step.payload["model_package_arn"] is None


def test_api_errors():
    assert model_package_step({"Error": {"Code": "ThrottlingException"}}, STATE).outcome == "retry"
    assert model_package_step({"Error": {"Code": "ValidationException"}}, STATE).outcome == "failure"
