"""Greengrass v2 emulation: components, deployments to a thing group, per-device outcomes."""

from __future__ import annotations

import base64
import json

from sandbox_helpers import wait_until

from sim2real.dev.sandbox import Sandbox

import pytest

# integration (not in make test-unit): one sandbox per module (tests/dev/sandbox/conftest.py)
pytestmark = pytest.mark.integration

GROUP = "sim2real-robots"
TERMINAL = {"SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELED", "REJECTED"}


def _group_arn(sb: Sandbox) -> str:
    return f"arn:aws:iot:{sb.region}:{sb.account_id}:thinggroup/{GROUP}"


def _deploy(sb: Sandbox, name: str) -> str:
    gg = sb.client("greengrassv2")
    components = {n: {"componentVersion": v, "configurationUpdate": {"merge": json.dumps({"ModelUri": "s3://b/m"})}}
                  for n, v in sb.config["greengrass"]["components"].items()}
    return gg.create_deployment(
        targetArn=_group_arn(sb), deploymentName=name, components=components,
        deploymentPolicies={"failureHandlingPolicy": "ROLLBACK",
                            "componentUpdatePolicy": {"timeoutInSeconds": 60, "action": "NOTIFY_COMPONENTS"}},
        iotJobConfiguration={"abortConfig": {"criteriaList": [{"failureType": "FAILED", "action": "CANCEL",
                                                               "thresholdPercentage": 10, "minNumberOfExecutedThings": 1}]}},
    )["deploymentId"]


def _outcomes(sb: Sandbox, deployment_id: str) -> dict[str, str]:
    gg = sb.client("greengrassv2")
    devices = [d["coreDeviceThingName"] for d in gg.list_core_devices(thingGroupArn=_group_arn(sb))["coreDevices"]]

    def done():
        result = {}
        for thing in devices:
            effective = gg.list_effective_deployments(coreDeviceThingName=thing)["effectiveDeployments"]
            mine = [e for e in effective if e["deploymentId"] == deployment_id]
            if not mine or mine[0]["coreDeviceExecutionStatus"] not in TERMINAL:
                return None
            result[thing] = mine[0]["coreDeviceExecutionStatus"]
        return result

    return wait_until(done, timeout=30)


def test_components_exist(sb: Sandbox) -> None:
    gg = sb.client("greengrassv2")
    arn = f"arn:aws:greengrass:{sb.region}:{sb.account_id}:components:com.sim2real.PolicyInference"
    versions = gg.list_component_versions(arn=arn)["componentVersions"]
    assert versions and versions[0]["componentName"] == "com.sim2real.PolicyInference"
    assert gg.describe_component(arn=versions[0]["arn"])["status"]["componentState"] == "DEPLOYABLE"
    recipe = {"RecipeFormatVersion": "2020-01-25", "ComponentName": "com.sim2real.Test", "ComponentVersion": "0.1.0",
              "Manifests": [{"Platform": {"os": "linux"}, "Lifecycle": {"Run": "true"}}]}
    created = gg.create_component_version(inlineRecipe=json.dumps(recipe).encode())
    assert created["status"]["componentState"] == "DEPLOYABLE"
    got = gg.get_component(arn=created["arn"])
    assert json.loads(got["recipe"])["ComponentName"] == "com.sim2real.Test"
    assert base64  # recipe blob is decoded by botocore


def test_deployment_succeeds_on_every_device(sb: Sandbox) -> None:
    gg = sb.client("greengrassv2")
    deployment_id = _deploy(sb, "deploy-ok")
    assert _outcomes(sb, deployment_id) == {"sim2real-robot-1": "SUCCEEDED", "sim2real-robot-2": "SUCCEEDED"}
    deployment = gg.get_deployment(deploymentId=deployment_id)
    assert deployment["deploymentStatus"] == "ACTIVE" and deployment["isLatestForTarget"]
    installed = gg.list_installed_components(coreDeviceThingName="sim2real-robot-1")["installedComponents"]
    assert {c["componentName"] for c in installed} == set(sb.config["greengrass"]["components"])
    assert any(d["deploymentId"] == deployment_id for d in gg.list_deployments(targetArn=_group_arn(sb))["deployments"])


def test_device_failure_rolls_back_and_cancel(sb: Sandbox) -> None:
    sb.faults["greengrass_device_fail"] = "sim2real-robot-2"
    deployment_id = _deploy(sb, "deploy-bad")
    outcome = _outcomes(sb, deployment_id)
    assert outcome == {"sim2real-robot-1": "SUCCEEDED", "sim2real-robot-2": "FAILED"}
    assert sb.events.find("greengrass", "rollback", deployment_id=deployment_id, thing="sim2real-robot-2")
    gg = sb.client("greengrassv2")
    gg.cancel_deployment(deploymentId=deployment_id)
    assert gg.get_deployment(deploymentId=deployment_id)["deploymentStatus"] == "CANCELED"


