"""Notifications of the ``sim_to_real`` and ``sim_to_real_release`` DAGs, through Airflow notifiers (Amazon SNS).

:class:`Sim2RealSnsNotifier` subclasses the Amazon provider's
:class:`~airflow.providers.amazon.aws.notifications.sns.SnsNotifier`. The topic is not a DAG
argument: it is read **at send time** from the environment config (``notifications.sns_topic_arn``,
optional — see :mod:`sim2real.orchestration.config`), so the DAG file stays free of account names and parses
without any lookup. With no topic configured the notifier logs what it would have sent and skips.
A notification never fails a task or a run: a publish error is logged.

Events (message attribute ``event``, usable in an SNS subscription filter policy):

- ``run_failed``: the DAG run failed (``on_failure_callback`` of the DAG);
- ``gate_failed``: the quality gate stopped the release (``on_failure_callback`` of ``quality_gate``),
  with the reason;
- ``approval_needed``: the approval step asks for a decision (``on_execute_callback`` of
  ``vla.wait_for_approval``), with the model package and how to decide: in Airflow (Required Actions) or
  in SageMaker; once per run (not again when the step resumes, nor when a retry waits on the same request);
- ``deployed``: the Greengrass deployment succeeded on every robot (``on_success_callback`` of
  ``deploy.deploy_to_robots``).

A gate failure also fails the run, so a subscriber to every event gets both ``gate_failed`` and
``run_failed`` for it; filter on ``event`` to keep one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from airflow.providers.amazon.aws.notifications.sns import SnsNotifier

from sim2real.contract import task_ids as ids

log = logging.getLogger(__name__)

RUN_FAILED = "run_failed"
GATE_FAILED = "gate_failed"
APPROVAL_NEEDED = "approval_needed"
DEPLOYED = "deployed"
EVENTS = (RUN_FAILED, GATE_FAILED, APPROVAL_NEEDED, DEPLOYED)

#: SNS Subject limit (characters, ASCII, one line).
SUBJECT_MAX = 100


def topic_arn_from_environment() -> tuple[str | None, dict[str, Any] | None]:
    """``(notifications.sns_topic_arn, env)`` from the environment config; ``(None, env)`` when unset.

    Never raises: a missing or invalid environment config gives ``(None, None)`` (logged).
    """
    from sim2real.orchestration.config import load_environment

    try:
        env = load_environment()
    except Exception as err:  # noqa: BLE001 - a notification must not fail the caller
        log.warning("notifications: no usable environment config (%s)", err)
        return None, None
    topic = ((env.get("notifications") or {}).get("sns_topic_arn") or "").strip()
    return (topic or None), env


def _ti_value(ti: Any, name: str) -> Any:
    return getattr(ti, name, None) if ti is not None else None


def _dag_id(context: Mapping[str, Any]) -> str:
    dag = context.get("dag")
    return getattr(dag, "dag_id", None) or _ti_value(context.get("ti"), "dag_id") or "sim_to_real"


def _run_id(context: Mapping[str, Any]) -> str:
    dag_run = context.get("dag_run")
    return context.get("run_id") or getattr(dag_run, "run_id", None) or _ti_value(context.get("ti"), "run_id") or "?"


def _run_folder(env: Mapping[str, Any] | None, run_key: str) -> str | None:
    if not env or not env.get("artifacts_bucket"):
        return None
    from sim2real.contract.run_key import run_prefix

    return f"s3://{env['artifacts_bucket']}/{run_prefix(run_key)}"


def _xcom(context: Mapping[str, Any], task_id: str, key: str | None = None) -> Any:
    ti = context.get("ti")
    if ti is None:
        return None
    try:
        return ti.xcom_pull(task_ids=task_id, **({"key": key} if key else {}))
    except Exception as err:  # noqa: BLE001 - a missing XCom leaves a field out of the message
        log.info("notifications: no XCom from %s (%s)", task_id, err)
        return None


def _approval_details(context: Mapping[str, Any]) -> list[str]:
    """How to approve: the package (found by run key, best effort) and the command or console path."""
    from sim2real.orchestration.hooks.model_registry import ModelRegistryHook, approve_command

    task = context.get("task")
    group = getattr(task, "model_package_group_name", None)
    run_key = getattr(task, "run_key", None)
    execution = getattr(task, "pipeline_execution_arn", None)
    lines = [f"Model package group: {group}", f"Pipeline execution: {execution}"]
    package = None
    if group and run_key:
        try:
            hook = ModelRegistryHook(aws_conn_id=getattr(task, "aws_conn_id", "aws_default"),
                                     region_name=getattr(task, "region_name", None))
            package = hook.find_model_package(group, run_key, execution)
        except Exception as err:  # noqa: BLE001 - the message still says how to find it
            log.info("notifications: could not look the model package up (%s)", err)
    lines.append("Approve or reject it with a comment in Airflow: Browse > Required Actions, task "
                 f"{getattr(task, 'task_id', 'vla.wait_for_approval')}; or in SageMaker (either ends the wait):")
    if package:
        arn = package["ModelPackageArn"]
        lines += [f"Model package: {arn} ({package.get('ModelApprovalStatus')})",
                  "Approve in SageMaker Studio (Models > Registered models > "
                  f"{group}) or run:", f"  {approve_command(arn)}"]
    else:
        lines += [f"The package is the one in {group} whose customer metadata sim2real:run-key = {run_key}.",
                  "Approve it in SageMaker Studio (Models > Registered models) or with "
                  "`aws sagemaker update-model-package --model-package-arn <arn> --model-approval-status Approved`."]
    return lines


def _round_lines(plan: Mapping[str, Any]) -> list[str]:
    """What a gate failure means for the retraining rounds (nothing without rounds)."""
    rounds = plan.get("rounds") or {}
    k, n = int(rounds.get("round") or 1), int(rounds.get("max_rounds") or 1)
    if n <= 1:
        return []
    if k < n:
        return [f"Retraining: this was round {k} of {n}; round {k + 1} follows as a new run of this DAG (it "
                "resumes from the best checkpoint so far and is evaluated with fresh seeds). The release waits "
                "for a round that passes."]
    return [f"This was the last retraining round ({k} of {n}): the loop ends with the gate failed."]


def compose(event: str, context: Mapping[str, Any], env: Mapping[str, Any] | None = None
            ) -> tuple[str, str, dict[str, str]]:
    """``(subject, message, message_attributes)`` of one notification from the Airflow context.

    :param event: one of :data:`EVENTS`.
    :param context: the callback's Airflow context (task context, or the DAG callback's context with
        ``dag``, ``run_id``, ``reason`` and, when known, the failed ``ti``).
    :param env: the environment config (for the run folder), optional.
    """
    from sim2real.contract.run_key import make_run_key

    if event not in EVENTS:
        raise ValueError(f"unknown notification event {event!r}; one of {EVENTS}")
    dag_id, run_id = _dag_id(context), _run_id(context)
    run_key = make_run_key(dag_id, run_id)
    ti = context.get("ti")
    head = [f"DAG: {dag_id}", f"Run: {run_id}", f"Run key: {run_key}"]
    folder = _run_folder(env, run_key)
    if event == RUN_FAILED:
        title = "run FAILED"
        body = [f"Reason: {context.get('reason') or 'failed'}"]
        if ti is not None:
            body.append(f"Failed task: {_ti_value(ti, 'task_id')} (try {_ti_value(ti, 'try_number')})")
        if folder:  # the run's record, written by its teardown task
            if dag_id == "sim_to_real_release":
                body.append(f"Record: {folder}release.json (written by the run's teardown)")
            else:
                body.append(f"Lineage: {folder}lineage.json (written by the run's teardown)")
        next_run = _xcom(context, ids.NEXT_ROUND, key="trigger_run_id")
        if next_run:  # a retraining round below the bar: the loop goes on
            body.append(f"Retraining: the next round runs as {next_run} (this round failed its quality gate).")
    elif event == GATE_FAILED:
        title = "quality gate FAILED"
        reason = str(context.get("exception") or "the quality gate failed")
        body = [f"Reason: {reason}", "The release (fine-tune, approval, deployment) was not started."]
        report = _xcom(context, ids.READ_EVAL_REPORT) or {}
        if report.get("report_uri"):
            body.append(f"Evaluation report: {report['report_uri']}")
        body += _round_lines((_xcom(context, ids.PREPARE_RUN) or {}).get("plan") or {})
    elif event == APPROVAL_NEEDED:
        title = "model approval needed"
        body = ["The fine-tuned model is registered and waits for a reviewer's approval before it is "
                "deployed to the robots.", *_approval_details(context)]
    else:
        title = "deployed to robots"
        result = _xcom(context, _ti_value(ti, "task_id") or ids.DEPLOY_TO_ROBOTS) or {}
        body = [f"Deployment: {result.get('deployment_id')}",
                f"Thing group: {result.get('thing_group_name') or getattr(context.get('task'), 'thing_group_name', None)}"]
        devices = result.get("devices") or {}
        if devices:
            body.append("Devices: " + ", ".join(f"{k}: {v}" for k, v in sorted(devices.items())))
        if folder:
            body.append(f"Run folder: {folder}")
    subject = f"[sim2real] {title}: {run_key}"
    subject = subject.encode("ascii", "replace").decode("ascii").replace("\n", " ")[:SUBJECT_MAX]
    message = "\n".join([f"sim2real: {title}", "", *head, *body]) + "\n"
    attributes = {"event": event, "dag_id": dag_id, "run_id": run_id, "run_key": run_key}
    return subject, message, attributes


def _is_resume(context: Mapping[str, Any]) -> bool:
    """Whether the task is resuming after a deferral (its ``on_execute_callback`` runs again then)."""
    ti = context.get("ti")
    server_ctx = getattr(ti, "_ti_context_from_server", None)
    return bool(getattr(server_ctx, "next_method", None))


def _asked_before(context: Mapping[str, Any]) -> bool:
    """Whether an earlier try of the approval step already wrote (and so announced) its request for the same
    pipeline execution's package: the step's record in the task state store, shared by the task's tries
    (:data:`sim2real.orchestration.operators.model_approval.REQUEST_KEY`), whose ``pipeline_execution_arn`` is the
    task's. A clear that re-ran the fine-tune (a new execution, a new package) is announced again: the row outlives
    the clear (Airflow 3.3.1), and the package ARN the row is bound to is only located in ``execute``."""
    from sim2real.orchestration.operators.model_approval import REQUEST_KEY, TaskStore

    row = TaskStore(context, log).get(REQUEST_KEY)
    execution = getattr(context.get("task"), "pipeline_execution_arn", None)
    return isinstance(row, Mapping) and row.get("pipeline_execution_arn") == execution


class Sim2RealSnsNotifier(SnsNotifier):
    """SNS notifier for one ``sim_to_real`` event; the topic comes from the environment config at send time.

    :param event: one of :data:`EVENTS` (decides the message).
    :param aws_conn_id: AWS connection used to publish (default ``aws_default``).
    """

    # The message is composed from the context at send time, not from Jinja templates.
    template_fields = ()

    def __init__(self, *, event: str, aws_conn_id: str | None = "aws_default", **kwargs: Any):
        if event not in EVENTS:
            raise ValueError(f"unknown notification event {event!r}; one of {EVENTS}")
        super().__init__(aws_conn_id=aws_conn_id, target_arn="", message="", **kwargs)
        self.event = event

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Nothing to render (no template fields); also safe with the DAG callback context of ``dag.test()``,
        whose ``dag`` is a serialized DAG without a Jinja environment."""

    def notify(self, context: Any) -> None:
        if self.event == APPROVAL_NEEDED and (_is_resume(context) or _asked_before(context)):
            return  # announced when the wait started, not again when it resumes or a retry waits on
        topic, env = topic_arn_from_environment()
        try:
            subject, message, attributes = compose(self.event, context, env)
        except Exception:  # noqa: BLE001 - a notification must not fail the caller
            log.exception("notifications: could not compose the %s message", self.event)
            return
        if not topic:
            log.info("notifications: no notifications.sns_topic_arn in the environment config; "
                     "not sending %s: %s", self.event, subject)
            return
        self.target_arn, self.subject, self.message = topic, subject, message
        self.message_attributes = attributes
        if not self.region_name and topic.startswith("arn:") and topic.count(":") >= 5:
            self.region_name = topic.split(":")[3] or None
        try:
            self.hook.publish_to_target(target_arn=topic, message=message, subject=subject,
                                        message_attributes=attributes)
        except Exception:  # noqa: BLE001 - logged, never fails the task or the run
            log.exception("notifications: publishing %s to %s failed", self.event, topic)
            return
        log.info("notifications: published %s to %s: %s", self.event, topic, subject)


def run_failed() -> Sim2RealSnsNotifier:
    """DAG ``on_failure_callback``."""
    return Sim2RealSnsNotifier(event=RUN_FAILED)


def gate_failed() -> Sim2RealSnsNotifier:
    """``quality_gate``'s ``on_failure_callback``."""
    return Sim2RealSnsNotifier(event=GATE_FAILED)


def approval_needed() -> Sim2RealSnsNotifier:
    """``wait_for_approval``'s ``on_execute_callback``."""
    return Sim2RealSnsNotifier(event=APPROVAL_NEEDED)


def deployed() -> Sim2RealSnsNotifier:
    """``deploy_to_robots``' ``on_success_callback``."""
    return Sim2RealSnsNotifier(event=DEPLOYED)
