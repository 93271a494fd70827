"""CanaryReviewOperator: the canary verdict's evidence in the request's body, Promote and Abort answered as Airflow
resumes the task (``HITLDetail.as_resume_event_payload``; the scheduler's timeout event), the abort's rollback
through botocore's Stubber on the Greengrass client (moto lacks Greengrass v2), the thing group in moto IoT."""

from __future__ import annotations

import datetime as dt
import types
from uuid import uuid4

import boto3
import pytest
from botocore.stub import Stubber

from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.sdk.exceptions import TaskAwaitingInput, TaskDeferred
from sim2real.orchestration.operators.canary_review import ANSWER_KEY, DECISION_XCOM, CanaryReviewOperator, review_body
from sim2real.orchestration.triggers.greengrass import GreengrassDeploymentTrigger

from operator_helpers import FakeTI
from sim2real.orchestration.hooks.greengrass import deployment_arn
from test_canary import CANARY, GROUP, RB, REGION, THINGS, stub_rollback
from test_model_approval_decisions import FakeStore
from tests.orchestration.environments import MINIMAL_ENVIRONMENT, use_environment

EVIDENCE = {
    "decision": "promote", "message": "promote: field success rate 0.900 (95 % Wilson interval [0.699, 0.972]) over "
                                      "20 episode(s), threshold 0.600: ...",
    "rate": 0.9, "ci95": [0.699, 0.972], "n": 20, "successes": 18, "threshold": 0.6, "min_episodes": 20,
    "robots": {"arm-1": {"n": 12, "successes": 11, "interventions": 1},
               "arm-2": {"n": 8, "successes": 7, "interventions": 0}},
    "silent": [], "refused": {"foreign": 2, "early": 1},
    "refusals": [["field/episodes/arm-2/e1.json", "foreign", "deployment_id 'dep-x' is not one of ['c0ffee']"]],
    "window": {"start": "2026-12-04T08:00:00Z", "end": "2026-12-04T09:00:00Z"}, "deployment_id": CANARY,
    "model_version": "ab" * 32,
}


@pytest.fixture(scope="module")
def group_arn(moto_endpoint):
    iot = boto3.client("iot", region_name=REGION, endpoint_url=moto_endpoint)
    return iot.create_thing_group(thingGroupName=GROUP)["thingGroupArn"]


def review_ti() -> FakeTI:
    """A try of the review task, with the verdict's evidence to pull (FakeTI's pull ignores task_ids)."""
    ti = FakeTI("deploy.canary_review")
    ti.xcom["canary_verdict"] = dict(EVIDENCE)
    return ti


@pytest.fixture
def context():
    return {"ti": review_ti(), "task_instance": types.SimpleNamespace(id=uuid4())}


@pytest.fixture
def requests(monkeypatch) -> list[dict]:
    """The HITL requests the operator writes (the provider's ``upsert_hitl_detail``, recorded instead)."""
    import airflow.providers.standard.operators.hitl as hitl

    written: list[dict] = []
    monkeypatch.setattr(hitl, "upsert_hitl_detail", lambda **kw: written.append(kw))
    return written


def next_try(context, try_number: int | None = None, max_tries: int | None = None) -> dict:
    """``context`` for a later try of the task: a new task instance with its own XComs (the verdict's evidence), and
    Airflow's try counters when given (without them it counts as a retry: ``starts_afresh``)."""
    ti = review_ti()
    if try_number is not None:
        ti.try_number, ti.max_tries = try_number, max_tries
    return {**context, "ti": ti}


def stub_promote(stub, group_arn) -> None:
    """The promotion: the canary deployment tagged ``sim2real:field-verdict=promoted`` (TagResource)."""
    stub.add_response("tag_resource", {}, {"resourceArn": deployment_arn(group_arn, CANARY),
                                           "tags": {"sim2real:field-verdict": "promoted"}})


def operator(**kwargs) -> CanaryReviewOperator:
    return CanaryReviewOperator(task_id="canary_review", thing_group_name=GROUP, deployment_name="sim2real-k-canary",
                                verdict_task_id="deploy.canary_verdict", **kwargs)


