"""PipelineDefinitionUpsertOperator, PipelineExecutionOperator and PipelineExecutionTrigger.

moto (ThreadedMotoServer) for what it implements; botocore Stubber for statuses moto cannot
represent; moto's in-process backend is edited to put an execution in a given status for the
trigger (aiobotocore needs a real endpoint).
"""

from __future__ import annotations

import asyncio
import json

import boto3
import pytest
from botocore.stub import Stubber
from moto.sagemaker.models import sagemaker_backends
from moto.sagemaker.responses import SageMakerResponse

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException
from airflow.sdk.bases.operator import ExecutorSafeguard
from airflow.sdk.exceptions import TaskDeferred
from sim2real.orchestration.operators.sagemaker_pipeline import (
    PipelineDefinitionUpsertOperator,
    PipelineExecutionOperator,
    pipeline_param_value,
)
from sim2real.orchestration.triggers.sagemaker import PipelineExecutionTrigger

from operator_helpers import FakeTI, first_event

ExecutorSafeguard.test_mode = True
ACCOUNT, REGION = "123456789012", "us-east-1"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/sim2real-pipeline"
DEFINITION = {"Version": "2020-12-01", "Parameters": [{"Name": "Epochs", "Type": "Integer"}], "Steps": []}


@pytest.fixture
def ti_task_id():
    return "vla_finetune"


@pytest.fixture
def sm(moto_endpoint):
    return boto3.client("sagemaker", region_name=REGION, endpoint_url=moto_endpoint)


def _pipeline(sm, name):
    sm.create_pipeline(PipelineName=name, PipelineDefinition=json.dumps(DEFINITION), RoleArn=ROLE, ClientRequestToken=f"{name:-<32}")


def _set_status(arn, status, region=REGION):
    from moto.sagemaker.utils import get_pipeline_execution_from_arn

    backend = sagemaker_backends[ACCOUNT][region]
    get_pipeline_execution_from_arn(backend.pipelines, arn).pipeline_execution_status = status


# ---------------------------------------------------------------- upsert
def test_upsert_created_then_unchanged_then_updated(moto_endpoint, context, sm):
    op = PipelineDefinitionUpsertOperator(task_id="u", pipeline_name="p-upsert", definition=DEFINITION, role_arn=ROLE)
    first = op.execute(context)
    assert first["action"] == "created"
    assert first["pipeline_arn"].endswith(":pipeline/p-upsert")
    # Same definition, other key order and whitespace (JSON text): unchanged.
    text = json.dumps({"Steps": [], "Parameters": DEFINITION["Parameters"], "Version": "2020-12-01"}, indent=2)
    op2 = PipelineDefinitionUpsertOperator(task_id="u", pipeline_name="p-upsert", definition=text, role_arn=ROLE)
    assert op2.execute(context) == {"pipeline_arn": first["pipeline_arn"], "action": "unchanged"}
    changed = {**DEFINITION, "Steps": [{"Name": "Train", "Type": "Training", "Arguments": {}}]}
    op3 = PipelineDefinitionUpsertOperator(task_id="u", pipeline_name="p-upsert", definition=changed, role_arn=ROLE)
    assert op3.execute(context)["action"] == "updated"
    described = json.loads(sm.describe_pipeline(PipelineName="p-upsert")["PipelineDefinition"])
    assert described["Steps"][0]["Name"] == "Train"


def test_upsert_unchanged_never_calls_update_pipeline(moto_endpoint, context):
    op = PipelineDefinitionUpsertOperator(task_id="u", pipeline_name="p-same", definition=DEFINITION, role_arn=ROLE)
    with Stubber(op.hook.conn) as stub:
        stub.add_response(
            "describe_pipeline",
            {
                "PipelineArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:pipeline/p-same",
                "PipelineDefinition": json.dumps(DEFINITION, indent=4),
                "RoleArn": ROLE,
            },
            {"PipelineName": "p-same"},
        )
        # No update_pipeline response queued: a call would raise UnStubbedResponseError.
        assert op.execute(context)["action"] == "unchanged"
        stub.assert_no_pending_responses()


def test_upsert_rejects_non_object_definition(moto_endpoint, context):
    op = PipelineDefinitionUpsertOperator(task_id="u", pipeline_name="p-bad", definition="[1, 2]", role_arn=ROLE)
    with pytest.raises(ValueError, match="JSON object"):
        op.execute(context)


# ---------------------------------------------------------------- execution, sync
def test_params_cast_to_strings():
    assert pipeline_param_value(3) == "3"
    assert pipeline_param_value(True) == "true"
    assert pipeline_param_value(0.5) == "0.5"
    assert pipeline_param_value({"b": 1, "a": 2}) == '{"a": 2, "b": 1}'
    with pytest.raises(ValueError):
        pipeline_param_value(None)


