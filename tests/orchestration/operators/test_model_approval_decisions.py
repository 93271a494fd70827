"""The release approval's rules, against moto's model registry with controlled interleavings:

* four-eyes: the run's trigger and unlisted users are refused (HITL ``assigned_users`` first, the step's own check
  behind it), the request stays open, the refusal is recorded;
* one decision, recorded once: the registry write is a compare-and-set, the decision made first stands (the
  Airflow answer's ``responded_at`` against the registry's ``LastModifiedTime``), the later contrary one is
  refused and recorded (lineage, ApprovalDescription, the request's closing note);
* retries: an earlier try's Airflow answer is completed with its attribution, the request is not written (nor
  announced) again.
"""

from __future__ import annotations

import datetime as dt
import json
import types
from uuid import uuid4

import boto3
import pytest

from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.sdk.exceptions import TaskDeferred
from sim2real.orchestration.hooks.model_registry import ModelRegistryHook
from sim2real.orchestration.lineage import _approval_entry, lineage_errors
from sim2real.orchestration.operators.model_approval import (
    ANSWER_KEY,
    DECISION_XCOM,
    REFUSED_KEY,
    REQUEST_KEY,
    ModelPackageApprovalOperator,
)

from operator_helpers import FakeTI
from tests.orchestration.model_registry import decide_in_registry
from tests.orchestration.model_registry import register_model_package as register
from tests.orchestration.environments import MINIMAL_ENVIRONMENT, use_environment

REGION = "us-east-1"


class FakeStore:
    """Airflow's task state store for one task of one run (``context["task_state_store"]``): shared by its tries."""

    def __init__(self):
        self.rows: dict = {}

    def get(self, key, default=None):
        return self.rows.get(key, default)

    def set(self, key, value, *, retention=None):
        if value is None:  # as Airflow's TaskStateStoreAccessor.set
            raise ValueError("Cannot set value as None")
        self.rows[key] = json.loads(json.dumps(value))

    def delete(self, key):
        self.rows.pop(key, None)


@pytest.fixture
def sm(moto_endpoint):
    return boto3.client("sagemaker", region_name=REGION, endpoint_url=moto_endpoint)


@pytest.fixture
def store():
    return FakeStore()


@pytest.fixture
def requests(monkeypatch):
    """Every request the step writes through the Task Execution API (the provider's ``upsert_hitl_detail``)."""
    import airflow.providers.standard.operators.hitl as hitl

    written = []
    monkeypatch.setattr(hitl, "upsert_hitl_detail", lambda **kw: written.append(kw))
    return written


def environment(monkeypatch, approval=None):
    use_environment(monkeypatch, {**MINIMAL_ENVIRONMENT, **({"approval": approval} if approval is not None else {})})


def context_for(store, triggered_by="alice"):
    return {"ti": FakeTI("vla.wait_for_approval"), "task_instance": types.SimpleNamespace(id=uuid4()),
            "dag_run": types.SimpleNamespace(dag_id="sim_to_real", run_id="manual__1", triggering_user_name=triggered_by),
            "task_state_store": store}


def operator(group, run_key):
    return ModelPackageApprovalOperator(task_id="wait_for_approval", model_package_group_name=group, run_key=run_key,
                                        poke_interval=1)


def answer(option, user, at, comment="looked at the review"):
    """The event Airflow's ``update_hitl_detail`` resumes the task with (``HITLDetail.as_resume_event_payload``)."""
    return {"chosen_options": [option], "params_input": {"comment": comment}, "responded_at": at,
            "responded_by_user": {"id": user, "name": user}, "timedout": False}


NOW = dt.datetime.now(dt.timezone.utc)


# ---------------------------------------------------------------- the compare-and-set itself
class RacingClient:
    """A SageMaker client whose ``n``-th call first runs ``race`` (another decision landing just then)."""

    def __init__(self, client, at_call, race):
        self._client, self._at, self._race, self.calls = client, at_call, race, []

    def __getattr__(self, name):
        method = getattr(self._client, name)

        def call(**kwargs):
            self.calls.append(name)
            if len(self.calls) == self._at:
                self._race()
            return method(**kwargs)
        return call


