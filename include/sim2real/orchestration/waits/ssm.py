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
