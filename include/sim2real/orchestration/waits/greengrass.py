"""Step function of a Greengrass deployment wait over every core device of a thing group.

Each device's ``ListEffectiveDeployments`` response is decided by the waiter
``core_device_deployment_complete`` of ``waiters/greengrassv2.json`` (SUCCEEDED / COMPLETED
success; FAILED / TIMED_OUT / REJECTED / CANCELED failure; QUEUED / IN_PROGRESS or not received
yet retry), through :func:`~sim2real.orchestration.hooks.greengrass.device_report`. Source: AWS IoT
Greengrass V2 API Reference, ListCoreDevices, ListEffectiveDeployments.

A response is ``{"devices": {thing name: <ListEffectiveDeployments response>}}`` with every core
device of the group (a polling round), or some of them (a delivered event); the state's memory
keeps each device's last report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim2real.orchestration.hooks.greengrass import device_report, summarize
from sim2real.orchestration.waits.core import Step, WaitState, api_error_step


def greengrass_deployment_step(response: Mapping[str, Any], state: WaitState) -> Step:
    """Decide one round of device responses for ``params["deployment_id"]`` on ``params["thing_group_arn"]``.

    :return: ``failure`` when the group has no core device, when one device failed (payload
        ``devices``: thing -> ``{"status", "outcome", "reason"}``), or on a non-retriable API error;
        ``success`` when every device succeeded; ``retry`` otherwise.
    """
    deployment_id, group = state.params["deployment_id"], state.params["thing_group_arn"]
    error = api_error_step(response, f"Greengrass deployment {deployment_id}", "ListEffectiveDeployments")
    if error is not None:
        return error
    reports: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (state.memory.get("devices") or {}).items()}
    devices = response.get("devices")
    if devices is not None and not devices and not reports:
        return Step("failure", f"thing group {group} has no core devices: register the robot's core device in it",
                    {"deployment_id": deployment_id, "devices": {}})
    for thing, device_response in (devices or {}).items():
        reports[thing] = device_report(dict(device_response), deployment_id)
    payload = {"deployment_id": deployment_id, "devices": reports}
    memory = {"devices": reports}
    outcomes = {r["outcome"] for r in reports.values()}
    if "failure" in outcomes:
        failed = {t: r for t, r in reports.items() if r["outcome"] == "failure"}
        return Step("failure", f"Greengrass deployment {deployment_id} failed on {summarize(failed)}", payload,
                    memory=memory)
    if reports and outcomes == {"success"}:
        return Step("success", f"Greengrass deployment {deployment_id} finished on {len(reports)} core device(s)",
                    payload, memory=memory)
    return Step("retry", f"Greengrass deployment {deployment_id}: {summarize(reports)}", payload, memory=memory)
