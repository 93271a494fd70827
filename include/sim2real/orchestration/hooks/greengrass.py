"""AWS IoT Greengrass v2 hook (botocore ``greengrassv2`` has no waiters; ours are in
``sim2real/orchestration/waiters/greengrassv2.json``).

Sources: AWS IoT Greengrass V2 API Reference — CreateDeployment, GetDeployment, ListDeployments
(``deploymentStatus`` ∈ ACTIVE | COMPLETED | CANCELED | FAILED | INACTIVE), CancelDeployment,
ListCoreDevices (``thingGroupArn``), TagResource (``resourceArn``, ``tags``), ListEffectiveDeployments (``coreDeviceExecutionStatus`` ∈
IN_PROGRESS | QUEUED | FAILED | COMPLETED | TIMED_OUT | CANCELED | REJECTED | SUCCEEDED, ``reason``,
``statusDetails.errorStack/errorTypes``); AWS IoT API Reference — DescribeThingGroup.
"""

from __future__ import annotations

from collections.abc import Collection
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
from airflow.providers.amazon.aws.utils import trim_none_values
from sim2real.orchestration.hooks.waiter_rounds import classify_response

GREENGRASS_WAITERS = Path(__file__).resolve().parents[1] / "waiters" / "greengrassv2.json"
DEVICE_WAITER = "core_device_deployment_complete"
#: ``deploymentName`` of the automatic rollback of deployment ``<name>``: ``<name>-rollback`` (a run key ends in
#: 8 hex digits, so the orphan sweep finds the run of ``sim2real-<run_key>-rollback`` unambiguously).
ROLLBACK_SUFFIX = "-rollback"
#: A run's deployment to its canary thing group is named ``sim2real-<run_key>`` + this (its rollback: + both).
CANARY_SUFFIX = "-canary"
#: The tag that records a canary deployment's field verdict on the deployment itself (CreateDeployment ``tags``,
#: then TagResource): :data:`VERDICT_PENDING` from its creation, :data:`VERDICT_PROMOTED` or :data:`VERDICT_REJECTED`
#: when it is decided. GetDeployment returns it in ``tags``.
FIELD_VERDICT_TAG = "sim2real:field-verdict"
VERDICT_PENDING, VERDICT_PROMOTED, VERDICT_REJECTED = "pending", "promoted", "rejected"
#: Field verdicts of a deployment that was never promoted: never a release to roll back to.
NOT_PROMOTED = frozenset({VERDICT_PENDING, VERDICT_REJECTED})


def deployment_arn(target_arn: str, deployment_id: str) -> str:
    """The ARN of a Greengrass deployment (``arn:<partition>:greengrass:<region>:<account>:deployments:<id>``,
    Service Authorization Reference, AWS IoT Greengrass V2 resource types) in the partition, region and account of
    its target (a thing or thing group ARN ``arn:<partition>:iot:<region>:<account>:...``).

    :raises ValueError: ``target_arn`` is not an ARN.
    """
    parts = target_arn.split(":", 5)
    if len(parts) < 6 or parts[0] != "arn":
        raise ValueError(f"not a thing or thing group ARN: {target_arn!r}")
    return f"arn:{parts[1]}:greengrass:{parts[3]}:{parts[4]}:deployments:{deployment_id}"


def field_verdict(deployment: dict[str, Any]) -> str | None:
    """The field verdict a GetDeployment response records (tag :data:`FIELD_VERDICT_TAG`), ``None`` when it has
    none (not a canary)."""
    return (deployment.get("tags") or {}).get(FIELD_VERDICT_TAG)


def effective_entry(response: dict[str, Any], deployment_id: str) -> dict[str, Any] | None:
    """The ListEffectiveDeployments entry of ``deployment_id`` (``None`` when not listed yet)."""
    for entry in response.get("effectiveDeployments", []):
        if entry.get("deploymentId") == deployment_id:
            return entry
    return None


