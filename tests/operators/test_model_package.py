"""ModelPackageApprovalSensor and ModelPackageApprovalTrigger against moto's model registry."""

from __future__ import annotations

from datetime import timedelta

import boto3
import pytest

from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSensorTimeout
from airflow.sdk.bases.operator import ExecutorSafeguard
from airflow.sdk.exceptions import TaskDeferred
from sim2real.orchestration.sensors.model_package import ModelPackageApprovalSensor
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


def sensor(group, run_key, **kwargs):
    kwargs.setdefault("poke_interval", 0)
    return ModelPackageApprovalSensor(task_id="approval", model_package_group_name=group, run_key=run_key, **kwargs)


# ---------------------------------------------------------------- settled without deferring
def test_approved_returns_contract_dict_and_ignores_other_runs(moto_endpoint, sm, context):
    mine = register(sm, "g-approved", "run-1", "Approved", description="looks good")
    register(sm, "g-approved", "run-2", "Rejected")  # newer package of another run
    result = sensor("g-approved", "run-1").execute(context)
    assert result == {
        "model_package_arn": mine,
        "model_data_url": "s3://bucket/runs/run-1/vla/model.tar.gz",
        "approval_status": "Approved",
        "approval_description": "looks good",
    }
    assert context["ti"].xcom["sim2real_sagemaker_model_package"]["group_name"] == "g-approved"


def test_rejected_fails_without_retry_with_description(moto_endpoint, sm, context):
    register(sm, "g-rejected", "run-1", "Rejected", description="grasp success 12% on robot A")
    with pytest.raises(AirflowFailException, match="grasp success 12% on robot A"):
        sensor("g-rejected", "run-1").execute(context)


def test_missing_package_timeout_event_names_run_key(moto_endpoint, sm, context):
    with pytest.raises(AirflowSensorTimeout, match="sim2real:run-key=run-9"):
        sensor("g-empty", "run-9").execute_complete(
            context, {"status": "timeout", "message": "no end", "model_package_arn": None, "approval_status": None})


def test_pipeline_execution_arn_cross_check(moto_endpoint, sm, context):
    sm.create_model_package_group(ModelPackageGroupName="g-exec")
    arn = sm.create_model_package(
        ModelPackageGroupName="g-exec",
        ModelApprovalStatus="Approved",
        CustomerMetadataProperties={"sim2real:run-key": "run-1", "sim2real:pipeline-execution-arn": "arn:exec/1"},
        InferenceSpecification={"Containers": [{"Image": "img", "ModelDataUrl": "s3://b/m.tar.gz"}],
                                "SupportedContentTypes": ["a"], "SupportedResponseMIMETypes": ["a"]},
    )["ModelPackageArn"]
    assert sensor("g-exec", "run-1", pipeline_execution_arn="arn:exec/1").execute(context)["model_package_arn"] == arn
    with pytest.raises(TaskDeferred):  # not this execution's package: keep waiting
        sensor("g-exec", "run-1", pipeline_execution_arn="arn:exec/2", timeout=60).execute(context)


# ---------------------------------------------------------------- deferred
def test_returns_at_once_when_already_approved(moto_endpoint, sm, context):
    register(sm, "g-def-ok", "run-1", "Approved")
    assert sensor("g-def-ok", "run-1").execute(context)["approval_status"] == "Approved"


def test_defers_with_located_package(moto_endpoint, sm, context):
    arn = register(sm, "g-def", "run-1", "PendingManualApproval")
    s = sensor("g-def", "run-1", poke_interval=30, timeout=timedelta(hours=1))
    with pytest.raises(TaskDeferred) as deferred:
        s.execute(context)
    trigger = deferred.value.trigger
    assert isinstance(trigger, ModelPackageApprovalTrigger)
    assert trigger.model_package_arn == arn
    assert trigger.attempts == 120
    assert deferred.value.timeout > timedelta(hours=1)  # the trigger's own timeout event comes first


@pytest.mark.parametrize(
    ("status", "expected"),
    [("Approved", "success"), ("Rejected", "failure"), ("PendingManualApproval", "timeout")],
)
def test_trigger_states_and_execute_complete(moto_endpoint, sm, context, status, expected):
    group = f"g-trig-{status.lower()}"
    arn = register(sm, group, "run-1", status, description="reason text")
    register(sm, group, "run-other", "Approved")
    event = first_event(
        ModelPackageApprovalTrigger(model_package_group_name=group, run_key="run-1", waiter_delay=0, waiter_max_attempts=1)
    )
    assert event["status"] == expected
    assert event["model_package_arn"] == arn
    s = sensor(group, "run-1")
    if expected == "success":
        assert s.execute_complete(context, event)["model_data_url"] == "s3://bucket/runs/run-1/vla/model.tar.gz"
    elif expected == "failure":
        with pytest.raises(AirflowFailException, match="reason text"):
            s.execute_complete(context, event)
    else:
        with pytest.raises(AirflowSensorTimeout, match="--model-approval-status Approved"):
            s.execute_complete(context, event)


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
