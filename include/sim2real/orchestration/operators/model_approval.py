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
from collections.abc import Callable, Mapping, Sequence
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
    DECIDED_STATUSES,
    ModelRegistryHook,
    airflow_approval_description,
    approval_result,
    approve_command,
    sagemaker_decision,
)
from sim2real.orchestration.links.sagemaker import SageMakerModelPackageLink
from sim2real.orchestration.review import package_lines
from sim2real.orchestration.triggers.base import defer_wait
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
#: Task state store keys (kept across the task's tries, and across its clears in Airflow 3.3.1): the Airflow answer,
#: stored before the registry write; that the request was written (and announced); the answers refused so far. Each
#: row names the model package it was recorded for (:data:`PACKAGE_FIELD`) and is read for that package only, so a
#: clear that registered a new package for the run asks the person again.
ANSWER_KEY = "sim2real.approval.airflow_answer"
REQUEST_KEY = "sim2real.approval.request_written"
REFUSED_KEY = "sim2real.approval.refused"
#: The field of those rows naming the model package ARN they were recorded for.
PACKAGE_FIELD = "model_package_arn"


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
    :param plan: the run's plan; with ``review``, the request's body is ``review(plan=, ti=, package=, dag_id=,
        run_id=)`` (the ``vla`` stage gives :func:`sim2real.orchestration.review.approval_body` with the rounds'
        lineage entry); else the package's lines only.
    :param review: builds the request's Markdown body from the plan (see ``plan``).
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
        review: Callable[..., str] | None = None,
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
        self.review = review
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
        if self.plan and self.review is not None:
            try:
                return self.review(plan=self.plan, ti=context["ti"], package=package,
                                   dag_id=context["dag_run"].dag_id, run_id=context["dag_run"].run_id)
            except Exception:  # noqa: BLE001 - a review that cannot be assembled still leaves the decision
                self.log.exception("the review body could not be assembled; showing the package only")
        region = self.hook.conn_region_name or package["ModelPackageArn"].split(":")[3]  # arn:aws:sagemaker:<region>:...
        return "\n\n".join(package_lines(package, region)) + "\n"

    # ------------------------------------------------------------------------------------ who may answer
    def _four_eyes(self, context: Context) -> tuple[str | None, dict[str, Any]]:
        """``(the user who triggered the run or None, the environment config's approval settings)``."""
        from sim2real.orchestration.config import EnvironmentConfigError, approval_settings, load_environment

        try:
            settings = approval_settings(load_environment())
        except EnvironmentConfigError as err:
            self.log.info("No environment config (%s): any user but the run's trigger may answer", err)
            settings = approval_settings(None)
        dag_run = context.get("dag_run") if hasattr(context, "get") else None
        return (getattr(dag_run, "triggering_user_name", None) or None), settings

    @staticmethod
    def _assigned(triggered_by: str | None, settings: Mapping[str, Any]) -> list[dict[str, str]]:
        """HITL ``assigned_users``: the listed approvers less the person who triggered the run."""
        return [{"id": user, "name": user} for user in settings["approvers"]
                if settings["self_approval"] or user != triggered_by]

    @staticmethod
    def _refusal(answer: Mapping[str, Any], triggered_by: str | None, settings: Mapping[str, Any]) -> str | None:
        """Why an Airflow answer is refused (four-eyes), or None when its author may answer."""
        user = answer.get("responded_by_user") or {}
        ids = {str(v) for v in (user.get("id"), user.get("name")) if v}
        who = user.get("name") or user.get("id") or "an unnamed user"
        if triggered_by and triggered_by in ids and not settings["self_approval"]:
            return (f"{who} triggered this run and cannot answer its release request: a second person releases "
                    "the model (four-eyes; environment config approval)")
        if settings["approvers"] and not ids & set(settings["approvers"]):
            return (f"{who} is not a listed approver (environment config approval.approvers: "
                    f"{', '.join(settings['approvers'])})")
        return None

    def _who_may_answer(self, triggered_by: str | None, settings: Mapping[str, Any]) -> str:
        """The request's line naming who may answer and why the person who triggered the run may not."""
        assigned = [u["id"] for u in self._assigned(triggered_by, settings)]
        who = ", ".join(assigned) if assigned else "any user allowed to act on this task"
        line = f"**Who may answer:** {who}"
        if triggered_by and not settings["self_approval"]:
            line += f" — not {triggered_by}, who triggered this run (a second person releases the model)"
        return line + "."

    # ------------------------------------------------------------------------------------ execute
    def execute(self, context: Context) -> Any:
        """Locate the package; complete an answer an earlier try recorded for it; settle at once when the package is
        already decided in the registry; else write the request (once per package, not again on a retry) and defer
        until the first decision. Records for another package of the run (a clear that re-ran the fine-tune) are
        ignored: the new package is asked for."""
        package = self.hook.find_model_package(self.model_package_group_name, self.run_key,
                                               self.pipeline_execution_arn)
        if package is None:
            raise AirflowFailException(
                f"No model package with CustomerMetadataProperties {RUN_KEY_TAG}={self.run_key} in group "
                f"{self.model_package_group_name}, though the fine-tune's pipeline execution succeeded. Check the "
                f"RegisterModel step of execution {self.pipeline_execution_arn}.")
        arn = self._package_arn = package["ModelPackageArn"]
        self._persist_link(context, arn)
        store = TaskStore(context, self.log)
        answer = (store.get_bound(ANSWER_KEY, PACKAGE_FIELD, arn) or {}).get("answer")
        if answer:
            # An earlier try got an Airflow answer and may have written it: complete it (same attribution).
            self.log.info("An earlier try of this task recorded the Airflow answer %s of %s: completing it",
                          answer.get("chosen_options"), (answer.get("responded_by_user") or {}).get("name"))
            return self._decided_in_airflow(context, arn, answer)
        if store.get_bound(REQUEST_KEY, PACKAGE_FIELD, arn):
            # A retry: the request (and its announcement) is already there, with any answer given meanwhile;
            # writing it again would erase that answer (the Task Execution API's upsert clears a response). The
            # trigger reads that answer and the registry, and the step orders them by time as on the first try.
            self.log.info("The release request was written by an earlier try: waiting for its answer without "
                          "asking again")
            return self._defer(context, arn, _refused(store, arn))  # its closing note names them too
        if self._settled(package):
            self.log.info("Model package %s is already %s in the registry", arn, package.get("ModelApprovalStatus"))
            return self._decided_in_sagemaker(context, package)
        triggered_by, settings = self._four_eyes(context)
        assigned = self._assigned(triggered_by, settings)
        if settings["approvers"] and not assigned:
            raise AirflowFailException(
                f"Nobody may approve model package {arn}: the only listed approver(s) "
                f"{settings['approvers']} triggered run {self.run_key}. Add a second person to the environment "
                "config's approval.approvers, then clear this task.")
        self.subject = f"{self.subject} Run {self.run_key}, model package {arn.rsplit('/', 2)[-2]} " \
                       f"v{arn.rsplit('/', 1)[-1]}"
        self.body = self._body(context, package) + "\n" + self._who_may_answer(triggered_by, settings) + "\n"
        # Settle before deferring: the review took a while; a decision made in the registry meanwhile ends the
        # step here instead of in a trigger that would fire right after the deferral.
        package = self.hook.describe_model_package(arn)
        if self._settled(package):
            self.log.info("Model package %s was %s in the registry while the review was assembled", arn,
                          package.get("ModelApprovalStatus"))
            return self._decided_in_sagemaker(context, package)
        self.assigned_users = assigned or None
        try:
            super().execute(context)  # the provider writes the request (and runs its notifiers), then parks
        except _parked_exceptions():
            pass  # parked or deferred to the provider's trigger: this step defers to its own, which also watches SageMaker
        store.set_bound(REQUEST_KEY, PACKAGE_FIELD, arn, assigned_users=[u["id"] for u in assigned],
                        triggered_by=triggered_by, pipeline_execution_arn=self.pipeline_execution_arn)
        return self._defer(context, arn)

    def _settled(self, package: Mapping[str, Any]) -> bool:
        return settle_now(model_package_step, package, {"model_package_group_name": self.model_package_group_name,
                                                        "run_key": self.run_key}) is not None

    def _defer(self, context: Context, arn: str, refused: Sequence[Mapping[str, Any]] = ()) -> None:
        timeout_s = self.response_timeout.total_seconds()
        defer_wait(self, ModelPackageDecisionTrigger, method_name="execute_complete",
                   timeout=dt.timedelta(seconds=timeout_s + self.poke_interval + 120),
                   waiter_delay=int(self.poke_interval),
                   waiter_max_attempts=max(1, int(timeout_s // max(1, self.poke_interval))),
                   ti_id=str(context["task_instance"].id), model_package_group_name=self.model_package_group_name,
                   run_key=self.run_key, pipeline_execution_arn=self.pipeline_execution_arn, model_package_arn=arn,
                   refused=[refusal_note(r) for r in refused])

    def _reopen(self, context: Context, arn: str, refused: Sequence[Mapping[str, Any]]) -> None:
        """Open the Airflow request again after refusing its answer (the Task Execution API's upsert clears the
        response and keeps the request), then wait again: for a legitimate reviewer, or for the trigger to close
        the request with the registry's decision and the refusals."""
        from airflow.providers.standard.operators import hitl

        hitl.upsert_hitl_detail(ti_id=context["task_instance"].id, options=self.options, subject=self.subject,
                                body=self.body, defaults=self.defaults, multiple=self.multiple,
                                params=self.serialized_params, assigned_users=self.assigned_users)
        self._defer(context, arn, refused)

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
    def _finish(self, context: Context, arn: str, decision: dict[str, Any], package: Mapping[str, Any]) -> dict[str, Any]:
        store = TaskStore(context, self.log)
        triggered_by, _ = self._four_eyes(context)
        decision = {**decision, "triggered_by": triggered_by, "refused": _refused(store, arn)}
        if decision["status"] == "Rejected":
            raise self._rejected(context, arn, decision)
        context["ti"].xcom_push(key=DECISION_XCOM, value=decision)
        return {**approval_result(dict(package)), "decision": decision}

    def _refuse(self, context: Context, arn: str, refusal: dict[str, Any],
                keep_answer: bool = False) -> list[dict[str, Any]]:
        """Record a refused answer about package ``arn`` (task state store, the lineage's ``refused``; logged); forget the stored
        Airflow answer unless ``keep_answer``. Returns every refusal so far.

        Idempotent: an answer already recorded (same :func:`refusal_key`: who, where, what, when) is not recorded
        again. The same Airflow answer can resume the task twice: once through the core API's ``update_hitl_detail``
        and once more through the event of the trigger that read it before the request was reopened (on SQLite
        the next deferral's trigger can get that trigger's id back, and the triggerer then delivers its late event
        to the new deferral)."""
        store = TaskStore(context, self.log)
        known = _refused(store, arn)
        if any(refusal_key(r) == refusal_key(refusal) for r in known):
            self.log.info("Already refused, seen again: %s", refusal_note(refusal))
            refused = known
        else:
            refused = [*known, refusal]
            store.set_bound(REFUSED_KEY, PACKAGE_FIELD, arn, refused=refused)
            self.log.warning("REFUSED: %s", refusal_note(refusal))
        if not keep_answer:
            store.delete(ANSWER_KEY)
        return refused

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
        user = answer.get("responded_by_user") or {}
        who = user.get("name") or user.get("id") or "unknown user"
        if user.get("id") and user.get("id") != user.get("name"):
            who = f"{who} (id {user['id']})"
        comment = str((answer.get("params_input") or {}).get(COMMENT) or "").strip() or None
        at_text = at.isoformat() if at else None
        triggered_by, settings = self._four_eyes(context)
        reason = self._refusal(answer, triggered_by, settings)
        if reason:
            refused = self._refuse(context, arn, {"by": who, "via": "airflow", "status": status, "at": at_text,
                                             "reason": reason})
            self._reopen(context, arn, refused)
        store = TaskStore(context, self.log)
        # Kept across retries before the registry is written: a retry completes this answer, same attribution.
        store.set_bound(ANSWER_KEY, PACKAGE_FIELD, arn, answer={**answer, "responded_at": at_text})
        decision = {"decided_by": who, "via": "airflow", "at": at_text, "comment": comment, "status": status}
        description = airflow_approval_description(status, who, comment, at_text or "unknown time")
        package: dict[str, Any] = {}
        for _ in range(3):  # each round reads the registry; a write that raced another one is read again
            package = self.hook.describe_model_package(arn)
            current = package.get("ModelApprovalStatus")
            if current == status and str(package.get("ApprovalDescription") or "").startswith(description):
                break  # this answer is the registry's decision (written by this call or an earlier try)
            if current not in DECIDED_STATUSES:
                written, package = self.hook.compare_and_set_approval(arn, status, description)
                if written:
                    break
                continue
            other = sagemaker_decision(dict(package))
            if not _answered_before(at, package.get("LastModifiedTime")):
                # Decided in the registry before the Airflow answer was given: that decision came first.
                refused = self._refuse(context, arn, {
                    "by": who, "via": "airflow", "status": status, "at": at_text,
                    "reason": (f"the registry decision came first: {other['status']} by "
                               f"{other['decided_by'] or 'an unnamed identity'} at {other['at'] or 'an unknown time'} "
                               f"({other['comment'] or 'no ApprovalDescription'})")})
                # The request shows the refused answer: open it again so that the trigger closes it with the
                # decision that stands and the refusal (seen by the answer's author on Required Actions).
                self._reopen(context, arn, refused)
            # The Airflow answer came first: the registry's later decision gives way (refused, and recorded in
            # the package's ApprovalDescription next to the decision that stands).
            late = {"by": other["decided_by"], "via": "sagemaker", "status": other["status"], "at": other["at"],
                    "reason": f"the Airflow answer ({status} by {who} at {at_text}) came first"}
            if other["status"] == status:
                late = None  # the same decision, made twice: no conflict, the first one is recorded
            text = description if late is None else _with_suffix(description, f" | Refused: {refusal_note(late)}")
            written, package = self.hook.compare_and_set_approval(arn, status, text, expected=package)
            if written:
                if late is not None:
                    self._refuse(context, arn, late, keep_answer=True)
                break
        else:
            raise AirflowException(f"Model package {arn} kept changing while the Airflow answer of {who} was being "
                                   f"recorded; it is {package.get('ModelApprovalStatus')} now. Clear this task to "
                                   "decide again from the registry and the request.")
        self.log.info("Model package %s: %s (%s)", arn, package.get("ModelApprovalStatus"),
                      package.get("ApprovalDescription"))
        return self._finish(context, arn, decision, package)

    def _decided_in_sagemaker(self, context: Context, package: Mapping[str, Any]) -> dict[str, Any]:
        arn = package["ModelPackageArn"]
        decision = sagemaker_decision(dict(package))
        status = decision["status"]
        if status not in DECIDED_STATUSES:
            raise AirflowException(f"Model package {arn} is {status} again after a decision; "
                                   f"{self._ways_to_decide(arn)} — then clear this task.")
        triggered_by, settings = self._four_eyes(context)
        mapped = set(settings["aws_identities"].get(triggered_by or "", []))
        if status == "Approved" and triggered_by and not settings["self_approval"] and decision["decided_by"] in mapped:
            reason = (f"{decision['decided_by']} is {triggered_by}, who triggered this run (environment config "
                      "approval.aws_identities): a second person releases the model")
            refused = self._refuse(context, arn, {"by": decision["decided_by"], "via": "sagemaker", "status": status,
                                             "at": decision["at"], "reason": reason})
            note = _with_suffix(f"Approval by {decision['decided_by']} refused: {reason}",
                                f" | was: {package.get('ApprovalDescription') or 'no ApprovalDescription'}")
            written, _ = self.hook.compare_and_set_approval(arn, "PendingManualApproval", note, expected=dict(package))
            if not written:
                self.log.warning("Model package %s changed again before the refused approval was undone; the "
                                 "wait reads it again", arn)
            self._reopen(context, arn, refused)
        return self._finish(context, arn, decision, package)


def _refused(store: TaskStore, arn: str) -> list[dict[str, Any]]:
    """The refusals recorded for model package ``arn`` (task state store :data:`REFUSED_KEY`); [] when none."""
    return list((store.get_bound(REFUSED_KEY, PACKAGE_FIELD, arn) or {}).get("refused") or [])


def _answered_before(answered_at: Any, registry_at: Any) -> bool:
    """Whether the Airflow answer (``responded_at``, the Airflow API server's clock) was given before the
    registry's decision (``LastModifiedTime``, SageMaker's clock); False when either time is unknown (the registry
    then stands: its decision is the one already in force)."""
    if isinstance(registry_at, str):
        registry_at = dt.datetime.fromisoformat(registry_at)
    if not isinstance(answered_at, dt.datetime) or not isinstance(registry_at, dt.datetime):
        return False
    if answered_at.tzinfo is None or registry_at.tzinfo is None:
        return False
    return answered_at < registry_at


def _with_suffix(text: str, suffix: str) -> str:
    """``text + suffix`` cut to :data:`APPROVAL_DESCRIPTION_MAX` characters (only the suffix is cut)."""
    room = APPROVAL_DESCRIPTION_MAX - len(text)
    return text + (suffix if len(suffix) <= room else suffix[:max(0, room - 1)] + "…")


def refusal_key(refusal: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two refusals the same answer: ``(via, by, status, at)`` (for an Airflow answer: the responding
    user, the chosen option and the HITL response's ``responded_at``; for a registry decision: its identity, status
    and ``LastModifiedTime``). The reason is left out: the same answer refused again reads the same."""
    return tuple(refusal.get(k) for k in ("via", "by", "status", "at"))


def refusal_note(refusal: Mapping[str, Any]) -> str:
    """One line for a refused answer: ``"<status> by <who> in <via> at <time> refused: <reason>"``."""
    action = {"Approved": "Approve", "Rejected": "Reject"}.get(str(refusal.get("status")), str(refusal.get("status")))
    return (f"{action} by {refusal.get('by') or 'an unnamed user'} in {refusal.get('via')} at "
            f"{refusal.get('at') or 'an unknown time'} refused: {refusal.get('reason')}")


class TaskStore:
    """The running task's Airflow task state store (``context["task_state_store"]``, Airflow 3.3+): rows scoped to
    the run's task, shared by its tries, so what one try records a retry reads. Without one (older cores, a
    bare context) nothing is kept (logged once); a failing read or write is logged and treated as absent."""

    def __init__(self, context: Any, log: Any) -> None:
        self._store = context.get("task_state_store") if hasattr(context, "get") else None
        self._log = log

    def get(self, key: str) -> Any:
        if self._store is None:
            return None
        try:
            return self._store.get(key)
        except Exception as err:  # noqa: BLE001 - the registry still holds the decision
            self._log.warning("task state store: %s not read (%s)", key, err)
            return None

    def get_bound(self, key: str, field: str, owner: str) -> dict[str, Any] | None:
        """The row under ``key`` (a mapping) when it was recorded for ``owner`` (its ``field`` equals it); else None.

        A row recorded for another resource of the run (an earlier canary deployment or model package), or without
        one (older rows), is ignored (logged): Airflow 3.3.1 keeps task state store rows across a clear of the task
        (``clear_task_instances`` leaves them; ``[state_store] clear_on_success`` is False by default), so a clear
        that made a new resource would otherwise replay what was recorded for the old one."""
        row = self.get(key)
        if row is None:
            return None
        if isinstance(row, Mapping) and owner and row.get(field) == owner:
            return dict(row)
        self._log.info("task state store: %s was recorded for %s %r, not %r: ignored", key, field,
                       row.get(field) if isinstance(row, Mapping) else None, owner)
        return None

    def set_bound(self, key: str, field: str, owner: str, **values: Any) -> None:
        """Record ``{field: owner, **values}`` under ``key`` (read back with :meth:`get_bound`)."""
        self.set(key, {field: owner, **values})

    def delete(self, key: str) -> None:
        if self._store is not None:
            try:
                self._store.delete(key)
            except Exception as err:  # noqa: BLE001 - a retry would then complete a refused answer: logged loudly
                self._log.error("task state store: %s not deleted (%s)", key, err)

    def set(self, key: str, value: Any) -> None:
        if self._store is None:
            self._log.info("no task state store: %s is not kept for a retry", key)
            return
        try:
            self._store.set(key, value)
        except Exception as err:  # noqa: BLE001 - a retry then decides from the registry and the request
            self._log.warning("task state store: %s not written (%s)", key, err)