def approve_while_the_registry_rejects(sm, group, at, description):
    """``compare_and_set_approval`` (Approved in Airflow by bob) of a new package in ``group`` while a Rejected
    decision (``description``) lands in the registry at the hook's ``at``-th call; returns the hook, the package
    ARN, and whether the hook wrote."""
    arn = register(sm, group, "r1")
    hook = ModelRegistryHook(aws_conn_id="aws_default", region_name=REGION)
    hook.__dict__["conn"] = RacingClient(sm, at, lambda: decide_in_registry(sm, arn, "r1", "Rejected", description))
    written, package = hook.compare_and_set_approval(arn, "Approved", "Approved in Airflow by bob at t: ok")
    assert package["ModelApprovalStatus"] == "Rejected"
    return hook, arn, written


def test_compare_and_set_writes_nothing_once_the_registry_decided(moto_endpoint, sm):
    # The registry decides right before the read (call 1: DescribeModelPackage): nothing is written.
    hook, arn, written = approve_while_the_registry_rejects(sm, "g-cas-1", 1, "drops it")
    assert not written
    assert hook.conn.calls == ["describe_model_package"]
    assert sm.describe_model_package(ModelPackageName=arn)["ApprovalDescription"] == "drops it"


def test_compare_and_set_sees_a_write_that_replaced_its_own(moto_endpoint, sm):
    # Another decision lands between the write (call 2) and the re-read (call 3): the re-read shows it.
    hook, arn, written = approve_while_the_registry_rejects(sm, "g-cas-2", 3, "late")
    assert not written
    # Conditional on what was seen: a write against a stale view is not made.
    hook.__dict__["conn"] = sm
    stale = {"ModelApprovalStatus": "Approved", "ApprovalDescription": "Approved in Airflow by bob at t: ok"}
    assert hook.compare_and_set_approval(arn, "PendingManualApproval", "undo", expected=stale)[0] is False


# ---------------------------------------------------------------- one decision: both orders, 30 ms apart
def rejected_in_studio(monkeypatch, sm, store, group):
    """A package of ``group`` that carol rejected in Studio; returns its ARN, the rejection's time (the package's
    LastModifiedTime) and the approval task's context."""
    environment(monkeypatch)
    arn = register(sm, group, "r1")
    rejected_at = decide_in_registry(sm, arn, "r1", "Rejected", "drops the cube (carol in Studio)")
    return arn, rejected_at, context_for(store)


def test_a_registry_reject_30ms_before_the_airflow_approve_stands_and_the_approve_is_refused(
        moto_endpoint, sm, store, requests, monkeypatch):
    arn, rejected_at, context = rejected_in_studio(monkeypatch, sm, store, "g-order-1")
    op = operator("g-order-1", "r1")
    with pytest.raises(TaskDeferred) as deferred:  # the request reopens, to be closed with the decision that stands
        op.execute_complete(context, {**answer("Approve", "bob", rejected_at + dt.timedelta(milliseconds=30)),
                                      "model_package_arn": arn})
    package = sm.describe_model_package(ModelPackageName=arn)
    assert (package["ModelApprovalStatus"], package["ApprovalDescription"]) == ("Rejected", "drops the cube (carol in Studio)")
    (refusal,) = store.rows[REFUSED_KEY]["refused"]
    assert (refusal["by"], refusal["via"], refusal["status"]) == ("bob", "airflow", "Approved")
    assert "registry decision came first" in refusal["reason"] and "drops the cube" in refusal["reason"]
    assert len(requests) == 1 and requests[0]["ti_id"] == context["task_instance"].id  # reopened
    note = deferred.value.trigger.refused
    assert note and note[0].startswith("Approve by bob in airflow") and "came first" in note[0]
    assert store.rows.get(ANSWER_KEY) is None
    # The trigger then ends on the registry's decision: the step fails with it, the refusal in its record.
    event = {"status": "failure", "message": "Rejected", "via": "sagemaker", "model_package_arn": arn,
             "approval_status": "Rejected"}
    with pytest.raises(AirflowFailException, match="Rejected in sagemaker"):
        op.execute_complete(context, event)
    decision = context["ti"].xcom[DECISION_XCOM]
    assert decision["status"] == "Rejected" and decision["refused"][0]["by"] == "bob"
    entry = _approval_entry(decision)
    assert entry["triggered_by"] == "alice" and entry["refused"][0]["status"] == "Approved"


