"""The approval step (ModelPackageApprovalOperator, ModelPackageDecisionTrigger) against moto's model registry.

UpdateModelPackage's request shape is checked with botocore's Stubber; the registry's state with moto. The
whole step under a real Airflow (``dag.test()``, the request and its answer in Airflow's metadata database) is
in ``test_model_approval_dag.py``.
"""

from __future__ import annotations

import datetime as dt
import types
from uuid import uuid4

import boto3
import pytest
from botocore.stub import Stubber

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException, AirflowSensorTimeout
from airflow.sdk.exceptions import TaskDeferred
from sim2real.orchestration.hooks.model_registry import (
    APPROVAL_DESCRIPTION_MAX,
    ModelRegistryHook,
    airflow_approval_description,
    sagemaker_decision,
)
from sim2real.orchestration.operators.model_approval import (
    COMMENT_MAX_CHARS,
    DECISION_XCOM,
    ModelPackageApprovalOperator,
)
from sim2real.orchestration.triggers.model_package import ModelPackageDecisionTrigger
from sim2real.orchestration.waits.core import WaitState
from sim2real.orchestration.waits.sagemaker import AIRFLOW_RESPONSE_KEY, model_package_decision_step

from operator_helpers import FakeTI, first_event
from tests.orchestration.model_registry import decide_in_registry, register_model_package
from tests.orchestration.environments import MINIMAL_ENVIRONMENT, use_environment

REGION = "us-east-1"
ARN = "arn:aws:sagemaker:us-east-1:123456789012:model-package/g/1"


@pytest.fixture
def sm(moto_endpoint):
    return boto3.client("sagemaker", region_name=REGION, endpoint_url=moto_endpoint)


@pytest.fixture
def context():
    return {"ti": FakeTI("vla.wait_for_approval"), "task_instance": types.SimpleNamespace(id=uuid4())}


def register(sm, group, run_key, status="PendingManualApproval", description=None):
    arn = register_model_package(sm, group, run_key)
    if status != "PendingManualApproval":
        decide_in_registry(sm, arn, run_key, status, description)
    return arn


def operator(group, run_key, **kwargs):
    kwargs.setdefault("poke_interval", 1)
    return ModelPackageApprovalOperator(task_id="wait_for_approval", model_package_group_name=group, run_key=run_key,
                                        **kwargs)


def airflow_answer(option, comment="", name="alice", user_id="alice"):
    """The event Airflow's ``update_hitl_detail`` resumes the task with (``HITLDetail.as_resume_event_payload``)."""
    return {"chosen_options": [option], "params_input": {"comment": comment},
            "responded_at": dt.datetime(2026, 12, 2, 7, 0, tzinfo=dt.timezone.utc),
            "responded_by_user": {"id": user_id, "name": name}, "timedout": False}


# ---------------------------------------------------------------- the registry's side (hook, step)
def test_update_approval_request_shape_matches_botocore():
    hook = ModelRegistryHook(aws_conn_id=None, region_name=REGION)
    client = boto3.client("sagemaker", region_name=REGION)
    description = airflow_approval_description("Approved", "alice", "grasps 9/10", "2026-12-02T07:00:00+00:00")
    with Stubber(client) as stub:
        stub.add_response("update_model_package", {"ModelPackageArn": ARN},
                          {"ModelPackageArn": ARN, "ModelApprovalStatus": "Approved", "ApprovalDescription": description})
        stub.add_response("describe_model_package", {
            "ModelPackageName": "g", "ModelPackageArn": ARN, "CreationTime": dt.datetime(2026, 12, 2),
            "ModelPackageStatus": "Completed", "ModelApprovalStatus": "Approved",
            "ModelPackageStatusDetails": {"ValidationStatuses": []}}, {"ModelPackageName": ARN})
        hook.__dict__["conn"] = client  # the hook's cached client property
        assert hook.update_approval(ARN, "Approved", description)["ModelApprovalStatus"] == "Approved"
        stub.assert_no_pending_responses()
    assert description == "Approved in Airflow by alice at 2026-12-02T07:00:00+00:00: grasps 9/10"
    with pytest.raises(ValueError, match="ModelApprovalStatus"):
        hook.update_approval(ARN, "PendingManualApproval", description)


def test_approval_description_is_never_cut():
    with pytest.raises(ValueError, match="at most 1024"):
        airflow_approval_description("Rejected", "u" * 300, "c" * COMMENT_MAX_CHARS, "2026-12-02T07:00:00+00:00")
    longest = airflow_approval_description("Rejected", "a" * 64, "c" * COMMENT_MAX_CHARS, "2026-12-02T07:00:00.123456+00:00")
    assert len(longest) <= APPROVAL_DESCRIPTION_MAX and longest.endswith("c" * COMMENT_MAX_CHARS)
    assert airflow_approval_description("Approved", "bob", "  ", "t").endswith(": no comment")