def test_custom_device_check_and_stuck_cancel(sb: Sandbox) -> None:
    seen = []
    previous = sb.greengrass.device_check
    sb.greengrass.device_check = lambda deployment, thing: (seen.append(thing) or thing != "sim2real-robot-1", "check")
    try:
        deployment_id = _deploy(sb, "deploy-check")
        assert _outcomes(sb, deployment_id)["sim2real-robot-1"] == "FAILED"
        assert sorted(seen) == ["sim2real-robot-1", "sim2real-robot-2"]
    finally:
        sb.greengrass.device_check = previous
    sb.faults["greengrass_stuck"] = True
    deployment_id = _deploy(sb, "deploy-stuck")
    gg = sb.client("greengrassv2")
    wait_until(lambda: all(
        e["coreDeviceExecutionStatus"] == "IN_PROGRESS"
        for e in gg.list_effective_deployments(coreDeviceThingName="sim2real-robot-1")["effectiveDeployments"]
        if e["deploymentId"] == deployment_id))
    gg.cancel_deployment(deploymentId=deployment_id)
    assert set(_outcomes(sb, deployment_id).values()) == {"CANCELED"}


def test_the_canary_group_holds_robot_1_which_stays_in_the_fleet_group(sb: Sandbox) -> None:
    from sim2real.dev.sandbox.provision import CANARY_THING_GROUP

    iot, gg = sb.client("iot"), sb.client("greengrassv2")
    assert iot.list_things_in_thing_group(thingGroupName=CANARY_THING_GROUP)["things"] == ["sim2real-robot-1"]
    assert sorted(iot.list_things_in_thing_group(thingGroupName=GROUP)["things"]) == ["sim2real-robot-1",
                                                                                      "sim2real-robot-2"]
    canary = f"arn:aws:iot:{sb.region}:{sb.account_id}:thinggroup/{CANARY_THING_GROUP}"
    devices = gg.list_core_devices(thingGroupArn=canary)["coreDevices"]
    assert [d["coreDeviceThingName"] for d in devices] == ["sim2real-robot-1"]


def test_a_deployments_tags_are_set_at_creation_and_by_tag_resource(sb: Sandbox) -> None:
    """CreateDeployment ``tags`` are returned by GetDeployment; TagResource on the deployment's ARN replaces one."""
    from sim2real.orchestration.hooks.greengrass import FIELD_VERDICT_TAG, deployment_arn, field_verdict

    gg = sb.client("greengrassv2")
    components = {n: {"componentVersion": v} for n, v in sb.config["greengrass"]["components"].items()}
    deployment_id = gg.create_deployment(targetArn=_group_arn(sb), deploymentName="deploy-tagged",
                                         components=components, tags={FIELD_VERDICT_TAG: "pending", "team": "a"})[
        "deploymentId"]
    assert field_verdict(gg.get_deployment(deploymentId=deployment_id)) == "pending"
    assert gg.tag_resource(resourceArn=deployment_arn(_group_arn(sb), deployment_id),
                           tags={FIELD_VERDICT_TAG: "promoted"})["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert gg.get_deployment(deploymentId=deployment_id)["tags"] == {FIELD_VERDICT_TAG: "promoted", "team": "a"}
    _outcomes(sb, deployment_id)


def test_a_request_sent_again_with_its_client_token_creates_no_second_deployment(sb: Sandbox) -> None:
    """CreateDeployment's clientToken makes the request idempotent: the same token returns the first deployment."""
    gg = sb.client("greengrassv2")
    request = {"targetArn": _group_arn(sb), "deploymentName": "sim2real-token-rollback",
               "clientToken": "c0ffee-rollback",
               "components": {n: {"componentVersion": v} for n, v in sb.config["greengrass"]["components"].items()}}
    first = gg.create_deployment(**request)
    again = gg.create_deployment(**request)
    assert (again["deploymentId"], again["iotJobId"]) == (first["deploymentId"], first["iotJobId"])
    other = gg.create_deployment(**{**request, "clientToken": "another"})["deploymentId"]
    assert other != first["deploymentId"]
    assert "clientToken" not in gg.get_deployment(deploymentId=first["deploymentId"])
    _outcomes(sb, other)
