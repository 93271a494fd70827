"""GreengrassDeploymentOperator / GreengrassV2Hook / GreengrassDeploymentTrigger.

moto has no Greengrass v2, so its calls are answered by botocore's Stubber (sync) and
aiobotocore's AioStubber (trigger), which validate every request and response against the
real ``greengrassv2`` service model. The thing group lives in moto IoT.
"""

from __future__ import annotations

import asyncio
import json

import boto3
import pytest
from aiobotocore.stub import AioStubber
from botocore.stub import Stubber

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException
from airflow.sdk.bases.operator import ExecutorSafeguard
from airflow.sdk.exceptions import TaskDeferred
from sim2real.orchestration.hooks.greengrass import GreengrassV2Hook
from sim2real.orchestration.operators.greengrass import GreengrassDeploymentOperator, normalize_components
from sim2real.orchestration.triggers.greengrass import GreengrassDeploymentTrigger

from operator_helpers import first_event

ExecutorSafeguard.test_mode = True
REGION = "us-east-1"
GROUP = "sim2real-robots"
DEP = "a1b2c3d4-5678-90ab-cdef-111111111111"
COMPONENTS = {
    "com.sim2real.PolicyInference": {
        "componentVersion": "1.0.0",
        "configurationUpdate": {"merge": json.dumps({"ModelUri": "s3://b/runs/k/vla/model.tar.gz"})},
    },
    "com.sim2real.PolicySetup": {"componentVersion": "1.0.0"},
}


@pytest.fixture
def ti_task_id():
    return "deploy"


@pytest.fixture(scope="module")
def group_arn(moto_endpoint):
    iot = boto3.client("iot", region_name=REGION, endpoint_url=moto_endpoint)
    return iot.create_thing_group(thingGroupName=GROUP)["thingGroupArn"]


def operator(**kwargs):
    return GreengrassDeploymentOperator(
        task_id="deploy", thing_group_name=GROUP, components=COMPONENTS, deployment_name="run-1",
        waiter_delay=0, **kwargs,
    )


def effective(status, deployment_id=DEP, reason=None, errors=None):
    entry = {
        "deploymentId": deployment_id, "deploymentName": "run-1", "iotJobId": "job-1", "targetArn": "arn:t",
        "coreDeviceExecutionStatus": status,
        "creationTimestamp": 0, "modifiedTimestamp": 0,
    }
    if reason:
        entry["reason"] = reason
    if errors:
        entry["statusDetails"] = {"errorStack": errors, "errorTypes": ["DEPLOYMENT_FAILURE"]}
    return {"effectiveDeployments": [entry]}


def stub_create(stub, group_arn, reuse=False, things=("robot-a",)):
    # The group's core devices are listed before anything is created (an empty group gets no deployment).
    stub.add_response("list_core_devices", {"coreDevices": [{"coreDeviceThingName": t} for t in things]},
                      {"thingGroupArn": group_arn})
    if reuse:
        stub.add_response(
            "list_deployments",
            {"deployments": [{"deploymentId": DEP, "deploymentName": "run-1", "targetArn": group_arn, "deploymentStatus": "ACTIVE"}]},
            {"targetArn": group_arn, "historyFilter": "ALL"},
        )
    else:
        stub.add_response(
            "list_deployments",
            {"deployments": [{"deploymentId": "old", "deploymentName": "run-0", "targetArn": group_arn, "deploymentStatus": "ACTIVE"}]},
            {"targetArn": group_arn, "historyFilter": "ALL"},
        )
        stub.add_response(
            "create_deployment",
            {"deploymentId": DEP, "iotJobId": "job-1"},
            {
                "targetArn": group_arn,
                "deploymentName": "run-1",
                "components": COMPONENTS,
                "deploymentPolicies": {"failureHandlingPolicy": "ROLLBACK"},
            },
        )
    stub.add_response("get_deployment", {"deploymentId": DEP, "iotJobId": "job-1", "deploymentStatus": "ACTIVE"}, {"deploymentId": DEP})