def test_the_same_refused_answer_seen_twice_is_one_refusal(moto_endpoint, sm, store, requests, monkeypatch):
    # bob's Approve (30 ms after carol's Reject) resumes the task through the core API's update_hitl_detail and is
    # refused; the trigger that read the same answer before the request was reopened then delivers it once more
    # (its late event reaches the new deferral: on SQLite the reopened wait's trigger can get the old trigger's id).
    arn, rejected_at, context = rejected_in_studio(monkeypatch, sm, store, "g-order-twice")
    op = operator("g-order-twice", "r1")
    bob = answer("Approve", "bob", rejected_at + dt.timedelta(milliseconds=30))
    with pytest.raises(TaskDeferred):
        op.execute_complete(context, {**bob, "model_package_arn": arn})  # the core API's resume
    stale = {key: bob[key] for key in ("chosen_options", "params_input", "responded_by_user", "responded_at")}
    with pytest.raises(TaskDeferred) as deferred:  # the old trigger's event, the same HITL response
        op.execute_complete(context, {"status": "success", "via": "airflow", "model_package_arn": arn,
                                      "message": "answered in Airflow; the registry is Rejected", "hitl_response": stale})
    (refusal,) = store.rows[REFUSED_KEY]["refused"]
    assert (refusal["by"], refusal["via"], refusal["status"]) == ("bob", "airflow", "Approved")
    (note,) = deferred.value.trigger.refused  # the closing note names it once
    assert note.startswith("Approve by bob in airflow")
    # A different answer of bob's (another responded_at) is another refusal.
    with pytest.raises(TaskDeferred):
        op.execute_complete(context, {**answer("Approve", "bob", rejected_at + dt.timedelta(seconds=5)),
                                      "model_package_arn": arn})
    assert len(store.rows[REFUSED_KEY]["refused"]) == 2
    with pytest.raises(AirflowFailException, match="Rejected in sagemaker"):
        op.execute_complete(context, {"status": "failure", "message": "Rejected", "via": "sagemaker",
                                      "model_package_arn": arn, "approval_status": "Rejected"})
    decision = context["ti"].xcom[DECISION_XCOM]
    assert [(r["by"], r["at"]) for r in decision["refused"]] == [
        ("bob", (rejected_at + dt.timedelta(milliseconds=30)).isoformat()),
        ("bob", (rejected_at + dt.timedelta(seconds=5)).isoformat())]
    assert sm.describe_model_package(ModelPackageName=arn)["ModelApprovalStatus"] == "Rejected"


def test_a_four_eyes_refusal_seen_twice_is_one_refusal(moto_endpoint, sm, store, requests, monkeypatch):
    environment(monkeypatch)
    arn = register(sm, "g-4eyes-twice", "r1")
    context = context_for(store, triggered_by="alice")
    for _ in range(2):  # the same answer of alice's, delivered twice
        with pytest.raises(TaskDeferred):
            operator("g-4eyes-twice", "r1").execute_complete(
                context, {**answer("Approve", "alice", NOW), "model_package_arn": arn})
    (refusal,) = store.rows[REFUSED_KEY]["refused"]
    assert refusal["by"] == "alice" and "triggered this run" in refusal["reason"]
    assert sm.describe_model_package(ModelPackageName=arn)["ModelApprovalStatus"] == "PendingManualApproval"


def test_an_airflow_approve_30ms_before_a_registry_reject_stands_and_the_reject_is_refused(
        moto_endpoint, sm, store, requests, monkeypatch):
    arn, rejected_at, context = rejected_in_studio(monkeypatch, sm, store, "g-order-2")
    result = operator("g-order-2", "r1").execute_complete(
        context, {**answer("Approve", "bob", rejected_at - dt.timedelta(milliseconds=30)), "model_package_arn": arn})
    package = sm.describe_model_package(ModelPackageName=arn)
    assert package["ModelApprovalStatus"] == "Approved"
    assert package["ApprovalDescription"].startswith("Approved in Airflow by bob at ")
    assert "| Refused: Reject by " in package["ApprovalDescription"]  # the registry says which decision gave way
    decision = result["decision"]
    assert (decision["status"], decision["via"], decision["decided_by"], decision["triggered_by"]) == (
        "Approved", "airflow", "bob", "alice")
    (refusal,) = decision["refused"]
    assert (refusal["via"], refusal["status"]) == ("sagemaker", "Rejected") and "came first" in refusal["reason"]
    assert requests == []  # nothing to reopen: the Airflow answer stands
    lineage_entry = _approval_entry(decision)
    assert lineage_entry["refused"] == [refusal]