def device_report(response: dict[str, Any], deployment_id: str) -> dict[str, Any]:
    """``{"status", "outcome", "reason"}`` of one device for ``deployment_id``.

    ``outcome`` is the waiter decision (success / failure / retry); ``reason`` joins
    ``reason``, ``statusDetails.errorTypes`` and ``statusDetails.errorStack`` when present.
    """
    entry = effective_entry(response, deployment_id)
    outcome = classify_response(str(GREENGRASS_WAITERS), DEVICE_WAITER, response, {"DEPLOYMENT_ID": deployment_id})
    if entry is None:
        return {"status": "NOT_RECEIVED", "outcome": outcome, "reason": "deployment not received yet"}
    details = entry.get("statusDetails") or {}
    parts = [entry.get("reason")] + [", ".join(details.get(k) or []) for k in ("errorTypes", "errorStack")]
    return {
        "status": entry.get("coreDeviceExecutionStatus"),
        "outcome": outcome,
        "reason": "; ".join(p for p in parts if p) or None,
    }


def summarize(reports: dict[str, dict[str, Any]]) -> str:
    """``"thing: STATUS (reason)"`` lines for a failure message."""
    return "; ".join(
        f"{thing}: {r['status']}" + (f" ({r['reason']})" if r.get("reason") else "") for thing, r in sorted(reports.items())
    )


#: ``coreDeviceExecutionStatus`` values of a device that runs the deployment (AWS IoT Greengrass V2 API Reference,
#: ListEffectiveDeployments; COMPLETED: a deployment to that single thing).
RUNS_IT = frozenset({"SUCCEEDED", "COMPLETED"})
#: ... of a device that tried the deployment and failed (it rolls back itself under failureHandlingPolicy ROLLBACK).
FAILED_IT = frozenset({"FAILED", "TIMED_OUT", "REJECTED"})
#: ... of a device that was still applying it: CancelDeployment does not stop a device that already received the
#: deployment (API Reference, CancelDeployment), it finishes on its own.
APPLYING_IT = frozenset({"IN_PROGRESS"})


def _created(entry: dict[str, Any]) -> float:
    """An effective deployment's ``creationTimestamp`` in epoch seconds (botocore gives a datetime)."""
    value = entry.get("creationTimestamp")
    if hasattr(value, "timestamp"):
        return value.timestamp()
    return float(value) if isinstance(value, (int, float)) else 0.0


def previous_release(response: dict[str, Any], deployment_id: str) -> str | None:
    """The release a device ran before ``deployment_id``: the newest other deployment its ListEffectiveDeployments
    response shows it finished (SUCCEEDED / COMPLETED), by ``deploymentName`` (``sim2real-<run_key>``), else its id;
    ``None`` when it lists none."""
    done = [e for e in response.get("effectiveDeployments") or []
            if e.get("deploymentId") != deployment_id and e.get("coreDeviceExecutionStatus") in RUNS_IT]
    if not done:
        return None
    newest = max(done, key=_created)
    return newest.get("deploymentName") or newest.get("deploymentId")


def rollback_name(deployment_name: str) -> str:
    """The name of the rollback of deployment ``deployment_name``: ``<deployment_name>`` + :data:`ROLLBACK_SUFFIX`."""
    return f"{deployment_name}{ROLLBACK_SUFFIX}"


