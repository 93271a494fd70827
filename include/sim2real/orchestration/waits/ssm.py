"""Step function of an SSM Run Command wait over every instance the command targets.

Each instance's ``GetCommandInvocation`` response is decided by botocore's own waiter ``ssm``
``CommandExecuted`` (Pending / InProgress / Delayed and ``InvocationDoesNotExist`` retry; Success
success; Cancelled / TimedOut / Failed / Cancelling failure). Source: AWS Systems Manager API
Reference, GetCommandInvocation (``Status``, ``ResponseCode``, ``StatusDetails``).

A response is ``{"Invocations": [<GetCommandInvocation response, or an error response with
"InstanceId">, ...]}``: one polling round over the pending instances, or one delivered
status-change event. The state's memory keeps what each instance reached.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim2real.orchestration.hooks.waiter_rounds import classify_service_response
from sim2real.orchestration.waits.core import Step, WaitState, api_error_step, error_code


def invocations_response(invocations: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The step's response shape for a list of GetCommandInvocation (or error) responses."""
    return {"Invocations": [dict(i) for i in invocations]}


def ssm_command_step(response: Mapping[str, Any], state: WaitState) -> Step:
    """Decide one round of invocations of ``state.params["command_id"]`` on ``params["instance_ids"]``.

    Memory: ``invocations`` (instance id -> ``{"status", "response_code"}`` of the instances that
    ended) and ``pending`` (instance id -> last status).

    :return: ``success`` when every instance reached Success (payload ``command_id``,
        ``instance_ids``, ``invocations``); ``failure`` as soon as one instance failed (payload
        ``instance_id``, ``command_status``, ``exit_code``), or on a non-retriable API error;
        ``retry`` otherwise.
    """
    params = state.params
    command_id = params["command_id"]
    instance_ids = list(params["instance_ids"])
    done: dict[str, Any] = dict(state.memory.get("invocations") or {})
    pending: dict[str, str] = dict(state.memory.get("pending") or dict.fromkeys(instance_ids, "Pending"))
    for pending_id in [i for i in pending if i in done]:
        del pending[pending_id]
    top = api_error_step(response, f"SSM command {command_id}", "GetCommandInvocation")
    if top is not None:
        return top
    for inv in response.get("Invocations") or []:
        instance_id = inv.get("InstanceId")
        if instance_id not in pending:
            continue  # an instance this wait does not watch, or one already ended
        code = error_code(inv)
        if code is not None and code != "InvocationDoesNotExist":
            error = api_error_step(inv, f"SSM command {command_id} on {instance_id}", "GetCommandInvocation")
            if error is not None and error.outcome == "failure":
                return Step(error.outcome, error.reason, {"command_id": command_id, "instance_id": instance_id,
                                                          **error.payload})
            continue
        outcome = classify_service_response("ssm", "CommandExecuted", dict(inv))
        status = inv.get("Status") or pending[instance_id]  # not delivered yet: as before
        if outcome == "success":
            done[instance_id] = {"status": status, "response_code": inv.get("ResponseCode")}
            del pending[instance_id]
        elif outcome == "failure":
            return Step(
                "failure",
                f"SSM command {command_id} ended {status} on {instance_id}: {inv.get('StatusDetails') or status} "
                f"(exit code {inv.get('ResponseCode', -1)})",
                {"command_id": command_id, "instance_id": instance_id, "command_status": status,
                 "exit_code": inv.get("ResponseCode", -1), "invocations": done, "pending": pending},
            )
        else:
            pending[instance_id] = status
    memory = {"invocations": done, "pending": pending}
    if not pending:
        return Step("success", f"SSM command {command_id} succeeded on {', '.join(instance_ids)}",
                    {"command_id": command_id, "instance_ids": instance_ids, "invocations": done}, memory=memory)
    return Step("retry", f"SSM command {command_id} still running on {pending}",
                {"command_id": command_id, "pending": pending}, memory=memory)


#: ``until`` values of :func:`instance_step` and the botocore EC2 waiter that decides the instance's state.
INSTANCE_WAITERS = {"running": "InstanceRunning", "stopped": "InstanceStopped"}
#: The key of the SSM agent's ``PingStatus`` (DescribeInstanceInformation) in an :func:`instance_step` response.
PING_STATUS_KEY = "PingStatus"


def instance_step(response: Mapping[str, Any], state: WaitState) -> Step:
    """Decide one ``DescribeInstances`` response of ``params["instance_id"]`` for ``params["until"]``.

    ``until="running"``: the instance running (botocore's EC2 waiter ``InstanceRunning``: every instance
    ``running``; ``shutting-down`` / ``terminated`` / ``stopping`` fail) AND its SSM agent ``Online`` (the
    response's :data:`PING_STATUS_KEY`, DescribeInstanceInformation's ``PingStatus``: ``Online`` /
    ``ConnectionLost`` / ``Inactive``, None while the agent has not registered); a started workstation can run a
    command only then. ``until="stopped"``: ``InstanceStopped`` (every instance ``stopped``; ``pending`` /
    ``terminated`` fail). Sources: Amazon EC2 API Reference, DescribeInstances; AWS Systems Manager API Reference,
    DescribeInstanceInformation; botocore's ``ec2`` waiters.

    :return: ``success`` / ``failure`` / ``retry``; payload ``instance_id``, ``instance_state``, ``ping_status``.
    """
    instance_id, until = state.params["instance_id"], state.params["until"]
    error = api_error_step(response, f"EC2 instance {instance_id}", "DescribeInstances")
    if error is not None:
        return Step(error.outcome, error.reason, {"instance_id": instance_id, "instance_state": None,
                                                  "ping_status": None, **error.payload})
    instances = [i for r in response.get("Reservations") or [] for i in r.get("Instances") or []]
    ec2_state = (instances[0].get("State") or {}).get("Name") if instances else "not found"
    ping = response.get(PING_STATUS_KEY)
    payload = {"instance_id": instance_id, "instance_state": ec2_state, "ping_status": ping}
    outcome = classify_service_response("ec2", INSTANCE_WAITERS[until], dict(response))
    if until == "running" and ec2_state == "stopped" and state.attempt >= 1:
        outcome = "failure"  # started, then stopped again between two polls (botocore's waiter would keep waiting)
    if outcome == "failure":
        return Step("failure", f"EC2 instance {instance_id} is {ec2_state} while waiting for it to be {until}: "
                               "someone else changed it; check the instance's state history in the EC2 console",
                    payload)
    if outcome == "success" and (until == "stopped" or ping == "Online"):
        return Step("success", f"EC2 instance {instance_id} is {ec2_state}"
                               + (", its SSM agent Online" if until == "running" else ""), payload)
    if outcome == "success":
        return Step("retry", f"EC2 instance {instance_id} is running; its SSM agent is {ping or 'not registered yet'}",
                    payload)
    return Step("retry", f"EC2 instance {instance_id} is {ec2_state}: waiting for {until}", payload)