def stub_devices(stub, group_arn, statuses: dict[str, dict]):
    stub.add_response(
        "list_core_devices",
        {"coreDevices": [{"coreDeviceThingName": t, "status": "HEALTHY"} for t in statuses]},
        {"thingGroupArn": group_arn},
    )
    for thing, response in statuses.items():
        stub.add_response("list_effective_deployments", response, {"coreDeviceThingName": thing})


# ---------------------------------------------------------------- settled without deferring
@pytest.mark.parametrize("status", ["SUCCEEDED", "COMPLETED"])
def test_success_statuses(moto_endpoint, group_arn, context, status):
    op = operator()
    with Stubber(op.hook.conn) as stub:
        stub_create(stub, group_arn)
        stub_devices(stub, group_arn, {"robot-a": effective(status), "robot-b": effective("SUCCEEDED")})
        result = op.execute(context)
        stub.assert_no_pending_responses()
    assert result == {"deployment_id": DEP, "iot_job_id": "job-1", "target_arn": group_arn, "thing_group_name": GROUP,
                      "devices": {"robot-a": status, "robot-b": "SUCCEEDED"}}
    assert context["ti"].xcom["sim2real_greengrass_deployment"]["deployment_id"] == DEP


@pytest.mark.parametrize("status", ["FAILED", "TIMED_OUT", "REJECTED", "CANCELED"])
def test_failure_statuses_cancel_and_list_devices(moto_endpoint, group_arn, context, status):
    op = operator()
    with Stubber(op.hook.conn) as stub:
        stub_create(stub, group_arn)
        stub_devices(
            stub, group_arn,
            {"robot-a": effective("SUCCEEDED"),
             "robot-b": effective(status, reason="component com.sim2real.PolicyInference broke", errors=["COMPONENT_BROKEN"])},
        )
        stub.add_response("cancel_deployment", {"message": "ok"}, {"deploymentId": DEP})
        stub_devices(  # read again after the cancel: what each robot reports now
            stub, group_arn,
            {"robot-a": effective("SUCCEEDED"),
             "robot-b": effective(status, reason="component com.sim2real.PolicyInference broke", errors=["COMPONENT_BROKEN"])},
        )
        with pytest.raises(AirflowException) as err:
            op.execute(context)
        stub.assert_no_pending_responses()  # CancelDeployment was called, the devices read again
    text = str(err.value)
    assert f"robot-b: {status}" in text and "robot-a: SUCCEEDED" in text
    assert "PolicyInference broke" in text and "COMPONENT_BROKEN" in text
    assert "cancelled" in text and "runs this release run-1" in text and "MIXED" in text


def test_in_progress_queued_or_not_received_defers(moto_endpoint, group_arn, context):
    """Not over on every device (another deployment's status is ignored): the wait defers."""
    op = operator()
    with Stubber(op.hook.conn) as stub:
        stub_create(stub, group_arn)
        stub_devices(stub, group_arn, {"robot-a": effective("QUEUED"),
                                       "robot-b": effective("FAILED", deployment_id="someone-else")})
        with pytest.raises(TaskDeferred):
            op.execute(context)
        stub.assert_no_pending_responses()


def test_retry_reuses_active_deployment(moto_endpoint, group_arn, context):
    op = operator()
    with Stubber(op.hook.conn) as stub:
        stub_create(stub, group_arn, reuse=True)  # no create_deployment stubbed: a call would fail
        stub_devices(stub, group_arn, {"robot-a": effective("SUCCEEDED")})
        assert op.execute(context)["deployment_id"] == DEP


def test_no_core_devices_fails_before_any_deployment(moto_endpoint, group_arn, context):
    """An empty group: refused before CreateDeployment (nothing to cancel), naming the group, not retried."""
    op = operator()
    with Stubber(op.hook.conn) as stub:
        stub.add_response("list_core_devices", {"coreDevices": []}, {"thingGroupArn": group_arn})
        # no list_deployments / create_deployment stubbed: either call would fail the test
        with pytest.raises(AirflowFailException) as err:
            op.execute(context)
        stub.assert_no_pending_responses()
    assert f"thing group {GROUP!r} ({group_arn}) has no Greengrass core devices" in str(err.value)
    assert "no deployment was created" in str(err.value) and "None" not in str(err.value)