def test_the_approval_entry_with_refusals_is_valid_lineage():
    from sim2real.orchestration.lineage import build_lineage

    decision = {"decided_by": "bob", "via": "airflow", "at": "2026-12-03T10:00:00+00:00", "comment": "ok",
                "status": "Approved", "triggered_by": "alice",
                "refused": [{"by": "alice", "via": "airflow", "status": "Approved", "at": "2026-12-03T09:59:00+00:00",
                             "reason": "alice triggered this run"}]}
    lineage = build_lineage(run_key="r1", dag_id="sim_to_real", run_id="manual__1", params={}, approval=decision)
    assert lineage_errors(lineage) == []
    assert lineage["approval"]["triggered_by"] == "alice" and lineage["approval"]["refused"][0]["by"] == "alice"


# ---------------------------------------------------------------- four-eyes
def test_the_request_is_assigned_to_the_listed_approvers_but_not_the_runs_trigger(
        moto_endpoint, sm, store, requests, monkeypatch):
    environment(monkeypatch, {"approvers": ["alice", "bob", "carol"]})
    arn = register(sm, "g-assign", "r1")
    with pytest.raises(TaskDeferred):
        operator("g-assign", "r1").execute(context_for(store, triggered_by="alice"))
    (request,) = requests
    assert request["assigned_users"] == [{"id": "bob", "name": "bob"}, {"id": "carol", "name": "carol"}]
    assert "**Who may answer:** bob, carol — not alice, who triggered this run" in request["body"]
    assert store.rows[REQUEST_KEY] == {"model_package_arn": arn, "assigned_users": ["bob", "carol"],
                                       "triggered_by": "alice", "pipeline_execution_arn": None}


def test_nobody_left_to_approve_fails_before_asking(moto_endpoint, sm, store, requests, monkeypatch):
    environment(monkeypatch, {"approvers": ["alice"]})
    register(sm, "g-alone", "r1")
    with pytest.raises(AirflowFailException, match="only listed approver.*alice.*triggered"):
        operator("g-alone", "r1").execute(context_for(store, triggered_by="alice"))
    assert requests == []


@pytest.mark.parametrize(("approval", "user", "why"), [
    ({}, "alice", "alice triggered this run and cannot answer"),                    # no list: anyone but the trigger
    ({"approvers": ["bob"]}, "mallory", "mallory is not a listed approver"),       # an unlisted user
])
def test_a_refused_answer_leaves_the_request_open_and_the_package_pending(
        moto_endpoint, sm, store, requests, monkeypatch, approval, user, why):
    environment(monkeypatch, approval)
    group = f"g-4eyes-{user}"
    arn = register(sm, group, "r1")
    context = context_for(store, triggered_by="alice")
    with pytest.raises(TaskDeferred) as deferred:
        operator(group, "r1").execute_complete(context, {**answer("Approve", user, NOW), "model_package_arn": arn})
    assert sm.describe_model_package(ModelPackageName=arn)["ModelApprovalStatus"] == "PendingManualApproval"
    assert len(requests) == 1  # the request is open again (the upsert clears the refused response)
    assert why in store.rows[REFUSED_KEY]["refused"][0]["reason"] and why in deferred.value.trigger.refused[0]
    # A listed second person approves: released, both named.
    result = operator(group, "r1").execute_complete(context, {**answer("Approve", "bob", NOW), "model_package_arn": arn})
    assert sm.describe_model_package(ModelPackageName=arn)["ModelApprovalStatus"] == "Approved"
    decision = result["decision"]
    assert (decision["decided_by"], decision["triggered_by"]) == ("bob", "alice")
    assert [r["by"] for r in decision["refused"]] == [user]


def test_a_retry_waits_with_the_refusals_an_earlier_try_recorded(moto_endpoint, sm, store, requests, monkeypatch):
    """A retry of the step (the request already written) defers again; its trigger closes the request with a note that
    names the refused answers, so the retry's trigger must get the refusals the earlier try stored (before: none)."""
    environment(monkeypatch, {})
    arn = register(sm, "g-retry", "r1")
    context = context_for(store, triggered_by="alice")
    with pytest.raises(TaskDeferred):
        operator("g-retry", "r1").execute_complete(context, {**answer("Approve", "alice", NOW), "model_package_arn": arn})
    (refusal,) = store.rows[REFUSED_KEY]["refused"]
    store.rows[REQUEST_KEY] = {"model_package_arn": arn, "assigned_users": [],  # the earlier try wrote the request
                               "triggered_by": "alice"}
    with pytest.raises(TaskDeferred) as retried:
        operator("g-retry", "r1").execute(context)
    assert len(retried.value.trigger.refused) == 1 and "alice triggered this run" in retried.value.trigger.refused[0]


