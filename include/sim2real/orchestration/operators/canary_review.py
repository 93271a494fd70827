"""A person promotes or aborts the canary release from the Airflow UI, with the canary verdict's evidence in front
of them.

:class:`CanaryReviewOperator` subclasses the standard provider's ``ApprovalOperator`` (its options are fixed:
``Approve`` = promote the release to the fleet group, ``Reject`` = abort the canary; a ``comment`` field). It
shows the evidence of the canary verdict (XCom ``canary_verdict`` of
:class:`~sim2real.orchestration.operators.canary.CanaryVerdictOperator`) as the request's Markdown body and waits
for the answer (Airflow 3.3+: the task waits ``awaiting_input``, no triggerer involved). Promote returns the
evidence and the decision; Abort rolls the canary thing group back (the verdict's rollback:
:class:`~sim2real.orchestration.operators.canary.CanaryRollback`), waits for it deferred and fails. The decision
— ``decided_by``, ``at``, ``comment``, ``status`` (``Promote`` | ``Abort``) — is the task's XCom ``decision``
(also when it fails).

Sources: Airflow standard provider ``airflow.providers.standard.operators.hitl`` (``ApprovalOperator``,
``HITLOperator``: ``execute_complete`` event shape, the timeout event ``{"error", "error_type": "timeout"}`` of
the scheduler's ``awaiting_input`` sweep); AWS IoT Greengrass V2 API Reference (ListCoreDevices,
ListEffectiveDeployments, GetDeployment, CreateDeployment: the rollback; TagResource: the canary's field verdict);
AWS IoT API Reference (DescribeThingGroup).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.providers.standard.exceptions import HITLRejectException
from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import Param
from airflow.sdk.definitions.param import ParamsDict

from sim2real.orchestration.field import canary_evidence
from sim2real.orchestration.hooks.greengrass import GreengrassV2Hook
from sim2real.orchestration.lineage import CANARY_REVIEW_KEY
from sim2real.orchestration.operators.canary import XCOM_VERDICT, CanaryRollback, truthy
from sim2real.orchestration.operators.model_approval import TaskStore
from sim2real.orchestration.stop_rule import starts_afresh

if TYPE_CHECKING:
    from airflow.sdk import Context

#: The request's form field for the reviewer's reason (in the decision and, on Abort, the task's failure).
COMMENT = "comment"
#: XCom key of the decision (pushed before an abort rolls back, so the lineage has it when the task fails).
DECISION_XCOM = CANARY_REVIEW_KEY
#: Task state store key of the decision a try received, ``{"deployment_id": <the canary deployment>, "decision"}``
#: (the run's tries share the store): every retry of the same series for the same canary deployment carries it out
#: again (idempotent); the first try of a series (a new task instance, or the first try after a person's clear)
#: deletes it and asks.
ANSWER_KEY = "canary_review_decision"
#: What the provider's fixed options mean here.
PROMOTE, ABORT = ApprovalOperator.APPROVE, ApprovalOperator.REJECT
#: Refused objects listed one by one in the body (the counts by reason are always complete).
REFUSALS_IN_BODY = 10

_RECOMMENDATION = {
    "promote": "**promote** to the fleet group",
    "roll_back": "**roll back** the canary group (abort)",
    "wait": "**wait** for more field episodes (the window is still open)",
}


def _rate(value: Any) -> str:
    return "n/a" if value is None else f"{float(value):.3f}"


def _moment(value: Any) -> dt.datetime | None:
    """``responded_at`` as the provider reads it (a datetime), from the resume event's datetime or ISO string."""
    return dt.datetime.fromisoformat(value) if isinstance(value, str) else value


def answer_decision(answer: Mapping[str, Any], status: str) -> dict[str, Any]:
    """The decision of an answer (the provider's resume event): ``{"decided_by"`` (the user's name, else id),
    ``"at"`` (ISO 8601, None when unknown), ``"comment"`` (None when empty), ``"status"}``."""
    user = answer.get("responded_by_user") or {}
    at = answer.get("responded_at")
    return {"decided_by": user.get("name") or user.get("id") or "an unnamed user",
            "at": at.isoformat() if at else None,
            "comment": str((answer.get("params_input") or {}).get(COMMENT) or "").strip() or None, "status": status}


