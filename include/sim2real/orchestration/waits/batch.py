"""Step function of an AWS Batch training job wait (``DescribeJobs`` responses).

The terminal statuses are the waiter ``training_job_complete`` of ``waiters/batch_ext.json``
(SUCCEEDED success, FAILED failure, SUBMITTED..RUNNING retry); on top of it: the RUNNABLE budget
and the cost limit, both of which terminate the job. Source: AWS Batch API Reference,
DescribeJobs (``jobs[].status``, ``statusReason``, ``createdAt`` / ``startedAt`` epoch ms).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim2real.orchestration.hooks.batch import (
    WAITERS_DIR,
    cost_limit_reason,
    format_cost_limit,
    format_runnable_timeout,
    job_cost_record,
    job_cost_verdict,
    runnable_elapsed,
)
from sim2real.orchestration.hooks.waiter_rounds import classify_response
from sim2real.orchestration.waits.core import Action, Step, WaitState, api_error_step

WAITER_PATH = WAITERS_DIR / "batch_ext.json"
WAITER_NAME = "training_job_complete"
#: DescribeJobs ``status`` values (AWS Batch API Reference, JobDetail.status).
KNOWN_STATUSES = frozenset({"SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED", "FAILED"})


def batch_job_step(response: Mapping[str, Any], state: WaitState) -> Step:
    """Decide one ``DescribeJobs`` response of ``state.params["job_id"]``.

    Params: ``job_id``; ``runnable_timeout_seconds`` (None: no RUNNABLE budget); ``cost_limit_usd``
    and ``usd_per_node_hour`` (None: no cost check); ``num_nodes`` (nodes without ``nodeProperties``).
    Memory: ``first_runnable`` (epoch s the wait first saw the job RUNNABLE).

    :return: ``success`` (SUCCEEDED); ``failure`` (FAILED, the job not found, a non-retriable API
        error; RUNNABLE past its budget: ``reason: runnable_timeout`` and action ``terminate_job``
        with ``describe_queue``; RUNNING with the cost at the next poll above the limit: ``reason:
        cost_limit``, ``job_cost`` and action ``terminate_job``); ``retry`` otherwise (an unknown
        status included: the attempt limit bounds it). Payload: ``job_id``, ``job_status``.
    """
    params = state.params
    job_id = params["job_id"]
    resource = f"AWS Batch job {job_id}"
    error = api_error_step(response, resource, "DescribeJobs")
    if error is not None:
        return error
    jobs = response.get("jobs") or []
    if not jobs:
        return Step("failure", f"{resource} not found (DescribeJobs returned no job): check the job id and the "
                               "region of the Airflow connection", {"job_id": job_id, "job_status": None})
    job = jobs[0]
    status = job.get("status")
    payload = {"job_id": job_id, "job_status": status}
    outcome = classify_response(str(WAITER_PATH), WAITER_NAME, response)
    if outcome == "success":
        return Step("success", f"{resource} SUCCEEDED", payload)
    if outcome == "failure":
        return Step("failure", f"{resource} is {status}: {job.get('statusReason')}", payload)
    if status not in KNOWN_STATUSES:
        return Step("retry", f"{resource} has status {status!r}, unknown to this wait: polling again", payload)
    memory: dict[str, Any] = dict(state.memory)
    if status == "RUNNABLE":
        memory["first_runnable"] = memory.get("first_runnable") or state.now
        elapsed = runnable_elapsed(job, state.now, memory["first_runnable"])
        budget = params.get("runnable_timeout_seconds")
        if budget is not None and elapsed >= float(budget):
            terminate = f"RUNNABLE for {elapsed:.0f} s, past the budget of {budget} s"
            return Step(
                "failure",
                format_runnable_timeout(job, elapsed, float(budget), terminated=True),
                {**payload, "reason": "runnable_timeout"},
                action=Action("terminate_job", {"job_id": job_id, "reason": terminate,
                                                "describe_queue": job.get("jobQueue")}),
                action_failed_reason=format_runnable_timeout(job, elapsed, float(budget), terminated=False),
            )
    else:
        memory.pop("first_runnable", None)
    note = ""
    if status == "RUNNING":
        verdict = job_cost_verdict(job, state.now, cost_limit_usd=params.get("cost_limit_usd"),
                                   usd_per_node_hour=params.get("usd_per_node_hour"),
                                   poll_interval_s=state.poll_interval_s, default_nodes=int(params.get("num_nodes") or 1))
        if verdict is not None and verdict.over_budget:
            record = job_cost_record(job, state.now, params.get("usd_per_node_hour"), int(params.get("num_nodes") or 1),
                                     stopped_by_budget=True)
            return Step(
                "failure",
                format_cost_limit(job, verdict, terminated=True),
                {**payload, "reason": "cost_limit", "job_cost": record},
                action=Action("terminate_job", {"job_id": job_id, "reason": cost_limit_reason(verdict)}),
                action_failed_reason=format_cost_limit(job, verdict, terminated=False),
            )
        note = f"; {verdict.describe()}" if verdict is not None else ""
    return Step("retry", f"{resource} status {status} {job.get('statusReason') or ''}".rstrip() + note, payload,
                memory=memory)
