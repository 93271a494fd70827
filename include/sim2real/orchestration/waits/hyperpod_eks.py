"""Step function of a training job on a HyperPod EKS cluster: a Kubeflow ``PyTorchJob`` under Kueue.

A response is ``{"job": <the PyTorchJob or None when it is gone>, "workload": <Kueue's Workload of the job or
None>}`` (:func:`job_response`), or an API error in botocore's error shape (:func:`api_error_response`).

Sources: Kubeflow training operator v1 API, ``JobStatus.conditions[]`` (types ``Created``, ``Running``,
``Restarting``, ``Succeeded``, ``Failed``, ``Suspended``) and ``RunPolicy.suspend``; Kueue API reference
(kueue.x-k8s.io/v1beta1), ``Workload.status.conditions[]`` (``QuotaReserved``, ``Admitted``, ``Evicted`` with reason
``Preempted`` / ``InactiveWorkload`` / ..., ``Preempted``, ``Finished``); Kueue documentation "Preemption": an
evicted workload's job is suspended (its pods deleted) and queued again until it is readmitted.

**Preemption is part of the wait**: a job suspended after it ran (Kueue evicted it for a higher priority or a team
reclaiming its quota) is waited for until it is readmitted and runs again; each one is counted (``preemptions``).
**The budget counts only the time the job held GPUs**, read from the cluster on every poll (so a retry, a reattach
or a restarted triggerer loses none of it): Kueue's ``Workload.status.accumulatedPastExexcutionTimeSeconds`` (sic:
the v1beta1 JSON name, "the total time, in seconds, the workload spent in Admitted state, in the previous
Admit - Evict cycles"; v1beta2 spells it ``accumulatedPastExecutionTimeSeconds``; Kueue API reference, WorkloadStatus)
plus, while the ``Admitted`` condition is True, the seconds since its ``lastTransitionTime`` (until the ``Finished``
condition's, once finished), as Kueue's own maximum-execution-time check adds them. The cost is ``gpu_seconds`` x
nodes x the node price.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from sim2real.contract.hyperpod_eks import PRIORITY_LABEL, QUEUE_LABEL
from sim2real.orchestration.budget import budget_verdict, elapsed_cost_usd
from sim2real.orchestration.waits.core import RETRIABLE_ERROR_CODES, Action, Step, WaitState, api_error_step

#: Seconds a suspended job may go without a Kueue Workload (Kueue creates it within seconds of the job) before the
#: wait fails: a missing WorkloadPriorityClass, or a queue label Kueue does not manage.
NO_WORKLOAD_FAIL_S = 300.0
#: Workload condition types that say Kueue took the job's quota away.
EVICTION_CONDITIONS = ("Evicted", "Preempted")


def api_error_response(error: Exception) -> dict[str, Any]:
    """An error of one read as botocore's error response, so that
    :func:`~sim2real.orchestration.waits.core.api_error_step` classifies it (retry: throttling and 5xx; fail: any
    other code):

    * a botocore ``ClientError`` (SageMaker / EKS ``DescribeCluster`` while the client is built): its own
      ``Error.Code`` and message (``ThrottlingException`` retries; ``AccessDeniedException``,
      ``ResourceNotFoundException``, ``ValidationException`` fail), an unlisted code with HTTP status 5xx as that
      status (retries);
    * ``ValueError`` (not an EKS-orchestrated cluster, no credentials) and botocore's ``NoCredentialsError``: fail;
    * a Kubernetes ``ApiException``: 429 ``TooManyRequestsException`` and 5xx retry, any other status fails;
    * anything else (no answer: a connection error, a timeout): ``ServiceUnavailable``, retried.
    """
    from botocore.exceptions import ClientError, NoCredentialsError

    if isinstance(error, ClientError):
        answer = error.response.get("Error") or {}
        code = str(answer.get("Code") or "")
        status = (error.response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0
        if code not in RETRIABLE_ERROR_CODES and int(status) >= 500:
            code = str(status)
        return {"Error": {"Code": code or "ClientError", "Message": str(answer.get("Message") or error)}}
    if isinstance(error, (ValueError, NoCredentialsError)):
        return {"Error": {"Code": type(error).__name__, "Message": str(error)}}
    status = getattr(error, "status", None)
    code = ("TooManyRequestsException" if status == 429 else str(status) if status
            else "ServiceUnavailable")
    message = str(getattr(error, "reason", "") or error).strip()
    return {"Error": {"Code": code, "Message": message}}


def job_response(job: Mapping[str, Any] | None, workload: Mapping[str, Any] | None) -> dict[str, Any]:
    """The step's response of one read of the job and its Workload."""
    return {"job": dict(job) if job is not None else None, "workload": dict(workload) if workload else None}


