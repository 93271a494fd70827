"""Step functions of SageMaker HyperPod waits: an instance group reaching its target count, and a
Slurm job ending.

Scale: a response is ``DescribeCluster`` plus ``"ClusterNodeSummaries"`` (``ListClusterNodes`` of
the group, listed once the cluster is InService), decided by
:func:`~sim2real.orchestration.hooks.hyperpod.scale_state` (waiter ``cluster_in_service`` of
``waiters/sagemaker_ext.json``). Source: Amazon SageMaker API Reference, DescribeCluster,
ListClusterNodes.

Slurm job: a response is the ``GetCommandInvocation`` of one status query
(:func:`sim2real.orchestration.slurm.status_commands`: ``sacct``, else ``scontrol show job``) on the
submit host. Source: AWS Systems Manager API Reference, GetCommandInvocation; Slurm ``sacct`` /
``scontrol`` manual pages for the job states.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim2real.orchestration.budget import budget_verdict
from sim2real.orchestration.hooks.hyperpod import scale_state
from sim2real.orchestration.hooks.waiter_rounds import classify_response
from sim2real.orchestration.hooks.sagemaker_pipeline import SAGEMAKER_EXT_WAITERS
from sim2real.orchestration.slurm import (
    SLURM_FAILURE_STATES,
    SLURM_SUCCESS_STATES,
    TIME_RESOLUTION_SECONDS,
    cancel_commands,
    cost_limit_message,
    job_cost_record,
    parse_status_output,
    parse_status_times,
    run_window,
)
from sim2real.orchestration.waits.core import Action, Step, WaitState, api_error_step

#: Default of the consecutive failed or unknown status queries before a Slurm wait gives up.
DEFAULT_MAX_FAILED_QUERIES = 10
NODES_KEY = "ClusterNodeSummaries"


def hyperpod_scale_step(response: Mapping[str, Any], state: WaitState) -> Step:
    """Decide one ``DescribeCluster`` (+ nodes) response for ``params["cluster_name"]``,
    ``params["instance_group_name"]`` and ``params["target_count"]``.

    ``target_count`` None is the wait before an ``UpdateCluster`` (the cluster was Updating, or UpdateCluster
    answered ConflictException): ``success`` once the cluster is InService at a response after the first (the
    task saw it busy a moment ago; one poll interval lets a just-started update show), whatever its counts.

    :return: ``success`` when InService with CurrentCount == target and that many nodes Running;
        ``failure`` when the cluster is Failed / RollingBack / Deleting or not found (non-retriable
        error); ``retry`` otherwise. Payload: ``cluster_name``, ``current_count``.
    """
    params = state.params
    cluster, group = params["cluster_name"], params["instance_group_name"]
    error = api_error_step(response, f"HyperPod cluster {cluster}", "DescribeCluster")
    if error is not None:
        return Step(error.outcome, error.reason, {"cluster_name": cluster, "current_count": None, **error.payload})
    if params.get("target_count") is None:
        return _ready_for_update(response, state, cluster)
    target = int(params["target_count"])
    nodes = response.get(NODES_KEY)
    outcome, text = scale_state(SAGEMAKER_EXT_WAITERS, dict(response), None if nodes is None else list(nodes),
                                group, target)
    current = next((g.get("CurrentCount") for g in response.get("InstanceGroups", [])
                    if g.get("InstanceGroupName") == group), None)
    return Step(outcome, f"HyperPod {cluster}: {text}", {"cluster_name": cluster, "current_count": current})


def _ready_for_update(response: Mapping[str, Any], state: WaitState, cluster: str) -> Step:
    status = response.get("ClusterStatus")
    outcome = classify_response(str(SAGEMAKER_EXT_WAITERS), "cluster_in_service", dict(response))
    payload = {"cluster_name": cluster, "current_count": None}
    if outcome == "failure":
        return Step("failure", f"HyperPod {cluster}: cluster is {status}: "
                               f"{response.get('FailureMessage') or 'no FailureMessage'}; it cannot be updated", payload)
    if outcome == "success" and state.attempt >= 1:
        return Step("success", f"HyperPod {cluster}: InService, ready for UpdateCluster", payload)
    return Step("retry", f"HyperPod {cluster}: cluster {status}, waiting for InService before UpdateCluster", payload)


def _slurm_record(params: Mapping[str, Any], window, stopped_by_budget: bool = False) -> dict[str, Any]:
    started_at, stopped_at, elapsed = window
    return job_cost_record(job_id=params["job_id"], cluster_name=params["cluster_name"], started_at=started_at,
                           stopped_at=stopped_at, elapsed_s=elapsed, num_nodes=params.get("num_nodes"),
                           usd_per_node_hour=params.get("usd_per_node_hour"), stopped_by_budget=stopped_by_budget)


def status_query_response(result: Mapping[str, Any]) -> dict[str, Any]:
    """The :func:`slurm_job_step` response (GetCommandInvocation's fields) of a status query's short-command result
    (``{"status", "stdout", "stderr", ...}``, :func:`~sim2real.orchestration.waits.ssm.command_result`)."""
    return {"Status": result["status"], "StandardOutputContent": result.get("stdout") or "",
            "StandardErrorContent": result.get("stderr") or ""}


def slurm_job_step(response: Mapping[str, Any], state: WaitState) -> Step:
    """Decide one status query of Slurm job ``params["job_id"]`` on ``params["instance_id"]``.

    Params: ``cluster_name``, ``instance_id``, ``job_id``, ``job_name``, ``reattached``,
    ``max_failed_queries`` (consecutive failed or unknown-state queries before giving up; default
    :data:`DEFAULT_MAX_FAILED_QUERIES`), ``num_nodes``, ``cost_limit_usd``, ``usd_per_node_hour``.
    Memory: ``failed_queries``, ``first_running_at`` (epoch s), ``window`` (started, stopped, elapsed).

    :return: ``success`` (COMPLETED); ``failure`` for a state of
        :data:`~sim2real.orchestration.slurm.SLURM_FAILURE_STATES`; ``failure`` with ``reason:
        cost_limit``, ``job_cost`` and action ``scancel`` when the cost at the next poll (the poll
        interval + this query's duration + Slurm's 1 s time resolution) would be above
        ``cost_limit_usd``; ``failure`` with ``reason: status_queries_failed`` after
        ``max_failed_queries`` consecutive queries that did not end Success or found the job in
        neither sacct nor scontrol; ``retry`` otherwise. Payload: ``cluster_name``, ``job_id``,
        ``instance_id``, ``reattached``, ``state``, ``exit_code``, ``job_cost``.
    """
    params = state.params
    job_id, cluster = params["job_id"], params["cluster_name"]
    memory: dict[str, Any] = dict(state.memory)
    failed = int(memory.get("failed_queries") or 0)
    window = tuple(memory.get("window") or (None, None, None))
    limit = int(params.get("max_failed_queries") or DEFAULT_MAX_FAILED_QUERIES)
    base = {"cluster_name": cluster, "job_id": job_id, "instance_id": params["instance_id"],
            "reattached": bool(params.get("reattached"))}
    error = api_error_step(response, f"Slurm status query on {params['instance_id']}", "GetCommandInvocation")
    slurm_state, exit_code, note = str(memory.get("state") or "UNKNOWN"), str(memory.get("exit_code") or ""), ""
    if error is not None and error.outcome == "failure":
        failed += 1
        note = error.reason
    elif error is not None:
        note = error.reason  # throttled: neither a failed query nor news about the job
    elif response.get("Status") != "Success":
        failed += 1
        note = (f"status query on {params['instance_id']} ended {response.get('Status')}: "
                f"{(response.get('StandardErrorContent') or '')[-300:]}")
    else:
        stdout = response.get("StandardOutputContent", "")
        slurm_state, exit_code = parse_status_output(stdout)
        if slurm_state == "RUNNING" and memory.get("first_running_at") is None:
            memory["first_running_at"] = state.now
        ended = slurm_state in SLURM_SUCCESS_STATES | SLURM_FAILURE_STATES
        window = run_window(parse_status_times(stdout), memory.get("first_running_at"), state.now, ended=ended)
        payload = {**base, "state": slurm_state, "exit_code": exit_code, "job_cost": _slurm_record(params, window)}
        if slurm_state in SLURM_SUCCESS_STATES:
            return Step("success", f"Slurm job {job_id} {slurm_state}", payload)
        if slurm_state in SLURM_FAILURE_STATES:
            return Step("failure", f"Slurm job {job_id} {slurm_state}", payload)
        if slurm_state == "UNKNOWN":
            failed += 1
            note = "neither sacct nor scontrol knows the job"
        else:
            failed = 0
        verdict = None
        if window[2] is not None and params.get("num_nodes"):
            verdict = budget_verdict(elapsed_s=window[2], instances=int(params["num_nodes"]),
                                     usd_per_hour=params.get("usd_per_node_hour"),
                                     limit_usd=params.get("cost_limit_usd"),
                                     poll_interval_s=state.poll_interval_s + state.describe_s + TIME_RESOLUTION_SECONDS)
        if verdict is not None:
            note = verdict.describe()
            if verdict.over_budget:
                record = _slurm_record(params, (window[0], window[0] + verdict.elapsed_s, verdict.elapsed_s),
                                       stopped_by_budget=True)
                message = dict(job_id=job_id, job_name=params.get("job_name") or "?", cluster_name=cluster,
                               verdict=verdict)
                return Step("failure", cost_limit_message(**message, cancelled=True),
                            {**payload, "job_cost": record, "reason": "cost_limit"},
                            action=Action("scancel", {"job_id": job_id, "instance_id": params["instance_id"],
                                                      "commands": cancel_commands(job_id)}),
                            action_failed_reason=cost_limit_message(**message, cancelled=False,
                                                                    cancel_error="see the action error"))
    memory.update(failed_queries=failed, window=list(window), state=slurm_state, exit_code=exit_code)
    payload = {**base, "state": slurm_state, "exit_code": exit_code, "job_cost": _slurm_record(params, window)}
    if failed >= limit:
        return Step("failure", f"Slurm job {job_id} on HyperPod cluster {cluster}: {failed} status queries in a row "
                               f"failed (limit max_failed_queries={limit}); last: {note}. Check the SSM agent and "
                               "slurmctld on the head node.",
                    {**payload, "reason": "status_queries_failed"}, memory=memory)
    return Step("retry", f"Slurm job {job_id} on {cluster}: {slurm_state}" + (f" ({note})" if note else ""), payload,
                memory=memory)
