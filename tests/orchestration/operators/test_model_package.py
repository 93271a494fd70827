"""ModelPackageApprovalTrigger (the base of the release approval's decision trigger) against moto's model registry."""

from __future__ import annotations

import boto3
import pytest

from airflow.sdk.bases.operator import ExecutorSafeguard
from sim2real.orchestration.triggers.model_package import ModelPackageApprovalTrigger

from operator_helpers import first_event

ExecutorSafeguard.test_mode = True
REGION = "us-east-1"


@pytest.fixture
def ti_task_id():
    return "approval"


@pytest.fixture
def sm(moto_endpoint):
    return boto3.client("sagemaker", region_name=REGION, endpoint_url=moto_endpoint)


def register(sm, group, run_key, status, description=None, url=None):
    """Create a package version like the pipeline's RegisterModel step does."""
    try:
        sm.create_model_package_group(ModelPackageGroupName=group)
    except sm.exceptions.ClientError:
        pass
    arn = sm.create_model_package(
        ModelPackageGroupName=group,
        ModelApprovalStatus=status,
        CustomerMetadataProperties={"sim2real:run-key": run_key},
        InferenceSpecification={
            "Containers": [{"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/groot@sha256:" + "a" * 64,
                            "ModelDataUrl": url or f"s3://bucket/runs/{run_key}/vla/model.tar.gz"}],
            "SupportedContentTypes": ["application/json"],
            "SupportedResponseMIMETypes": ["application/json"],
        },
    )["ModelPackageArn"]
    if description:  # how an approver records the reason (UpdateModelPackage); moto needs the metadata again
        sm.update_model_package(
            ModelPackageArn=arn, ModelApprovalStatus=status, ApprovalDescription=description,
            CustomerMetadataProperties={"sim2real:run-key": run_key},
        )
    return arn


@pytest.mark.parametrize(
    ("status", "expected"),
    [("Approved", "success"), ("Rejected", "failure"), ("PendingManualApproval", "timeout")],
)
def test_trigger_states(moto_endpoint, sm, status, expected):
    group = f"g-trig-{status.lower()}"
    arn = register(sm, group, "run-1", status, description="reason text")
    register(sm, group, "run-other", "Approved")  # a newer package of another run is not this run's
    event = first_event(
        ModelPackageApprovalTrigger(model_package_group_name=group, run_key="run-1", waiter_delay=0, waiter_max_attempts=1)
    )
    assert (event["status"], event["model_package_arn"], event["approval_status"]) == (expected, arn, status)
    if expected != "timeout":
        assert event["approval_description"] == "reason text"


def test_trigger_cross_checks_the_pipeline_execution(moto_endpoint, sm):
    sm.create_model_package_group(ModelPackageGroupName="g-exec")
    arn = sm.create_model_package(
        ModelPackageGroupName="g-exec",
        ModelApprovalStatus="Approved",
        CustomerMetadataProperties={"sim2real:run-key": "run-1", "sim2real:pipeline-execution-arn": "arn:exec/1"},
        InferenceSpecification={"Containers": [{"Image": "img", "ModelDataUrl": "s3://b/m.tar.gz"}],
                                "SupportedContentTypes": ["a"], "SupportedResponseMIMETypes": ["a"]},
    )["ModelPackageArn"]
    mine = first_event(ModelPackageApprovalTrigger(model_package_group_name="g-exec", run_key="run-1",
                                                   pipeline_execution_arn="arn:exec/1", waiter_delay=0,
                                                   waiter_max_attempts=1))
    assert (mine["status"], mine["model_package_arn"]) == ("success", arn)
    other = first_event(ModelPackageApprovalTrigger(model_package_group_name="g-exec", run_key="run-1",
                                                    pipeline_execution_arn="arn:exec/2", waiter_delay=0,
                                                    waiter_max_attempts=1))
    assert other["status"] == "timeout" and other["model_package_arn"] is None  # not this execution's package


def test_trigger_not_found_times_out_without_arn(moto_endpoint, sm):
    sm.create_model_package_group(ModelPackageGroupName="g-trig-none")
    event = first_event(
        ModelPackageApprovalTrigger(model_package_group_name="g-trig-none", run_key="run-x", waiter_delay=0, waiter_max_attempts=1)
    )
    assert event["status"] == "timeout" and event["model_package_arn"] is None and event["approval_status"] is None
    assert "no model package for run run-x" in event["message"]


def test_trigger_serializes_round_trip():
    t = ModelPackageApprovalTrigger(model_package_group_name="g", run_key="k", model_package_arn="arn:p/1", waiter_delay=5,
                                    waiter_max_attempts=3)
    path, kwargs = t.serialize()
    assert path == "sim2real.orchestration.triggers.model_package.ModelPackageApprovalTrigger"
    assert ModelPackageApprovalTrigger(**kwargs).serialize() == (path, kwargs)
