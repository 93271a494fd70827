"""CanaryVerdictOperator / CanaryFieldEpisodesTrigger: the canary robots' field episodes in moto's S3 (written as
sim2real.edge.field_recorder writes them: one object per episode under its own key), the thing group in moto IoT,
Greengrass v2 (which moto lacks) through botocore's Stubber on the real service model."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from botocore.stub import Stubber

from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.sdk.exceptions import TaskDeferred
from sim2real.contract import field as contract
from sim2real.orchestration.hooks.greengrass import deployment_arn
from sim2real.orchestration.operators.canary import CanaryDeploymentOperator, CanaryVerdictOperator
from sim2real.orchestration.triggers.canary import CanaryFieldEpisodesTrigger
from sim2real.orchestration.triggers.greengrass import GreengrassDeploymentTrigger

from operator_helpers import first_event
from test_greengrass import PREVIOUS, effective, with_release
from tests.orchestration.test_field import SHA, episode

REGION, BUCKET, PREFIX, GROUP = "us-east-1", "sim2real-artifacts-123456789012", "fleet/", "sim2real-canary"
CANARY, RB = "c0ffee00-5678-90ab-cdef-111111111111", "c0ffee00-5678-90ab-cdef-222222222222"
THINGS = ["arm-1", "arm-2"]


@pytest.fixture(scope="module")
def group_arn(moto_endpoint):
    iot = boto3.client("iot", region_name=REGION, endpoint_url=moto_endpoint)
    return iot.create_thing_group(thingGroupName=GROUP)["thingGroupArn"]


@pytest.fixture
def s3(moto_endpoint):
    client = boto3.client("s3", region_name=REGION, endpoint_url=moto_endpoint)
    client.create_bucket(Bucket=BUCKET)
    yield client
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for obj in page.get("Contents", []):
            client.delete_object(Bucket=BUCKET, Key=obj["Key"])
    client.delete_bucket(Bucket=BUCKET)


def stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def upload(s3, start: datetime, *outcomes: tuple[str, bool], deployment: str = CANARY, model: str = SHA) -> None:
    """One object per episode ``(thing, success)``, a minute each from ``start`` + 1 min, under its own key."""
    for i, (thing, ok) in enumerate(outcomes, start=1):
        doc = episode(thing, i, success=ok, deployment=deployment, model=model)
        doc["started_at"], doc["ended_at"] = stamp(start + timedelta(minutes=i)), stamp(start + timedelta(minutes=i + 1))
        s3.put_object(Bucket=BUCKET, Key=contract.episode_key(PREFIX, thing, doc["episode_id"]),
                      Body=json.dumps(doc).encode())


def operator(start: datetime, **kwargs) -> CanaryVerdictOperator:
    """A verdict of 4 episodes at 0.5, its window opened at ``start``; 6 h long unless given (the module's times are
    taken at its import, which may be half an hour before a test runs in the whole suite)."""
    return CanaryVerdictOperator(**{
        "task_id": "canary_verdict", "thing_group_name": GROUP, "deployment_id": CANARY,
        "deployment_name": "sim2real-k-canary", "model_version": SHA, "bucket": BUCKET, "prefix": PREFIX,
        "min_episodes": 4, "window_minutes": 360, "min_success_rate": 0.5, "window_start": stamp(start),
        "waiter_delay": 60, **kwargs})


def defer(op, context, group_arn) -> TaskDeferred:
    """``execute`` with the group's core devices listed (Stubber): the episode wait it defers on."""
    with Stubber(op.hook.conn) as stub:
        stub.add_response("list_core_devices", {"coreDevices": [{"coreDeviceThingName": t} for t in THINGS]},
                          {"thingGroupArn": group_arn})
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context)
        stub.assert_no_pending_responses()
    return deferred.value


def resume(op, context, deferred: TaskDeferred, s3):
    """``execute_complete`` with the wait's event (listed: the objects of each canary robot, as the wait counts)."""
    listed = {t: s3.list_objects_v2(Bucket=BUCKET, Prefix=contract.episodes_prefix(PREFIX, t))["KeyCount"]
              for t in THINGS}
    return op.execute_complete(context, {"status": "success", "message": "", "listed": listed,
                                         "window_over": False}, **deferred.kwargs)


NOW = datetime.now(timezone.utc).replace(microsecond=0)
OPEN, OVER = NOW - timedelta(minutes=30), NOW - timedelta(minutes=120)  # window starts: open now, over an hour ago


