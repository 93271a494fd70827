"""slurm_job_step: the GetCommandInvocation of one Slurm status query (sacct / scontrol through SSM) -> Step."""

from __future__ import annotations

import pytest

from sim2real.orchestration.waits.core import WaitState
from sim2real.orchestration.waits.hyperpod import DEFAULT_MAX_FAILED_QUERIES, slurm_job_step

NOW = 1_800_000_000.0
PARAMS = {"cluster_name": "c", "instance_id": "i-head", "job_id": "42", "job_name": "run", "reattached": False,
          "max_failed_queries": 3, "num_nodes": None, "cost_limit_usd": None, "usd_per_node_hour": None}


def _query(stdout, status="Success", stderr=""):
    return {"Status": status, "StandardOutputContent": stdout, "StandardErrorContent": stderr}


def _state(memory=None, **params):
    return WaitState(params={**PARAMS, **params}, memory=memory or {}, now=NOW, poll_interval_s=30, describe_s=2)


def test_completed_succeeds_with_the_job_cost():
    step = slurm_job_step(_query("sacct|COMPLETED|0:0\n"), _state())
    assert step.outcome == "success" and step.payload["state"] == "COMPLETED" and step.payload["exit_code"] == "0:0"
    assert step.payload["job_cost"]["job_id"] == "42" and step.payload["instance_id"] == "i-head"


@pytest.mark.parametrize("state", ["FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED"])
def test_failure_states(state):
    step = slurm_job_step(_query(f"sacct|{state}|1:0\n"), _state())
    assert step.outcome == "failure" and step.payload["state"] == state and "reason" not in step.payload


def test_running_and_pending_retry_and_reset_the_failed_count():
    step = slurm_job_step(_query("sacct|RUNNING|0:0\n"), _state({"failed_queries": 2}))
    assert step.outcome == "retry" and step.memory["failed_queries"] == 0
    assert step.memory["first_running_at"] == NOW
    assert slurm_job_step(_query("sacct|PENDING|0:0\n"), _state()).outcome == "retry"


def test_unknown_state_limit_is_the_configured_one():
    memory: dict = {}
    for _ in range(2):
        step = slurm_job_step(_query(""), _state(memory))
        assert step.outcome == "retry"
        memory = step.memory
    step = slurm_job_step(_query(""), _state(memory))
    assert step.outcome == "failure" and step.payload["reason"] == "status_queries_failed"
    assert "max_failed_queries=3" in step.reason


def test_failed_queries_count_too_and_default_limit():
    memory: dict = {}
    params = {**PARAMS}
    params.pop("max_failed_queries")
    for _attempt in range(DEFAULT_MAX_FAILED_QUERIES):
        step = slurm_job_step(_query("", status="Failed", stderr="sacct: error"), WaitState(params=params, memory=memory))
        memory = step.memory
    assert step.outcome == "failure" and "sacct: error" in step.reason


def test_throttled_query_is_not_a_failed_query():
    step = slurm_job_step({"Error": {"Code": "ThrottlingException"}}, _state({"failed_queries": 2}))
    assert step.outcome == "retry" and step.memory["failed_queries"] == 2


def test_cost_limit_scancels():
    # sacct Start one hour ago on the head node's clock; 2 nodes x $10/h = $20 reached
    stdout = f"sacct|RUNNING|0:0\nstart|{NOW - 3600:.0f}\nclock|{NOW:.0f}\n"
    step = slurm_job_step(_query(stdout), _state(num_nodes=2, cost_limit_usd=20.0, usd_per_node_hour=10.0))
    assert step.outcome == "failure" and step.payload["reason"] == "cost_limit"
    assert step.action.name == "scancel" and step.action.params["job_id"] == "42"
    assert step.payload["job_cost"]["stopped_by_budget"] is True
    assert "scancel FAILED" in step.action_failed_reason


def test_cost_counted_from_first_seen_running_without_a_slurm_start():
    params = {**PARAMS, "num_nodes": 2, "cost_limit_usd": 20.0, "usd_per_node_hour": 10.0}
    step = slurm_job_step(_query("sacct|RUNNING|0:0\n"), WaitState(params=params, memory={"first_running_at": NOW - 3600},
                                                             now=NOW, poll_interval_s=30))
    assert step.outcome == "failure" and step.payload["reason"] == "cost_limit"
    under = slurm_job_step(_query("sacct|RUNNING|0:0\n"), WaitState(params=params, memory={"first_running_at": NOW - 60},
                                                              now=NOW, poll_interval_s=30))
    assert under.outcome == "retry" and "$" in under.reason