def test_timeout_is_one_bound_from_the_form_and_names_the_unfinished_devices(moto_endpoint, group_arn, context):
    """deployment_timeout_seconds (rendered from the run's form) sets the polls; a timeout event cancels and
    fails with AirflowFailException (no retry: a retry would create a second deployment and double the bound)."""
    op = operator(deployment_timeout_seconds=90)
    op.waiter_delay = 30  # 90 s / 30 s = 3 polls
    devices = {"robot-a": {"status": "SUCCEEDED", "outcome": "success", "reason": None},
               "robot-b": {"status": "IN_PROGRESS", "outcome": "retry", "reason": None}}
    event = {"status": "timeout", "message": "no end after 3 polls 30 s apart", "deployment_id": DEP,
             "devices": devices}
    base = {"deployment_id": DEP, "iot_job_id": "job-1", "target_arn": group_arn, "thing_group_name": GROUP}
    with Stubber(op.hook.conn) as stub:
        stub.add_response("cancel_deployment", {"message": "SUCCESS"}, {"deploymentId": DEP})
        stub_devices(stub, group_arn, {"robot-a": effective("SUCCEEDED"), "robot-b": effective("IN_PROGRESS")})
        with pytest.raises(AirflowFailException) as err:
            op.execute_complete(context, event, base)
        stub.assert_no_pending_responses()
    assert op.waiter_max_attempts == 3
    text = str(err.value)
    assert "timed out" in text and "unfinished devices: robot-b: IN_PROGRESS" in text
    assert "within the deployment timeout of 90 s" in text and "no end after 3 polls" in text
    assert "robot-a: SUCCEEDED" not in text.split("unfinished devices:")[1].split(".")[0]
    assert "cancelled" in text and "deployment_timeout_minutes" in text


def test_after_a_timeout_each_robot_is_named_with_the_release_it_really_runs(moto_endpoint, group_arn, context):
    """The wait's last reading said robot-b QUEUED; after the cancel it reports FAILED and rolled back, robot-a had
    SUCCEEDED and keeps the new release, robot-c never got it. The failure says exactly that (status as each
    device reports it, which release it runs, the fleet is mixed), not "devices roll back"."""
    op = operator(deployment_timeout_seconds=60)
    op.waiter_delay = 30
    devices = {"robot-a": {"status": "SUCCEEDED", "outcome": "success", "reason": None},
               "robot-b": {"status": "QUEUED", "outcome": "retry", "reason": None},
               "robot-c": {"status": "QUEUED", "outcome": "retry", "reason": None}}
    event = {"status": "timeout", "message": "no end after 2 polls", "deployment_id": DEP, "devices": devices}
    base = {"deployment_id": DEP, "iot_job_id": "job-1", "target_arn": group_arn, "thing_group_name": GROUP}

    def with_previous(response):
        previous = {"deploymentId": "old", "deploymentName": "sim2real-run-0", "iotJobId": "job-0",
                    "targetArn": "arn:t", "coreDeviceExecutionStatus": "SUCCEEDED",
                    "creationTimestamp": 0, "modifiedTimestamp": 0}
        return {"effectiveDeployments": response["effectiveDeployments"] + [previous]}

    with Stubber(op.hook.conn) as stub:
        stub.add_response("cancel_deployment", {"message": "SUCCESS"}, {"deploymentId": DEP})
        stub_devices(stub, group_arn, {
            "robot-a": with_previous(effective("SUCCEEDED")),
            "robot-b": with_previous(effective("FAILED", reason="PolicySetup failed", errors=["COMPONENT_BROKEN"])),
            "robot-c": with_previous(effective("CANCELED", reason="deployment canceled")),
        })
        with pytest.raises(AirflowFailException) as err:
            op.execute_complete(context, event, base)
        stub.assert_no_pending_responses()
    text = str(err.value)
    assert "(devices roll back)" not in text and "robot-b: QUEUED" not in text.split("Robots as they report")[1]
    assert "robot-a: SUCCEEDED — runs this release run-1" in text
    assert "robot-b: FAILED (PolicySetup failed" in text and "rolled back to sim2real-run-0" in text
    assert "robot-c: CANCELED (deployment canceled) — never applied this release: still runs sim2real-run-0" in text
    assert "The fleet is MIXED: robot-a run run-1, robot-b, robot-c do not" in text


