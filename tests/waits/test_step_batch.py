"""batch_job_step: DescribeJobs responses (AWS Batch API Reference, DescribeJobs / JobDetail) -> Step."""

from __future__ import annotations

import pytest

from sim2real.orchestration.waits.batch import batch_job_step
from sim2real.orchestration.waits.core import WaitState

NOW = 1_800_000_000.0
PARAMS = {"job_id": "j-1", "runnable_timeout_seconds": 600, "cost_limit_usd": None, "usd_per_node_hour": None,
          "num_nodes": 2}


def _job(status, **extra):
    return {"jobs": [{"jobId": "j-1", "jobName": "run", "jobQueue": "q", "status": status, **extra}]}


def _state(memory=None, **params):
    return WaitState(params={**PARAMS, **params}, memory=memory or {}, now=NOW, poll_interval_s=30)


@pytest.mark.parametrize("status", ["SUBMITTED", "PENDING", "STARTING", "RUNNING"])
def test_in_flight_statuses_retry(status):
    step = batch_job_step(_job(status, startedAt=int(NOW * 1000) - 60_000), _state())
    assert step.outcome == "retry" and step.action is None
    assert step.payload == {"job_id": "j-1", "job_status": status}


def test_succeeded_and_failed():
    assert batch_job_step(_job("SUCCEEDED"), _state()).outcome == "success"
    step = batch_job_step(_job("FAILED", statusReason="Essential container exited"), _state())
    assert step.outcome == "failure" and "Essential container exited" in step.reason
    assert step.payload["job_status"] == "FAILED" and "reason" not in step.payload


def test_unknown_status_keeps_polling_and_says_so():
    step = batch_job_step(_job("HIBERNATING"), _state())
    assert step.outcome == "retry" and "unknown to this wait" in step.reason


def test_job_not_found_fails():
    step = batch_job_step({"jobs": []}, _state())
    assert step.outcome == "failure" and "not found" in step.reason


def test_throttling_retries_and_access_denied_fails():
    assert batch_job_step({"Error": {"Code": "TooManyRequestsException"}}, _state()).outcome == "retry"
    step = batch_job_step({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, _state())
    assert step.outcome == "failure" and "DescribeJobs" in step.reason


def test_runnable_budget_remembers_first_seen_then_terminates():
    # a job with an attempt already: counted from when the wait first saw it RUNNABLE
    response = _job("RUNNABLE", attempts=[{}], statusReason="waiting for capacity")
    first = batch_job_step(response, _state())
    assert first.outcome == "retry" and first.memory == {"first_runnable": NOW}
    later = batch_job_step(response, WaitState(params=PARAMS, memory=first.memory, now=NOW + 601))
    assert later.outcome == "failure" and later.payload["reason"] == "runnable_timeout"
    assert later.action.name == "terminate_job"
    assert later.action.params["job_id"] == "j-1" and later.action.params["describe_queue"] == "q"
    assert "stayed RUNNABLE for 601 s" in later.reason and "the job was terminated" in later.reason
    assert "terminating the job FAILED" in later.action_failed_reason


def test_runnable_budget_counts_from_created_at_without_attempts():
    """A fresh job's createdAt survives a triggerer restart (no memory needed)."""
    step = batch_job_step(_job("RUNNABLE", createdAt=int((NOW - 700) * 1000)), _state())
    assert step.outcome == "failure" and step.payload["reason"] == "runnable_timeout"


def test_no_runnable_budget_and_leaving_runnable_forgets():
    response = _job("RUNNABLE", createdAt=int((NOW - 10_000) * 1000))
    assert batch_job_step(response, _state(runnable_timeout_seconds=None)).outcome == "retry"
    step = batch_job_step(_job("STARTING"), WaitState(params=PARAMS, memory={"first_runnable": NOW - 5}, now=NOW))
    assert step.outcome == "retry" and "first_runnable" not in step.memory


def test_cost_limit_terminates_with_the_job_cost():
    started = int((NOW - 3600) * 1000)  # one hour on 2 nodes at $10/node-h = $20; next poll +30 s > $20
    response = _job("RUNNING", startedAt=started, nodeProperties={"numNodes": 2})
    step = batch_job_step(response, _state(cost_limit_usd=20.0, usd_per_node_hour=10.0))
    assert step.outcome == "failure" and step.payload["reason"] == "cost_limit"
    assert step.action.name == "terminate_job" and "cost limit" in step.action.params["reason"]
    assert step.payload["job_cost"]["stopped_by_budget"] is True
    assert step.payload["job_cost"]["cost_usd"] == pytest.approx(20.0, rel=1e-3)
    assert "Terminating the job FAILED" in step.action_failed_reason


def test_cost_under_limit_keeps_polling_with_the_figures():
    response = _job("RUNNING", startedAt=int((NOW - 60) * 1000), nodeProperties={"numNodes": 2})
    step = batch_job_step(response, _state(cost_limit_usd=100.0, usd_per_node_hour=10.0))
    assert step.outcome == "retry" and "$" in step.reason