def test_self_approval_is_allowed_only_when_the_config_says_so(moto_endpoint, sm, store, requests, monkeypatch):
    environment(monkeypatch, {"self_approval": True})
    arn = register(sm, "g-self", "r1")
    result = operator("g-self", "r1").execute_complete(
        context_for(store, triggered_by="alice"), {**answer("Approve", "alice", NOW), "model_package_arn": arn})
    assert result["decision"]["decided_by"] == "alice" and result["decision"]["refused"] == []


def test_a_registry_approval_by_the_triggers_mapped_identity_is_undone(moto_endpoint, sm, store, requests, monkeypatch):
    role = "arn:aws:sts::123456789012:assumed-role/ml-engineer/alice"
    environment(monkeypatch, {"aws_identities": {"alice": [role]}})
    arn = register(sm, "g-self-sm", "r1")
    decide_in_registry(sm, arn, "r1", "Approved", "lgtm")
    package = {**sm.describe_model_package(ModelPackageName=arn), "LastModifiedBy": {"IamIdentity": {"Arn": role}}}
    op = operator("g-self-sm", "r1")
    with pytest.raises(TaskDeferred):
        op._decided_in_sagemaker(context_for(store, triggered_by="alice"), package)
    after = sm.describe_model_package(ModelPackageName=arn)
    assert after["ModelApprovalStatus"] == "PendingManualApproval"
    assert after["ApprovalDescription"].startswith(f"Approval by {role} refused: ") and "was: lgtm" in after["ApprovalDescription"]
    assert store.rows[REFUSED_KEY]["refused"][0]["via"] == "sagemaker"



def test_a_registry_approval_dressed_as_an_airflow_answer_is_the_identity_that_made_it(
        moto_endpoint, sm, store, requests, monkeypatch):
    # The run's trigger approves in Studio with a description that reads like the step's record of another user's
    # Airflow answer: the decider is the identity SageMaker recorded, so four-eyes still refuses it.
    role = "arn:aws:sts::123456789012:assumed-role/ml-engineer/alice"
    environment(monkeypatch, {"aws_identities": {"alice": [role]}})
    arn = register(sm, "g-forged", "r1")
    forged = f"Approved in Airflow by bob at {NOW.isoformat()}: looked at the review"
    decide_in_registry(sm, arn, "r1", "Approved", forged)
    package = {**sm.describe_model_package(ModelPackageName=arn), "LastModifiedBy": {"IamIdentity": {"Arn": role}}}
    with pytest.raises(TaskDeferred):
        operator("g-forged", "r1")._decided_in_sagemaker(context_for(store, triggered_by="alice"), package)
    assert sm.describe_model_package(ModelPackageName=arn)["ModelApprovalStatus"] == "PendingManualApproval"
    refused = store.rows[REFUSED_KEY]["refused"][0]
    assert (refused["by"], refused["via"]) == (role, "sagemaker")


# ---------------------------------------------------------------- retries
def test_a_retry_completes_the_earlier_tries_airflow_answer_with_its_attribution(
        moto_endpoint, sm, store, requests, monkeypatch):
    environment(monkeypatch)
    arn = register(sm, "g-retry", "r1")
    first = context_for(store)
    # Try 1 records bob's answer and writes it; the task is then failed from a stale state (fast-trigger race).
    operator("g-retry", "r1").execute_complete(first, {**answer("Approve", "bob", NOW), "model_package_arn": arn})
    sm.update_model_package(ModelPackageArn=arn, CustomerMetadataProperties={"sim2real:run-key": "r1"},
                            ModelApprovalStatus="Approved",
                            ApprovalDescription=sm.describe_model_package(ModelPackageName=arn)["ApprovalDescription"])
    retry = context_for(store)  # a new try: new task instance id, same task state store
    result = operator("g-retry", "r1").execute(retry)
    decision = result["decision"]
    assert (decision["via"], decision["decided_by"]) == ("airflow", "bob")  # not "sagemaker" under the AWS caller
    assert requests == []  # not asked again