def test_sagemaker_decision_names_the_studio_user_else_the_iam_identity():
    at = dt.datetime(2026, 12, 2, 7, 5, tzinfo=dt.timezone.utc)
    studio = sagemaker_decision({"ModelApprovalStatus": "Approved", "ApprovalDescription": "ok", "LastModifiedTime": at,
                                 "LastModifiedBy": {"UserProfileName": "carol", "IamIdentity": {"Arn": "arn:x"}}})
    assert studio == {"decided_by": "carol", "via": "sagemaker", "at": at.isoformat(), "comment": "ok",
                      "status": "Approved"}
    role = "arn:aws:sts::1:assumed-role/r/dave"
    cli = sagemaker_decision({"ModelApprovalStatus": "Rejected", "LastModifiedBy": {"IamIdentity": {"Arn": role}}})
    assert cli["decided_by"] == role and cli["at"] is None


def test_decision_step_prefers_the_airflow_answer_and_marks_where_a_decision_came_from():
    state = WaitState(params={"model_package_group_name": "g", "run_key": "k", "model_package_arn": ARN})
    answer = {"chosen_options": ["Reject"], "params_input": {"comment": "no"}, "responded_by_user": {"id": "a", "name": "a"}}
    step = model_package_decision_step({"ModelPackageArn": ARN, AIRFLOW_RESPONSE_KEY: answer}, state)
    assert (step.outcome, step.payload["via"], step.payload["hitl_response"]) == ("success", "airflow", answer)
    approved = model_package_decision_step({"ModelPackageArn": ARN, "ModelApprovalStatus": "Approved"}, state)
    assert (approved.outcome, approved.payload["via"]) == ("success", "sagemaker")
    rejected = model_package_decision_step({"ModelPackageArn": ARN, "ModelApprovalStatus": "Rejected"}, state)
    assert (rejected.outcome, rejected.payload["via"]) == ("failure", "sagemaker")
    pending = model_package_decision_step({"ModelPackageArn": ARN, "ModelApprovalStatus": "PendingManualApproval"}, state)
    assert pending.outcome == "retry" and "via" not in pending.payload


# ---------------------------------------------------------------- decided in SageMaker before the step asks
def test_already_approved_in_the_registry_settles_without_asking(moto_endpoint, sm, context):
    arn = register(sm, "g-pre-ok", "run-1", "Approved", description="approved in Studio")
    result = operator("g-pre-ok", "run-1").execute(context)
    assert result["model_package_arn"] == arn and result["approval_status"] == "Approved"
    assert result["decision"]["via"] == "sagemaker" and result["decision"]["comment"] == "approved in Studio"
    assert context["ti"].xcom[DECISION_XCOM] == result["decision"]


def test_already_rejected_fails_with_the_reason_and_records_the_decision(moto_endpoint, sm, context):
    register(sm, "g-pre-no", "run-1", "Rejected", description="grasp success 12% on robot A")
    with pytest.raises(AirflowFailException, match="Rejected in sagemaker .*grasp success 12% on robot A"):
        operator("g-pre-no", "run-1").execute(context)
    assert context["ti"].xcom[DECISION_XCOM]["status"] == "Rejected"


def test_no_package_for_the_run_fails_naming_the_register_step(moto_endpoint, sm, context):
    register(sm, "g-none", "other-run")
    with pytest.raises(AirflowFailException, match="RegisterModel step of execution arn:exec"):
        operator("g-none", "run-1", pipeline_execution_arn="arn:exec").execute(context)


# ---------------------------------------------------------------- asking in Airflow
def test_pending_package_writes_the_request_and_defers_to_the_decision_trigger(moto_endpoint, sm, context, monkeypatch):
    import airflow.providers.standard.operators.hitl as hitl

    arn = register(sm, "g-ask", "run-1")
    requests = []
    monkeypatch.setattr(hitl, "upsert_hitl_detail", lambda **kw: requests.append(kw))
    op = operator("g-ask", "run-1", poke_interval=30, response_timeout=dt.timedelta(hours=1))
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    (request,) = requests
    assert request["ti_id"] == context["task_instance"].id and request["options"] == ["Approve", "Reject"]
    assert "run-1" in request["subject"] and arn in request["body"] and "update-model-package" in request["body"]
    assert set(request["params"]) == {"comment"} and request["params"]["comment"]["schema"]["maxLength"] == COMMENT_MAX_CHARS
    trigger = deferred.value.trigger
    assert isinstance(trigger, ModelPackageDecisionTrigger)
    assert (trigger.model_package_arn, trigger.ti_id, trigger.attempts) == (arn, str(context["task_instance"].id), 120)
    assert deferred.value.timeout > dt.timedelta(hours=1)  # the trigger's own timeout event comes first