def last_good_deployment(responses: dict[str, dict[str, Any]], deployment_id: str, deployment_name: str,
                         target_arn: str, skip: Collection[str] = ()) -> dict[str, Any] | None:
    """The release to roll the thing group back to: the newest deployment to ``target_arn`` that robots finished
    (``coreDeviceExecutionStatus`` SUCCEEDED / COMPLETED in their ListEffectiveDeployments) and that no robot lists
    as FAILED / TIMED_OUT / REJECTED; never ``deployment_id``, another try of the same release
    (``deployment_name``, e.g. a cleared task's earlier deployment) nor its own rollback
    (:func:`rollback_name`: once the robots finished it, a retry of the rollback would otherwise take it for the
    release to go back to). ``None`` when there is none (the group's first release, or the history is gone).

    :param responses: thing name → its ListEffectiveDeployments entries (every page).
    :param skip: deployment ids that are no release to go back to (a canary never promoted: :func:`start_rollback`).
    :return: that ListEffectiveDeployments entry (``deploymentId``, ``deploymentName``, ``creationTimestamp``).
    """
    entries = [entry for response in responses.values() for entry in response.get("effectiveDeployments") or []
               if entry.get("targetArn") == target_arn and entry.get("deploymentId") != deployment_id
               and entry.get("deploymentName") not in (deployment_name, rollback_name(deployment_name))
               and entry.get("deploymentId") not in skip]
    failed = {e.get("deploymentId") for e in entries if e.get("coreDeviceExecutionStatus") in FAILED_IT}
    done = [e for e in entries if e.get("coreDeviceExecutionStatus") in RUNS_IT and e.get("deploymentId") not in failed]
    return max(done, key=_created) if done else None


def rollback_request(previous: dict[str, Any], deployment_name: str, failed_deployment_id: str) -> dict[str, Any]:
    """The CreateDeployment request that puts ``previous`` (a GetDeployment response) back on its target: its
    components, deployment policies and IoT job configuration, named ``<deployment_name>``
    + :data:`ROLLBACK_SUFFIX`, with the client token
    ``<failed_deployment_id>-rollback`` (a resent request creates no second rollback)."""
    return trim_none_values({
        "targetArn": previous["targetArn"],
        "deploymentName": rollback_name(deployment_name),
        "clientToken": f"{failed_deployment_id}{ROLLBACK_SUFFIX}"[:64],
        "components": previous.get("components") or {},
        "deploymentPolicies": previous.get("deploymentPolicies") or {"failureHandlingPolicy": "ROLLBACK"},
        "iotJobConfiguration": previous.get("iotJobConfiguration") or None,
    })


