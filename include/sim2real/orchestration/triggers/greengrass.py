"""Trigger waiting until every core device of a thing group finished a Greengrass deployment."""

from __future__ import annotations

from typing import Any

from sim2real.orchestration.events import envelope
from sim2real.orchestration.events.consumer import WaitEvent
from sim2real.orchestration.hooks.greengrass import GreengrassV2Hook
from sim2real.orchestration.triggers.base import REQUIRED, StepWaitTrigger
from sim2real.orchestration.waits.core import WaitState
from sim2real.orchestration.waits.greengrass import greengrass_deployment_step


class GreengrassDeploymentTrigger(StepWaitTrigger):
    """Poll ListEffectiveDeployments of each core device until all are terminal or one failed
    (:func:`~sim2real.orchestration.waits.greengrass.greengrass_deployment_step`).

    Per-device states come from waiter ``core_device_deployment_complete``
    (``sim2real/orchestration/waiters/greengrassv2.json``): SUCCEEDED/COMPLETED success; FAILED/TIMED_OUT/
    REJECTED/CANCELED failure; QUEUED/IN_PROGRESS (or not received yet) keep polling.

    :param deployment_id: the Greengrass deployment.
    :param thing_group_arn: its target; core devices are listed with ListCoreDevices each poll.
    :param waiter_delay: seconds between polls.
    :param waiter_max_attempts: polls before a ``timeout`` event.
    :param cancel_on_kill: CancelDeployment when the user kills the deferred task.
    :param thing_names: only these core devices of the group are waited for (an automatic rollback waits for the
        robots that ran the failed release); None: every core device of the group.

    One event (``devices`` maps thing name → ``{"status", "outcome", "reason"}``):
    ``{"status": "success" | "failure" | "timeout", "message", "deployment_id", "devices"}``.
    """

    aws_hook_class = GreengrassV2Hook

    fields = {"deployment_id": REQUIRED, "thing_group_arn": REQUIRED, "cancel_on_kill": True, "thing_names": None}
    default_waiter_delay, default_waiter_max_attempts = 30, 120

    async def _things(self, client) -> list[str]:
        names: list[str] = []
        kwargs: dict[str, Any] = {"thingGroupArn": self.thing_group_arn}
        while True:
            page = await client.list_core_devices(**kwargs)
            names += [d["coreDeviceThingName"] for d in page.get("coreDevices", [])]
            if not page.get("nextToken"):
                return sorted(n for n in names if self.thing_names is None or n in self.thing_names)
            kwargs["nextToken"] = page["nextToken"]

    step_function = staticmethod(greengrass_deployment_step)

    def event_keys(self) -> list[envelope.ResourceKey]:
        """``Greengrass V2 Effective Deployment Status Change`` events of the deployment (one per core device)."""
        return [envelope.greengrass_deployment(self.deployment_id)]

    async def event_response(self, client, state: WaitState, event: WaitEvent) -> dict[str, Any]:
        """The event's core device as a round of one device (the step keeps the others' last reports)."""
        response = dict(event.response)
        thing = response.pop("coreDeviceThingName", None)
        if not thing or (self.thing_names is not None and thing not in self.thing_names):
            return await self.describe(client, state)
        return {"devices": {thing: response}}

    async def describe(self, client, state: WaitState) -> dict[str, Any]:
        """ListCoreDevices of the group, then ListEffectiveDeployments of each core device."""
        return {"devices": {thing: await client.list_effective_deployments(coreDeviceThingName=thing)
                            for thing in await self._things(client)}}

    async def stop_resource(self) -> None:
        """CancelDeployment: a person stopped the deferred task (base ``on_kill``)."""
        if not self.cancel_on_kill:
            return
        self.log.info("Cancelling Greengrass deployment %s", self.deployment_id)
        async with await self.hook().get_async_conn() as client:
            await client.cancel_deployment(deploymentId=self.deployment_id)