RB = "a1b2c3d4-5678-90ab-cdef-222222222222"
#: GetDeployment of the group's previous release "run-0" (what CreateDeployment had sent for it).
PREVIOUS = {"targetArn": None, "deploymentId": "old", "deploymentName": "sim2real-run-0", "revisionId": "1",
            "deploymentStatus": "INACTIVE", "isLatestForTarget": False,
            "components": {"com.sim2real.PolicyInference": {"componentVersion": "0.9.0"},
                           "com.sim2real.PolicySetup": {"componentVersion": "0.9.0", "configurationUpdate": {
                               "merge": json.dumps({"ModelUri": "s3://b/runs/run-0/vla/model.tar.gz"})}}},
            "deploymentPolicies": {"failureHandlingPolicy": "ROLLBACK"},
            "iotJobConfiguration": {"jobExecutionsRolloutConfig": {"maximumPerMinute": 10}}}


def with_release(response, target, status="SUCCEEDED"):
    """A device's ListEffectiveDeployments with the group's earlier release "sim2real-run-0" in it."""
    previous = {"deploymentId": "old", "deploymentName": "sim2real-run-0", "iotJobId": "job-0", "targetArn": target,
                "coreDeviceExecutionStatus": status, "creationTimestamp": 0, "modifiedTimestamp": 0}
    return {"effectiveDeployments": response["effectiveDeployments"] + [previous]}


def failed_release_rolled_back(op, group_arn, context):
    """robot-a SUCCEEDED the release, robot-b FAILED it; both ran "sim2real-run-0" before: the deploy task
    cancels the release, reads the robots again, reads run-0's deployment and creates its rollback, and defers."""
    after = {"robot-a": with_release(effective("SUCCEEDED"), group_arn),
             "robot-b": with_release(effective("FAILED", reason="PolicySetup failed"), group_arn)}
    with Stubber(op.hook.conn) as stub:
        stub_create(stub, group_arn)
        stub_devices(stub, group_arn, after)
        stub.add_response("cancel_deployment", {"message": "SUCCESS"}, {"deploymentId": DEP})
        stub_devices(stub, group_arn, after)
        stub.add_response("get_deployment", {**PREVIOUS, "targetArn": group_arn}, {"deploymentId": "old"})
        # the request is the previous release's, as botocore's greengrassv2 model checks it
        stub.add_response("create_deployment", {"deploymentId": RB, "iotJobId": "job-rb"}, {
            "targetArn": group_arn, "deploymentName": "run-1-rollback", "clientToken": f"{DEP}-rollback",
            "components": PREVIOUS["components"],
            "deploymentPolicies": PREVIOUS["deploymentPolicies"],
            "iotJobConfiguration": PREVIOUS["iotJobConfiguration"]})
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context)
        stub.assert_no_pending_responses()
    return deferred.value