# ---------------------------------------------------------------- trigger
def test_the_trigger_counts_each_canary_robots_objects_and_ends_when_there_are_enough(moto_endpoint, s3):
    upload(s3, OPEN, ("arm-1", True), ("arm-1", True), ("arm-2", True), ("arm-9", True))  # arm-9: no canary robot
    event = first_event(CanaryFieldEpisodesTrigger(bucket=BUCKET, prefix=PREFIX, thing_names=THINGS, min_episodes=3,
                                                   window_start=OPEN.timestamp(), window_end=NOW.timestamp() + 3600,
                                                   waiter_delay=0, waiter_max_attempts=1))
    assert event["status"] == "success" and event["listed"] == {"arm-1": 2, "arm-2": 1} and not event["window_over"]


def test_the_trigger_does_not_count_objects_uploaded_before_the_window(moto_endpoint, s3):
    """A canary robot's folder keeps its episodes of earlier releases: they must not end the wait."""
    upload(s3, OPEN, ("arm-1", True), ("arm-2", True), ("arm-1", True))
    later = datetime.now(timezone.utc) + timedelta(minutes=5)  # a window that starts after these uploads
    event = first_event(CanaryFieldEpisodesTrigger(bucket=BUCKET, prefix=PREFIX, thing_names=THINGS, min_episodes=3,
                                                   window_start=later.timestamp(), window_end=later.timestamp() + 60,
                                                   waiter_delay=0, waiter_max_attempts=1))
    assert event["status"] == "timeout" and event["listed"] == {"arm-1": 0, "arm-2": 0}


def test_the_trigger_ends_at_the_windows_end_with_what_is_there(moto_endpoint, s3):
    trigger = CanaryFieldEpisodesTrigger(bucket=BUCKET, prefix=PREFIX, thing_names=THINGS, min_episodes=3,
                                         window_end=NOW.timestamp() - 1, waiter_delay=0, waiter_max_attempts=5)
    event = first_event(trigger)
    assert event["status"] == "success" and event["window_over"] and event["listed"] == {"arm-1": 0, "arm-2": 0}
    # what the triggerer rebuilds it from
    assert trigger.serialize()[1]["window_end"] == NOW.timestamp() - 1 and trigger.serialize()[1]["keys_read"] == 0


# ---------------------------------------------------------------- operator
def test_execute_defers_on_the_episode_wait_until_the_windows_end(moto_endpoint, group_arn, context):
    # a window opened 30 minutes ago, counted from now (not from the module's import: in the whole suite this test
    # ran 25 minutes after it, and a window opened at the import had 5 minutes left, not 30)
    start = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=30)
    deferred = defer(operator(start, window_minutes=60), context, group_arn)
    trigger = deferred.trigger
    assert isinstance(trigger, CanaryFieldEpisodesTrigger) and deferred.method_name == "execute_complete"
    assert (trigger.bucket, trigger.prefix, trigger.thing_names, trigger.min_episodes, trigger.keys_read) == (
        BUCKET, PREFIX, THINGS, 4, 0)
    assert (trigger.window_start, trigger.window_end) == (start.timestamp(), (start + timedelta(minutes=60)).timestamp())
    # polls enough to reach the window's end (30 min left, one a minute), plus one
    assert trigger.waiter_delay == 60 and trigger.attempts in (30, 31)
    assert context["ti"].xcom["canary_window"] == {
        "start": stamp(start), "end": stamp(start + timedelta(minutes=60)), "thing_names": THINGS,
        "target_arn": group_arn}


@pytest.mark.parametrize(("field", "value", "error"), [
    ("min_episodes", 0, "min_episodes must be >= 1, got 0"),
    ("min_success_rate", 80, r"min_success_rate must be a fraction in \[0, 1\], got 80"),
    ("window_minutes", 0, "window_minutes must be positive, got 0"),
])
def test_a_limit_out_of_range_is_refused_before_any_call(context, field, value, error):
    op = operator(OPEN)
    setattr(op, field, value)
    with pytest.raises(ValueError, match=error):
        op.execute(context)