def true_conditions(obj: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """``type -> condition`` of ``obj``'s ``status.conditions`` whose ``status`` is ``"True"``."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return {c.get("type"): c for c in conditions if str(c.get("status")) == "True"}


def said(condition: Mapping[str, Any]) -> str:
    """A condition's ``"<reason>: <message>"`` (either may be missing; "" for neither)."""
    return f"{condition.get('reason') or ''}: {condition.get('message') or ''}".strip(": ")


#: ``Workload.status`` keys of the admitted seconds of earlier admissions: v1beta1 (sic), v1beta2.
PAST_ADMITTED_FIELDS = ("accumulatedPastExexcutionTimeSeconds", "accumulatedPastExecutionTimeSeconds")


def _epoch(stamp: Any) -> float | None:
    """An RFC 3339 time (``metav1.Time``, e.g. ``2026-12-04T17:00:00Z``) as epoch seconds; None when absent."""
    if not stamp:
        return None
    return dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()


def admitted_seconds(workload: Mapping[str, Any] | None, now: float) -> float | None:
    """Seconds the Workload held its quota (GPUs): the earlier admissions' total (:data:`PAST_ADMITTED_FIELDS`) plus
    the current admission's ``now`` (epoch s; the ``Finished`` condition's time once finished) minus the ``Admitted``
    condition's ``lastTransitionTime``. None without a Workload."""
    if not workload:
        return None
    status = workload.get("status") or {}
    past = next((float(status[k]) for k in PAST_ADMITTED_FIELDS if status.get(k) is not None), 0.0)
    true = true_conditions(workload)
    since = _epoch((true.get("Admitted") or {}).get("lastTransitionTime"))
    if since is None:
        return past
    end = _epoch((true.get("Finished") or {}).get("lastTransitionTime")) or now
    return past + max(end - since, 0.0)


#: Eviction reasons of a deactivated Workload (Kueue: ``InactiveWorkload`` before v0.9, ``Deactivated`` and
#: ``DeactivatedDueTo...`` since).
DEACTIVATED_REASONS = ("InactiveWorkload", "Deactivated")


def deactivation(workload: Mapping[str, Any] | None) -> str:
    """Why Kueue will not run the Workload again ("" when it may): ``spec.active: false`` (someone, or Kueue's
    maximum execution time or requeue limit, deactivated it), or an ``Evicted`` condition whose reason is one of
    :data:`DEACTIVATED_REASONS`. A deactivated Workload is never readmitted by itself: not a preemption."""
    if not workload:
        return ""
    name = (workload.get("metadata") or {}).get("name") or "of the job"
    evicted = true_conditions(workload).get("Evicted") or {}
    reason = str(evicted.get("reason") or "")
    if (workload.get("spec") or {}).get("active") is False or reason.startswith(DEACTIVATED_REASONS):
        detail = said(evicted) or "spec.active is false"
        return (f"Kueue Workload {name} is deactivated ({detail}): Kueue will not admit it again; reactivate it "
                "(spec.active: true) or retry the task")
    return ""


def job_state(job: Mapping[str, Any], workload: Mapping[str, Any] | None) -> tuple[str, str]:
    """``(state, why)``: ``Succeeded`` / ``Failed`` / ``Preempted`` / ``Running`` / ``Queued`` / ``Admitted``, and
    the condition's reason and message that say so."""
    job_true, wl_true = true_conditions(job), true_conditions(workload)
    suspended = bool(((job.get("spec") or {}).get("runPolicy") or {}).get("suspend"))
    for kind in ("Succeeded", "Failed"):
        if kind in job_true:
            return kind, said(job_true[kind])
    deactivated = deactivation(workload)
    if deactivated:
        return "Failed", deactivated
    evicted = next((wl_true[k] for k in EVICTION_CONDITIONS if k in wl_true), None)
    if evicted is not None and (suspended or "Admitted" not in wl_true):
        return "Preempted", said(evicted)
    if suspended:
        pending = ((workload or {}).get("status") or {}).get("conditions") or []
        note = next((c.get("message") for c in pending if c.get("type") == "QuotaReserved"), "") or ""
        return "Queued", note or "waiting for Kueue to admit the workload"
    if "Running" in job_true:
        return "Running", ""
    return "Admitted", "admitted, pods starting"


def eks_job_step(response: Mapping[str, Any], state: WaitState) -> Step:
    """Decide one read of the ``PyTorchJob`` ``params["namespace"]/params["job_name"]``.

    Params: ``cluster_name``, ``namespace``, ``job_name``, ``job_uid``, ``num_nodes``, ``usd_per_node_hour`` and
    ``cost_limit_usd`` (None: no cost check). Memory: ``gpu_seconds`` (the last :func:`admitted_seconds` read),
    ``preemptions``, ``preempted`` (the last read saw it preempted).

    :return: ``success`` (Succeeded); ``failure`` (Failed, with its reason; the job gone before it ended; still
        suspended without a Workload :data:`NO_WORKLOAD_FAIL_S` after its ``creationTimestamp``; a
        non-retriable API error; the cost at the next poll above ``cost_limit_usd``: ``reason: cost_limit`` and
        action ``delete_job``); ``retry`` otherwise (queued, admitted, running, preempted). Payload:
        ``cluster_name``, ``namespace``, ``job_name``, ``job_uid``, ``state``, ``why``, ``preemptions``,
        ``gpu_seconds``, ``cost_usd``.
    """
    p = state.params
    where = f"PyTorchJob {p['namespace']}/{p['job_name']} on HyperPod EKS cluster {p['cluster_name']}"
    memory: dict[str, Any] = dict(state.memory)
    held = float(memory.get("gpu_seconds") or 0.0)
    preemptions = int(memory.get("preemptions") or 0)
    base = {"cluster_name": p["cluster_name"], "namespace": p["namespace"], "job_name": p["job_name"],
            "job_uid": p.get("job_uid"), "preemptions": preemptions}
    error = api_error_step(response, where, "Kubernetes API read")
    if error is not None:
        return Step(error.outcome, error.reason, {**base, **error.payload, "state": "Unknown",
                                                   "gpu_seconds": held, "cost_usd": _cost(p, held)})
    job = response.get("job")
    if job is None:
        return Step("failure", f"{where} is gone (deleted before it ended, by a person or the cluster)",
                    {**base, "state": "Deleted", "why": "", "gpu_seconds": held, "cost_usd": _cost(p, held)})
    status, why = job_state(job, response.get("workload"))
    admitted = admitted_seconds(response.get("workload"), state.now)
    held = held if admitted is None else admitted  # no Workload (yet, or any more): the last one read
    if status == "Preempted" and not memory.get("preempted"):  # Evicted: it had been admitted
        preemptions += 1
    memory.update(gpu_seconds=held, preemptions=preemptions, preempted=status == "Preempted")
    created = _epoch((job.get("metadata") or {}).get("creationTimestamp"))
    if response.get("workload") is None and status == "Queued" and created is not None \
            and state.now - created > float(p.get("no_workload_fail_s") or NO_WORKLOAD_FAIL_S):
        labels = (job.get("metadata") or {}).get("labels") or {}
        return Step("failure", f"{where}: Kueue created no Workload for it in {state.now - created:.0f} s, so it stays "
                    f"suspended; likely the WorkloadPriorityClass {labels.get(PRIORITY_LABEL)!r} does not exist, or "
                    f"Kueue does not manage LocalQueue {labels.get(QUEUE_LABEL)!r} (ask the cluster admin)",
                    {**base, "state": "NoWorkload", "why": "no Kueue Workload", "gpu_seconds": held,
                     "cost_usd": _cost(p, held)})
    payload = {**base, "preemptions": preemptions, "state": status, "why": why, "gpu_seconds": round(held, 3),
               "cost_usd": _cost(p, held)}
    if status == "Succeeded":
        return Step("success", f"{where} Succeeded after {held:.0f} GPU-held s, {preemptions} preemption(s)", payload)
    if status == "Failed":
        return Step("failure", f"{where} Failed: {why or 'no reason given'}", payload)
    note = ""
    if status == "Running" and p.get("num_nodes"):
        verdict = budget_verdict(elapsed_s=held, instances=int(p["num_nodes"]), usd_per_hour=p.get("usd_per_node_hour"),
                                 limit_usd=p.get("cost_limit_usd"), poll_interval_s=state.poll_interval_s + state.describe_s)
        if verdict is not None and verdict.over_budget:
            text = (f"{where} stopped at its cost limit: {verdict.describe()} (GPU-held time only; "
                    f"{preemptions} preemption(s) not counted). Raise max_budget_usd or lower max_iterations/num_nodes")
            return Step("failure", text + "; the job was deleted.", {**payload, "reason": "cost_limit"},
                        action=Action("delete_job", {"namespace": p["namespace"], "job_name": p["job_name"]}),
                        action_failed_reason=text + "; deleting the job FAILED: delete it by hand.", memory=memory)
        note = f"; {verdict.describe()}" if verdict is not None else ""
    if status == "Preempted":
        note = (f" (preempted by Kueue: {why}; the job waits for readmission, not a failure; GPU-held time so far "
                f"{held:.0f} s)")
    elif why:
        note = f" ({why}){note}"
    return Step("retry", f"{where}: {status}{note}", payload, memory=memory)


def _cost(params: Mapping[str, Any], held_s: float) -> float | None:
    """USD of ``held_s`` GPU-held seconds on ``num_nodes`` nodes (None without a price)."""
    price, nodes = params.get("usd_per_node_hour"), params.get("num_nodes")
    if price is None or not nodes:
        return None
    return round(elapsed_cost_usd(0.0, held_s, int(nodes), float(price)), 4)