def answer(option, comment="", name="alice"):
    """The event Airflow's ``update_hitl_detail`` resumes the task with (``HITLDetail.as_resume_event_payload``)."""
    return {"chosen_options": [option], "params_input": {"comment": comment},
            "responded_at": dt.datetime(2026, 12, 4, 9, 30, tzinfo=dt.timezone.utc),
            "responded_by_user": {"id": name, "name": name}, "timedout": False}


def test_the_body_shows_the_evidence_the_recommendation_each_robot_and_the_refusals():
    body = review_body({**EVIDENCE, "decision": "roll_back", "silent": ["arm-3"]})
    assert "**Approve = Promote** the release to the fleet thing group" in body and "**Reject = Abort**" in body
    assert f"Canary deployment: `{CANARY}`" in body and "ab" * 32 in body
    assert "Field success rate: **0.900** (95 % Wilson interval [0.699, 0.972])" in body
    assert "Episodes: 18 successful of 20 (20 needed)" in body and "Threshold: 0.600" in body
    assert "Automatic verdict: **roll back** the canary group (abort) — promote: field success rate 0.900" in body
    assert "| arm-1 | 12 | 11 | 0.917 | 1 |" in body and "| arm-2 | 8 | 7 | 0.875 | 0 |" in body
    assert "| arm-3 | 0 | 0 | n/a | 0 |" in body and "No episode from: arm-3." in body
    assert "early: 1, foreign: 2" in body and "- `field/episodes/arm-2/e1.json`: foreign (deployment_id" in body


def test_the_request_carries_the_evidence_and_the_environments_approvers(context, monkeypatch, requests):
    use_environment(monkeypatch, {**MINIMAL_ENVIRONMENT, "approval": {"approvers": ["bob", "carol"]}})
    with pytest.raises(TaskAwaitingInput):  # Airflow 3.3+: the task waits for the answer, no trigger
        operator(response_timeout=dt.timedelta(hours=2)).execute(context)
    (request,) = requests
    assert request["options"] == ["Approve", "Reject"] and set(request["params"]) == {"comment"}
    assert request["subject"] == (f"Promote the canary release to the fleet? Canary {CANARY} on {GROUP}: field "
                                  "success rate 0.900 (95 % Wilson interval [0.699, 0.972]) over 20 episode(s), "
                                  "threshold 0.600")
    assert request["body"] == review_body(EVIDENCE)
    assert request["assigned_users"] == [{"id": "bob", "name": "bob"}, {"id": "carol", "name": "carol"}]


def test_without_a_canary_nothing_is_asked(context):
    op = CanaryReviewOperator(task_id="canary_review", thing_group_name="", deployment_name="d",
                              verdict_task_id="deploy.canary_verdict")
    assert op.execute(context) == {"decision": "no_canary"}


def test_promote_returns_the_evidence_with_the_decision(moto_endpoint, group_arn, context):
    context["task_state_store"] = store = FakeStore()
    op = operator()
    with Stubber(op.hook.conn) as stub:  # the promotion is recorded on the canary deployment
        stub_promote(stub, group_arn)
        result = op.execute_complete(context, answer("Approve", "field looks good", name="Bob"))
        stub.assert_no_pending_responses()
    decision = {"decided_by": "Bob", "at": "2026-12-04T09:30:00+00:00", "comment": "field looks good",
                "status": "Promote"}
    assert result == {**EVIDENCE, "decision": decision}
    assert context["ti"].xcom[DECISION_XCOM] == decision
    # kept after it was carried out: a retry of this try (a stale executor state) promotes again, asks nobody
    assert store.rows[ANSWER_KEY] == {"deployment_id": CANARY, "decision": decision}


def abort(op, context, group_arn, create_fails=False, rollback_status="QUEUED"):
    """Abort: exactly the canary group's rollback is created (Stubber), and the task defers on its wait."""
    with Stubber(op.hook.conn) as stub:
        stub_rollback(stub, group_arn, create_fails, rollback_status)
        with pytest.raises((TaskDeferred, AirflowFailException)) as outcome:
            op.execute_complete(context, {**answer("Reject", "arm-2 drops the cube"),
                                          "responded_at": "2026-12-04T09:30:00+00:00"})
        stub.assert_no_pending_responses()
    return outcome.value