def test_a_release_some_robots_ran_is_rolled_back_on_the_whole_group(moto_endpoint, group_arn, context):
    """Before: robot-a kept the failed release (a cancel does not undo a device that SUCCEEDED) and the run only
    said the fleet was mixed. Now the group gets its last good release again, waited for in the triggerer."""
    op = operator()
    deferred = failed_release_rolled_back(op, group_arn, context)
    assert deferred.method_name == "rollback_complete"
    assert deferred.trigger.deployment_id == RB and deferred.trigger.thing_group_arn == group_arn
    assert deferred.trigger.thing_names == ["robot-a"]  # the robot that ran the release; robot-b rolled back itself
    rollback = context["ti"].xcom["rollback"]
    assert {k: rollback[k] for k in ("deployment_id", "deployment_name", "previous_deployment_id",
                                     "previous_deployment_name", "deployment_id_failed")} == {
        "deployment_id": RB, "deployment_name": "run-1-rollback", "previous_deployment_id": "old",
        "previous_deployment_name": "sim2real-run-0", "deployment_id_failed": DEP}
    assert deferred.kwargs == {"rollback": rollback}
    # The rollback reached every robot: the task still fails (this release is not deployed), saying so.
    done = {"status": "success", "deployment_id": RB, "message": "finished on 1 core device(s)",
            "devices": {"robot-a": {"status": "SUCCEEDED", "outcome": "success", "reason": None}}}
    with pytest.raises(AirflowFailException) as err:
        op.rollback_complete(context, done)  # no kwargs: as dag.test resumes, from XCom
    text = str(err.value)
    assert text.startswith(f"Greengrass deployment {DEP} (run-1) to thing group {GROUP!r} ({group_arn}) failed")
    assert "robot-a: SUCCEEDED — runs this release run-1" in text and "robot-b: FAILED (PolicySetup failed" in text
    assert (f"Rolled back automatically: deployment {RB} (run-1-rollback) put the components of sim2real-run-0 "
            "(deployment old) back on the robots that ran this release (robot-a: SUCCEEDED): the fleet runs "
            "sim2real-run-0 again") in text
    assert "release the previous approved model package again" not in text  # done: no advice to do it by hand


def rollback_ends(group_arn, context, status: str, device: dict, cancels: bool) -> str:
    """The release fails and is rolled back; the rollback's wait ends ``status`` with robot-a's ``device`` report;
    the task's failure message. ``cancels``: CancelDeployment of the rollback is expected (else a call fails)."""
    op = operator()
    deferred = failed_release_rolled_back(op, group_arn, context)
    event = {"status": status, "deployment_id": RB, "message": "no end after 120 polls", "devices": {"robot-a": device}}
    with Stubber(op.hook.conn) as stub:
        if cancels:
            stub.add_response("cancel_deployment", {"message": "SUCCESS"}, {"deploymentId": RB})
        with pytest.raises(AirflowFailException) as err:
            op.rollback_complete(context, event, **deferred.kwargs)
        stub.assert_no_pending_responses()
    return str(err.value)


def test_a_rollback_that_fails_too_names_both_deployments_and_is_cancelled(moto_endpoint, group_arn, context):
    text = rollback_ends(group_arn, context, "failure",
                         {"status": "FAILED", "outcome": "failure", "reason": "disk full"}, cancels=True)
    assert (f"The automatic rollback to sim2real-run-0 (deployment old) failed too: deployment {RB} (run-1-rollback): "
            "robot-a: FAILED (disk full); it was cancelled") in text
    assert f"Both deployments: {DEP} (this release) and {RB} (the rollback)" in text


def test_a_rollback_not_finished_in_time_stays_the_groups_release(moto_endpoint, group_arn, context):
    """robot-a went offline after running the release: cancelling the rollback would keep it on the failed release
    when it comes back; the rollback stays active (no CancelDeployment is stubbed: a call would fail)."""
    text = rollback_ends(group_arn, context, "timeout", {"status": "QUEUED", "outcome": "retry", "reason": None},
                         cancels=False)
    assert (f"The automatic rollback to sim2real-run-0 (deployment old), deployment {RB} (run-1-rollback), had not "
            "finished on every robot that ran this release (robot-a) within 0 s: robot-a: QUEUED. It stays active") in text
    assert f"Both deployments: {DEP} (this release) and {RB} (the rollback)" in text and "it was cancelled" not in text