def test_a_retry_waits_on_the_written_request_without_writing_or_announcing_it_again(
        moto_endpoint, sm, store, requests, monkeypatch):
    from sim2real.orchestration import notifications

    environment(monkeypatch)
    register(sm, "g-retry-2", "r1")
    with pytest.raises(TaskDeferred):
        operator("g-retry-2", "r1").execute(context_for(store))
    assert len(requests) == 1
    retry = context_for(store)
    with pytest.raises(TaskDeferred):
        operator("g-retry-2", "r1").execute(retry)
    assert len(requests) == 1  # an upsert would clear an answer recorded meanwhile
    sent = []
    monkeypatch.setattr(notifications, "compose", lambda *a, **k: sent.append(a) or ("s", "m", {}))
    notifications.approval_needed().notify({**retry, "task": operator("g-retry-2", "r1")})
    assert sent == []  # no second "approval needed"
    notifications.approval_needed().notify({**context_for(FakeStore()), "task": operator("g-retry-2", "r1")})
    assert len(sent) == 1  # the first try announces


def test_a_new_model_package_of_the_run_is_asked_for_not_decided_by_the_old_ones_records(
        moto_endpoint, sm, store, requests, monkeypatch):
    """Airflow 3.3.1 keeps task state store rows across a clear of the task (``clear_task_instances`` leaves them;
    ``[state_store] clear_on_success`` is False by default). Clearing the fine-tune and this step registers a new
    package for the run: the old package's answer, request and refusals are not replayed on it; the person is asked."""
    environment(monkeypatch, {})
    old = register(sm, "g-cleared", "r1")
    context = context_for(store, triggered_by="alice")
    with pytest.raises(TaskDeferred):
        operator("g-cleared", "r1").execute(context)  # the request for the old package
    with pytest.raises(TaskDeferred):  # alice triggered the run: refused, the request reopens
        operator("g-cleared", "r1").execute_complete(context, {**answer("Approve", "alice", NOW), "model_package_arn": old})
    operator("g-cleared", "r1").execute_complete(context, {**answer("Approve", "bob", NOW), "model_package_arn": old})
    assert sm.describe_model_package(ModelPackageName=old)["ModelApprovalStatus"] == "Approved"
    new = register(sm, "g-cleared", "r1")  # the re-run fine-tune's package
    requests.clear()
    with pytest.raises(TaskDeferred) as deferred:
        operator("g-cleared", "r1").execute(context_for(store, triggered_by="alice"))
    assert sm.describe_model_package(ModelPackageName=new)["ModelApprovalStatus"] == "PendingManualApproval"
    (request,) = requests  # asked again, for the new package
    assert new.rsplit("/", 1)[-1] in request["subject"]
    assert (deferred.value.trigger.model_package_arn, deferred.value.trigger.refused) == (new, [])
    assert store.rows[REQUEST_KEY]["model_package_arn"] == new


def test_a_clear_that_reran_the_fine_tune_announces_the_new_request(moto_endpoint, sm, store, requests, monkeypatch):
    """The "approval needed" announcement runs before the step (``on_execute_callback``): it is skipped for a retry
    of the same pipeline execution's approval, not for a clear that re-ran the fine-tune (a new execution's package;
    the old request row stays in the task state store across the clear)."""
    from sim2real.orchestration import notifications

    environment(monkeypatch)
    register(sm, "g-rerun", "r1")
    first = ModelPackageApprovalOperator(task_id="wait_for_approval", model_package_group_name="g-rerun",
                                         run_key="r1", pipeline_execution_arn=None, poke_interval=1)
    with pytest.raises(TaskDeferred):
        first.execute(context_for(store))
    sent = []
    monkeypatch.setattr(notifications, "compose", lambda *a, **k: sent.append(a) or ("s", "m", {}))
    retry = ModelPackageApprovalOperator(task_id="wait_for_approval", model_package_group_name="g-rerun",
                                         run_key="r1", pipeline_execution_arn=None, poke_interval=1)
    notifications.approval_needed().notify({**context_for(store), "task": retry})
    assert sent == []  # the same execution's request: announced by the first try
    rerun = ModelPackageApprovalOperator(
        task_id="wait_for_approval", model_package_group_name="g-rerun", run_key="r1", poke_interval=1,
        pipeline_execution_arn="arn:aws:sagemaker:us-east-1:123456789012:pipeline/p/execution/rerun")
    notifications.approval_needed().notify({**context_for(store), "task": rerun})
    assert len(sent) == 1