def test_enough_good_episodes_promote_with_the_evidence_and_the_refusals(moto_endpoint, group_arn, context, s3):
    op = operator(OPEN)
    deferred = defer(op, context, group_arn)
    upload(s3, OPEN, ("arm-1", True), ("arm-2", True), ("arm-1", True), ("arm-2", True))
    with Stubber(op.hook.conn) as stub:  # the verdict is recorded on the canary deployment
        stub.add_response("tag_resource", {}, {"resourceArn": deployment_arn(group_arn, CANARY),
                                               "tags": {"sim2real:field-verdict": "promoted"}})
        evidence = resume(op, context, deferred, s3)
        stub.assert_no_pending_responses()
    assert deployment_arn(group_arn, CANARY) == f"arn:aws:greengrass:{REGION}:123456789012:deployments:{CANARY}"
    assert evidence["decision"] == "promote" and evidence == context["ti"].xcom["canary_verdict"]
    assert evidence["message"].startswith("promote: field success rate 1.000 (95 % Wilson interval [0.510, 1.000]) "
                                          "over 4 episode(s), threshold 0.500")
    assert (evidence["n"], evidence["successes"], evidence["rate"]) == (4, 4, 1.0)
    assert evidence["robots"] == {"arm-1": {"n": 2, "successes": 2, "interventions": 0},
                                  "arm-2": {"n": 2, "successes": 2, "interventions": 0}}
    assert evidence["refused"] == {"malformed": 0, "duplicated": 0, "foreign": 0, "early": 0, "late": 0}


def test_a_refused_object_is_counted_and_too_few_valid_ones_wait_for_a_new_object(moto_endpoint, group_arn, context,
                                                                                   s3):
    op = operator(OPEN)
    deferred = defer(op, context, group_arn)
    upload(s3, OPEN, ("arm-1", True), ("arm-2", True), ("arm-1", True))
    doc = episode("arm-2", 9, deployment="dep-of-the-fleet")
    s3.put_object(Bucket=BUCKET, Key=contract.episode_key(PREFIX, "arm-2", doc["episode_id"]),
                  Body=json.dumps(doc).encode())
    with pytest.raises(TaskDeferred) as again:
        resume(op, context, deferred, s3)
    assert again.value.method_name == "execute_complete"
    assert again.value.trigger.keys_read == 4  # the wait ends again only on a fifth object
    evidence = context["ti"].xcom["canary_verdict"]
    assert evidence["decision"] == "wait" and evidence["refused"]["foreign"] == 1
    assert evidence["refusals"] == [[contract.episode_key(PREFIX, "arm-2", doc["episode_id"]), "foreign",
                                     "deployment_id 'dep-of-the-fleet' is not one of ['" + CANARY + "']"]]


def stub_rollback(stub, group_arn, create_fails: bool = False, rollback_status: str = "QUEUED") -> None:
    """The canary group's rollback on ``stub`` (the Greengrass client): its robots (each finished the canary after
    the earlier release "sim2real-run-0"; with ``rollback_status`` SUCCEEDED, a retry's view, also the rollback
    itself, newest), that release (GetDeployment), exactly its CreateDeployment again, and each robot's reading of
    the rollback before the task defers (``rollback_status``: QUEUED, still to do)."""
    after = {t: with_release(effective("SUCCEEDED", deployment_id=CANARY), group_arn) for t in THINGS}
    if rollback_status == "SUCCEEDED":
        for response in after.values():
            response["effectiveDeployments"].insert(0, {
                "deploymentId": RB, "deploymentName": "sim2real-k-canary-rollback", "iotJobId": "job-rb",
                "targetArn": group_arn, "coreDeviceExecutionStatus": "SUCCEEDED", "creationTimestamp": 100,
                "modifiedTimestamp": 100})
    stub.add_response("tag_resource", {}, {"resourceArn": deployment_arn(group_arn, CANARY),
                                           "tags": {"sim2real:field-verdict": "rejected"}})
    stub.add_response("list_core_devices", {"coreDevices": [{"coreDeviceThingName": t} for t in THINGS]},
                      {"thingGroupArn": group_arn})
    for thing, response in after.items():
        stub.add_response("list_effective_deployments", response, {"coreDeviceThingName": thing})
    stub.add_response("get_deployment", {**PREVIOUS, "targetArn": group_arn}, {"deploymentId": "old"})
    if create_fails:
        stub.add_client_error("create_deployment", "AccessDeniedException", "not allowed")
    else:
        stub.add_response("create_deployment", {"deploymentId": RB, "iotJobId": "job-rb"}, {
            "targetArn": group_arn, "deploymentName": "sim2real-k-canary-rollback",
            "clientToken": f"{CANARY}-rollback", "components": PREVIOUS["components"],
            "deploymentPolicies": PREVIOUS["deploymentPolicies"],
            "iotJobConfiguration": PREVIOUS["iotJobConfiguration"]})
        for thing in THINGS:
            stub.add_response("list_effective_deployments", effective(rollback_status, deployment_id=RB),
                              {"coreDeviceThingName": thing})


