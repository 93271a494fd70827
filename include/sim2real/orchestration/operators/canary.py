"""Judge a canary release on the field episodes its robots upload: promote it to the fleet, or roll the canary
thing group back.

Sources: Amazon S3 API Reference (ListObjectsV2, GetObject: the episode objects, :mod:`sim2real.contract.field`);
AWS IoT Greengrass V2 API Reference (ListCoreDevices, ListEffectiveDeployments, GetDeployment, CreateDeployment: the
rollback; CreateDeployment ``tags`` and TagResource: the canary's field verdict recorded on its deployment); AWS IoT
API Reference (DescribeThingGroup).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.common.compat.sdk import AirflowFailException

from sim2real.contract.field import parse_time
from sim2real.orchestration.field import canary_verdict, collect_field_episodes, field_summary
from sim2real.orchestration.lineage import CANARY_VERDICT_KEY
from sim2real.orchestration.hooks.greengrass import (
    FIELD_VERDICT_TAG, VERDICT_PENDING, VERDICT_PROMOTED, VERDICT_REJECTED, GreengrassV2Hook, summarize,
)
from sim2real.orchestration.operators.greengrass import GreengrassDeploymentOperator, start_rollback
from sim2real.orchestration.triggers.base import defer_wait
from sim2real.orchestration.triggers.canary import CanaryFieldEpisodesTrigger
from sim2real.orchestration.triggers.greengrass import GreengrassDeploymentTrigger
from sim2real.orchestration.waits.core import event_outcome, settle_now
from sim2real.orchestration.waits.greengrass import greengrass_deployment_step

if TYPE_CHECKING:
    from airflow.sdk import Context

#: XCom keys: the window and robots fixed at the first try (a resume reads them), the verdict with its evidence,
#: the rollback started.
XCOM_WINDOW, XCOM_VERDICT, XCOM_ROLLBACK = "canary_window", CANARY_VERDICT_KEY, "canary_rollback"
#: The rollback's wait on the canary robots: seconds between polls and polls (1 h), as the Greengrass operator's.
ROLLBACK_WAITER_DELAY, ROLLBACK_WAITER_MAX_ATTEMPTS = 30, 120
#: Refusals listed one by one in the verdict's XCom (the counts by reason are always complete).
REFUSALS_IN_XCOM = 50


def _utc(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def truthy(value: Any) -> bool:
    """A boolean argument, also rendered from a template (``"False"``, ``"false"``, ``""`` and ``"0"`` are False)."""
    if isinstance(value, str):
        return value.strip().lower() not in ("", "false", "0", "none")
    return bool(value)


class CanaryRollback:
    """The canary group's rollback, shared by the canary's deciders (:class:`CanaryVerdictOperator` when the field
    says no, :class:`~sim2real.orchestration.operators.canary_review.CanaryReviewOperator` when a person aborts):
    put the canary thing group back on its last good release
    (:func:`~sim2real.orchestration.hooks.greengrass.start_rollback`), wait for it on the canary robots
    (deferred: :class:`~sim2real.orchestration.triggers.greengrass.GreengrassDeploymentTrigger`) and fail.

    The operator it is mixed into has ``hook`` (:class:`~sim2real.orchestration.hooks.greengrass.GreengrassV2Hook`),
    ``thing_group_name``, ``deployment_id`` and ``deployment_name`` (the canary's) and is an ``AwsBaseOperator``.

    Sources: AWS IoT Greengrass V2 API Reference (ListCoreDevices, ListEffectiveDeployments, GetDeployment,
    CreateDeployment).
    """

    def _promote(self, target_arn: str) -> None:
        """Record on the canary deployment that it was promoted (tag ``sim2real:field-verdict`` = ``promoted``,
        TagResource): a later rollback of the canary group may go back to it.

        :raises botocore.exceptions.ClientError: TagResource failed (the task is retried: the record must be true).
        """
        self.hook.tag_field_verdict(self.deployment_id, target_arn, VERDICT_PROMOTED)
        self.log.info("Canary %s promoted: tagged %s=%s", self.deployment_id, FIELD_VERDICT_TAG, VERDICT_PROMOTED)

    def _reject(self, target_arn: str) -> None:
        """Record on the canary deployment that it was rejected (``sim2real:field-verdict`` = ``rejected``,
        TagResource). A failure is only logged: its ``pending`` tag from CreateDeployment already keeps every
        rollback from going back to it, and the rollback matters more."""
        try:
            self.hook.tag_field_verdict(self.deployment_id, target_arn, VERDICT_REJECTED)
        except Exception as error:  # noqa: BLE001 - the rollback goes on; the pending tag stays
            self.log.warning("Could not tag canary %s %s=%s (it stays %s): %s", self.deployment_id,
                             FIELD_VERDICT_TAG, VERDICT_REJECTED, VERDICT_PENDING, error)

    def _roll_back(self, context: Context, target_arn: str, thing_names: Sequence[str], why: str) -> NoReturn:
        """Record the canary as rejected (:meth:`_reject`), roll the canary group (``target_arn``) back to its last
        good release and defer on that deployment's wait on the robots ``thing_names``; fails at once when there is
        no release to go back to or the rollback could not be created.

        :param why: what ended the canary, after ``Canary <id> (<name>) on thing group <group>`` in the failure.
        :raises TaskDeferred: the rollback was created (resumes in :meth:`rollback_complete`).
        :raises AirflowFailException: (not retried) it could not be, or the robots already finished it (ListEffectiveDeployments,
            read once before deferring: :meth:`rollback_complete` at once).
        """
        failure = (f"Canary {self.deployment_id} ({self.deployment_name}) on thing group {self.thing_group_name!r} "
                   f"{why}")
        self._reject(target_arn)
        responses = {thing: self.hook.effective_deployments(thing)
                     for thing in self.hook.list_core_device_names(target_arn)}
        rollback = start_rollback(self.hook, self.deployment_id, self.deployment_name, target_arn, responses)
        if "error" in rollback:
            raise AirflowFailException(f"{failure}. {rollback['error']}; the canary robots still run deployment "
                                       f"{self.deployment_id}: deploy an earlier approved release to the group")
        rollback = {**rollback, "failure": failure}
        context["ti"].xcom_push(key=XCOM_ROLLBACK, value=rollback)
        self.log.info("Rolling canary group %s back to %s: deployment %s", self.thing_group_name,
                      rollback["previous_deployment_name"], rollback["deployment_id"])
        # Settle before deferring: a rollback the robots already finished (a retry's: its client token returns the
        # same deployment) ends here, not in a trigger firing right after the deferral (Airflow 3.3.1 can fail a try
        # from that deferral's stale executor state).
        step = settle_now(greengrass_deployment_step,
                          {"devices": {thing: self.hook.effective_deployments(thing) for thing in thing_names}},
                          {"deployment_id": rollback["deployment_id"], "thing_group_arn": target_arn})
        if step is not None:
            self.rollback_complete(context, {"status": step.outcome, "message": step.reason, **step.payload}, rollback)
        defer_wait(self, GreengrassDeploymentTrigger, method_name="rollback_complete", kwargs={"rollback": rollback},
                   waiter_delay=ROLLBACK_WAITER_DELAY,
                   waiter_max_attempts=ROLLBACK_WAITER_MAX_ATTEMPTS, deployment_id=rollback["deployment_id"],
                   thing_group_arn=target_arn, thing_names=list(thing_names), cancel_on_kill=False)

    def rollback_complete(self, context: Context, event: dict[str, Any] | None = None,
                          rollback: dict[str, Any] | None = None) -> NoReturn:
        """Resume after the rollback's wait on the canary robots: the task fails either way (the canary was not
        promoted), saying whether the robots run the earlier release again, or naming both deployments.

        :raises AirflowFailException: always.
        """
        status, message = event_outcome(event, f"Greengrass rollback of canary {self.deployment_id}")
        rollback = rollback or context["ti"].xcom_pull(task_ids=self.task_id, key=XCOM_ROLLBACK) or {}
        rollback_id = rollback.get("deployment_id") or event.get("deployment_id")
        back_to = f"{rollback.get('previous_deployment_name')} (deployment {rollback.get('previous_deployment_id')})"
        devices = summarize(event.get("devices") or {}) or message
        if status == "success":
            raise AirflowFailException(
                f"{rollback.get('failure')}. Rolled back: deployment {rollback_id} ({rollback.get('deployment_name')}) "
                f"put {back_to} back on the canary robots ({devices}); the fleet was not deployed")
        raise AirflowFailException(
            f"{rollback.get('failure')}. The rollback to {back_to} did not succeed ({status}): {devices}. Both "
            f"deployments: {self.deployment_id} (the canary) and {rollback_id} (the rollback); read each canary "
            "robot's ListEffectiveDeployments")


class CanaryVerdictOperator(CanaryRollback, AwsBaseOperator[GreengrassV2Hook]):
    """Wait, deferred, for the field episodes the canary robots upload after the canary deployment, then promote the
    release or roll the canary thing group back.

    The wait (:class:`~sim2real.orchestration.triggers.canary.CanaryFieldEpisodesTrigger`) only counts the canary
    robots' episode objects uploaded in the window, every ``waiter_delay`` seconds, until there are ``min_episodes``
    from every robot or the window (``window_minutes`` from ``window_start``) is over. The task then reads and
    checks those of the canary robots' folders (:func:`~sim2real.orchestration.field.collect_field_episodes`: this
    model version, this deployment, these robots, this window; every other object refused, counted and logged with
    its reason; one uploaded before the window is refused as early without being read), sums them up
    (:func:`~sim2real.orchestration.field.field_summary`) and decides
    (:func:`~sim2real.orchestration.field.canary_verdict`): ``wait`` defers again until a new object arrives;
    ``promote`` returns the evidence; ``roll_back`` puts the canary group back on its last good release (the
    Greengrass operator's rollback: :func:`~sim2real.orchestration.hooks.greengrass.start_rollback`), waits for
    it on the canary robots (deferred), and fails naming the field success rate, its 95 % Wilson interval, the
    threshold and the episode count, and both deployment ids when the rollback did not succeed.

    ``on_kill`` stops nothing: the episode wait starts nothing, and a rollback in progress is left to finish (it is
    the canary group's safe release).

    :param thing_group_name: the canary IoT thing group (templated).
    :param deployment_id: the canary's Greengrass deployment (templated: the canary deploy task's XCom).
    :param deployment_name: its name (the rollback is ``<deployment_name>-rollback``).
    :param model_version: what the canary robots serve (the episodes' ``model_version``: the deployment's
        ``ModelSha256``).
    :param bucket: the bucket the robots upload to; ``prefix``: their key prefix (``""`` or ending in ``/``).
    :param min_episodes: field episodes needed before the rate decides (>= 1).
    :param window_minutes: the canary window in minutes (> 0): the longest the verdict waits.
    :param min_success_rate: the field threshold, a fraction in ``[0, 1]``.
    :param window_start: the window's start, RFC 3339 with an offset (templated); None: when the canary deployment
        was created (GetDeployment ``creationTimestamp``: its robots report episodes from then on, before this task
        starts). Kept in XCom ``canary_window`` with the robots, for the try's resumes.
    :param thing_names: the canary robots; None: the group's core devices (ListCoreDevices) when the try starts.
    :param waiter_delay: seconds between the wait's S3 listings (default 300: 12 ListObjectsV2 per robot an hour).
    :param review: (templated) a person decides after the verdict
        (:class:`~sim2real.orchestration.operators.canary_review.CanaryReviewOperator`): a ``roll_back`` verdict is
        then returned with its evidence, not carried out (the verdict still waits for the episodes as without it).
    :return: ``{"decision": "no_canary"}`` at once when ``thing_group_name`` is empty (no canary); (``promote``,
        or ``roll_back`` with ``review``) the evidence, also in XCom ``canary_verdict``: ``{"decision", "message", "rate",
        "ci95", "n", "successes", "threshold", "min_episodes", "robots": {thing: {"n", "successes",
        "interventions"}}, "silent", "refused": {reason: count}, "refusals": [[key, reason, detail], ...] (the
        first 50), "window": {"start", "end"}, "deployment_id", "model_version"}``.
    :raises ValueError: an argument out of range (named).
    :raises AirflowFailException: (not retried) the canary was rolled back (or could not be), the canary group has
        no core device, or the episodes could not be listed (e.g. AccessDenied).
    """

    #: Always True: the waits run in the triggerer; read by the DAG checks.
    deferrable = True

    aws_hook_class = GreengrassV2Hook
    template_fields: Sequence[str] = aws_template_fields(
        "thing_group_name", "deployment_id", "deployment_name", "model_version", "bucket", "prefix", "min_episodes",
        "window_minutes", "min_success_rate", "window_start", "review",
    )

    def __init__(self, *, thing_group_name: str, deployment_id: str, deployment_name: str, model_version: str,
                 bucket: str, prefix: str = "", min_episodes: int = 20, window_minutes: float = 60,
                 min_success_rate: float = 0.8, window_start: str | None = None,
                 thing_names: Sequence[str] | None = None, waiter_delay: int = 300, review: bool = False,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.thing_group_name, self.deployment_id, self.deployment_name = thing_group_name, deployment_id, deployment_name
        self.model_version, self.bucket, self.prefix = model_version, bucket, prefix
        self.min_episodes, self.window_minutes, self.min_success_rate = min_episodes, window_minutes, min_success_rate
        self.window_start, self.waiter_delay, self.review = window_start, waiter_delay, review
        self.thing_names = list(thing_names) if thing_names is not None else None

    def _rule(self) -> dict[str, Any]:
        """The rendered limits, checked: ``{"min_episodes", "min_success_rate", "window_minutes"}``."""
        rule = {"min_episodes": int(self.min_episodes), "min_success_rate": float(self.min_success_rate),
                "window_minutes": float(self.window_minutes)}
        if rule["min_episodes"] < 1:
            raise ValueError(f"min_episodes must be >= 1, got {self.min_episodes}")
        if not 0.0 <= rule["min_success_rate"] <= 1.0:
            raise ValueError(f"min_success_rate must be a fraction in [0, 1], got {self.min_success_rate}")
        if not rule["window_minutes"] > 0:
            raise ValueError(f"window_minutes must be positive, got {self.window_minutes}")
        if self.prefix and not self.prefix.endswith("/"):
            raise ValueError(f"prefix must be empty or end with '/', got {self.prefix!r}")
        return rule

    def execute(self, context: Context) -> dict[str, Any]:
        if not self.thing_group_name:
            self.log.info("No canary thing group: no verdict (the release goes to the fleet group at once)")
            return {"decision": "no_canary"}
        rule = self._rule()
        target_arn = self.hook.thing_group_arn(self.thing_group_name)
        things = sorted(self.thing_names if self.thing_names is not None
                        else self.hook.list_core_device_names(target_arn))
        if not things:
            raise AirflowFailException(
                f"canary thing group {self.thing_group_name!r} ({target_arn}) has no Greengrass core device: no "
                "robot can report field episodes. Add the canary robots' core devices to it.")
        start = parse_time(self.window_start) if self.window_start else self._deployment_created()
        end = start + timedelta(minutes=rule["window_minutes"])
        window = {"start": _utc(start), "end": _utc(end), "thing_names": things, "target_arn": target_arn}
        context["ti"].xcom_push(key=XCOM_WINDOW, value=window)  # the resumes read it (dag.test gives no kwargs)
        self.log.info("Canary %s on %s: waiting for field episodes of %s until %s", self.deployment_id,
                      ", ".join(window["thing_names"]), self.model_version, window["end"])
        self._wait(window, rule, keys_read=0)

    def _deployment_created(self) -> datetime:
        """When the canary deployment was created (GetDeployment ``creationTimestamp``): the robots run the release,
        and report its episodes, from the moment they apply it, before this task starts."""
        created = self.hook.conn.get_deployment(deploymentId=self.deployment_id)["creationTimestamp"]
        if isinstance(created, datetime):
            return created.astimezone(timezone.utc)
        return datetime.fromtimestamp(float(created), timezone.utc)

    def _wait(self, window: dict[str, Any], rule: dict[str, Any], keys_read: int) -> NoReturn:
        """Defer on the episode wait until ``window["end"]`` (polls enough to reach it, plus one)."""
        end = parse_time(window["end"]).timestamp()
        delay = max(1, int(self.waiter_delay))
        left = max(0.0, end - datetime.now(timezone.utc).timestamp())
        defer_wait(self, CanaryFieldEpisodesTrigger, method_name="execute_complete", kwargs={"window": window},
                   waiter_delay=delay, waiter_max_attempts=math.ceil(left / delay) + 1, bucket=self.bucket,
                   prefix=self.prefix, thing_names=window["thing_names"], min_episodes=rule["min_episodes"],
                   window_start=parse_time(window["start"]).timestamp(), window_end=end, keys_read=keys_read)

    def _s3(self) -> Any:
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        return S3Hook(aws_conn_id=self.aws_conn_id, region_name=self.region_name, verify=self.verify,
                      config=self.botocore_config)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None,
                         window: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after the episode wait: read and check the episodes, decide, and promote, wait again or roll
        back (see the class docstring)."""
        where = f"field episodes of canary {self.deployment_id} under s3://{self.bucket}/{self.prefix}field/episodes/"
        status, message = event_outcome(event, where)
        if status == "failure":
            raise AirflowFailException(f"Waiting for the {where} failed: {message}")
        rule = self._rule()
        window = window or context["ti"].xcom_pull(task_ids=self.task_id, key=XCOM_WINDOW)
        ended = bool(event.get("window_over")) or datetime.now(timezone.utc) >= parse_time(window["end"])
        episodes = collect_field_episodes(
            self._s3(), self.bucket, self.prefix, model_version=self.model_version,
            deployment_ids=[self.deployment_id], thing_names=window["thing_names"], not_before=window["start"],
            not_after=window["end"], thing_folders_only=True, skip_uploaded_before=True)
        for key, reason, detail in episodes.refusals:
            self.log.warning("Refused field episode object %s: %s (%s)", key, reason, detail)
        summary = field_summary(episodes.accepted).get(self.model_version)
        verdict = canary_verdict(summary, window["thing_names"], window_ended=ended, **rule)
        self.log.info("Canary %s: %s (refused objects by reason: %s)", self.deployment_id, verdict.message,
                      episodes.refused)
        evidence = {
            "decision": verdict.decision, "message": verdict.message, "rate": (summary or {}).get("rate"),
            "ci95": (summary or {}).get("ci95", [0.0, 1.0]), "n": (summary or {}).get("n", 0),
            "successes": (summary or {}).get("successes", 0), "threshold": rule["min_success_rate"],
            "min_episodes": rule["min_episodes"], "robots": (summary or {}).get("robots", {}),
            "silent": list(verdict.silent), "refused": episodes.refused,
            "refusals": [list(r) for r in episodes.refusals[:REFUSALS_IN_XCOM]],
            "window": {"start": window["start"], "end": window["end"]}, "deployment_id": self.deployment_id,
            "model_version": self.model_version,
        }
        context["ti"].xcom_push(key=XCOM_VERDICT, value=evidence)
        if verdict.decision == "promote" and not truthy(self.review):
            self._promote(window["target_arn"])
        if verdict.decision == "promote":
            return evidence
        if verdict.decision == "roll_back" and truthy(self.review):
            self.log.info("Canary %s: the verdict recommends a roll back; a person decides (canary_review)",
                          self.deployment_id)
            return evidence
        if verdict.decision == "wait":
            self._wait(window, rule, keys_read=sum((event.get("listed") or {}).values()))
        self._roll_back(context, window["target_arn"], window["thing_names"], verdict.message)


class CanaryDeploymentOperator(GreengrassDeploymentOperator):
    """:class:`~sim2real.orchestration.operators.greengrass.GreengrassDeploymentOperator` to the canary thing group;
    with no canary group (``thing_group_name`` ``""``, the form's default) it deploys nothing and returns ``{}`` at
    once, so that the fleet deployment after it runs as without a canary. The deployment is created with the tag
    ``sim2real:field-verdict`` = ``pending`` (CreateDeployment ``tags``): until the verdict promotes it, no rollback
    goes back to it (:func:`~sim2real.orchestration.hooks.greengrass.start_rollback`).

    :return: the Greengrass operator's result, or ``{}`` without a canary group.
    """

    def execute(self, context: Context) -> dict[str, Any]:
        if not self.thing_group_name:
            self.log.info("No canary thing group: nothing deployed to a canary")
            return {}
        self.tags = {**(self.tags or {}), FIELD_VERDICT_TAG: VERDICT_PENDING}
        return super().execute(context)