def test_start_with_typed_params_returns_arn_and_status(moto_endpoint, context, sm):
    _pipeline(sm, "p-start")
    op = PipelineExecutionOperator(
        task_id="x", pipeline_name="p-start", display_name="run-abc-12345678",
        pipeline_params={"Epochs": 3, "UseLora": False}, check_interval=0,
    )
    result = op.execute(context)
    assert result["status"] == "Succeeded"
    params = sm.list_pipeline_parameters_for_execution(PipelineExecutionArn=result["pipeline_execution_arn"])
    assert {p["Name"]: p["Value"] for p in params["PipelineParameters"]} == {"Epochs": "3", "UseLora": "false"}
    assert context["ti"].xcom["sim2real_sagemaker_pipeline_execution"]["pipeline_name"] == "p-start"


@pytest.mark.parametrize("name", ["bad_name", "-lead", "x" * 83, ""])
def test_invalid_display_name_refused(moto_endpoint, context, name):
    op = PipelineExecutionOperator(task_id="x", pipeline_name="p", display_name=name)
    with pytest.raises(ValueError, match="PipelineExecutionDisplayName"):
        op.execute(context)


def test_reattaches_to_executing_execution_and_defers(moto_endpoint, context, sm):
    _pipeline(sm, "p-reattach")
    arn = sm.start_pipeline_execution(PipelineName="p-reattach", PipelineExecutionDisplayName="run-r1")["PipelineExecutionArn"]
    _set_status(arn, "Executing")
    op = PipelineExecutionOperator(task_id="x", pipeline_name="p-reattach", display_name="run-r1")
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    trigger = deferred.value.trigger
    assert isinstance(trigger, PipelineExecutionTrigger)
    assert trigger.pipeline_execution_arn == arn
    executions = sm.list_pipeline_executions(PipelineName="p-reattach")["PipelineExecutionSummaries"]
    assert len(executions) == 1  # no second execution started



def _try(context, try_number: int, max_tries: int, retries: int = 2) -> dict:
    """``context`` whose task instance has Airflow's try counters (a new task instance: ``max_tries = retries``;
    ``clear_task_instances``: ``max_tries = try_number + retries``)."""
    context["ti"].try_number, context["ti"].max_tries = try_number, max_tries
    return context


def test_a_retry_reattaches_to_the_executing_execution(moto_endpoint, context, sm):
    _pipeline(sm, "p-retry")
    arn = sm.start_pipeline_execution(PipelineName="p-retry", PipelineExecutionDisplayName="run-t1")["PipelineExecutionArn"]
    _set_status(arn, "Executing")
    op = PipelineExecutionOperator(task_id="x", pipeline_name="p-retry", display_name="run-t1", retries=2)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(_try(context, 2, 2))  # a retry: max_tries unchanged
    assert deferred.value.trigger.pipeline_execution_arn == arn
    assert len(sm.list_pipeline_executions(PipelineName="p-retry")["PipelineExecutionSummaries"]) == 1


def test_a_cleared_task_stops_the_earlier_tries_execution_and_starts_a_new_one(moto_endpoint, context):
    """Before: the first try after a person's clear reattached to the cleared try's execution still Executing (same
    display name, the run key), so the clear silently continued the old execution."""
    old = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:pipeline/p-stub/execution/old111"
    op = PipelineExecutionOperator(task_id="x", pipeline_name="p-stub", display_name="run-s1", retries=2,
                                   check_interval=0, waiter_max_attempts=1)
    with Stubber(op.hook.conn) as stub:
        stub.add_response(
            "list_pipeline_executions",
            {"PipelineExecutionSummaries": [{"PipelineExecutionArn": old, "PipelineExecutionStatus": "Executing",
                                             "PipelineExecutionDisplayName": "run-s1"}]},
            {"PipelineName": "p-stub", "SortBy": "CreationTime", "SortOrder": "Descending"},
        )
        stub.add_response("stop_pipeline_execution", {"PipelineExecutionArn": old}, {"PipelineExecutionArn": old})
        stub.add_response("describe_pipeline_execution", {"PipelineExecutionStatus": "Stopping"},
                          {"PipelineExecutionArn": old})
        stub.add_response(
            "start_pipeline_execution",
            {"PipelineExecutionArn": ARN},
            {"PipelineName": "p-stub", "PipelineExecutionDisplayName": "run-s1", "PipelineParameters": []},
        )
        stub.add_response("describe_pipeline_execution", {"PipelineExecutionStatus": "Executing"},
                          {"PipelineExecutionArn": ARN})
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(_try(context, 2, 3))  # try 1 of 2 retries cleared: max_tries = 1 + 2
        stub.assert_no_pending_responses()
    assert deferred.value.trigger.pipeline_execution_arn == ARN


