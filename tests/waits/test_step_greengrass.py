"""greengrass_deployment_step: ListEffectiveDeployments responses of each core device (AWS IoT Greengrass V2
API Reference) -> Step."""

from __future__ import annotations

import pytest

from sim2real.orchestration.waits.core import WaitState
from sim2real.orchestration.waits.greengrass import greengrass_deployment_step

PARAMS = {"deployment_id": "d-1", "thing_group_arn": "arn:aws:iot:us-east-1:1:thinggroup/robots"}


def _device(status, reason=None, deployment_id="d-1"):
    entry = {"deploymentId": deployment_id, "coreDeviceExecutionStatus": status}
    if reason:
        entry["reason"] = reason
    return {"effectiveDeployments": [entry]}


def test_success_on_every_device():
    step = greengrass_deployment_step({"devices": {"r1": _device("SUCCEEDED"), "r2": _device("COMPLETED")}},
                                      WaitState(params=PARAMS))
    assert step.outcome == "success" and set(step.payload["devices"]) == {"r1", "r2"}


@pytest.mark.parametrize("status", ["FAILED", "TIMED_OUT", "REJECTED", "CANCELED"])
def test_one_failed_device_fails(status):
    step = greengrass_deployment_step({"devices": {"r1": _device("SUCCEEDED"), "r2": _device(status, "bad recipe")}},
                                      WaitState(params=PARAMS))
    assert step.outcome == "failure" and "r2" in step.reason and "bad recipe" in step.reason
    assert step.payload["devices"]["r2"]["outcome"] == "failure"


@pytest.mark.parametrize("status", ["QUEUED", "IN_PROGRESS", "SOMETHING_NEW"])
def test_in_flight_unknown_and_not_received_retry(status):
    step = greengrass_deployment_step({"devices": {"r1": _device(status), "r2": _device("SUCCEEDED", deployment_id="old")}},
                                      WaitState(params=PARAMS))
    assert step.outcome == "retry"
    assert step.payload["devices"]["r2"]["status"] == "NOT_RECEIVED"


def test_no_core_device_fails():
    step = greengrass_deployment_step({"devices": {}}, WaitState(params=PARAMS))
    assert step.outcome == "failure" and "no core devices" in step.reason


def test_a_delivered_event_for_one_device_keeps_the_others():
    first = greengrass_deployment_step({"devices": {"r1": _device("IN_PROGRESS"), "r2": _device("SUCCEEDED")}},
                                       WaitState(params=PARAMS))
    step = greengrass_deployment_step({"devices": {"r1": _device("SUCCEEDED")}},
                                      WaitState(params=PARAMS, memory=first.memory))
    assert step.outcome == "success" and set(step.payload["devices"]) == {"r1", "r2"}


def test_api_errors():
    assert greengrass_deployment_step({"Error": {"Code": "ThrottlingException"}}, WaitState(params=PARAMS)).outcome == "retry"
    assert greengrass_deployment_step({"Error": {"Code": "AccessDeniedException"}}, WaitState(params=PARAMS)).outcome == "failure"