def test_the_decision_trigger_gets_the_environment_events_section(moto_endpoint, sm, context, monkeypatch):
    """With the environment config's ``events`` section the approval wait subscribes to its package's events."""
    import airflow.providers.standard.operators.hitl as hitl

    from sim2real.orchestration.events import envelope

    arn = register(sm, "g-ask-ev", "run-1")
    monkeypatch.setattr(hitl, "upsert_hitl_detail", lambda **kw: None)
    events = {"mode": "events", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/sim2real-wait-events",
              "reconcile_interval_seconds": 600}
    use_environment(monkeypatch, {**MINIMAL_ENVIRONMENT, "events": events})
    with pytest.raises(TaskDeferred) as deferred:
        operator("g-ask-ev", "run-1", poke_interval=30).execute(context)
    trigger = deferred.value.trigger
    assert trigger.serialize()[1]["events"] == events and trigger.event_settings.enabled
    assert trigger.event_keys() == [envelope.model_package(arn)]


def test_approve_in_airflow_updates_the_package_with_approver_and_comment(moto_endpoint, sm, context):
    arn = register(sm, "g-yes", "run-1")
    result = operator("g-yes", "run-1").execute_complete(
        context, {**airflow_answer("Approve", "grasps 9/10 on the bench", name="Alice", user_id="7")})
    package = sm.describe_model_package(ModelPackageName=arn)
    assert package["ModelApprovalStatus"] == "Approved"
    assert package["ApprovalDescription"] == ("Approved in Airflow by Alice (id 7) at 2026-12-02T07:00:00+00:00: "
                                              "grasps 9/10 on the bench")
    assert result["approval_status"] == "Approved" and result["model_data_url"].endswith("run-1/vla/model.tar.gz")
    assert result["decision"] == {"decided_by": "Alice (id 7)", "via": "airflow", "at": "2026-12-02T07:00:00+00:00",
                                  "comment": "grasps 9/10 on the bench", "status": "Approved", "triggered_by": None,
                                  "refused": []}


def test_reject_in_airflow_rejects_the_package_and_fails_with_the_reason(moto_endpoint, sm, context):
    arn = register(sm, "g-no", "run-1")
    trigger_event = {"status": "success", "message": "answered", "via": "airflow", "model_package_arn": arn,
                     "hitl_response": {**airflow_answer("Reject", "drops the cube"),
                                       "responded_at": "2026-12-02T07:00:00+00:00"}}
    with pytest.raises(AirflowFailException, match="Rejected in airflow by alice: drops the cube"):
        operator("g-no", "run-1").execute_complete(context, trigger_event)
    package = sm.describe_model_package(ModelPackageName=arn)
    assert package["ModelApprovalStatus"] == "Rejected" and package["ApprovalDescription"].endswith(": drops the cube")
    assert context["ti"].xcom[DECISION_XCOM]["via"] == "airflow"


def test_a_decision_in_sagemaker_that_came_first_is_not_overwritten(moto_endpoint, sm, context, monkeypatch):
    import airflow.providers.standard.operators.hitl as hitl

    monkeypatch.setattr(hitl, "upsert_hitl_detail", lambda **kw: None)
    arn = register(sm, "g-race", "run-1", "Approved", description="approved in Studio")
    decided_at = sm.describe_model_package(ModelPackageName=arn)["LastModifiedTime"]
    late = {**airflow_answer("Reject", "late"), "responded_at": decided_at + dt.timedelta(seconds=1)}
    with pytest.raises(TaskDeferred) as deferred:  # refused; the trigger closes the request with the registry's
        operator("g-race", "run-1").execute_complete(context, {**late, "model_package_arn": arn})
    assert sm.describe_model_package(ModelPackageName=arn)["ModelApprovalStatus"] == "Approved"
    assert "registry decision came first: Approved" in deferred.value.trigger.refused[0]


def test_an_answer_outside_the_options_is_refused(moto_endpoint, sm, context):
    arn = register(sm, "g-bad", "run-1")
    with pytest.raises(ValueError, match="not in"):
        operator("g-bad", "run-1").execute_complete(context, {**airflow_answer("Maybe"), "model_package_arn": arn})
    assert sm.describe_model_package(ModelPackageName=arn)["ModelApprovalStatus"] == "PendingManualApproval"