def test_the_release_to_go_back_to_is_never_this_release_nor_one_a_robot_failed():
    """A cleared task's earlier deployment of the same release (B1) and an earlier release a robot FAILED (F) are
    not good releases, nor is another group's; A is."""
    from sim2real.orchestration.hooks.greengrass import last_good_deployment

    def entry(dep_id, name, status, created, target="arn:g"):
        return {"deploymentId": dep_id, "deploymentName": name, "targetArn": target,
                "coreDeviceExecutionStatus": status, "creationTimestamp": created}

    responses = {
        "robot-a": {"effectiveDeployments": [entry("B2", "run-1", "SUCCEEDED", 50), entry("B1", "run-1", "SUCCEEDED", 40),
                                             entry("F", "run-0b", "SUCCEEDED", 30), entry("A", "run-0", "SUCCEEDED", 10),
                                             entry("X", "other", "SUCCEEDED", 45, target="arn:other")]},
        "robot-b": {"effectiveDeployments": [entry("F", "run-0b", "FAILED", 30), entry("A", "run-0", "COMPLETED", 10)]},
    }
    assert last_good_deployment(responses, "B2", "run-1", "arn:g")["deploymentId"] == "A"
    assert last_good_deployment({"robot-a": {"effectiveDeployments": [entry("B1", "run-1", "SUCCEEDED", 1)]}},
                                "B2", "run-1", "arn:g") is None


def test_the_rollback_trigger_waits_only_for_the_robots_that_ran_the_release(moto_endpoint, async_stub):
    plan, stubbers = async_stub
    plan.append(("list_core_devices", {"coreDevices": [{"coreDeviceThingName": "robot-a"},
                                                       {"coreDeviceThingName": "robot-offline"}]},
                 {"thingGroupArn": "arn:g"}))
    plan.append(("list_effective_deployments", effective("SUCCEEDED"), {"coreDeviceThingName": "robot-a"}))
    event = first_event(GreengrassDeploymentTrigger(deployment_id=DEP, thing_group_arn="arn:g", waiter_delay=0,
                                                    waiter_max_attempts=1, thing_names=["robot-a"]))
    stubbers[0].assert_no_pending_responses()  # robot-offline is not read
    assert event["status"] == "success" and set(event["devices"]) == {"robot-a"}


def test_no_rollback_without_an_earlier_release_of_this_group_or_under_do_nothing(moto_endpoint, group_arn, context):
    """An earlier release of ANOTHER target (a robot in two thing groups) is not this group's: nothing to go back
    to, the failure says so and keeps the advice; under DO_NOTHING nothing is rolled back either."""
    for policy, other_target in (("ROLLBACK", "arn:aws:iot:us-east-1:123456789012:thinggroup/other"),
                                 ("DO_NOTHING", None)):
        op = operator(failure_handling_policy=policy)
        after = {"robot-a": with_release(effective("SUCCEEDED"), other_target or group_arn),
                 "robot-b": with_release(effective("FAILED"), other_target or group_arn)}
        with Stubber(op.hook.conn) as stub:
            stub.add_response("cancel_deployment", {"message": "SUCCESS"}, {"deploymentId": DEP})
            stub_devices(stub, group_arn, after)  # no get_deployment / create_deployment stubbed: a call fails
            with pytest.raises(AirflowFailException) as err:
                op.execute_complete(context, {"status": "failure", "deployment_id": DEP, "devices": {}},
                                    {"deployment_id": DEP, "target_arn": group_arn, "thing_group_name": GROUP})
            stub.assert_no_pending_responses()
        text = str(err.value)
        assert "The fleet is MIXED: robot-a run run-1, robot-b do not; to put every robot on one release" in text
        assert ("No automatic rollback: no robot of the group lists an earlier release" in text) is (policy == "ROLLBACK")


def test_trigger_gets_the_form_timeout(moto_endpoint, group_arn, context):
    op = operator(deployment_timeout_seconds=600)
    op.waiter_delay = 30
    with Stubber(op.hook.conn) as stub:
        stub_create(stub, group_arn)
        stub_devices(stub, group_arn, {"robot-a": effective("IN_PROGRESS")})  # not over yet: it defers
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context)
    assert deferred.value.trigger.attempts == 20
    assert deferred.value.timeout.total_seconds() == 600 + 120