def review_body(evidence: Mapping[str, Any]) -> str:
    """The request's Markdown body from the canary verdict's evidence (XCom ``canary_verdict``).

    :param evidence: ``{"decision", "message", "rate", "ci95", "n", "successes", "threshold", "min_episodes",
        "robots": {thing: {"n", "successes", "interventions"}}, "silent", "refused": {reason: count}, "refusals",
        "window": {"start", "end"}, "deployment_id", "model_version"}``; missing keys are shown as unknown.
    :return: Markdown: what the two options do, the release, the field success rate with its 95 % Wilson
        interval, episodes and threshold, the automatic verdict's recommendation, a per-robot table, silent robots
        and the refused objects.
    """
    low, high = (list(evidence.get("ci95") or [0.0, 1.0]) + [0.0, 1.0])[:2]
    threshold = float(evidence.get("threshold") or 0.0)
    window = evidence.get("window") or {}
    decision = str(evidence.get("decision") or "unknown")
    lines = [
        f"**{PROMOTE} = Promote** the release to the fleet thing group (the fleet deployment runs next). "
        f"**{ABORT} = Abort** the canary: its thing group is rolled back to its last good release, this task fails "
        "and the fleet is not deployed. Say why in the comment.",
        "",
        "### Canary release",
        f"- Canary deployment: `{evidence.get('deployment_id') or 'unknown'}`",
        f"- Model version (ModelSha256): `{evidence.get('model_version') or 'unknown'}`",
        f"- Window: {window.get('start', '?')} to {window.get('end', '?')}",
        "",
        "### Field evidence",
        f"- Field success rate: **{_rate(evidence.get('rate'))}** (95 % Wilson interval "
        f"[{float(low):.3f}, {float(high):.3f}])",
        f"- Episodes: {int(evidence.get('successes') or 0)} successful of {int(evidence.get('n') or 0)} "
        f"({evidence.get('min_episodes', '?')} needed)",
        f"- Threshold: {threshold:.3f} (the interval's lower bound must be at or above it)",
        f"- Automatic verdict: {_RECOMMENDATION.get(decision, f'**{decision}**')} — {evidence.get('message') or ''}",
        "",
        "### Per robot",
        "| Robot | Episodes | Successes | Success rate | Interventions |",
        "|---|---:|---:|---:|---:|",
    ]
    robots = evidence.get("robots") or {}
    for thing in sorted(set(robots) | set(evidence.get("silent") or [])):
        r = robots.get(thing) or {}
        n, ok = int(r.get("n") or 0), int(r.get("successes") or 0)
        lines.append(f"| {thing} | {n} | {ok} | {_rate(ok / n if n else None)} | {int(r.get('interventions') or 0)} |")
    if evidence.get("silent"):
        lines += ["", f"No episode from: {', '.join(evidence['silent'])}."]
    refused = evidence.get("refused") or {}
    lines += ["", "### Refused episode objects"]
    if not refused:
        lines.append("None.")
    else:
        lines.append(", ".join(f"{reason}: {count}" for reason, count in sorted(refused.items())))
        for key, reason, detail in (evidence.get("refusals") or [])[:REFUSALS_IN_BODY]:
            lines.append(f"- `{key}`: {reason} ({detail})")
    return "\n".join(lines) + "\n"


