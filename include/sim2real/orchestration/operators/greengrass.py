"""Deploy Greengrass v2 components to a thing group and wait for every core device.

Sources: AWS IoT Greengrass V2 API Reference (CreateDeployment — ``targetArn``,
``deploymentName``, ``components{name: {componentVersion, configurationUpdate{merge, reset}}}``,
``deploymentPolicies.failureHandlingPolicy`` ROLLBACK | DO_NOTHING, ``iotJobConfiguration``;
GetDeployment; ListDeployments; CancelDeployment; ListCoreDevices; ListEffectiveDeployments).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.utils import trim_none_values
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.common.compat.sdk import AirflowFailException

from sim2real.orchestration.hooks.greengrass import (  # the rollback is shared with the orphan sweep
    APPLYING_IT, FAILED_IT, RUNS_IT, GreengrassV2Hook, device_report, previous_release,
    start_rollback, summarize,
)
from sim2real.orchestration.hooks.model_registry import ModelRegistryHook, not_approved_message
from sim2real.orchestration.links.greengrass import GreengrassDeploymentLink
from sim2real.orchestration.triggers.base import defer_wait
from sim2real.orchestration.triggers.greengrass import GreengrassDeploymentTrigger
from sim2real.orchestration.waits.core import event_outcome, settle_now
from sim2real.orchestration.waits.greengrass import greengrass_deployment_step

if TYPE_CHECKING:
    from airflow.sdk import Context


def normalize_components(components: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Validate the ``components`` argument and return the CreateDeployment ``components`` map.

    Each value needs a non-empty string ``componentVersion``; ``configurationUpdate.merge`` may
    be a JSON string or a dict (dumped to JSON). Other keys (``runWith``,
    ``configurationUpdate.reset``) pass through.

    :raises ValueError: empty map, missing version, merge that is not a JSON object.
    """
    if not isinstance(components, dict) or not components:
        raise ValueError("components must be a non-empty dict {component name: {'componentVersion': ...}}")
    out: dict[str, dict[str, Any]] = {}
    for name, spec in components.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("componentVersion"), str) or not spec["componentVersion"]:
            raise ValueError(f"component {name!r} needs a string componentVersion, got {spec!r}")
        spec = dict(spec)
        update = spec.get("configurationUpdate")
        if update is not None:
            update = dict(update)
            merge = update.get("merge")
            if isinstance(merge, dict):
                update["merge"] = json.dumps(merge, sort_keys=True)
            elif merge is not None:
                try:
                    if not isinstance(json.loads(merge), dict):
                        raise ValueError
                except (TypeError, ValueError):
                    raise ValueError(f"configurationUpdate.merge of {name!r} must be a JSON object string") from None
            spec["configurationUpdate"] = update
        out[name] = spec
    return out


def device_releases(responses: dict[str, dict[str, Any]], deployment_id: str, deployment_name: str,
                    failure_handling_policy: str) -> dict[str, dict[str, Any]]:
    """Which release each core device runs after ``deployment_id`` ended badly (failed, timed out, cancelled).

    :param responses: thing name → its ListEffectiveDeployments response, read after the CancelDeployment.
    :return: thing → ``{"status", "reason", "release"}``: ``status`` is the device's ``coreDeviceExecutionStatus``
        for this deployment exactly as it reports it (``NOT_RECEIVED`` when it does not list it); ``release``
        says what it runs: ``deployment_name`` (it finished this deployment: a cancel does not undo that), its
        previous release (it failed and rolled back, or never applied this one), or that it is still applying.
    """
    out: dict[str, dict[str, Any]] = {}
    for thing, response in sorted(responses.items()):
        report = device_report(response, deployment_id)
        status = report["status"]
        before = previous_release(response, deployment_id) or "its earlier components (no earlier deployment listed)"
        if status in RUNS_IT:
            release = f"runs this release {deployment_name} (a cancel does not undo a device that finished)"
        elif status in FAILED_IT:
            release = (f"rolled back to {before}" if failure_handling_policy == "ROLLBACK"
                       else f"left as the failure left it (failureHandlingPolicy DO_NOTHING; before: {before})")
        elif status in APPLYING_IT:
            release = (f"was applying this release when it was cancelled and finishes on its own (success keeps "
                       f"{deployment_name}, a failure rolls back to {before})")
        else:  # QUEUED, CANCELED, NOT_RECEIVED: never applied it
            release = f"never applied this release: still runs {before}"
        out[thing] = {"status": status, "reason": report.get("reason"), "release": release}
    return out