def roll_back(op, context, group_arn, s3, create_fails: bool = False) -> TaskDeferred:
    """The verdict is roll_back: the canary group's robots are read and the group's earlier release is deployed
    again (GetDeployment, CreateDeployment), as the Greengrass operator's rollback does."""
    deferred = defer(op, context, group_arn)
    with Stubber(op.hook.conn) as stub:
        stub_rollback(stub, group_arn, create_fails)
        with pytest.raises((TaskDeferred, AirflowFailException)) as outcome:
            resume(op, context, deferred, s3)
        stub.assert_no_pending_responses()
    return outcome.value


BAD = (("arm-1", False), ("arm-2", False)) * 5  # 0 of 10: the whole interval below 0.5, decided before the window ends
BAD_NUMBERS = ("field success rate 0.000 (95 % Wilson interval [0.000, 0.278]) over 10 episode(s), threshold 0.500: "
               "the whole interval is below the threshold with 10 >= 4 episodes")


def test_an_interval_below_the_threshold_rolls_the_canary_group_back(moto_endpoint, group_arn, context, s3):
    op = operator(OPEN)
    upload(s3, OPEN, *BAD)
    deferred = roll_back(op, context, group_arn, s3)
    assert deferred.method_name == "rollback_complete"
    trigger = deferred.trigger
    assert isinstance(trigger, GreengrassDeploymentTrigger)
    assert (trigger.deployment_id, trigger.thing_group_arn, trigger.thing_names, trigger.cancel_on_kill) == (
        RB, group_arn, THINGS, False)  # a kill leaves the rollback (the group's safe release) to finish
    rollback = context["ti"].xcom["canary_rollback"]
    assert deferred.kwargs == {"rollback": rollback}
    done = {"status": "success", "deployment_id": RB, "message": "",
            "devices": {t: {"status": "SUCCEEDED", "outcome": "success", "reason": None} for t in THINGS}}
    with pytest.raises(AirflowFailException) as err:
        op.rollback_complete(context, done)  # as dag.test resumes: from XCom
    assert str(err.value) == (
        f"Canary {CANARY} (sim2real-k-canary) on thing group {GROUP!r} roll back: {BAD_NUMBERS}. Rolled back: "
        f"deployment {RB} (sim2real-k-canary-rollback) put sim2real-run-0 (deployment old) back on the canary robots "
        "(arm-1: SUCCEEDED; arm-2: SUCCEEDED); the fleet was not deployed")


def test_a_rollback_that_does_not_finish_names_both_deployments(moto_endpoint, group_arn, context, s3):
    op = operator(OPEN)
    upload(s3, OPEN, *BAD)
    deferred = roll_back(op, context, group_arn, s3)
    failed = {"status": "failure", "deployment_id": RB, "message": "",
              "devices": {"arm-1": {"status": "FAILED", "outcome": "failure", "reason": "disk full"}}}
    with pytest.raises(AirflowFailException) as err:
        op.rollback_complete(context, failed, **deferred.kwargs)
    text = str(err.value)
    assert text.startswith(f"Canary {CANARY} (sim2real-k-canary) on thing group {GROUP!r} roll back: {BAD_NUMBERS}.")
    assert ("The rollback to sim2real-run-0 (deployment old) did not succeed (failure): arm-1: FAILED (disk full). "
            f"Both deployments: {CANARY} (the canary) and {RB} (the rollback)") in text


def test_a_rollback_that_cannot_be_created_fails_at_once_with_the_numbers(moto_endpoint, group_arn, context, s3):
    op = operator(OPEN)
    upload(s3, OPEN, *BAD)
    err = roll_back(op, context, group_arn, s3, create_fails=True)
    assert isinstance(err, AirflowFailException)
    assert str(err).startswith(f"Canary {CANARY} (sim2real-k-canary) on thing group {GROUP!r} roll back: "
                               f"{BAD_NUMBERS}. The automatic rollback to sim2real-run-0 (old) could not be created: ")
    assert "AccessDeniedException" in str(err) and f"the canary robots still run deployment {CANARY}" in str(err)


