"""Trigger for an SSM Run Command, waited on per instance id.

Unlike the provider's ``SsmRunCommandTrigger`` it does not call ListCommandInvocations to learn
the instances (so tag targets are never skipped): the operator resolves the instance ids and
passes them. Source: AWS Systems Manager API Reference, GetCommandInvocation / CancelCommand.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from sim2real.orchestration.events import envelope
from sim2real.orchestration.events.consumer import WaitEvent
from sim2real.orchestration.hooks.waiter_rounds import classify_service_response
from sim2real.orchestration.hooks.workstation import WorkstationHook, instance_information_request, ping_status_of
from sim2real.orchestration.triggers.base import REQUIRED, StepWaitTrigger
from sim2real.orchestration.waits.core import WaitState
from sim2real.orchestration.waits.ssm import PING_STATUS_KEY, instance_step, invocations_response, ssm_command_step


class WorkstationCommandTrigger(StepWaitTrigger):
    """Poll GetCommandInvocation for every instance until
    :func:`~sim2real.orchestration.waits.ssm.ssm_command_step` (botocore's ``CommandExecuted`` acceptors)
    ends the wait.

    :param command_id: the SendCommand ``CommandId``.
    :param instance_ids: the instance ids the command was sent to.
    :param waiter_delay: seconds between polling rounds.
    :param waiter_max_attempts: rounds before giving up with a ``timeout`` event.
    :param cancel_on_kill: CancelCommand when the user kills the deferred task (Airflow 3.3
        ``BaseTrigger.on_kill``).

    One event: ``{"status": "success", "message", "command_id", "instance_ids", "invocations": {id:
    {"status", "response_code"}}}``; ``{"status": "failure", "message", "command_id", "instance_id",
    "command_status", "exit_code"}`` as soon as one instance is Failed / Cancelled / TimedOut /
    Cancelling; ``{"status": "timeout", "message",
    "command_id", "pending": {id: status}}``.
    """

    aws_hook_class = WorkstationHook

    fields = {"command_id": REQUIRED, "instance_ids": REQUIRED, "cancel_on_kill": True}
    default_waiter_delay, default_waiter_max_attempts = 15, 300

    step_function = staticmethod(ssm_command_step)

    def event_keys(self) -> list[envelope.ResourceKey]:
        """``EC2 Command Invocation Status-change Notification`` events of the command on each instance."""
        return [envelope.ssm_invocation(self.command_id, i) for i in self.instance_ids]

    async def event_response(self, client, state: WaitState, event: WaitEvent) -> dict[str, Any]:
        """The event's invocation; when it ended, its GetCommandInvocation (the event has no ``ResponseCode``,
        which the task reports), unless that still shows an earlier status (then the event as is)."""
        invocation = dict(event.response)
        if classify_service_response("ssm", "CommandExecuted", invocation) != "retry":
            try:
                described = await client.get_command_invocation(CommandId=self.command_id,
                                                                InstanceId=invocation["InstanceId"])
            except Exception as error:  # noqa: BLE001 - best effort: the event's status decides the step
                self.log.warning("GetCommandInvocation of %s on %s after its %s event failed: %s", self.command_id,
                                 invocation["InstanceId"], invocation.get("Status"), error)
            else:
                if described.get("Status") == invocation.get("Status"):
                    invocation = described
        return invocations_response([invocation])

    async def describe(self, client, state: WaitState) -> dict[str, Any]:
        """``GetCommandInvocation`` of every instance still pending (an error answers as its error response)."""
        pending = state.memory.get("pending") or dict.fromkeys(self.instance_ids, "Pending")
        invocations = []
        for instance_id in pending:
            try:
                invocations.append(await client.get_command_invocation(CommandId=self.command_id,
                                                                       InstanceId=instance_id))
            except ClientError as error:
                invocations.append({**error.response, "InstanceId": instance_id})
        return invocations_response(invocations)

    async def stop_resource(self) -> None:
        """CancelCommand on the instances: a person stopped the deferred task (base ``on_kill``)."""
        if not self.cancel_on_kill:
            return
        self.log.info("Cancelling SSM command %s on %s", self.command_id, self.instance_ids)
        async with await self.hook().get_async_conn() as client:
            await client.cancel_command(CommandId=self.command_id, InstanceIds=self.instance_ids)


class WorkstationInstanceTrigger(StepWaitTrigger):
    """Poll an EC2 instance (DescribeInstances, then DescribeInstanceInformation once it is running) until
    :func:`~sim2real.orchestration.waits.ssm.instance_step` ends the wait: a started workstation running with its
    SSM agent Online (``until="running"``), or a stopping one stopped (``until="stopped"``). No worker slot is held
    meanwhile (starting a stopped GPU workstation takes minutes).

    :param instance_id: the EC2 instance.
    :param until: ``running`` (and the SSM agent Online) or ``stopped``.
    :param waiter_delay: seconds between polls.
    :param waiter_max_attempts: polls before a ``timeout`` event.

    One event: ``{"status", "message", "instance_id", "instance_state", "ping_status"}``.
    """

    aws_hook_class = WorkstationHook

    fields = {"instance_id": REQUIRED, "until": REQUIRED}
    default_waiter_delay, default_waiter_max_attempts = 15, 40

    step_function = staticmethod(instance_step)

    async def describe(self, client, state: WaitState) -> dict[str, Any]:
        """DescribeInstances of the instance (an error answers as its error response); once it is running and
        the wait is for ``running``, the agent's ``PingStatus`` from DescribeInstanceInformation (``client``:
        SSM) under :data:`~sim2real.orchestration.waits.ssm.PING_STATUS_KEY`."""
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

        ec2_hook = AwsBaseHook(client_type="ec2", **self._hook_parameters)
        try:
            async with await ec2_hook.get_async_conn() as ec2:
                described = await ec2.describe_instances(InstanceIds=[self.instance_id])
        except ClientError as error:
            return error.response
        names = {i.get("State", {}).get("Name") for r in described.get("Reservations", []) for i in r["Instances"]}
        if self.until == "running" and names == {"running"}:
            info = await client.describe_instance_information(**instance_information_request(self.instance_id))
            described = {**described, PING_STATUS_KEY: ping_status_of(info)}
        return described
