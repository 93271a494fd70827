"""ssm_command_step: GetCommandInvocation responses of every targeted instance (AWS Systems Manager API
Reference, GetCommandInvocation) -> Step, decided by botocore's ``CommandExecuted`` acceptors."""

from __future__ import annotations

import pytest

from sim2real.orchestration.waits.core import WaitState
from sim2real.orchestration.waits.ssm import invocations_response, ssm_command_step

PARAMS = {"command_id": "c-1", "instance_ids": ["i-a", "i-b"]}


def _inv(instance_id, status, code=0, details=None):
    return {"CommandId": "c-1", "InstanceId": instance_id, "Status": status, "StatusDetails": details or status,
            "ResponseCode": code}


def _missing(instance_id):
    return {"Error": {"Code": "InvocationDoesNotExist", "Message": ""}, "InstanceId": instance_id}


def test_success_needs_every_instance_across_rounds():
    first = ssm_command_step(invocations_response([_inv("i-a", "Success"), _inv("i-b", "InProgress")]),
                             WaitState(params=PARAMS))
    assert first.outcome == "retry" and first.memory["pending"] == {"i-b": "InProgress"}
    second = ssm_command_step(invocations_response([_inv("i-b", "Success", 0)]),
                              WaitState(params=PARAMS, memory=first.memory))
    assert second.outcome == "success"
    assert second.payload["invocations"] == {"i-a": {"status": "Success", "response_code": 0},
                                             "i-b": {"status": "Success", "response_code": 0}}
    assert second.payload["instance_ids"] == ["i-a", "i-b"]


@pytest.mark.parametrize("status", ["Failed", "Cancelled", "TimedOut", "Cancelling"])
def test_one_failed_instance_fails_the_wait(status):
    step = ssm_command_step(invocations_response([_inv("i-a", "Success"), _inv("i-b", status, 2, "boom")]),
                            WaitState(params=PARAMS))
    assert step.outcome == "failure"
    assert step.payload["instance_id"] == "i-b" and step.payload["command_status"] == status
    assert step.payload["exit_code"] == 2 and "i-b" in step.reason


@pytest.mark.parametrize("status", ["Pending", "InProgress", "Delayed", "SomethingNew"])
def test_in_flight_and_unknown_statuses_retry(status):
    step = ssm_command_step(invocations_response([_inv("i-a", status), _inv("i-b", status)]),
                            WaitState(params=PARAMS))
    assert step.outcome == "retry" and step.memory["pending"] == {"i-a": status, "i-b": status}


def test_not_delivered_yet_retries_and_other_errors_fail():
    step = ssm_command_step(invocations_response([_missing("i-a"), _inv("i-b", "Success")]), WaitState(params=PARAMS))
    assert step.outcome == "retry" and list(step.memory["pending"]) == ["i-a"]
    throttled = {"Error": {"Code": "ThrottlingException"}, "InstanceId": "i-a"}
    assert ssm_command_step(invocations_response([throttled]), WaitState(params=PARAMS)).outcome == "retry"
    denied = {"Error": {"Code": "AccessDeniedException", "Message": "no"}, "InstanceId": "i-a"}
    step = ssm_command_step(invocations_response([denied]), WaitState(params=PARAMS))
    assert step.outcome == "failure" and step.payload["instance_id"] == "i-a"


def test_a_single_delivered_event_updates_one_instance():
    """A status-change event carries one instance: the others keep their state from memory."""
    memory = {"invocations": {}, "pending": {"i-a": "InProgress", "i-b": "InProgress"}}
    step = ssm_command_step(invocations_response([_inv("i-a", "Success")]), WaitState(params=PARAMS, memory=memory))
    assert step.outcome == "retry" and step.memory["pending"] == {"i-b": "InProgress"}
    # an instance the wait does not watch is ignored
    step = ssm_command_step(invocations_response([_inv("i-z", "Failed")]), WaitState(params=PARAMS, memory=memory))
    assert step.outcome == "retry"