def test_abort_rolls_the_canary_group_back_and_fails_naming_who_and_why(moto_endpoint, group_arn, context):
    context["task_state_store"] = store = FakeStore()
    deferred = abort(operator(), context, group_arn)
    assert store.rows[ANSWER_KEY]["deployment_id"] == CANARY  # kept while the rollback runs: a retry completes it
    assert isinstance(deferred, TaskDeferred) and deferred.method_name == "rollback_complete"
    trigger = deferred.trigger
    assert isinstance(trigger, GreengrassDeploymentTrigger)
    assert (trigger.deployment_id, trigger.thing_group_arn, trigger.thing_names, trigger.cancel_on_kill) == (
        RB, group_arn, THINGS, False)
    assert context["ti"].xcom[DECISION_XCOM]["status"] == "Abort"
    done = {"status": "success", "deployment_id": RB, "message": "",
            "devices": {t: {"status": "SUCCEEDED", "outcome": "success", "reason": None} for t in THINGS}}
    with pytest.raises(AirflowFailException) as err:
        operator().rollback_complete(context, done, **deferred.kwargs)  # a resumed task is a fresh operator
    assert str(err.value) == (
        f"Canary {CANARY} (sim2real-k-canary) on thing group {GROUP!r} aborted in Airflow by alice at "
        f"2026-12-04T09:30:00+00:00: arm-2 drops the cube. Rolled back: deployment {RB} "
        "(sim2real-k-canary-rollback) put sim2real-run-0 (deployment old) back on the canary robots (arm-1: "
        "SUCCEEDED; arm-2: SUCCEEDED); the fleet was not deployed")
    assert store.rows[ANSWER_KEY]["deployment_id"] == CANARY  # kept after the rollback: a retry fails the same way


def test_a_retry_after_an_abort_completes_it_and_never_asks_again(moto_endpoint, group_arn, context, requests):
    """The answer is kept in the task state store (shared by the run's tries): a retry of the aborted review (Airflow
    3.3.1 can fail a task from its deferral's stale executor state and retry it) rolls back again, the same
    rollback (its client token), and writes no second request (a person would be asked again after the rollback)."""
    context["task_state_store"] = store = FakeStore()
    abort(operator(), context, group_arn)
    assert store.rows[ANSWER_KEY] == {"deployment_id": CANARY, "decision": context["ti"].xcom[DECISION_XCOM]}
    retry = next_try(context)
    op = operator()
    with Stubber(op.hook.conn) as stub:
        stub_rollback(stub, group_arn, rollback_status="SUCCEEDED")  # the robots finished it meanwhile
        with pytest.raises(AirflowFailException) as err:
            op.execute(retry)  # settled: no deferral whose trigger would fire at once
        stub.assert_no_pending_responses()
    assert requests == []
    assert str(err.value).startswith(f"Canary {CANARY} (sim2real-k-canary) on thing group {GROUP!r} aborted in "
                                     "Airflow by alice at 2026-12-04T09:30:00+00:00: arm-2 drops the cube. Rolled "
                                     f"back: deployment {RB}"), str(err.value)
    decision = retry["ti"].xcom[DECISION_XCOM]
    assert (decision["decided_by"], decision["status"], decision["comment"]) == ("alice", "Abort",
                                                                                 "arm-2 drops the cube")
    assert store.rows[ANSWER_KEY]["deployment_id"] == CANARY  # kept: a further retry fails the same way


PROMOTED = {"decided_by": "Bob", "at": "2026-12-04T09:30:00+00:00", "comment": "field looks good",
            "status": "Promote"}