def describe_releases(devices: dict[str, dict[str, Any]], deployment_name: str, advise: bool = True) -> str:
    """One sentence per device (status as reported, reason, release it runs), and whether the fleet is mixed
    (with how to put every robot on one release when ``advise``)."""
    lines = "; ".join(f"{thing}: {d['status']}" + (f" ({d['reason']})" if d.get("reason") else "")
                      + f" — {d['release']}" for thing, d in sorted(devices.items()))
    new = sorted(t for t, d in devices.items() if d["status"] in RUNS_IT)
    old = sorted(t for t, d in devices.items() if d["status"] not in RUNS_IT)
    text = f"Robots as they report now (ListEffectiveDeployments after the cancel): {lines}"
    if new and old:
        text += f". The fleet is MIXED: {', '.join(new)} run {deployment_name}, {', '.join(old)} do not"
        if advise:
            text += ("; to put every robot on one release, release the previous approved model package again (DAG "
                     "sim_to_real_release with its model_package_arn) or fix the failing robots and deploy again")
    return text


class GreengrassDeploymentOperator(AwsBaseOperator[GreengrassV2Hook]):
    """CreateDeployment to a thing group and wait until every core device reports success.

    Reuses an ACTIVE deployment with the same ``deployment_name`` on the same target (a retried
    task) instead of creating a second one. The devices are the core devices of the thing group
    (ListCoreDevices ``thingGroupArn``); each device's status for THIS deployment is read from
    ListEffectiveDeployments. SUCCEEDED/COMPLETED are success; FAILED/TIMED_OUT/REJECTED/CANCELED
    fail the task; QUEUED/IN_PROGRESS keep waiting. On a failure or timeout the deployment is
    cancelled (CancelDeployment: it stops the devices that have not received it yet) and every device is read
    again: the task fails naming each device's status as the device reports it, its reason and the release it
    runs now (this one when it had SUCCEEDED: a cancel does not undo it; its previous release when it failed and
    rolled back, ``failure_handling_policy="ROLLBACK"``, or never applied this one; still applying), and says
    when the fleet is left mixed. Under ``ROLLBACK``, when some robots run (or are still applying) the failed
    release, the whole thing group is rolled back to its last good release
    (:func:`~sim2real.orchestration.hooks.greengrass.last_good_deployment`: the newest other release to this group
    that robots finished and none failed, and no canary that was not promoted, read from every page of
    ListEffectiveDeployments), deployed again with its own components, policies and job configuration
    (GetDeployment → CreateDeployment named ``<deployment_name>-rollback``); its wait on the robots that ran the
    failed release is deferred too, and the task then fails saying they run the earlier release again, or, when
    the rollback failed on one as well, naming both deployments (the rollback is cancelled; one that has not
    finished in time stays active). With no earlier release of the group there is nothing to go back to, and the
    failure says so. The trigger's ``on_kill`` cancels the deployment it waits for (the release, or its rollback).

    :param thing_group_name: IoT thing group of the robots.
    :param components: ``{name: {"componentVersion": v, "configurationUpdate": {"merge": json-str}}}``.
    :param deployment_name: the deployment name (the run key).
    :param failure_handling_policy: ``ROLLBACK`` (default) or ``DO_NOTHING``.
    :param iot_job_configuration: CreateDeployment ``iotJobConfiguration`` (rollout, abort, timeout).
    :param waiter_delay: seconds between polls (default 30).
    :param waiter_max_attempts: polls before cancelling and failing (default 120 = 1 h), when
        ``deployment_timeout_seconds`` is not given.
    :param deployment_timeout_seconds: the one bound on the wait, in seconds (templated: a run's form field
        reaches it at run time); polls = ``ceil(timeout / waiter_delay)``. When it passes, the deployment is
        cancelled and the task fails **without retry**, naming each device that had not finished.
    :param model_package_arn: the SageMaker model package the components deploy (templated). Read again
        (DescribeModelPackage) right before CreateDeployment: a package that is no longer ``Approved``
        (rejected, set back to PendingManualApproval after its approval) is refused and nothing is deployed.
        The status seen then is in the result and in XCom ``model_package_check``.
    :param tags: CreateDeployment ``tags`` of the deployment (a reused ACTIVE deployment keeps its own).
    :return: ``{"deployment_id", "iot_job_id", "target_arn", "devices": {thing: status}}``, plus
        ``model_package_arn`` and ``model_approval_status`` (the status read before CreateDeployment) when a
        package was given.
    :raises ValueError: bad components/policy, missing thing group.
    :raises AirflowFailException: (not retried) a device failed or the deployment timed out (after the
        rollback, when one was made: :meth:`rollback_complete`), the thing group
        has no core devices (checked before CreateDeployment: nothing is created), or the model package is
        not Approved.
    """

    #: Always True: the wait runs in the triggerer (there is no blocking mode); read by the DAG checks.
    deferrable = True

    aws_hook_class = GreengrassV2Hook
    template_fields: Sequence[str] = aws_template_fields(
        "thing_group_name", "components", "deployment_name", "failure_handling_policy", "iot_job_configuration",
        "deployment_timeout_seconds", "model_package_arn",
    )
    template_fields_renderers = {"components": "json", "iot_job_configuration": "json"}
    operator_extra_links = (GreengrassDeploymentLink(),)

    def __init__(
        self,
        *,
        thing_group_name: str,
        components: dict[str, dict[str, Any]],
        deployment_name: str,
        failure_handling_policy: str = "ROLLBACK",
        iot_job_configuration: dict[str, Any] | None = None,
        waiter_delay: int = 30,
        waiter_max_attempts: int = 120,
        deployment_timeout_seconds: int | None = None,
        model_package_arn: str | None = None,
        tags: dict[str, str] | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.tags = tags
        self.deployment_timeout_seconds = deployment_timeout_seconds
        self.model_package_arn = model_package_arn
        self.thing_group_name = thing_group_name
        self.components = components
        self.deployment_name = deployment_name
        self.failure_handling_policy = failure_handling_policy
        self.iot_job_configuration = iot_job_configuration
        self.waiter_delay = waiter_delay
        self.waiter_max_attempts = waiter_max_attempts

    def execute(self, context: Context) -> dict[str, Any]:
        if self.failure_handling_policy not in ("ROLLBACK", "DO_NOTHING"):
            raise ValueError(f"failure_handling_policy must be ROLLBACK or DO_NOTHING, got {self.failure_handling_policy!r}")
        if not self.deployment_name:
            raise ValueError("deployment_name is required (use the run key)")
        components = normalize_components(self.components)
        self._apply_timeout()
        target_arn = self.hook.thing_group_arn(self.thing_group_name)
        package = self._check_model_package(context)
        things = self.hook.list_core_device_names(target_arn)
        if not things:
            raise AirflowFailException(
                f"IoT thing group {self.thing_group_name!r} ({target_arn}) has no Greengrass core devices: no "
                "deployment was created. Add the robots' core devices to the group (install the Greengrass "
                "nucleus with --thing-group-name) or deploy to another group (form field thing_group_name)."
            )

        existing = self.hook.find_active_deployment(target_arn, self.deployment_name)
        if existing:
            deployment_id = existing["deploymentId"]
            self.log.info("Reusing ACTIVE deployment %s named %s", deployment_id, self.deployment_name)
        else:
            deployment_id = self.hook.conn.create_deployment(
                **trim_none_values(
                    {
                        "targetArn": target_arn,
                        "deploymentName": self.deployment_name,
                        "components": components,
                        "deploymentPolicies": {"failureHandlingPolicy": self.failure_handling_policy},
                        "iotJobConfiguration": self.iot_job_configuration,
                        "tags": self.tags or None,
                    }
                )
            )["deploymentId"]
            self.log.info("Created Greengrass deployment %s to %s", deployment_id, target_arn)
        iot_job_id = self.hook.conn.get_deployment(deploymentId=deployment_id).get("iotJobId")
        GreengrassDeploymentLink.persist(
            context=context,
            operator=self,
            region_name=self.hook.conn_region_name,
            aws_partition=self.hook.conn_partition,
            deployment_id=deployment_id,
        )
        base = {"deployment_id": deployment_id, "iot_job_id": iot_job_id, "target_arn": target_arn,
                "thing_group_name": self.thing_group_name, **package}

        over = self._over(deployment_id, target_arn)  # already finished on every device: no trigger race
        if over is not None:
            self.log.info("Deployment %s is already over (%s): not deferring", deployment_id, over[0])
            return self._finish(context, base, *over)
        defer_wait(self, GreengrassDeploymentTrigger, method_name="execute_complete", kwargs={"base": base},
                   waiter_delay=self.waiter_delay, waiter_max_attempts=self.waiter_max_attempts,
                   deployment_id=deployment_id, thing_group_arn=target_arn)

    def _apply_timeout(self) -> None:
        """``deployment_timeout_seconds`` (rendered) → ``waiter_max_attempts`` polls ``waiter_delay`` s apart."""
        if self.deployment_timeout_seconds in (None, ""):
            return
        timeout = int(self.deployment_timeout_seconds)
        if timeout <= 0:
            raise ValueError(f"deployment_timeout_seconds must be positive, got {timeout}")
        self.waiter_max_attempts = max(1, -(-timeout // max(1, int(self.waiter_delay))))

    def _check_model_package(self, context: Context) -> dict[str, Any]:
        """DescribeModelPackage of ``model_package_arn`` right before CreateDeployment; refuse a package that
        is not Approved. Returns ``{"model_package_arn", "model_approval_status"}`` (``{}`` without a package)."""
        if not self.model_package_arn:
            return {}

        registry = ModelRegistryHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name,
                                     verify=self.verify, config=self.botocore_config)
        package = registry.describe_model_package(self.model_package_arn)
        status = package.get("ModelApprovalStatus")
        seen = {"model_package_arn": package.get("ModelPackageArn") or self.model_package_arn,
                "model_approval_status": status}
        context["ti"].xcom_push(key="model_package_check", value=seen)
        self.log.info("Model package %s is %s at deploy time", seen["model_package_arn"], status)
        if status != "Approved":
            raise AirflowFailException(
                "Not deployed (no Greengrass deployment was created): " + not_approved_message(package))
        return seen

    def _over(self, deployment_id: str, target_arn: str) -> tuple[str, dict[str, dict[str, Any]], str] | None:
        """One poll of the group's core devices (ListCoreDevices, then ListEffectiveDeployments per device),
        decided by the wait's step function
        (:func:`~sim2real.orchestration.waits.greengrass.greengrass_deployment_step`).

        :return: ``(status, reports, message)`` when the deployment is over (``"success"`` on every device,
            ``"failure"`` on one, or no core device), None while it is unfinished.
        """
        things = self.hook.list_core_device_names(target_arn)
        response = {"devices": {thing: self.hook.conn.list_effective_deployments(coreDeviceThingName=thing)
                                for thing in things}}
        step = settle_now(greengrass_deployment_step, response,
                          {"deployment_id": deployment_id, "thing_group_arn": target_arn})
        if step is None:
            return None
        reports = dict(step.payload.get("devices") or {})
        return step.outcome, reports, "" if reports else step.reason

    def _finish(self, context: Context, base: dict[str, Any], status: str, reports: dict[str, dict[str, Any]],
                message: str) -> dict[str, Any]:
        if status == "success":
            return {**base, "devices": {t: r["status"] for t, r in sorted(reports.items())}}
        if status == "timeout":
            unfinished = {t: r for t, r in reports.items() if r.get("outcome") != "success"}
            bound = int(self.waiter_delay) * int(self.waiter_max_attempts)
            message = (f"the robots did not all finish within the deployment timeout of {bound} s ({message}); "
                       f"unfinished devices: {summarize(unfinished) or 'none listed'}")
        deployment_id = base["deployment_id"]
        cancelled = self._cancel(deployment_id)
        what = "timed out" if status == "timeout" else "failed"
        # What each robot runs now, as it reports it after the cancel (the wait's last reading can be older: a
        # robot seen QUEUED may have failed and rolled back since, one seen IN_PROGRESS may have finished).
        target_arn, responses = self._devices_after_cancel(base)
        devices = device_releases(responses, deployment_id, self.deployment_name, self.failure_handling_policy)
        if devices:
            self.log.info("Devices after the cancel: %s", devices)
        # Robots that finished (or are finishing) this release keep it after a cancel; under ROLLBACK the whole
        # group is put back on the last release its robots finished, so that the fleet is not left mixed.
        rollback: dict[str, Any] | None = None
        if self.failure_handling_policy == "ROLLBACK" and any(d["status"] in RUNS_IT | APPLYING_IT
                                                               for d in devices.values()):
            rollback = start_rollback(self.hook, deployment_id, self.deployment_name, target_arn, responses)
        # A device failure or a timeout is a verdict on this release: not retried, which would push the same
        # components to the robots again and multiply the bound.
        target = base.get("thing_group_name") or self.thing_group_name
        failure = (
            f"Greengrass deployment {deployment_id} ({self.deployment_name}) to thing group {target!r}"
            + (f" ({target_arn})" if target_arn else "") + f" {what}"
            + (f": {message}" if message else "")
            + f". Deployment {cancelled}"
            + (". " + describe_releases(devices, self.deployment_name, advise=rollback is None or "error" in rollback)
               if devices
               else (f". Devices as last read (they could not be read again after the cancel): {summarize(reports)}"
                     if reports else ""))
        )
        advice = (". Check the device logs (/greengrass/v2/logs/greengrass.log and the component logs)"
                  + (" or raise deployment_timeout_minutes" if status == "timeout" else "") + ".")
        if rollback is None or "error" in rollback:
            raise AirflowFailException(failure + (f". {rollback['error']}" if rollback else "") + advice)
        robots = sorted(t for t, d in devices.items() if d["status"] in RUNS_IT | APPLYING_IT)
        rollback = {**rollback, "failure": failure, "advice": advice, "deployment_id_failed": deployment_id,
                    "thing_names": robots}
        context["ti"].xcom_push(key="rollback", value=rollback)
        self.log.info("Rolling thing group %s back to %s: deployment %s", target, rollback["previous_deployment_name"],
                      rollback["deployment_id"])
        defer_wait(self, GreengrassDeploymentTrigger, method_name="rollback_complete", kwargs={"rollback": rollback},
                   waiter_delay=self.waiter_delay, waiter_max_attempts=self.waiter_max_attempts,
                   deployment_id=rollback["deployment_id"], thing_group_arn=target_arn, thing_names=robots)

    def _cancel(self, deployment_id: str) -> str:
        """CancelDeployment; ``"cancelled"``, or ``"CancelDeployment failed: <error>"`` (the failure report that
        follows matters more than the cancel)."""
        try:
            self.hook.conn.cancel_deployment(deploymentId=deployment_id)
        except Exception as error:  # noqa: BLE001 - named in the failure instead
            return f"CancelDeployment failed: {error}"
        return "cancelled"

    def _devices_after_cancel(self, base: dict[str, Any]) -> tuple[str | None, dict[str, dict[str, Any]]]:
        """The group's ARN and every core device's ListEffectiveDeployments entries (every page), read now
        (``{}`` when they cannot be read)."""
        target = base.get("target_arn")
        try:
            target = target or self.hook.thing_group_arn(base.get("thing_group_name") or self.thing_group_name)
            return target, {thing: self.hook.effective_deployments(thing)
                            for thing in self.hook.list_core_device_names(target)}
        except Exception as error:  # noqa: BLE001 - the failure is raised anyway, with the last reading
            self.log.warning("Could not read the devices again after the cancel: %s", error)
            return target, {}

    def rollback_complete(self, context: Context, event: dict[str, Any] | None = None,
                          rollback: dict[str, Any] | None = None) -> NoReturn:
        """Resume after the rollback deployment's wait on the robots that ran the failed release: the task fails
        either way (the release did not deploy), saying whether those robots run the previous release again. A
        rollback that failed on a robot is cancelled and both deployments are named; one that has not finished
        everywhere in time stays active (it is the group's release: a robot that comes back applies it).

        :raises AirflowFailException: always.
        """
        status, message = event_outcome(event, f"Greengrass rollback deployment of {self.deployment_name}")
        self._apply_timeout()
        if rollback is None:  # resumed without the deferral's kwargs (dag.test hands on the event only)
            rollback = context["ti"].xcom_pull(task_ids=self.task_id, key="rollback") or {}
        rollback_id = rollback.get("deployment_id") or event.get("deployment_id")
        name, back_to = rollback.get("deployment_name"), (
            f"{rollback.get('previous_deployment_name')} (deployment {rollback.get('previous_deployment_id')})")
        robots = ", ".join(rollback.get("thing_names") or []) or "none listed"
        devices = event.get("devices") or {}
        advice = rollback.get("advice", ".")
        if status == "success":
            raise AirflowFailException(
                f"{rollback.get('failure')}. Rolled back automatically: deployment {rollback_id} ({name}) put the "
                f"components of {back_to} back on the robots that ran this release ({summarize(devices)}): the fleet "
                f"runs {rollback.get('previous_deployment_name')} again" + advice)
        both = (f"Both deployments: {rollback.get('deployment_id_failed')} (this release) and {rollback_id} (the "
                "rollback)")
        if status == "timeout":
            bound = int(self.waiter_delay) * int(self.waiter_max_attempts)
            raise AirflowFailException(
                f"{rollback.get('failure')}. The automatic rollback to {back_to}, deployment {rollback_id} ({name}), "
                f"had not finished on every robot that ran this release ({robots}) within {bound} s: "
                f"{summarize(devices) or message}. It stays active (it is the group's release: a robot that comes "
                f"back applies it); until then the fleet may be mixed. {both}" + advice)
        cancelled = self._cancel(rollback_id)
        cancelled = "it was cancelled" if cancelled == "cancelled" else cancelled
        raise AirflowFailException(
            f"{rollback.get('failure')}. The automatic rollback to {back_to} failed too: deployment {rollback_id} "
            f"({name}): {summarize(devices) or message}; {cancelled}. {both}; the fleet may be mixed: read each "
            "robot's ListEffectiveDeployments" + advice)

    def execute_complete(
        self, context: Context, event: dict[str, Any] | None = None, base: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Resume after the trigger: return the device statuses or cancel and fail."""
        status, message = event_outcome(event, f"Greengrass deployment of {self.deployment_name}")
        self._apply_timeout()  # a resumed task is a fresh operator: the bound in the message is the form's
        if base is None:  # resumed without the deferral's kwargs (dag.test hands on the event only)
            check = context["ti"].xcom_pull(task_ids=self.task_id, key="model_package_check") or {}
            base = {"deployment_id": event["deployment_id"], "iot_job_id": None, "target_arn": None,
                    "thing_group_name": self.thing_group_name, **check}
        devices = event.get("devices") or {}
        # a device failure is named by the device reports; the message adds what they do not say
        return self._finish(context, base, status, devices, "" if status == "failure" and devices else message)