def test_a_robot_silent_for_the_whole_window_is_not_promoted(moto_endpoint, group_arn, context, s3):
    op = operator(OVER, window_minutes=60)
    upload(s3, OVER, *[("arm-1", True)] * 6)
    deferred = roll_back(op, context, group_arn, s3)
    assert deferred.method_name == "rollback_complete"
    assert context["ti"].xcom["canary_verdict"]["message"] == (
        "not promoted: robot arm-2 reported no episode in 60 min (field success rate 1.000 (95 % Wilson interval "
        "[0.610, 1.000]) over 6 episode(s), threshold 0.500)")
    assert context["ti"].xcom["canary_verdict"]["silent"] == ["arm-2"]


def test_a_listing_that_failed_fails_the_task_naming_the_prefix(moto_endpoint, group_arn, context):
    op = operator(OPEN)
    with pytest.raises(AirflowFailException, match=f"Waiting for the field episodes of canary {CANARY} under "
                                                   f"s3://{BUCKET}/fleet/field/episodes/ failed: ListObjectsV2"):
        op.execute_complete(context, {"status": "failure", "message": "ListObjectsV2 for ... failed: AccessDenied"})


def test_without_a_canary_group_the_canary_tasks_succeed_at_once_without_a_call(aws_env, context):
    """No Greengrass, IoT or S3 call is answered here: a call would fail the test."""
    to_canary = CanaryDeploymentOperator(task_id="deploy_to_canary", thing_group_name="", components={},
                                         deployment_name="sim2real-k-canary")
    assert to_canary.execute(context) == {}
    verdict = CanaryVerdictOperator(task_id="canary_verdict", thing_group_name="", deployment_id="",
                                    deployment_name="sim2real-k-canary", model_version="", bucket="b")
    assert verdict.execute(context) == {"decision": "no_canary"}


def test_a_wait_that_ran_out_of_polls_before_the_windows_end_waits_again(moto_endpoint, group_arn, context, s3):
    """The trigger's poll limit reaches past the window's end; should it still end first (a late triggerer), the
    task reads what is there and, the window being open, waits again rather than judging early."""
    op = operator(OPEN)
    deferred = defer(op, context, group_arn)
    upload(s3, OPEN, ("arm-1", True))
    with pytest.raises(TaskDeferred) as again:
        op.execute_complete(context, {"status": "timeout", "message": "no end after 30 polls",
                                      "listed": {"arm-1": 1, "arm-2": 0}, "window_over": False}, **deferred.kwargs)
    assert again.value.method_name == "execute_complete" and again.value.trigger.keys_read == 1
    assert context["ti"].xcom["canary_verdict"]["message"].startswith("wait: 1 of 4 episodes; no episode yet from arm-2")


def test_without_a_given_start_the_window_opens_when_the_canary_deployment_was_created(moto_endpoint, group_arn,
                                                                                       context):
    """The canary robots run the release, and report episodes, from the moment it is applied: before this task
    starts. A window opened at the task's start refused those episodes as early (found in a sandbox run: 3 of 10)."""
    op = CanaryVerdictOperator(
        task_id="canary_verdict", thing_group_name=GROUP, deployment_id=CANARY, deployment_name="sim2real-k-canary",
        model_version=SHA, bucket=BUCKET, prefix=PREFIX, min_episodes=4, window_minutes=60, min_success_rate=0.5,
        waiter_delay=60)
    with Stubber(op.hook.conn) as stub:
        stub.add_response("list_core_devices", {"coreDevices": [{"coreDeviceThingName": t} for t in THINGS]},
                          {"thingGroupArn": group_arn})
        stub.add_response("get_deployment", {**PREVIOUS, "deploymentId": CANARY, "targetArn": group_arn,
                                             "creationTimestamp": OPEN}, {"deploymentId": CANARY})
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context)
        stub.assert_no_pending_responses()
    assert deferred.value.trigger.window_start == OPEN.timestamp()
    assert context["ti"].xcom["canary_window"]["start"] == stamp(OPEN)


@pytest.mark.parametrize("review", [True, "True"])  # as given, or rendered from the plan's canary_review
def test_with_a_review_a_roll_back_verdict_is_returned_for_the_person_to_decide(moto_endpoint, group_arn, context, s3,
                                                                               review):
    op = operator(OPEN, review=review)
    deferred = defer(op, context, group_arn)
    upload(s3, OPEN, *BAD)
    with Stubber(op.hook.conn) as stub:  # nothing is rolled back: no Greengrass call
        evidence = resume(op, context, deferred, s3)
        stub.assert_no_pending_responses()
    assert evidence["decision"] == "roll_back" and evidence == context["ti"].xcom["canary_verdict"]
    assert evidence["message"] == f"roll back: {BAD_NUMBERS}" and "canary_rollback" not in context["ti"].xcom
