"""Step function of an SSM Run Command wait over every instance the command targets.

Each instance's ``GetCommandInvocation`` response is decided by botocore's own waiter ``ssm``
``CommandExecuted`` (Pending / InProgress / Delayed and ``InvocationDoesNotExist`` retry; Success
success; Cancelled / TimedOut / Failed / Cancelling failure). Source: AWS Systems Manager API
Reference, GetCommandInvocation (``Status``, ``ResponseCode``, ``StatusDetails``).

A response is ``{"Invocations": [<GetCommandInvocation response, or an error response with
"InstanceId">, ...]}``: one polling round over the pending instances, or one delivered
status-change event. The state's memory keeps what each instance reached.

A short command (seconds: Slurm's ``sbatch`` / ``sacct`` / ``scancel`` on a head node) is run and waited for
by :func:`run_short_command_async` (in the triggerer), or :func:`run_short_command` (the same wait, in the
worker): every answer is decided by :func:`ssm_command_step`.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from sim2real.orchestration.hooks.waiter_rounds import classify_service_response
from sim2real.orchestration.hooks.workstation import shell_script_request
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


def command_result(command_id: str, invocation: Mapping[str, Any]) -> dict[str, Any]:
    """A short command's result from its last GetCommandInvocation response.

    :return: ``{"command_id", "status", "response_code", "stdout", "stderr"}`` (``response_code`` -1 when SSM gave
        none; ``stdout`` / ``stderr`` the inline content: 24,000 / 8,000 characters at most).
    """
    return {"command_id": command_id, "status": invocation.get("Status"),
            "response_code": invocation.get("ResponseCode", -1),
            "stdout": invocation.get("StandardOutputContent", ""),
            "stderr": invocation.get("StandardErrorContent", "")}


async def run_short_command_async(
    client: Any,
    instance_id: str,
    commands: list[str],
    *,
    execution_timeout_seconds: int = 300,
    poll_seconds: float = 1.0,
    comment: str = "",
    grace_seconds: float = 60,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Run a short command on one instance and wait for it: the one wait of a short command (the triggerer awaits
    it; :func:`run_short_command` runs it in the worker).

    Sends ``commands`` (:func:`~sim2real.orchestration.hooks.workstation.shell_script_request`), then every
    ``poll_seconds`` asks GetCommandInvocation (a ``ClientError`` counts as its error response:
    ``InvocationDoesNotExist`` right after the send). Each answer is decided by :func:`ssm_command_step`
    (botocore's ``ssm`` ``CommandExecuted`` waiter): Success and every failure status (Failed, TimedOut,
    Cancelled, Cancelling) end the wait; Pending / InProgress / Delayed, a missing invocation and throttling
    poll again.

    :param client: an aiobotocore SSM client (``await WorkstationHook().get_async_conn()``).
    :param execution_timeout_seconds: the document's ``executionTimeout`` (seconds).
    :param grace_seconds: how long after it the wait goes on (delivery, a busy agent).
    :param clock: seconds (monotonic) for the deadline.
    :return: :func:`command_result` of the last answer.
    :raises ClientError: SendCommand failed, or GetCommandInvocation with a code that is not retried
        (AccessDenied, ...).
    :raises TimeoutError: no end ``execution_timeout_seconds + grace_seconds`` after the send: the command is
        cancelled first; the message names the command id, the instance and its last status.
    """
    sent = await client.send_command(**shell_script_request(instance_id, commands, execution_timeout_seconds,
                                                            comment))
    command_id = sent["Command"]["CommandId"]
    bound = int(execution_timeout_seconds) + grace_seconds
    deadline = clock() + bound
    state = WaitState(params={"command_id": command_id, "instance_ids": [instance_id]}, poll_interval_s=poll_seconds)
    while True:
        await asyncio.sleep(poll_seconds)
        try:
            answer = await client.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
        except ClientError as error:
            answer = error.response
        step = ssm_command_step(invocations_response([{"InstanceId": instance_id, **answer}]),
                                replace(state, now=time.time()))
        if step.outcome == "success" or step.payload.get("command_status"):
            return command_result(command_id, answer)
        if step.outcome == "failure":
            raise ClientError(dict(answer), "GetCommandInvocation")
        state = state.after(step)
        if clock() >= deadline:
            await client.cancel_command(CommandId=command_id, InstanceIds=[instance_id])
            status = (state.memory.get("pending") or {}).get(instance_id, "Pending")
            raise TimeoutError(f"SSM command {command_id} on {instance_id} is still {status} {bound:g} s after it "
                               "was sent; it was cancelled.")


class _Blocking:
    """A boto3 client's calls as coroutines, for :func:`run_short_command_async` on a private event loop."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._client, name)

        async def call(**kwargs: Any) -> Any:
            return method(**kwargs)

        return call


def run_short_command(client: Any, instance_id: str, commands: list[str], **options: Any) -> dict[str, Any]:
    """:func:`run_short_command_async` in the worker, on a boto3 SSM client: the same wait, the worker blocked for it.

    Only for commands of seconds (``sbatch``, ``sacct``, ``scancel``, a log's tail) whose output fits
    GetCommandInvocation's inline content: the worker waits at most ``execution_timeout_seconds +
    grace_seconds`` (default 300 + 60 s), then cancels the command and raises ``TimeoutError``. A longer
    command is deferred to a trigger instead. Called while this thread's event loop runs (Airflow calls a task's
    ``on_kill`` from its SIGTERM handler, which can interrupt an earlier call's wait here), the wait runs on a
    thread of its own, so that the ``scancel`` of a killed task is still sent. Not for a trigger (it awaits
    :func:`run_short_command_async`).

    :param client: the boto3 SSM client (``WorkstationHook().conn``).
    :param options: :func:`run_short_command_async`'s keywords (``execution_timeout_seconds``, ``poll_seconds``,
        ``comment``, ``grace_seconds``, ``clock``).
    :return: ``{"command_id", "status", "response_code", "stdout", "stderr"}`` (:func:`command_result`).
    """
    wait = run_short_command_async(_Blocking(client), instance_id, commands, **options)
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # the usual case: no event loop in this thread
        return asyncio.run(wait)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ssm-short-command") as pool:
        return pool.submit(asyncio.run, wait).result()


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
