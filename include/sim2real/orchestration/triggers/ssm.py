"""Trigger for an SSM Run Command, waited on per instance id.

Unlike the provider's ``SsmRunCommandTrigger`` it does not call ListCommandInvocations to learn
the instances (so tag targets are never skipped): the operator resolves the instance ids and
passes them. Source: AWS Systems Manager API Reference, GetCommandInvocation / CancelCommand.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from botocore.exceptions import ClientError

from sim2real.orchestration.triggers.base import AwsHookWaiterTrigger
from airflow.triggers.base import TriggerEvent
from sim2real.orchestration.hooks.workstation import (
    SSM_FAILURE_STATES,
    SSM_SUCCESS_STATES,
    WorkstationHook,
)


class WorkstationCommandTrigger(AwsHookWaiterTrigger):
    """Poll GetCommandInvocation for every instance until each one is terminal.

    :param command_id: the SendCommand ``CommandId``.
    :param instance_ids: the instance ids the command was sent to.
    :param waiter_delay: seconds between polling rounds.
    :param waiter_max_attempts: rounds before giving up with a ``timeout`` event.
    :param cancel_on_kill: CancelCommand when the user kills the deferred task (Airflow 3.3
        ``BaseTrigger.on_kill``).

    Events: ``{"status": "success", "command_id", "instance_ids", "invocations": {id: {"status",
    "response_code"}}}``; ``{"status": "failed", "command_id", "instance_id", "command_status",
    "exit_code", "message"}`` as soon as one instance is Failed/Cancelled/TimedOut/Cancelling;
    ``{"status": "timeout", "command_id", "pending": {id: status}, "message"}``.
    """

    aws_hook_class = WorkstationHook

    def __init__(
        self,
        *,
        command_id: str,
        instance_ids: list[str],
        waiter_delay: int = 15,
        waiter_max_attempts: int = 300,
        cancel_on_kill: bool = True,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict | None = None,
    ) -> None:
        super().__init__(
            serialized_fields={
                "command_id": command_id,
                "instance_ids": list(instance_ids),
                "cancel_on_kill": cancel_on_kill,
            },
            waiter_name="command_executed",
            waiter_args={"CommandId": command_id},
            failure_message=f"SSM command {command_id} failed",
            status_message=f"SSM command {command_id} status",
            status_queries=["Status"],
            return_key="command_id",
            return_value=command_id,
            waiter_delay=waiter_delay,
            waiter_max_attempts=waiter_max_attempts,
            aws_conn_id=aws_conn_id,
            region_name=region_name,
            verify=verify,
            botocore_config=botocore_config,
        )
        self.command_id = command_id
        self.instance_ids = list(instance_ids)
        self.cancel_on_kill = cancel_on_kill

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self.hook()
        pending: dict[str, str] = dict.fromkeys(self.instance_ids, "Pending")
        done: dict[str, dict[str, Any]] = {}
        async with await hook.get_async_conn() as client:
            for attempt in range(self.attempts):
                if attempt:
                    await asyncio.sleep(self.waiter_delay)
                for instance_id in list(pending):
                    try:
                        inv = await client.get_command_invocation(
                            CommandId=self.command_id, InstanceId=instance_id
                        )
                    except ClientError as error:
                        if error.response["Error"]["Code"] == "InvocationDoesNotExist":
                            continue  # not delivered yet: keep polling
                        raise
                    status = inv.get("Status", "")
                    if status in SSM_SUCCESS_STATES:
                        done[instance_id] = {"status": status, "response_code": inv.get("ResponseCode")}
                        del pending[instance_id]
                    elif status in SSM_FAILURE_STATES:
                        yield TriggerEvent(
                            {
                                "status": "failed",
                                "command_id": self.command_id,
                                "instance_id": instance_id,
                                "command_status": status,
                                "exit_code": inv.get("ResponseCode", -1),
                                "message": inv.get("StatusDetails", status),
                            }
                        )
                        return
                    else:
                        pending[instance_id] = status
                if not pending:
                    yield TriggerEvent(
                        {
                            "status": "success",
                            "command_id": self.command_id,
                            "instance_ids": self.instance_ids,
                            "invocations": done,
                        }
                    )
                    return
                self.log.info("SSM command %s still running on %s", self.command_id, pending)
        yield TriggerEvent(
            {
                "status": "timeout",
                "command_id": self.command_id,
                "pending": pending,
                "message": f"still {pending} after {self.attempts} polls {self.waiter_delay} s apart",
            }
        )

    async def on_kill(self) -> None:
        """CancelCommand on the instances when the user kills the deferred task (Airflow 3.3+)."""
        if not self.cancel_on_kill:
            return
        self.log.info("Cancelling SSM command %s on %s", self.command_id, self.instance_ids)
        async with await self.hook().get_async_conn() as client:
            await client.cancel_command(CommandId=self.command_id, InstanceIds=self.instance_ids)