# ---------------------------------------------------------------- the trigger: SageMaker's side, the timeout
class StubComms:
    """The triggerer's side of the Task Execution API for the human-in-the-loop request: answers
    ``GetHITLDetailResponse`` with ``detail`` and records ``UpdateHITLDetail``."""

    def __init__(self, detail=None):
        from airflow.sdk.api.datamodels._generated import HITLDetailResponse

        self.detail = detail or HITLDetailResponse(response_received=False, responded_at=None, chosen_options=None)
        self.updates = []

    def send(self, msg):
        if type(msg).__name__ == "GetHITLDetailResponse":
            return self.detail
        if type(msg).__name__ == "UpdateHITLDetail":
            self.updates.append(msg)
            return self.detail
        raise AssertionError(f"unexpected request {msg!r}")


@pytest.fixture
def comms(monkeypatch):
    import airflow.sdk.execution_time.task_runner as task_runner

    stub = StubComms()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", stub, raising=False)
    return stub


def trigger(group, arn, **kwargs):
    kwargs.setdefault("settle_seconds", 0)
    return ModelPackageDecisionTrigger(ti_id=str(uuid4()), model_package_group_name=group, run_key="run-1",
                                       model_package_arn=arn, waiter_delay=0, **kwargs)


def test_an_answer_in_airflow_ends_the_wait_before_the_registry_is_read(moto_endpoint, sm, comms):
    from airflow.sdk.api.datamodels._generated import HITLDetailResponse, HITLUser

    arn = register(sm, "g-tr-af", "run-1")
    at = dt.datetime(2026, 12, 2, 7, 0, tzinfo=dt.timezone.utc)
    comms.detail = HITLDetailResponse(response_received=True, responded_at=at, chosen_options=["Approve"],
                                      params_input={"comment": "ok"}, responded_by_user=HITLUser(id="7", name="alice"))
    event = first_event(trigger("g-tr-af", arn, waiter_max_attempts=1))
    assert (event["status"], event["via"], event["model_package_arn"]) == ("success", "airflow", arn)
    assert event["hitl_response"] == {"chosen_options": ["Approve"], "params_input": {"comment": "ok"},
                                      "responded_by_user": {"id": "7", "name": "alice"}, "responded_at": at}
    assert comms.updates == []  # the answer is Airflow's own: nothing to write back


def test_approved_in_sagemaker_ends_the_wait_and_answers_the_request(moto_endpoint, sm, context, comms):
    arn = register(sm, "g-sm", "run-1", "Approved", description="approved with the CLI")
    event = first_event(trigger("g-sm", arn, waiter_max_attempts=1))
    assert (event["status"], event["via"], event["model_package_arn"]) == ("success", "sagemaker", arn)
    (answer,) = comms.updates  # the Airflow request is answered with the registry's decision
    assert answer.chosen_options == ["Approve"] and "Approved in SageMaker" in answer.params_input["comment"]
    assert "approved with the CLI" in answer.params_input["comment"]
    result = operator("g-sm", "run-1").execute_complete(context, event)
    assert result["decision"]["via"] == "sagemaker" and result["decision"]["comment"] == "approved with the CLI"


def test_rejected_in_sagemaker_fails_the_step(moto_endpoint, sm, context, comms):
    arn = register(sm, "g-sm-no", "run-1", "Rejected", description="bad grasp")
    event = first_event(trigger("g-sm-no", arn, waiter_max_attempts=1))
    assert (event["status"], event["via"]) == ("failure", "sagemaker")
    assert [u.chosen_options for u in comms.updates] == [["Reject"]]
    with pytest.raises(AirflowFailException, match="bad grasp"):
        operator("g-sm-no", "run-1").execute_complete(context, event)


def test_a_runner_without_the_hitl_route_still_ends_on_the_registry(moto_endpoint, sm, monkeypatch):
    import airflow.sdk.execution_time.task_runner as task_runner

    class Unserved:  # dag.test()'s in-process trigger supervisor answers "Unhandled request" with None
        def send(self, msg):
            return None

    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", Unserved(), raising=False)
    arn = register(sm, "g-unserved", "run-1", "Approved", description="ok")
    assert first_event(trigger("g-unserved", arn, waiter_max_attempts=1))["via"] == "sagemaker"


