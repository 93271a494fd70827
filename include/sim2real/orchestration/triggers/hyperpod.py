"""Triggers for SageMaker HyperPod: an instance group reaching its target count, a Slurm job ending."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim2real.orchestration.events import envelope
from sim2real.orchestration.events.consumer import WaitEvent
from sim2real.orchestration.hooks.hyperpod import HyperPodHook, group_nodes, list_nodes_request
from sim2real.orchestration.hooks.workstation import WorkstationHook, shell_script_request
from sim2real.orchestration.slurm import cancel_commands, status_commands
from sim2real.orchestration.triggers.base import REQUIRED, StepWaitTrigger
from sim2real.orchestration.waits.core import Action, WaitState
from sim2real.orchestration.waits.hyperpod import (
    DEFAULT_MAX_FAILED_QUERIES,
    NODES_KEY,
    hyperpod_scale_step,
    slurm_job_step,
    status_query_response,
)
from sim2real.orchestration.waits.ssm import run_short_command_async


class HyperPodScaleTrigger(StepWaitTrigger):
    """Poll DescribeCluster + ListClusterNodes until :func:`~sim2real.orchestration.hooks.hyperpod.scale_state` decides.

    :param cluster_name: the HyperPod cluster.
    :param instance_group_name: the scaled group.
    :param target_count: its target instance count; None: wait until the cluster is InService again, ready for
        an UpdateCluster (after the task found it Updating or got ConflictException; no node listing).
    :param waiter_delay: seconds between polls.
    :param waiter_max_attempts: polls before a ``timeout`` event.

    One event (:func:`~sim2real.orchestration.waits.hyperpod.hyperpod_scale_step`):
    ``{"status": "success" | "failure" | "timeout", "message", "cluster_name", "current_count"}``.
    """

    aws_hook_class = HyperPodHook

    fields = {"cluster_name": REQUIRED, "instance_group_name": REQUIRED, "target_count": REQUIRED}
    default_waiter_delay, default_waiter_max_attempts = 60, 120

    async def _nodes(self, client) -> list[dict[str, Any]]:
        """The group's nodes: ListClusterNodes through the client's paginator (as the hook's
        :meth:`~sim2real.orchestration.hooks.hyperpod.HyperPodHook.list_group_nodes`)."""
        pages = client.get_paginator("list_cluster_nodes").paginate(
            **list_nodes_request(self.cluster_name, self.instance_group_name))
        return [node async for page in pages for node in group_nodes(page, self.instance_group_name)]

    step_function = staticmethod(hyperpod_scale_step)

    def max_event_wait(self, state: WaitState, last_response: Mapping[str, Any] | None) -> float | None:
        """Waiting for InService before an UpdateCluster (no count): a fresh describe every ``waiter_delay``, since a
        cluster that was already InService when the wait began announces no state change."""
        return float(self.waiter_delay) if self.target_count is None else None

    def event_keys(self) -> list[envelope.ResourceKey]:
        """``SageMaker HyperPod Cluster State Change`` / ``Cluster Node Health Event`` events of the cluster."""
        return [envelope.hyperpod_cluster(self.cluster_name)]

    async def event_response(self, client, state: WaitState, event: WaitEvent) -> dict[str, Any]:
        """A cluster or node event says something changed; the step needs the group's nodes, which neither
        event lists, so the event is answered with :meth:`describe` (DescribeCluster + ListClusterNodes)."""
        return await self.describe(client, state)

    async def describe(self, client, state: WaitState) -> dict[str, Any]:
        """DescribeCluster, plus the group's nodes (ListClusterNodes) once the cluster is InService (when waiting
        for a count)."""
        describe = await client.describe_cluster(ClusterName=self.cluster_name)
        if describe.get("ClusterStatus") == "InService" and self.target_count is not None:
            describe = {**describe, NODES_KEY: await self._nodes(client)}
        return describe


class HyperPodSlurmJobTrigger(StepWaitTrigger):
    """Poll a Slurm job's state through SSM Run Command on the cluster's head/login node.

    Each poll sends :func:`sim2real.orchestration.slurm.status_commands` (``sacct``, else ``scontrol show job``) with
    ``AWS-RunShellScript`` to ``instance_id``, waits for that short command and parses its output.

    Cost limit: while the job runs, its cost is ``num_nodes`` x ``usd_per_node_hour`` x the time since
    its Slurm ``Start`` (else since this trigger first saw it RUNNING; :func:`sim2real.orchestration.slurm.run_window`).
    When ``cost_limit_usd``, ``usd_per_node_hour`` and ``num_nodes`` are all set and the cost at the next
    poll (``waiter_delay`` + the last status query's duration + 1 s of Slurm time resolution) would be
    above ``cost_limit_usd`` (:func:`sim2real.orchestration.budget.budget_verdict`), the trigger runs
    ``scancel`` and yields ``{"status": "failure", "reason": "cost_limit", "message", "job_cost": {...},
    ...}`` (``job_cost``: :func:`sim2real.orchestration.slurm.job_cost_record`).

    :param cluster_name: the HyperPod cluster (for messages).
    :param instance_id: the submit host (head/login node, SSM-managed).
    :param job_id: the Slurm job id.
    :param waiter_delay: seconds between polls.
    :param waiter_max_attempts: polls before a ``timeout`` event.
    :param max_failed_queries: consecutive status queries that fail (SSM command not Success, or the
        job unknown to both sacct and scontrol) before a ``failure`` event with ``"reason":
        "status_queries_failed"``.
    :param job_name: the Slurm job name (messages).
    :param num_nodes: nodes the job is billed for (the instance group's target count); None = no cost.
    :param cost_limit_usd: USD the job may spend; None = no cost check.
    :param usd_per_node_hour: on-demand USD per node-hour; None = no cost check and no cost figure.

    ``on_kill`` (the deferred task stopped by a person, Airflow 3.3+) always runs ``scancel`` (no flag turns it
    off): a job nobody waits for would keep the GPU nodes busy. A hand-over to another triggerer stops nothing
    (:meth:`StepWaitTrigger.on_kill`).

    One event (:func:`~sim2real.orchestration.waits.hyperpod.slurm_job_step`):
    ``{"status": "success" | "failure" | "timeout", "cluster_name", "job_id",
    "instance_id", "reattached", "state", "exit_code", "message", "job_cost"}`` (self-contained: the
    resumed task needs nothing else; ``job_cost`` has ``started_at``/``stopped_at`` epoch seconds and
    ``cost_usd``); ``failure`` for any state of :data:`~sim2real.orchestration.slurm.SLURM_FAILURE_STATES`, and with
    ``"reason": "cost_limit"`` for a job stopped at its cost limit.
    """

    aws_hook_class = WorkstationHook

    fields = {"cluster_name": REQUIRED, "instance_id": REQUIRED, "job_id": REQUIRED,
              "max_failed_queries": DEFAULT_MAX_FAILED_QUERIES, "reattached": False, "job_name": "", "num_nodes": None,
              "cost_limit_usd": None, "usd_per_node_hour": None}
    default_waiter_delay, default_waiter_max_attempts = 30, 1440

    async def _run_script(self, client, commands: list[str]) -> dict[str, Any]:
        """Send ``commands`` and wait for them (:func:`~sim2real.orchestration.waits.ssm.run_short_command_async`:
        1 s polls, ``executionTimeout`` 120 s, up to 5 min in all); the result as the status query's response
        (:func:`~sim2real.orchestration.waits.hyperpod.status_query_response`). A command with no end by then
        (cancelled) answers ``TimedOut`` with the reason as its stderr."""
        try:
            result = await run_short_command_async(client, self.instance_id, commands, execution_timeout_seconds=120,
                                                   grace_seconds=180, comment=f"sim2real slurm job {self.job_id}")
        except TimeoutError as error:
            return {"Status": "TimedOut", "StandardOutputContent": "", "StandardErrorContent": str(error)}
        return status_query_response(result)

    step_function = staticmethod(slurm_job_step)

    async def describe(self, client, state: WaitState) -> dict[str, Any]:
        """One status query (``sacct``, else ``scontrol``) through SSM: its GetCommandInvocation."""
        return await self._run_script(client, status_commands(self.job_id))

    async def perform(self, client, action: Action) -> str:
        """``scancel``: run the cancel commands on the submit host and wait for them."""
        if action.name != "scancel":
            raise ValueError(f"unknown action {action.name}")
        error = await self._scancel(client)
        if error:
            raise RuntimeError(error)
        return ""

    async def _scancel(self, client) -> str:
        """``scancel`` the job and wait for the command; "" on success, else what went wrong."""
        try:
            inv = await self._run_script(client, cancel_commands(self.job_id))
        except Exception as error:  # noqa: BLE001 - reported in the event
            return str(error)
        if inv.get("Status") != "Success":
            return f"{inv.get('Status')}: {(inv.get('StandardErrorContent') or '')[-300:]}"
        return ""

    async def stop_resource(self) -> None:
        """``scancel`` the job on the submit host: a person stopped the deferred task (base ``on_kill``)."""
        self.log.info("Cancelling Slurm job %s on %s (scancel via SSM on %s)", self.job_id, self.cluster_name,
                      self.instance_id)
        async with await self.hook().get_async_conn() as client:
            await client.send_command(**shell_script_request(self.instance_id, cancel_commands(self.job_id), 60,
                                                             f"sim2real scancel {self.job_id}"))