def test_reattach_to_succeeded_returns_without_waiting(moto_endpoint, context, sm):
    _pipeline(sm, "p-done")
    arn = sm.start_pipeline_execution(PipelineName="p-done", PipelineExecutionDisplayName="run-d1")["PipelineExecutionArn"]
    op = PipelineExecutionOperator(task_id="x", pipeline_name="p-done", display_name="run-d1")
    assert op.execute(context) == {"pipeline_execution_arn": arn, "status": "Succeeded"}


@pytest.mark.parametrize("status", ["Succeeded", "Failed"])
def test_a_new_execution_already_over_completes_without_deferring(moto_endpoint, context, sm, monkeypatch, status):
    """No trigger race: an execution that ended before the task would defer is settled in the task."""
    from sim2real.orchestration.hooks.sagemaker_pipeline import SageMakerPipelineHook

    _pipeline(sm, f"p-over-{status.lower()}")
    original = SageMakerPipelineHook.start_pipeline

    def start_and_end(self, **kwargs):
        arn = original(self, **kwargs)
        _set_status(arn, status)  # moto ends it at once; a real one may fail at once (bad parameter)
        return arn

    monkeypatch.setattr(SageMakerPipelineHook, "start_pipeline", start_and_end)
    op = PipelineExecutionOperator(task_id="x", pipeline_name=f"p-over-{status.lower()}", display_name="run-o1")
    if status == "Succeeded":
        assert op.execute(context)["status"] == "Succeeded"  # no TaskDeferred
    else:
        with pytest.raises(AirflowFailException, match="Failed"):
            op.execute(context)


def _stub_start(stub, arn, pipeline="p-stub", display="run-s1"):
    stub.add_response("list_pipeline_executions", {"PipelineExecutionSummaries": []})
    stub.add_response(
        "start_pipeline_execution",
        {"PipelineExecutionArn": arn},
        {"PipelineName": pipeline, "PipelineExecutionDisplayName": display, "PipelineParameters": []},
    )


ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:pipeline/p-stub/execution/abc123"


@pytest.mark.parametrize("status", ["Failed", "Stopped", "CompletedWithFailures"])
def test_failure_statuses_name_the_failing_step(moto_endpoint, context, status):
    op = PipelineExecutionOperator(task_id="x", pipeline_name="p-stub", display_name="run-s1", check_interval=0)
    with Stubber(op.hook.conn) as stub:
        _stub_start(stub, ARN)
        stub.add_response("describe_pipeline_execution", {"PipelineExecutionStatus": status, "FailureReason": "step failed"})
        stub.add_response(
            "list_pipeline_execution_steps",
            {
                "PipelineExecutionSteps": [
                    {"StepName": "TransformDataset", "StepStatus": "Succeeded"},
                    {"StepName": "GR00TFinetune", "StepStatus": "Failed", "FailureReason": "CUDA out of memory"},
                ]
            },
        )
        with pytest.raises(AirflowException) as err:
            op.execute(context)
    assert status in str(err.value)
    assert "GR00TFinetune" in str(err.value) and "CUDA out of memory" in str(err.value)
    assert "TransformDataset" not in str(err.value)


def test_failure_without_list_steps_still_fails(moto_endpoint, context):
    op = PipelineExecutionOperator(task_id="x", pipeline_name="p-stub", display_name="run-s1", check_interval=0)
    with Stubber(op.hook.conn) as stub:
        _stub_start(stub, ARN)
        stub.add_response("describe_pipeline_execution", {"PipelineExecutionStatus": "Failed"})
        stub.add_client_error("list_pipeline_execution_steps", "InternalFailure", http_status_code=500)
        with pytest.raises(AirflowException, match="ended Failed"):
            op.execute(context)


def test_on_kill_stops_execution(moto_endpoint, context):
    op = PipelineExecutionOperator(task_id="x", pipeline_name="p-stub", display_name="run-s1", check_interval=0, waiter_max_attempts=1)
    with Stubber(op.hook.conn) as stub:
        _stub_start(stub, ARN)
        stub.add_response("describe_pipeline_execution", {"PipelineExecutionStatus": "Executing"})
        with pytest.raises(TaskDeferred):
            op.execute(context)
        stub.add_response("stop_pipeline_execution", {"PipelineExecutionArn": ARN}, {"PipelineExecutionArn": ARN})
        stub.add_response("describe_pipeline_execution", {"PipelineExecutionStatus": "Stopping"}, {"PipelineExecutionArn": ARN})
        op.on_kill()
        stub.assert_no_pending_responses()