def test_no_decision_times_out_with_the_ways_to_decide(moto_endpoint, sm, context, comms):
    arn = register(sm, "g-late", "run-1")
    event = first_event(trigger("g-late", arn, waiter_max_attempts=2))
    assert event["status"] == "timeout" and "via" not in event and comms.updates == []
    with pytest.raises(AirflowSensorTimeout, match="Required Actions.*--model-approval-status Approved"):
        operator("g-late", "run-1").execute_complete(context, event)


def test_an_unknown_event_fails_loudly(moto_endpoint, context):
    with pytest.raises(ValueError, match="unexpected trigger event"):
        operator("g", "run-1").execute_complete(context, {"status": "weird"})
    with pytest.raises(AirflowException, match="wait failed"):
        operator("g", "run-1").execute_complete(context, {"status": "failure", "message": "AccessDenied"})


def test_trigger_serializes_round_trip_with_the_task_instance():
    t = ModelPackageDecisionTrigger(ti_id="0190f0a0-0000-7000-8000-000000000000", model_package_group_name="g",
                                    run_key="k", model_package_arn=ARN, waiter_delay=5, waiter_max_attempts=3)
    path, kwargs = t.serialize()
    assert path == "sim2real.orchestration.triggers.model_package.ModelPackageDecisionTrigger"
    assert kwargs["ti_id"] == "0190f0a0-0000-7000-8000-000000000000"
    assert ModelPackageDecisionTrigger(**kwargs).serialize() == (path, kwargs)


def test_a_description_naming_an_airflow_user_does_not_make_that_user_the_decider():
    # Anyone who may update the package can write such a text; the step recognises its own write by the answer
    # it keeps in the task state store (test_model_approval_decisions: a retry completes it), not by this text.
    description = airflow_approval_description("Approved", "bob", "ok: fine", "2026-12-02T07:00:00+00:00")
    decision = sagemaker_decision({"ModelApprovalStatus": "Approved", "ApprovalDescription": description,
                                   "LastModifiedBy": {"IamIdentity": {"Arn": "arn:aws:sts::1:assumed-role/mwaa/x"}}})
    assert decision == {"decided_by": "arn:aws:sts::1:assumed-role/mwaa/x", "via": "sagemaker", "at": None,
                        "comment": description, "status": "Approved"}


def test_a_registry_decision_with_an_airflow_answer_pending_goes_to_the_step_as_the_answer(moto_endpoint, sm, comms):
    """Both decided by the time the trigger looks: the step gets the Airflow answer (and orders the two by time)."""
    from airflow.sdk.api.datamodels._generated import HITLDetailResponse, HITLUser

    arn = register(sm, "g-tr-both", "run-1", "Rejected", description="carol")
    at = dt.datetime(2026, 12, 2, 7, 0, tzinfo=dt.timezone.utc)
    answered = HITLDetailResponse(response_received=True, responded_at=at, chosen_options=["Approve"],
                                  params_input={"comment": "ok"}, responded_by_user=HITLUser(id="bob", name="bob"))
    t = trigger("g-tr-both", arn, waiter_max_attempts=1)
    reads = []

    async def answer_after_the_registry_read():  # the answer lands while the trigger reads the registry
        reads.append(1)
        return None if len(reads) == 1 else {"chosen_options": ["Approve"], "params_input": {"comment": "ok"},
                                             "responded_by_user": {"id": "bob", "name": "bob"}, "responded_at": at}

    t._airflow_answer = answer_after_the_registry_read
    event = first_event(t)
    assert (event["via"], event["hitl_response"]["responded_by_user"]["name"]) == ("airflow", "bob")
    assert comms.updates == [] and answered.chosen_options == ["Approve"]  # the request is not closed over it


def test_the_closing_note_names_the_refused_answers(moto_endpoint, sm, comms):
    arn = register(sm, "g-tr-note", "run-1", "Rejected", description="carol: drops the cube")
    first_event(trigger("g-tr-note", arn, waiter_max_attempts=1,
                        refused=["Approve by bob in airflow at t refused: the registry decision came first"]))
    (closing,) = comms.updates
    assert closing.chosen_options == ["Reject"]
    assert "carol: drops the cube | Approve by bob in airflow at t refused" in closing.params_input["comment"]


def test_the_trigger_holds_its_event_a_few_seconds_after_it_starts(moto_endpoint, sm, comms):
    import time as _time

    arn = register(sm, "g-tr-hold", "run-1", "Approved", description="ok")
    started = _time.monotonic()
    assert first_event(trigger("g-tr-hold", arn, waiter_max_attempts=1, settle_seconds=1.5))["via"] == "sagemaker"
    assert _time.monotonic() - started >= 1.5