@pytest.mark.parametrize("row", [
    {"deployment_id": "d0ld-canary", "decision": PROMOTED},  # the canary a clear of the deploy group replaced
    PROMOTED,                                                # recorded without its deployment (an older release)
])
def test_a_decision_recorded_for_another_canary_deployment_is_not_carried_out(context, row, requests):
    """Airflow 3.3.1 keeps task state store rows across a clear of the task (``clear_task_instances`` leaves them;
    ``[state_store] clear_on_success`` is False by default): a clear that made a new canary deployment asks the
    person again instead of promoting the new release with the old canary's answer."""
    context["task_state_store"] = FakeStore()
    context["task_state_store"].rows[ANSWER_KEY] = row
    op = operator()
    with Stubber(op.hook.conn) as stub, pytest.raises(TaskAwaitingInput):  # no AWS call: nothing promoted
        op.execute(context)
    stub.assert_no_pending_responses()
    (request,) = requests
    assert request["subject"].startswith(f"Promote the canary release to the fleet? Canary {CANARY} on {GROUP}")
    assert DECISION_XCOM not in context["ti"].xcom


def test_a_promote_recorded_for_this_canary_deployment_is_carried_out_by_a_retry(
        moto_endpoint, group_arn, context, requests):
    """The retry path: the try that received the Promote failed before its TagResource; the retry promotes with
    the recorded decision and asks nobody."""
    context["task_state_store"] = store = FakeStore()
    store.rows[ANSWER_KEY] = {"deployment_id": CANARY, "decision": PROMOTED}
    op = operator()
    with Stubber(op.hook.conn) as stub:
        stub_promote(stub, group_arn)
        result = op.execute(context)
        stub.assert_no_pending_responses()
    assert result == {**EVIDENCE, "decision": PROMOTED} and context["ti"].xcom[DECISION_XCOM] == PROMOTED
    assert requests == [] and store.rows[ANSWER_KEY] == {"deployment_id": CANARY, "decision": PROMOTED}


def test_a_retry_after_the_abort_was_carried_out_fails_the_same_way_and_asks_nobody(
        moto_endpoint, group_arn, context, requests):
    """Airflow 3.3.1 under load: the abort's rollback wait ends seconds after it deferred, the resumed try rolls
    back and fails, then the deferral's stale executor state marks that try for retry. Before: the rollback's end
    had deleted the decision, so the retry asked the person again about a canary already rolled back, and the run
    waited for an answer instead of ending failed (seen in the live canary abort)."""
    context["task_state_store"] = FakeStore()
    deferred = abort(operator(retries=2), context, group_arn)
    done = {"status": "success", "deployment_id": RB, "message": "",
            "devices": {t: {"status": "SUCCEEDED", "outcome": "success", "reason": None} for t in THINGS}}
    with pytest.raises(AirflowFailException) as first:
        operator(retries=2).rollback_complete(context, done, **deferred.kwargs)  # carried out: the try fails
    retry = next_try(context, 2, 2)  # the retry Airflow scheduled from the stale state
    op = operator(retries=2)
    with Stubber(op.hook.conn) as stub:
        stub_rollback(stub, group_arn, rollback_status="SUCCEEDED")  # the same rollback, found by its client token
        with pytest.raises(AirflowFailException) as again:
            op.execute(retry)
        stub.assert_no_pending_responses()
    assert requests == []
    assert str(again.value) == str(first.value)


def test_a_promote_carried_out_is_carried_out_again_by_a_retry(moto_endpoint, group_arn, context, requests):
    context["task_state_store"] = FakeStore()
    op = operator(retries=2)
    with Stubber(op.hook.conn) as stub:
        stub_promote(stub, group_arn)
        first = op.execute_complete(context, answer("Approve", "field looks good", name="Bob"))
    retry = next_try(context, 2, 2)
    op = operator(retries=2)
    with Stubber(op.hook.conn) as stub:
        stub_promote(stub, group_arn)  # TagResource again: the same tag
        assert op.execute(retry) == first
        stub.assert_no_pending_responses()
    assert requests == []