@pytest.fixture(scope="module")
def model_package(moto_endpoint):
    sm = boto3.client("sagemaker", region_name=REGION, endpoint_url=moto_endpoint)
    sm.create_model_package_group(ModelPackageGroupName="sim2real-groot-models")
    return sm, sm.create_model_package(
        ModelPackageGroupName="sim2real-groot-models", ModelApprovalStatus="Approved",
        InferenceSpecification={"Containers": [{"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/g:1",
                                                "ModelDataUrl": "s3://b/runs/k/vla/model.tar.gz"}],
                                "SupportedContentTypes": ["application/json"],
                                "SupportedResponseMIMETypes": ["application/json"]},
    )["ModelPackageArn"]


@pytest.mark.parametrize("status", ["Rejected", "PendingManualApproval"])
def test_package_no_longer_approved_is_not_deployed(moto_endpoint, group_arn, context, model_package, status):
    """Approved when the approval wait saw it, then rejected / set back before the deploy stage: refused right
    before CreateDeployment; the status seen then is recorded (XCom model_package_check)."""
    sm, arn = model_package
    sm.update_model_package(ModelPackageArn=arn, ModelApprovalStatus=status)
    op = operator(model_package_arn=arn)
    with Stubber(op.hook.conn):  # no Greengrass call stubbed but the device list: nothing is created
        with pytest.raises(AirflowFailException) as err:
            op.execute(context)
    assert f"{arn} is {status}" in str(err.value) and "no Greengrass deployment was created" in str(err.value)
    assert context["ti"].xcom["model_package_check"] == {"model_package_arn": arn, "model_approval_status": status}


def test_package_still_approved_is_deployed_and_recorded(moto_endpoint, group_arn, context, model_package):
    sm, arn = model_package
    sm.update_model_package(ModelPackageArn=arn, ModelApprovalStatus="Approved")
    op = operator(model_package_arn=arn)
    with Stubber(op.hook.conn) as stub:
        stub_create(stub, group_arn)
        stub_devices(stub, group_arn, {"robot-a": effective("SUCCEEDED")})
        result = op.execute(context)
    assert (result["model_package_arn"], result["model_approval_status"]) == (arn, "Approved")
    assert context["ti"].xcom["model_package_check"]["model_approval_status"] == "Approved"


def test_unknown_thing_group(moto_endpoint, context):
    op = GreengrassDeploymentOperator(task_id="d", thing_group_name="nope", components=COMPONENTS, deployment_name="r")
    with pytest.raises(ValueError, match="thing group 'nope' does not exist"):
        op.execute(context)


def test_components_validation():
    out = normalize_components({"c": {"componentVersion": "1.0.0", "configurationUpdate": {"merge": {"b": 1}}}})
    assert out["c"]["configurationUpdate"]["merge"] == '{"b": 1}'
    for bad in ({}, {"c": {}}, {"c": {"componentVersion": "1", "configurationUpdate": {"merge": "[1]"}}}):
        with pytest.raises(ValueError):
            normalize_components(bad)


def test_defers(moto_endpoint, group_arn, context):
    op = operator()
    with Stubber(op.hook.conn) as stub:
        stub_create(stub, group_arn)
        stub_devices(stub, group_arn, {"robot-a": effective("IN_PROGRESS"), "robot-b": effective("SUCCEEDED")})
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context)
    trigger = deferred.value.trigger
    assert isinstance(trigger, GreengrassDeploymentTrigger)
    assert (trigger.deployment_id, trigger.thing_group_arn) == (DEP, group_arn)
    assert deferred.value.kwargs["base"]["iot_job_id"] == "job-1"