# ---------------------------------------------------------------- trigger
@pytest.mark.parametrize(
    ("status", "expected"),
    [("Succeeded", "success"), ("Failed", "failure"), ("Stopped", "failure"), ("CompletedWithFailures", "failure"),
     ("Executing", "timeout"), ("Stopping", "timeout")],
)
def test_trigger_terminal_state_table(moto_endpoint, sm, status, expected):
    _pipeline(sm, f"p-trig-{status.lower()}")
    arn = sm.start_pipeline_execution(PipelineName=f"p-trig-{status.lower()}", PipelineExecutionDisplayName="t")["PipelineExecutionArn"]
    _set_status(arn, status)
    event = first_event(PipelineExecutionTrigger(pipeline_execution_arn=arn, waiter_delay=0, waiter_max_attempts=1))
    assert event["status"] == expected
    assert event["execution_status"] == status
    assert event["pipeline_execution_arn"] == arn
    if expected == "failure":
        assert status in event["message"]
        op = PipelineExecutionOperator(task_id="x", pipeline_name="p", display_name="t")
        with pytest.raises(AirflowException, match=status):
            op.execute_complete({"ti": FakeTI("vla_finetune")}, event)
    if expected == "success":
        op = PipelineExecutionOperator(task_id="x", pipeline_name="p", display_name="t")
        assert op.execute_complete({"ti": FakeTI("vla_finetune")}, event) == {"pipeline_execution_arn": arn, "status": "Succeeded"}


def test_trigger_failure_names_step_when_list_steps_answers(moto_endpoint, sm, monkeypatch):
    _pipeline(sm, "p-trig-steps")
    arn = sm.start_pipeline_execution(PipelineName="p-trig-steps", PipelineExecutionDisplayName="t")["PipelineExecutionArn"]
    _set_status(arn, "Failed")

    def list_pipeline_execution_steps(self):
        from moto.core.responses import ActionResult

        return ActionResult({"PipelineExecutionSteps": [
            {"StepName": "SmokeGate", "StepStatus": "Failed", "FailureReason": "success rate 0.1 < 0.5"}]})

    monkeypatch.setattr(SageMakerResponse, "list_pipeline_execution_steps", list_pipeline_execution_steps, raising=False)
    event = first_event(PipelineExecutionTrigger(pipeline_execution_arn=arn, waiter_delay=0, waiter_max_attempts=1))
    assert event["status"] == "failure"
    assert "SmokeGate" in event["message"] and "success rate 0.1 < 0.5" in event["message"]


def test_trigger_on_kill_stops_execution(moto_endpoint, monkeypatch):
    stopped = []

    def stop_pipeline_execution(self):
        from moto.core.responses import ActionResult

        stopped.append(self._get_param("PipelineExecutionArn"))
        return ActionResult({"PipelineExecutionArn": stopped[-1]})

    monkeypatch.setattr(SageMakerResponse, "stop_pipeline_execution", stop_pipeline_execution, raising=False)
    trigger = PipelineExecutionTrigger(pipeline_execution_arn=ARN, waiter_delay=0, waiter_max_attempts=1)
    asyncio.run(trigger.on_kill())
    assert stopped == [ARN]


def test_trigger_serializes_round_trip():
    trigger = PipelineExecutionTrigger(pipeline_execution_arn=ARN, waiter_delay=5, waiter_max_attempts=7, region_name=REGION)
    path, kwargs = trigger.serialize()
    assert path == "sim2real.orchestration.triggers.sagemaker.PipelineExecutionTrigger"
    again = PipelineExecutionTrigger(**kwargs)
    assert again.serialize() == (path, kwargs)


def test_the_deferred_wait_keeps_the_tasks_region_verify_and_botocore_config(moto_endpoint, context):
    """The triggerer polls with the task's own AWS settings, not the connection's defaults (the provider fixed the
    same for its SageMaker operators in 9.36.0, apache/airflow#71857): they cross into the trigger's serialized
    payload and build its hook."""
    region, config = "eu-west-1", {"retries": {"max_attempts": 9}}
    sm = boto3.client("sagemaker", region_name=region, endpoint_url=moto_endpoint)
    _pipeline(sm, "p-region")
    arn = sm.start_pipeline_execution(PipelineName="p-region", PipelineExecutionDisplayName="run-g1")["PipelineExecutionArn"]
    _set_status(arn, "Executing", region)
    op = PipelineExecutionOperator(task_id="x", pipeline_name="p-region", display_name="run-g1", region_name=region,
                                   verify=False, botocore_config=config)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    _, kwargs = deferred.value.trigger.serialize()
    assert (kwargs["pipeline_execution_arn"], kwargs["region_name"], kwargs["verify"], kwargs["botocore_config"]) == (
        arn, region, False, config)
    hook = PipelineExecutionTrigger(**kwargs).hook()
    assert (hook.region_name, hook.verify, hook.config.retries) == (region, False, config["retries"])
