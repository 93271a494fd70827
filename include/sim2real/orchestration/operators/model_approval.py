"""The release approval: an Airflow human-in-the-loop step fused with the SageMaker Model Registry.

:class:`ModelPackageApprovalOperator` subclasses the standard provider's ``ApprovalOperator`` (options
``Approve`` / ``Reject``, a ``comment`` field). It locates this run's model package (registered
``PendingManualApproval`` by the pipeline's RegisterModel step), writes the request (subject, the review
body of :func:`sim2real.orchestration.review.approval_body`) and defers to
:class:`~sim2real.orchestration.triggers.model_package.ModelPackageDecisionTrigger`, which ends on whichever
comes first:

* an answer in Airflow (Browse → Required Actions, the task's Required Actions tab, or the REST API
  ``PATCH .../taskInstances/{task_id}/{map_index}/hitlDetails``): the operator calls UpdateModelPackage
  (``ModelApprovalStatus`` Approved / Rejected, ``ApprovalDescription`` naming the Airflow user, the time
  and the comment);
* an approval or rejection of the package in SageMaker (Studio, the CLI ``update-model-package``, the API):
  the trigger answers the Airflow request with it for the record (the Required Actions page shows it closed).

Rejected (either way) fails the task with the reviewer's reason, without retry. No decision within
``response_timeout`` fails it with the package and the ways to decide (the DAG's failure notification
follows). The decision — ``decided_by``, ``via`` (``airflow`` | ``sagemaker``), ``at``, ``comment``,
``status`` — is the XCom ``decision`` of the task (also when it fails) and part of its return value.

Sources: Airflow standard provider ``airflow.providers.standard.operators.hitl`` (``ApprovalOperator``,
``HITLOperator``: ``upsert_hitl_detail``, ``execute_complete`` event shape); Airflow 3.3 core REST API
``update_hitl_detail`` (resumes a deferred task with the answer); Amazon SageMaker API Reference —
ListModelPackages, DescribeModelPackage, UpdateModelPackage.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException, AirflowSensorTimeout
from airflow.providers.standard.exceptions import HITLRejectException
from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import Param
from airflow.sdk.definitions.param import ParamsDict

from sim2real.orchestration.config import RUN_KEY_TAG
from sim2real.orchestration.hooks.model_registry import (
    APPROVAL_DESCRIPTION_MAX,
    ModelRegistryHook,
    airflow_approval_description,
    approval_result,
    approve_command,
    sagemaker_decision,
)
from sim2real.orchestration.links.sagemaker import SageMakerModelPackageLink
from sim2real.orchestration.events.settings import task_events_section
from sim2real.orchestration.triggers.model_package import ModelPackageDecisionTrigger
from sim2real.orchestration.waits.core import event_outcome, settle_now
from sim2real.orchestration.waits.sagemaker import model_package_step

if TYPE_CHECKING:
    from airflow.sdk import Context

#: The request's form field for the reviewer's reason (written into the package's ApprovalDescription).
COMMENT = "comment"
#: Longest comment: what leaves room in ApprovalDescription for "<status> in Airflow by <user> at <time>: "
#: (a longer description is refused by :func:`~sim2real.orchestration.hooks.model_registry.airflow_approval_description`).
COMMENT_MAX_CHARS = APPROVAL_DESCRIPTION_MAX - 224
#: XCom key of the decision (pushed before a rejection fails the task, so the lineage still has it).
DECISION_XCOM = "decision"


def _parked_exceptions() -> tuple[type[BaseException], ...]:
    """What the provider's ``HITLOperator.execute`` raises once the request is written: ``TaskAwaitingInput``
    (Airflow 3.3+: park without a trigger) or ``TaskDeferred`` (older cores: defer to ``HITLTrigger``)."""
    from airflow.sdk.exceptions import TaskDeferred

    try:
        from airflow.sdk.exceptions import TaskAwaitingInput
    except ImportError:  # pragma: no cover - Airflow < 3.3
        return (TaskDeferred,)
    return (TaskAwaitingInput, TaskDeferred)


class ModelPackageApprovalOperator(ApprovalOperator, AwsBaseOperator[ModelRegistryHook]):
    """Ask a reviewer in Airflow to approve this run's model package; end on the first decision, Airflow's or
    SageMaker's (module docstring).

    :param model_package_group_name: the model package group.
    :param run_key: this DAG run's key (``CustomerMetadataProperties["sim2real:run-key"]`` of the package).
    :param pipeline_execution_arn: the execution that registered the package (cross-check).
    :param plan: the run's plan; when given, the request's body is the review of
        :func:`sim2real.orchestration.review.approval_body` (else the package's lines only).
    :param poke_interval: seconds between the wait's rounds (DescribeModelPackage and the Airflow answer).
    :param response_timeout: how long to wait for a decision (default 24 h).
    :return: ``{"model_package_arn", "model_data_url", "approval_status": "Approved", "approval_description",
        "decision": {"decided_by", "via", "at", "comment", "status"}}``.
    :raises AirflowFailException: no package for the run, or the package was Rejected (the reviewer's reason).
    :raises AirflowSensorTimeout: no decision within ``response_timeout``.
    """

    #: Always True: the wait runs in the triggerer; read by the DAG checks.
    deferrable = True

    aws_hook_class = ModelRegistryHook
    template_fields: Sequence[str] = aws_template_fields(
        "subject", "body", "model_package_group_name", "run_key", "pipeline_execution_arn", "plan")
    operator_extra_links = (SageMakerModelPackageLink(),)

    def __init__(
        self,
        *,
        model_package_group_name: str,
        run_key: str,
        pipeline_execution_arn: str | None = None,
        plan: Mapping[str, Any] | None = None,
        poke_interval: float = 60,
        response_timeout: dt.timedelta = dt.timedelta(hours=24),
        subject: str = "Release the fine-tuned GR00T model?",
        **kwargs: Any,
    ) -> None:
        # The DAG's own params arrive here too (the provider's HITLOperator keeps only the task's): kept as given.
        inherited = kwargs.pop("params", None) or {}
        params = {k: inherited.get_param(k) for k in inherited} if isinstance(inherited, ParamsDict) else dict(inherited)
        params[COMMENT] = Param("", type="string", maxLength=COMMENT_MAX_CHARS, title="Comment",
                                 description="Why: written with your name into the model package's "
                                             "ApprovalDescription in the SageMaker Model Registry.")
        super().__init__(subject=subject, params=params, fail_on_reject=True, response_timeout=response_timeout,
                         **kwargs)
        self.model_package_group_name = model_package_group_name
        self.run_key = run_key
        self.pipeline_execution_arn = pipeline_execution_arn
        self.plan = plan
        self.poke_interval = poke_interval
        self._package_arn: str | None = None

    # ------------------------------------------------------------------------------------ helpers
    def _persist_link(self, context: Context, arn: str) -> None:
        SageMakerModelPackageLink.persist(
            context=context, operator=self, region_name=self.hook.conn_region_name,
            aws_partition=self.hook.conn_partition, group_name=self.model_package_group_name,
            version=arn.rsplit("/", 1)[-1])

    def _ways_to_decide(self, arn: str) -> str:
        return (f"Approve or reject it in Airflow (Browse > Required Actions, task {self.task_id}), in SageMaker "
                f"Studio (Models > Registered models > {self.model_package_group_name}) or with: "
                f"{approve_command(arn)}")

    def _rejected(self, context: Context, arn: str, decision: Mapping[str, Any]) -> AirflowFailException:
        context["ti"].xcom_push(key=DECISION_XCOM, value=dict(decision))
        return AirflowFailException(
            f"Model package {arn} (run {self.run_key}) was Rejected in {decision['via']} by "
            f"{decision.get('decided_by') or 'an unnamed reviewer'}: {decision.get('comment') or 'no reason given'}. "
            "The release stops here; register a new model version to try again.")

    def _body(self, context: Context, package: Mapping[str, Any]) -> str:
        from sim2real.orchestration.review import approval_body, package_lines

        if self.plan:
            try:
                return approval_body(plan=self.plan, ti=context["ti"], package=package,
                                     dag_id=context["dag_run"].dag_id, run_id=context["dag_run"].run_id)
            except Exception:  # noqa: BLE001 - a review that cannot be assembled still leaves the decision
                self.log.exception("the review body could not be assembled; showing the package only")
        region = self.hook.conn_region_name or package["ModelPackageArn"].split(":")[3]  # arn:aws:sagemaker:<region>:...
        return "\n\n".join(package_lines(package, region)) + "\n"

    # ------------------------------------------------------------------------------------ execute
    def execute(self, context: Context) -> Any:
        """Locate the package; settle at once when it is already decided in the registry; else write the
        request and defer until the first decision."""
        package = self.hook.find_model_package(self.model_package_group_name, self.run_key,
                                               self.pipeline_execution_arn)
        if package is None:
            raise AirflowFailException(
                f"No model package with CustomerMetadataProperties {RUN_KEY_TAG}={self.run_key} in group "
                f"{self.model_package_group_name}, though the fine-tune's pipeline execution succeeded. Check the "
                f"RegisterModel step of execution {self.pipeline_execution_arn}.")
        arn = self._package_arn = package["ModelPackageArn"]
        self._persist_link(context, arn)
        if settle_now(model_package_step, package, {"model_package_group_name": self.model_package_group_name,
                                                    "run_key": self.run_key}) is not None:
            self.log.info("Model package %s is already %s in the registry", arn, package.get("ModelApprovalStatus"))
            return self._decided_in_sagemaker(context, package)
        self.subject = f"{self.subject} Run {self.run_key}, model package {arn.rsplit('/', 2)[-2]} " \
                       f"v{arn.rsplit('/', 1)[-1]}"
        self.body = self._body(context, package)
        try:
            super().execute(context)  # the provider writes the request (and runs its notifiers), then parks
        except _parked_exceptions():
            pass  # parked or deferred to the provider's trigger: this step defers to its own, which also watches SageMaker
        timeout_s = self.response_timeout.total_seconds()
        self.defer(
            trigger=ModelPackageDecisionTrigger(
                ti_id=str(context["task_instance"].id),
                model_package_group_name=self.model_package_group_name,
                run_key=self.run_key,
                pipeline_execution_arn=self.pipeline_execution_arn,
                model_package_arn=arn,
                waiter_delay=int(self.poke_interval),
                waiter_max_attempts=max(1, int(timeout_s // max(1, self.poke_interval))),
                aws_conn_id=self.aws_conn_id,
                region_name=self.region_name,
                verify=self.verify,
                botocore_config=self.botocore_config,
                events=task_events_section(self.log),
            ),
            method_name="execute_complete",
            timeout=dt.timedelta(seconds=timeout_s + self.poke_interval + 120),
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume with the first decision: an Airflow answer (from the core API's resume, or the trigger) or the
        trigger's model-package event."""
        event = dict(event or {})
        arn = event.get("model_package_arn") or self._package_arn
        if "chosen_options" in event:  # resumed by Airflow's API with the answer itself
            return self._decided_in_airflow(context, arn or self._locate_arn(), event)
        if event.get("via") == "airflow":
            return self._decided_in_airflow(context, arn, dict(event["hitl_response"]))
        status, message = event_outcome(event, f"the model package of run {self.run_key}")
        if status == "timeout":
            raise AirflowSensorTimeout(
                f"Model package {arn} (group {self.model_package_group_name}, run {self.run_key}) got no decision "
                f"within {self.response_timeout}: it is still {event.get('approval_status') or 'PendingManualApproval'}. "
                f"{self._ways_to_decide(arn)} — then clear this task.")
        if event.get("via") == "sagemaker" and arn:
            return self._decided_in_sagemaker(context, self.hook.describe_model_package(arn))
        raise AirflowException(f"Model package approval wait failed: {message}")

    def _locate_arn(self) -> str:
        package = self.hook.find_model_package(self.model_package_group_name, self.run_key,
                                               self.pipeline_execution_arn)
        if package is None:
            raise AirflowFailException(f"the model package of run {self.run_key} is no longer in group "
                                       f"{self.model_package_group_name}")
        return package["ModelPackageArn"]

    # ------------------------------------------------------------------------------------ decisions
    def _decided_in_airflow(self, context: Context, arn: str, answer: dict[str, Any]) -> dict[str, Any]:
        at = answer.get("responded_at")
        if isinstance(at, str):
            at = dt.datetime.fromisoformat(at)
        answer = {**answer, "responded_at": at}
        try:
            super().execute_complete(context=context, event=answer)  # the provider validates options and params
            status = "Approved"
        except HITLRejectException:
            status = "Rejected"
        package = self.hook.describe_model_package(arn)
        if package.get("ModelApprovalStatus") in ("Approved", "Rejected"):
            # Decided in the registry before the Airflow answer reached this step: that decision came first.
            self.log.warning("Model package %s was already %s in SageMaker; the Airflow answer %s is not applied",
                             arn, package.get("ModelApprovalStatus"), status)
            return self._decided_in_sagemaker(context, package)
        user = answer.get("responded_by_user") or {}
        who = user.get("name") or user.get("id") or "unknown user"
        if user.get("id") and user.get("id") != user.get("name"):
            who = f"{who} (id {user['id']})"
        comment = str((answer.get("params_input") or {}).get(COMMENT) or "").strip() or None
        decision = {"decided_by": who, "via": "airflow", "at": at.isoformat() if at else None,
                    "comment": comment, "status": status}
        description = airflow_approval_description(status, who, comment, decision["at"] or "unknown time")
        package = self.hook.update_approval(arn, status, description)
        self.log.info("UpdateModelPackage %s: %s (%s)", arn, status, description)
        if status == "Rejected":
            raise self._rejected(context, arn, decision)
        context["ti"].xcom_push(key=DECISION_XCOM, value=decision)
        return {**approval_result(package), "decision": decision}

    def _decided_in_sagemaker(self, context: Context, package: Mapping[str, Any]) -> dict[str, Any]:
        arn = package["ModelPackageArn"]
        decision = sagemaker_decision(dict(package))
        status = decision["status"]
        if status not in ("Approved", "Rejected"):
            raise AirflowException(f"Model package {arn} is {status} again after a decision; "
                                   f"{self._ways_to_decide(arn)} — then clear this task.")
        if status == "Rejected":
            raise self._rejected(context, arn, decision)
        context["ti"].xcom_push(key=DECISION_XCOM, value=decision)
        return {**approval_result(dict(package)), "decision": decision}