class CanaryReviewOperator(CanaryRollback, ApprovalOperator, AwsBaseOperator[GreengrassV2Hook]):
    """Ask a person in Airflow to promote the canary release to the fleet or abort it (module docstring).

    With no canary (``thing_group_name`` empty) it asks nothing and returns ``{"decision": "no_canary"}`` at once;
    without ``review`` (the automatic verdict alone decides) ``{"decision": "no_review"}``. It runs only after the
    canary verdict succeeded: without ``review`` a verdict that rolled back failed and stops the deploy group; with
    ``review`` the verdict returns its ``promote`` or ``roll_back`` recommendation and this person decides either
    way (Promote overrides a ``roll_back`` recommendation; Abort one of ``promote``).

    A retry of the task (Airflow 3.3.1 can fail a try from its deferral's stale executor state and retry it, also
    after the decision was carried out: the abort's rollback wait ends seconds after it deferred) carries out the
    decision an earlier try of the series received for the same canary deployment (task state store
    :data:`ANSWER_KEY`) again and asks nobody: Promote tags the canary again, Abort finds the same rollback (its
    client token) and fails as before. The first try after a person clears the task
    (:func:`sim2real.orchestration.stop_rule.starts_afresh`) forgets the decision and asks again, also during an
    abort's rollback wait (the new answer decides; the rollback already created goes on), and one recorded for
    another canary deployment is ignored (a clear of the deploy group made a new canary; Airflow 3.3.1 keeps task
    state store rows across clears). A clear while a try runs is not seen as one (Airflow 3.3.1 leaves
    ``max_tries`` of a running task instance as it is): the next try carries the decision out again.

    :param thing_group_name: the canary IoT thing group (templated).
    :param deployment_name: the canary deployment's name (the rollback is ``<deployment_name>-rollback``).
    :param verdict_task_id: the canary verdict's task; its XCom ``canary_verdict`` is the evidence shown (and
        ``deployment_id``, the canary deployment, comes from it).
    :param assigned_users: who may answer (HITL ``assigned_users``); None: the environment config's
        ``approval.approvers``, or any user allowed to act on the task when it names none.
    :param response_timeout: how long to wait for an answer (default 24 h).
    :param review: (templated) whether a person decides (the form's ``canary_review``); False: nothing is asked.
    :return: Promote: the evidence with ``"decision": {"decided_by", "at", "comment", "status": "Promote"}``.

    :raises AirflowFailException: (not retried) no evidence; Abort (after the rollback's wait: who aborted, their
        comment and the rollback deployment, or both deployment ids when the rollback did not succeed); no answer
        within ``response_timeout`` (the canary deployment and how to decide).
    """

    #: The rollback's wait runs in the triggerer; read by the DAG checks.
    deferrable = True

    aws_hook_class = GreengrassV2Hook
    template_fields: Sequence[str] = aws_template_fields("subject", "body", "thing_group_name", "deployment_name", "review")

    def __init__(self, *, thing_group_name: str, deployment_name: str, verdict_task_id: str,
                 response_timeout: dt.timedelta = dt.timedelta(hours=24), review: bool = True,
                 subject: str = "Promote the canary release to the fleet?", **kwargs: Any) -> None:
        inherited = kwargs.pop("params", None) or {}
        params = {k: inherited.get_param(k) for k in inherited} if isinstance(inherited, ParamsDict) else dict(inherited)
        params[COMMENT] = Param("", type="string", maxLength=1000, title="Comment",
                                description="Why you promote or abort: kept in the decision, and named in the "
                                            "task's failure when you abort.")
        super().__init__(subject=subject, params=params, fail_on_reject=True, response_timeout=response_timeout,
                         **kwargs)
        self.thing_group_name, self.deployment_name = thing_group_name, deployment_name
        self.verdict_task_id, self.review = verdict_task_id, review
        self.deployment_id = ""

    def _evidence(self, context: Context) -> dict[str, Any]:
        evidence = context["ti"].xcom_pull(task_ids=self.verdict_task_id, key=XCOM_VERDICT)
        if not evidence:
            raise AirflowFailException(f"No canary verdict evidence (XCom {XCOM_VERDICT!r} of task "
                                       f"{self.verdict_task_id}): clear the verdict task, then this one")
        self.deployment_id = str(evidence.get("deployment_id") or "")
        return dict(evidence)

    def _approvers(self) -> list[dict[str, str]] | None:
        from sim2real.orchestration.config import EnvironmentConfigError, approval_settings, load_environment

        try:
            approvers = approval_settings(load_environment())["approvers"]
        except EnvironmentConfigError as err:
            self.log.info("No environment config (%s): any user allowed to act on the task may answer", err)
            return None
        return [{"id": user, "name": user} for user in approvers] or None

    def execute(self, context: Context) -> Any:
        """Write the request (subject, the evidence's body) and wait for the answer (the provider's
        ``HITLOperator.execute``)."""
        if not self.thing_group_name:
            self.log.info("No canary thing group: nothing to review")
            return {"decision": "no_canary"}
        if not truthy(self.review):
            self.log.info("No canary review asked (canary_review): the automatic verdict decided")
            return {"decision": "no_review"}
        evidence = self._evidence(context)
        store = TaskStore(context, self.log)
        afresh = starts_afresh(context.get("ti"), self.retries)
        if afresh:  # a new task instance, or a person cleared it: ask (never replay, also if the delete fails)
            store.delete(ANSWER_KEY)
        recorded = None if afresh else store.get_bound(ANSWER_KEY, "deployment_id", self.deployment_id)
        if recorded:
            # Airflow 3.3.1 can fail a try from its deferral's stale executor state (the abort's rollback wait ends
            # seconds after it deferred) and retry it, even once the decision was carried out: the person answered
            # already for this canary, never ask again.
            decided = recorded["decision"]
            self.log.info("An earlier try of this task recorded %s by %s for canary %s: completing it",
                          decided["status"], decided["decided_by"], self.deployment_id)
            return self._carry_out(context, evidence, decided)
        self.subject = (f"{self.subject} Canary {self.deployment_id} on {self.thing_group_name}: "
                        f"{canary_evidence(evidence if evidence.get('n') else None, float(evidence.get('threshold') or 0))}")
        self.body = review_body(evidence)
        if self.assigned_users is None:
            self.assigned_users = self._approvers()
        return super().execute(context)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Resume with the answer: Promote returns the evidence and the decision; Abort rolls the canary group back
        (deferred; the task then fails in ``rollback_complete``); a timeout fails."""
        event = dict(event or {})
        evidence = self._evidence(context)
        if event.get("error_type") == "timeout":
            raise AirflowFailException(
                f"Canary {self.deployment_id} ({self.deployment_name}) on thing group {self.thing_group_name!r} got "
                f"no Promote or Abort within {self.response_timeout}: the canary robots still run it and the fleet "
                f"was not deployed. Clear this task ({self.task_id}) to be asked again, then answer in Browse > "
                "Required Actions (Approve = Promote, Reject = Abort)")
        answer = {**event, "responded_at": _moment(event.get("responded_at"))}
        status = "Abort"
        with contextlib.suppress(HITLRejectException):  # Reject (fail_on_reject): the abort below
            super().execute_complete(context=context, event=answer)  # the provider validates options and params
            status = "Promote"
        decision = answer_decision(answer, status)
        TaskStore(context, self.log).set_bound(ANSWER_KEY, "deployment_id", self.deployment_id, decision=decision)
        return self._carry_out(context, evidence, decision)

    def _carry_out(self, context: Context, evidence: dict[str, Any], decision: dict[str, Any]) -> Any:
        """Push the decision (XCom ``decision``); Promote: return the evidence with it; Abort: roll the canary group
        back (:meth:`CanaryRollback._roll_back`: a repeated abort sends the same client token, so a retry gets the
        same rollback deployment) and defer on its wait. The recorded decision (:data:`ANSWER_KEY`) stays for the
        series' retries (see the class)."""
        status, who, at, comment = decision["status"], decision["decided_by"], decision["at"], decision["comment"]
        context["ti"].xcom_push(key=DECISION_XCOM, value=decision)
        self.log.info("Canary %s: %s by %s at %s (%s)", self.deployment_id, status, who, at, comment)
        target_arn = self.hook.thing_group_arn(self.thing_group_name)
        if status == "Promote":
            self._promote(target_arn)
            return {**evidence, "decision": decision}
        things = sorted(set(evidence.get("robots") or {}) | set(evidence.get("silent") or []))
        self._roll_back(context, target_arn, things or self.hook.list_core_device_names(target_arn),
                        f"aborted in Airflow by {who} at {at or 'an unknown time'}: {comment or 'no comment given'}")

    def rollback_complete(self, context: Context, event: dict[str, Any] | None = None,
                          rollback: dict[str, Any] | None = None) -> Any:
        """Resume after the abort's rollback wait (:meth:`CanaryRollback.rollback_complete`, with the canary
        deployment read again from the evidence: a resumed task is a fresh operator).

        :raises AirflowFailException: always.
        """
        self._evidence(context)
        return super().rollback_complete(context, event, rollback)
