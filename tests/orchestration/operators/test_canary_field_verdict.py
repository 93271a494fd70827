"""A canary's field verdict is recorded on its Greengrass deployment (tag ``sim2real:field-verdict``): created
``pending``, and a rollback never goes back to a canary that was not promoted, even when its robots finished it.

Greengrass v2 through botocore's Stubber on the real ``greengrassv2`` service model; the thing group in moto IoT."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from airflow.sdk.exceptions import TaskDeferred
from sim2real.orchestration.hooks.greengrass import FIELD_VERDICT_TAG, GreengrassV2Hook, start_rollback
from sim2real.orchestration.operators.canary import CanaryDeploymentOperator

from test_greengrass import COMPONENTS, PREVIOUS

REGION, GROUP = "us-east-1", "sim2real-canary-verdicts"
CANARY, RB = "c0ffee00-5678-90ab-cdef-333333333333", "c0ffee00-5678-90ab-cdef-444444444444"


@pytest.fixture(scope="module")
def group_arn(moto_endpoint):
    iot = boto3.client("iot", region_name=REGION, endpoint_url=moto_endpoint)
    return iot.create_thing_group(thingGroupName=GROUP)["thingGroupArn"]


def entry(deployment_id: str, name: str, created: int, target: str) -> dict:
    return {"deploymentId": deployment_id, "deploymentName": name, "iotJobId": f"job-{deployment_id}",
            "targetArn": target, "coreDeviceExecutionStatus": "SUCCEEDED", "creationTimestamp": created,
            "modifiedTimestamp": created}


def test_a_canary_never_promoted_is_no_release_to_roll_back_to(moto_endpoint, group_arn):
    """The canary group's robots finished three earlier canaries: "rejected" (its rollback failed), "pending" (its
    review timed out, or its run was killed) and, before them, "promoted". Before: the newest they finished, the
    rejected one, was put back. Now both are passed over (GetDeployment ``tags``) and the promoted one is."""
    robots = {t: {"effectiveDeployments": [
        entry(CANARY, "sim2real-k4-canary", 40, group_arn), entry("rejected", "sim2real-k3-canary", 30, group_arn),
        entry("pending", "sim2real-k2-canary", 20, group_arn), entry("promoted", "sim2real-k1-canary", 10, group_arn),
    ]} for t in ("arm-1", "arm-2")}
    hook = GreengrassV2Hook(region_name=REGION)
    with Stubber(hook.conn) as stub:
        for deployment_id, verdict in (("rejected", "rejected"), ("pending", "pending"), ("promoted", "promoted")):
            stub.add_response("get_deployment", {**PREVIOUS, "deploymentId": deployment_id, "targetArn": group_arn,
                                                 "tags": {FIELD_VERDICT_TAG: verdict}}, {"deploymentId": deployment_id})
        stub.add_response("create_deployment", {"deploymentId": RB, "iotJobId": "job-rb"}, {
            "targetArn": group_arn, "deploymentName": "sim2real-k4-canary-rollback",
            "clientToken": f"{CANARY}-rollback", "components": PREVIOUS["components"],
            "deploymentPolicies": PREVIOUS["deploymentPolicies"],
            "iotJobConfiguration": PREVIOUS["iotJobConfiguration"]})
        rollback = start_rollback(hook, CANARY, "sim2real-k4-canary", group_arn, robots)
        stub.assert_no_pending_responses()
    assert rollback == {"deployment_id": RB, "deployment_name": "sim2real-k4-canary-rollback",
                        "previous_deployment_id": "promoted", "previous_deployment_name": "sim2real-k1-canary",
                        "skipped": {"rejected": "sim2real-k3-canary (field verdict rejected)",
                                    "pending": "sim2real-k2-canary (field verdict pending)"}}


def test_with_only_canaries_never_promoted_there_is_nothing_to_go_back_to(moto_endpoint, group_arn):
    robots = {"arm-1": {"effectiveDeployments": [entry(CANARY, "sim2real-k4-canary", 40, group_arn),
                                                 entry("pending", "sim2real-k2-canary", 20, group_arn)]}}
    hook = GreengrassV2Hook(region_name=REGION)
    with Stubber(hook.conn) as stub:  # no CreateDeployment stubbed: a call would fail
        stub.add_response("get_deployment", {**PREVIOUS, "deploymentId": "pending", "targetArn": group_arn,
                                             "tags": {FIELD_VERDICT_TAG: "pending"}}, {"deploymentId": "pending"})
        rollback = start_rollback(hook, CANARY, "sim2real-k4-canary", group_arn, robots)
        stub.assert_no_pending_responses()
    assert rollback["error"].startswith("No automatic rollback: no robot of the group lists an earlier release it "
                                        "finished (ListEffectiveDeployments) (canaries never promoted, passed over: "
                                        "sim2real-k2-canary (field verdict pending))")


def test_the_canary_deployment_is_created_pending(moto_endpoint, group_arn, context):
    op = CanaryDeploymentOperator(task_id="deploy_to_canary", thing_group_name=GROUP, components=COMPONENTS,
                                  deployment_name="sim2real-k4-canary", waiter_delay=0)
    with Stubber(op.hook.conn) as stub:
        stub.add_response("list_core_devices", {"coreDevices": [{"coreDeviceThingName": "arm-1"}]},
                          {"thingGroupArn": group_arn})
        stub.add_response("list_deployments", {"deployments": []}, {"targetArn": group_arn, "historyFilter": "ALL"})
        stub.add_response("create_deployment", {"deploymentId": CANARY, "iotJobId": "job-1"}, {
            "targetArn": group_arn, "deploymentName": "sim2real-k4-canary", "components": COMPONENTS,
            "deploymentPolicies": {"failureHandlingPolicy": "ROLLBACK"}, "tags": {FIELD_VERDICT_TAG: "pending"}})
        stub.add_response("get_deployment", {"deploymentId": CANARY, "iotJobId": "job-1"}, {"deploymentId": CANARY})
        stub.add_response("list_core_devices", {"coreDevices": [{"coreDeviceThingName": "arm-1"}]},
                          {"thingGroupArn": group_arn})
        stub.add_response("list_effective_deployments", {"effectiveDeployments": []}, {"coreDeviceThingName": "arm-1"})
        with pytest.raises(TaskDeferred):
            op.execute(context)
        stub.assert_no_pending_responses()