def start_rollback(hook: GreengrassV2Hook, deployment_id: str, deployment_name: str, target_arn: str,
                   responses: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Roll the thing group ``target_arn`` back from ``deployment_id`` (named ``deployment_name``): CreateDeployment
    of the group's last good release (:func:`last_good_deployment`, its components read with GetDeployment;
    :func:`rollback_request`, whose client token makes a repeated request return the same rollback). A canary
    deployment whose GetDeployment ``tags`` record a field verdict other than promoted
    (:data:`FIELD_VERDICT_TAG` ``pending`` or ``rejected``) is no good
    release, even when its robots finished it: the next older one is taken.

    :param hook: the Greengrass hook (its ``conn``: GetDeployment, CreateDeployment).
    :param responses: thing name → its ListEffectiveDeployments entries (every page), for the group's core devices.
    :return: ``{"deployment_id", "deployment_name", "previous_deployment_id", "previous_deployment_name",
        "skipped": {deployment id: "<name> (field verdict <v>)"}}``, or ``{"error": why}`` when there is no earlier
        release or the rollback could not be created.
    """
    skipped: dict[str, str] = {}
    while True:
        previous = last_good_deployment(responses, deployment_id, deployment_name, target_arn, skip=skipped)
        if previous is None:
            passed = f" (canaries never promoted, passed over: {', '.join(skipped.values())})" if skipped else ""
            return {"error": "No automatic rollback: no robot of the group lists an earlier release it finished "
                             f"(ListEffectiveDeployments){passed}, so there is no release to go back to"}
        name = previous.get("deploymentName") or previous["deploymentId"]
        try:
            deployment = hook.conn.get_deployment(deploymentId=previous["deploymentId"])
            if field_verdict(deployment) in NOT_PROMOTED:
                skipped[previous["deploymentId"]] = f"{name} (field verdict {field_verdict(deployment)})"
                continue
            request = rollback_request(deployment, deployment_name, deployment_id)
            rollback_id = hook.conn.create_deployment(**request)["deploymentId"]
        except Exception as error:  # noqa: BLE001 - named in the failure with both deployments
            return {"error": f"The automatic rollback to {name} ({previous['deploymentId']}) could not be created: "
                             f"{error}"}
        return {"deployment_id": rollback_id, "deployment_name": request["deploymentName"],
                "previous_deployment_id": previous["deploymentId"], "previous_deployment_name": name,
                "skipped": skipped}


class GreengrassV2Hook(AwsBaseHook):
    """Thin hook for ``boto3.client("greengrassv2")`` with our custom waiter file."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["client_type"] = "greengrassv2"
        super().__init__(*args, **kwargs)

    @cached_property
    def waiter_path(self):
        return GREENGRASS_WAITERS

    @cached_property
    def iot(self):
        """boto3 IoT client (same connection settings)."""
        return AwsBaseHook(
            aws_conn_id=self.aws_conn_id, region_name=self.region_name, verify=self.verify, config=self.config,
            client_type="iot",
        ).conn

    def thing_group_arn(self, thing_group_name: str) -> str:
        """ARN of the thing group (IoT DescribeThingGroup).

        :raises ValueError: the thing group does not exist.
        """
        try:
            return self.iot.describe_thing_group(thingGroupName=thing_group_name)["thingGroupArn"]
        except self.iot.exceptions.ResourceNotFoundException as error:
            raise ValueError(
                f"IoT thing group {thing_group_name!r} does not exist; create it and add the robots' core devices."
            ) from error

    def find_active_deployment(self, target_arn: str, deployment_name: str) -> dict[str, Any] | None:
        """An ACTIVE deployment named ``deployment_name`` on ``target_arn`` (ListDeployments), or ``None``."""
        kwargs: dict[str, Any] = {"targetArn": target_arn, "historyFilter": "ALL"}
        while True:
            page = self.conn.list_deployments(**kwargs)
            for dep in page.get("deployments", []):
                if dep.get("deploymentName") == deployment_name and dep.get("deploymentStatus") == "ACTIVE":
                    return dep
            if not page.get("nextToken"):
                return None
            kwargs["nextToken"] = page["nextToken"]

    def tag_field_verdict(self, deployment_id: str, target_arn: str, verdict: str) -> None:
        """Record ``verdict`` (:data:`VERDICT_PROMOTED` / :data:`VERDICT_REJECTED`) on the canary deployment
        ``deployment_id`` to ``target_arn`` (TagResource of :func:`deployment_arn`, tag :data:`FIELD_VERDICT_TAG`).

        :raises botocore.exceptions.ClientError: as TagResource (e.g. AccessDeniedException).
        """
        self.conn.tag_resource(resourceArn=deployment_arn(target_arn, deployment_id),
                               tags={FIELD_VERDICT_TAG: verdict})

    def list_core_device_names(self, thing_group_arn: str) -> list[str]:
        """Thing names of the core devices in the group (ListCoreDevices ``thingGroupArn``)."""
        names: list[str] = []
        kwargs: dict[str, Any] = {"thingGroupArn": thing_group_arn}
        while True:
            page = self.conn.list_core_devices(**kwargs)
            names += [d["coreDeviceThingName"] for d in page.get("coreDevices", [])]
            if not page.get("nextToken"):
                return sorted(names)
            kwargs["nextToken"] = page["nextToken"]

    def effective_deployments(self, thing_name: str) -> dict[str, Any]:
        """Every page of ListEffectiveDeployments of one core device, as one response
        (``{"effectiveDeployments": [...]}``; AWS documents no order: a long-lived robot's newest entries can be on
        any page)."""
        pages = self.conn.get_paginator("list_effective_deployments").paginate(coreDeviceThingName=thing_name)
        return {"effectiveDeployments": [e for page in pages for e in page.get("effectiveDeployments") or []]}

    def device_reports(self, deployment_id: str, things: list[str]) -> dict[str, dict[str, Any]]:
        """One :func:`device_report` per core device (ListEffectiveDeployments)."""
        return {
            thing: device_report(self.conn.list_effective_deployments(coreDeviceThingName=thing), deployment_id)
            for thing in things
        }