@pytest.mark.parametrize(("try_number", "max_tries"), [(1, 2), (3, 4)], ids=["first-try", "first-after-a-clear"])
def test_the_first_try_of_a_series_forgets_a_recorded_decision_and_asks(context, try_number, max_tries, requests):
    """A person's clear (``clear_task_instances``: ``max_tries = try_number + retries``) asks again, although the
    task state store still holds the decision for this canary (Airflow 3.3.1 keeps its rows across clears)."""
    context["task_state_store"] = store = FakeStore()
    store.rows[ANSWER_KEY] = {"deployment_id": CANARY, "decision": PROMOTED}
    context["ti"].try_number, context["ti"].max_tries = try_number, max_tries
    op = operator(retries=2)
    with Stubber(op.hook.conn) as stub, pytest.raises(TaskAwaitingInput):  # no AWS call: nothing promoted
        op.execute(context)
    stub.assert_no_pending_responses()
    assert len(requests) == 1 and ANSWER_KEY not in store.rows and DECISION_XCOM not in context["ti"].xcom


def test_an_abort_whose_rollback_fails_names_both_deployments(moto_endpoint, group_arn, context):
    deferred = abort(operator(), context, group_arn)
    failed = {"status": "failure", "deployment_id": RB, "message": "",
              "devices": {"arm-1": {"status": "FAILED", "outcome": "failure", "reason": "disk full"}}}
    with pytest.raises(AirflowFailException) as err:
        operator().rollback_complete(context, failed, **deferred.kwargs)
    text = str(err.value)
    assert text.startswith(f"Canary {CANARY} (sim2real-k-canary) on thing group {GROUP!r} aborted in Airflow by "
                           "alice at 2026-12-04T09:30:00+00:00: arm-2 drops the cube.")
    assert f"Both deployments: {CANARY} (the canary) and {RB} (the rollback)" in text


def test_an_abort_whose_rollback_cannot_be_created_fails_at_once(moto_endpoint, group_arn, context):
    err = abort(operator(), context, group_arn, create_fails=True)
    assert isinstance(err, AirflowFailException) and "aborted in Airflow by alice" in str(err)
    assert "AccessDeniedException" in str(err) and f"the canary robots still run deployment {CANARY}" in str(err)


def test_no_answer_in_time_fails_naming_the_canary_and_how_to_decide(context):
    timeout = {"error": "The Human-in-the-loop response timeout has passed without a response.",
               "error_type": "timeout"}
    with pytest.raises(AirflowFailException) as err:
        operator(response_timeout=dt.timedelta(hours=3)).execute_complete(context, timeout)
    assert str(err.value) == (
        f"Canary {CANARY} (sim2real-k-canary) on thing group {GROUP!r} got no Promote or Abort within 3:00:00: the "
        "canary robots still run it and the fleet was not deployed. Clear this task (canary_review) to be asked "
        "again, then answer in Browse > Required Actions (Approve = Promote, Reject = Abort)")
    assert DECISION_XCOM not in context["ti"].xcom


def test_an_answer_outside_the_options_is_refused(context):
    with pytest.raises(ValueError, match="not in"):
        operator().execute_complete(context, answer("Maybe"))
    assert DECISION_XCOM not in context["ti"].xcom


@pytest.mark.parametrize("review", [False, "False"])  # as given, or rendered from the plan's canary_review
def test_without_a_review_nothing_is_asked(context, review):
    assert operator(review=review).execute(context) == {"decision": "no_review"}


def test_a_retry_after_a_clear_carries_out_the_decision_that_series_received(
        moto_endpoint, group_arn, context, requests):
    """Cleared after try 2 (``max_tries`` = 2 + 2 retries = 4): try 3 asked and recorded the answer, try 4 is a
    retry of that series and carries it out without asking."""
    context["task_state_store"] = store = FakeStore()
    store.rows[ANSWER_KEY] = {"deployment_id": CANARY, "decision": PROMOTED}
    context["ti"].try_number, context["ti"].max_tries = 4, 4
    op = operator(retries=2)
    with Stubber(op.hook.conn) as stub:
        stub_promote(stub, group_arn)
        assert op.execute(context) == {**EVIDENCE, "decision": PROMOTED}
        stub.assert_no_pending_responses()
    assert requests == []