@pytest.mark.parametrize("statuses, succeeds", [(("SUCCEEDED", "SUCCEEDED"), True), (("SUCCEEDED", "FAILED"), False)])
def test_a_deployment_already_over_completes_without_deferring(moto_endpoint, group_arn, context, statuses, succeeds):
    """No trigger race: a deployment that finished on every device (or failed on one) is settled in the task."""
    op = operator()
    with Stubber(op.hook.conn) as stub:
        stub_create(stub, group_arn, reuse=True)
        stub_devices(stub, group_arn, {"robot-a": effective(statuses[0]), "robot-b": effective(statuses[1])})
        if succeeds:
            assert op.execute(context)["devices"] == {"robot-a": "SUCCEEDED", "robot-b": "SUCCEEDED"}
        else:
            stub.add_response("cancel_deployment", {}, {"deploymentId": DEP})
            with pytest.raises(AirflowFailException, match="robot-b"):
                op.execute(context)
        stub.assert_no_pending_responses()


# ---------------------------------------------------------------- trigger
@pytest.fixture
def async_stub(monkeypatch):
    """Answer the trigger's aiobotocore client with an AioStubber (moto lacks greengrassv2)."""
    plan: list = []
    stubbers: list = []
    original = GreengrassV2Hook.get_async_conn

    async def get_async_conn(self):
        cm = await original(self)

        class Conn:
            async def __aenter__(self_inner):
                client = await cm.__aenter__()
                stubber = AioStubber(client)
                for method, response, params in plan:
                    stubber.add_response(method, response, params)
                stubber.activate()
                stubbers.append(stubber)
                return client

            async def __aexit__(self_inner, *exc):
                return await cm.__aexit__(*exc)

        return Conn()

    monkeypatch.setattr(GreengrassV2Hook, "get_async_conn", get_async_conn)
    return plan, stubbers


@pytest.mark.parametrize(
    ("status", "expected"),
    [("SUCCEEDED", "success"), ("COMPLETED", "success"), ("FAILED", "failure"), ("TIMED_OUT", "failure"),
     ("REJECTED", "failure"), ("CANCELED", "failure"), ("QUEUED", "timeout"), ("IN_PROGRESS", "timeout")],
)
def test_trigger_device_status_table(moto_endpoint, async_stub, context, status, expected):
    plan, stubbers = async_stub
    plan.append(("list_core_devices", {"coreDevices": [{"coreDeviceThingName": "robot-a"}]}, {"thingGroupArn": "arn:g"}))
    plan.append(("list_effective_deployments", effective(status, reason="why"), {"coreDeviceThingName": "robot-a"}))
    event = first_event(GreengrassDeploymentTrigger(deployment_id=DEP, thing_group_arn="arn:g", waiter_delay=0, waiter_max_attempts=1))
    assert event["status"] == expected
    assert event["devices"]["robot-a"]["status"] == status
    stubbers[0].assert_no_pending_responses()
    op = operator()
    base = {"deployment_id": DEP, "iot_job_id": "job-1", "target_arn": "arn:g"}
    if expected == "success":
        assert op.execute_complete(context, event, base=base)["devices"] == {"robot-a": status}
    else:
        with Stubber(op.hook.conn) as stub:
            stub.add_response("cancel_deployment", {}, {"deploymentId": DEP})
            with pytest.raises(AirflowException, match=f"robot-a: {status}"):
                op.execute_complete(context, event, base=base)
            stub.assert_no_pending_responses()


def test_trigger_on_kill_cancels_deployment(moto_endpoint, async_stub):
    plan, stubbers = async_stub
    plan.append(("cancel_deployment", {"message": "cancelled"}, {"deploymentId": DEP}))
    asyncio.run(GreengrassDeploymentTrigger(deployment_id=DEP, thing_group_arn="arn:g").on_kill())
    stubbers[0].assert_no_pending_responses()


def test_trigger_serializes_round_trip():
    t = GreengrassDeploymentTrigger(deployment_id=DEP, thing_group_arn="arn:g", waiter_delay=3, waiter_max_attempts=4)
    path, kwargs = t.serialize()
    assert path == "sim2real.orchestration.triggers.greengrass.GreengrassDeploymentTrigger"
    assert GreengrassDeploymentTrigger(**kwargs).serialize() == (path, kwargs)
