"""Triggers for SageMaker HyperPod: an instance group reaching its target count, a Slurm job ending."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from botocore.exceptions import ClientError

from sim2real.orchestration.triggers.base import AwsHookWaiterTrigger
from airflow.triggers.base import TriggerEvent
from sim2real.orchestration.budget import budget_verdict
from sim2real.orchestration.hooks.hyperpod import HyperPodHook, scale_state
from sim2real.orchestration.hooks.workstation import SSM_FAILURE_STATES, SSM_SUCCESS_STATES, WorkstationHook
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
    status_commands,
)


class HyperPodScaleTrigger(AwsHookWaiterTrigger):
    """Poll DescribeCluster + ListClusterNodes until :func:`~sim2real.orchestration.hooks.hyperpod.scale_state` decides.

    :param cluster_name: the HyperPod cluster.
    :param instance_group_name: the scaled group.
    :param target_count: its target instance count.
    :param waiter_delay: seconds between polls.
    :param waiter_max_attempts: polls before a ``timeout`` event.

    Events: ``{"status": "success" | "failure" | "timeout", "cluster_name", "message", "current_count"}``.
    """

    aws_hook_class = HyperPodHook

    def __init__(
        self,
        *,
        cluster_name: str,
        instance_group_name: str,
        target_count: int,
        waiter_delay: int = 60,
        waiter_max_attempts: int = 120,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict | None = None,
    ) -> None:
        super().__init__(
            serialized_fields={
                "cluster_name": cluster_name,
                "instance_group_name": instance_group_name,
                "target_count": target_count,
            },
            waiter_name="cluster_in_service",
            waiter_args={"ClusterName": cluster_name},
            failure_message="HyperPod cluster update failed",
            status_message="HyperPod cluster status",
            status_queries=["ClusterStatus"],
            return_key="cluster_name",
            return_value=cluster_name,
            waiter_delay=waiter_delay,
            waiter_max_attempts=waiter_max_attempts,
            aws_conn_id=aws_conn_id,
            region_name=region_name,
            verify=verify,
            botocore_config=botocore_config,
        )
        self.cluster_name = cluster_name
        self.instance_group_name = instance_group_name
        self.target_count = target_count

    async def _nodes(self, client) -> list[dict[str, Any]]:
        nodes: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"ClusterName": self.cluster_name, "InstanceGroupNameContains": self.instance_group_name}
        while True:
            page = await client.list_cluster_nodes(**kwargs)
            nodes += [n for n in page.get("ClusterNodeSummaries", []) if n.get("InstanceGroupName") == self.instance_group_name]
            if not page.get("NextToken"):
                return nodes
            kwargs["NextToken"] = page["NextToken"]

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self.hook()
        text = ""
        current = None
        async with await hook.get_async_conn() as client:
            for attempt in range(self.attempts):
                if attempt:
                    await asyncio.sleep(self.waiter_delay)
                describe = await client.describe_cluster(ClusterName=self.cluster_name)
                nodes = await self._nodes(client) if describe.get("ClusterStatus") == "InService" else None
                outcome, text = scale_state(hook.waiter_path, describe, nodes, self.instance_group_name, self.target_count)
                current = next(
                    (g.get("CurrentCount") for g in describe.get("InstanceGroups", [])
                     if g.get("InstanceGroupName") == self.instance_group_name),
                    None,
                )
                if outcome != "retry":
                    yield TriggerEvent({"status": outcome, "cluster_name": self.cluster_name, "message": text, "current_count": current})
                    return
                self.log.info("HyperPod %s: %s", self.cluster_name, text)
        yield TriggerEvent({"status": "timeout", "cluster_name": self.cluster_name, "message": text, "current_count": current})


class HyperPodSlurmJobTrigger(AwsHookWaiterTrigger):
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
        job unknown to both sacct and scontrol) before an ``error`` event.
    :param job_name: the Slurm job name (messages).
    :param num_nodes: nodes the job is billed for (the instance group's target count); None = no cost.
    :param cost_limit_usd: USD the job may spend; None = no cost check.
    :param usd_per_node_hour: on-demand USD per node-hour; None = no cost check and no cost figure.

    ``on_kill`` (the deferred task killed, Airflow 3.3+) always runs ``scancel``: a job nobody waits
    for would keep the GPU nodes busy.

    Events: ``{"status": "success" | "failure" | "timeout" | "error", "cluster_name", "job_id",
    "instance_id", "reattached", "state", "exit_code", "message", "job_cost"}`` (self-contained: the
    resumed task needs nothing else; ``job_cost`` has ``started_at``/``stopped_at`` epoch seconds and
    ``cost_usd``); ``failure`` for any state of :data:`~sim2real.orchestration.slurm.SLURM_FAILURE_STATES`, and with
    ``"reason": "cost_limit"`` for a job stopped at its cost limit.
    """

    aws_hook_class = WorkstationHook

    def __init__(
        self,
        *,
        cluster_name: str,
        instance_id: str,
        job_id: str,
        waiter_delay: int = 30,
        waiter_max_attempts: int = 1440,
        max_failed_queries: int = 10,
        reattached: bool = False,
        job_name: str = "",
        num_nodes: int | None = None,
        cost_limit_usd: float | None = None,
        usd_per_node_hour: float | None = None,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict | None = None,
    ) -> None:
        super().__init__(
            serialized_fields={
                "cluster_name": cluster_name,
                "instance_id": instance_id,
                "job_id": job_id,
                "max_failed_queries": max_failed_queries,
                "reattached": reattached,
                "job_name": job_name,
                "num_nodes": num_nodes,
                "cost_limit_usd": cost_limit_usd,
                "usd_per_node_hour": usd_per_node_hour,
            },
            waiter_name="command_executed",
            waiter_args={},
            failure_message=f"Slurm job {job_id} failed",
            status_message=f"Slurm job {job_id} state",
            status_queries=["Status"],
            return_key="job_id",
            return_value=job_id,
            waiter_delay=waiter_delay,
            waiter_max_attempts=waiter_max_attempts,
            aws_conn_id=aws_conn_id,
            region_name=region_name,
            verify=verify,
            botocore_config=botocore_config,
        )
        self.cluster_name = cluster_name
        self.instance_id = instance_id
        self.job_id = job_id
        self.max_failed_queries = max_failed_queries
        self.reattached = reattached
        self.job_name = job_name
        self.num_nodes = num_nodes
        self.cost_limit_usd = cost_limit_usd
        self.usd_per_node_hour = usd_per_node_hour

    async def _run_script(self, client, commands: list[str]) -> dict[str, Any]:
        """Send ``commands`` and wait for the invocation (1 s polls, up to 5 min)."""
        response = await client.send_command(
            DocumentName="AWS-RunShellScript",
            InstanceIds=[self.instance_id],
            Parameters={"commands": commands, "executionTimeout": ["120"]},
            Comment=f"sim2real slurm job {self.job_id}"[:100],
        )
        command_id = response["Command"]["CommandId"]
        for _ in range(300):
            await asyncio.sleep(1)
            try:
                inv = await client.get_command_invocation(CommandId=command_id, InstanceId=self.instance_id)
            except ClientError as error:
                if error.response["Error"]["Code"] == "InvocationDoesNotExist":
                    continue
                raise
            if inv.get("Status") in SSM_SUCCESS_STATES or inv.get("Status") in SSM_FAILURE_STATES - {"Cancelling"}:
                return inv
        return {"Status": "TimedOut", "StandardOutputContent": "", "StandardErrorContent": "no answer in 300 s"}

    def _event(self, status: str, state: str, exit_code: str, message: str,
               job_cost: dict[str, Any] | None = None, **extra: Any) -> TriggerEvent:
        return TriggerEvent({"status": status, "cluster_name": self.cluster_name, "job_id": self.job_id,
                             "instance_id": self.instance_id, "reattached": self.reattached,
                             "state": state, "exit_code": exit_code, "message": message,
                             "job_cost": job_cost, **extra})

    def _record(self, window: tuple[float | None, float | None, float | None], **kwargs: Any) -> dict[str, Any]:
        started_at, stopped_at, elapsed = window
        return job_cost_record(job_id=self.job_id, cluster_name=self.cluster_name, started_at=started_at,
                               stopped_at=stopped_at, elapsed_s=elapsed, num_nodes=self.num_nodes,
                               usd_per_node_hour=self.usd_per_node_hour, **kwargs)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        failed_queries = 0
        state, exit_code, note = "UNKNOWN", "", ""
        first_running_at: float | None = None
        window: tuple[float | None, float | None, float | None] = (None, None, None)
        async with await self.hook().get_async_conn() as client:
            for attempt in range(self.attempts):
                if attempt:
                    await asyncio.sleep(self.waiter_delay)
                asked = time.monotonic()
                inv = await self._run_script(client, status_commands(self.job_id))
                query_s = time.monotonic() - asked
                if inv.get("Status") != "Success":
                    failed_queries += 1
                    note = (f"status query on {self.instance_id} ended {inv.get('Status')}: "
                            f"{(inv.get('StandardErrorContent') or '')[-300:]}")
                else:
                    stdout = inv.get("StandardOutputContent", "")
                    state, exit_code = parse_status_output(stdout)
                    now = time.time()
                    if state == "RUNNING" and first_running_at is None:
                        first_running_at = now
                    window = run_window(parse_status_times(stdout), first_running_at, now,
                                        ended=state in SLURM_SUCCESS_STATES | SLURM_FAILURE_STATES)
                    if state in SLURM_SUCCESS_STATES:
                        yield self._event("success", state, exit_code, f"Slurm job {self.job_id} {state}",
                                          self._record(window))
                        return
                    if state in SLURM_FAILURE_STATES:
                        yield self._event("failure", state, exit_code, f"Slurm job {self.job_id} {state}",
                                          self._record(window))
                        return
                    if state == "UNKNOWN":
                        failed_queries += 1
                        note = "neither sacct nor scontrol knows the job"
                    else:
                        failed_queries = 0
                        note = ""
                    verdict = None
                    if window[2] is not None and self.num_nodes:
                        verdict = budget_verdict(elapsed_s=window[2], instances=int(self.num_nodes),
                                                 usd_per_hour=self.usd_per_node_hour, limit_usd=self.cost_limit_usd,
                                                 poll_interval_s=self._next_poll_s(query_s))
                    if verdict is not None:
                        note = verdict.describe()
                    if verdict is not None and verdict.over_budget:
                        cancel_error = await self._scancel(client)
                        record = self._record((window[0], window[0] + verdict.elapsed_s, verdict.elapsed_s),
                                              stopped_by_budget=True)
                        yield self._event(
                            "failure", state, exit_code,
                            cost_limit_message(job_id=self.job_id, job_name=self.job_name or "?",
                                               cluster_name=self.cluster_name, verdict=verdict,
                                               cancelled=not cancel_error, cancel_error=cancel_error),
                            record, reason="cost_limit")
                        return
                if failed_queries >= self.max_failed_queries:
                    yield self._event("error", state, exit_code,
                                      f"{failed_queries} status queries in a row failed; last: {note}")
                    return
                self.log.info("Slurm job %s on %s: %s%s", self.job_id, self.cluster_name, state,
                              f" ({note})" if note else "")
        yield self._event("timeout", state, exit_code,
                          f"still {state} after {self.attempts} polls {self.waiter_delay} s apart",
                          self._record(window))

    def _next_poll_s(self, query_s: float) -> float:
        """Seconds until the next poll sees the job: the delay, a status query as long as this one, and
        Slurm's time resolution (the cost check judges the job's cost then)."""
        return float(self.waiter_delay) + query_s + TIME_RESOLUTION_SECONDS

    async def _scancel(self, client) -> str:
        """``scancel`` the job and wait for the command; "" on success, else what went wrong."""
        try:
            inv = await self._run_script(client, cancel_commands(self.job_id))
        except Exception as error:  # noqa: BLE001 - the cost-limit event must still be sent
            return str(error)
        if inv.get("Status") != "Success":
            return f"{inv.get('Status')}: {(inv.get('StandardErrorContent') or '')[-300:]}"
        return ""

    async def on_kill(self) -> None:
        """``scancel`` the job on the submit host when the deferred task is killed (Airflow 3.3+)."""
        self.log.info("Cancelling Slurm job %s on %s (scancel via SSM on %s)", self.job_id, self.cluster_name,
                      self.instance_id)
        async with await self.hook().get_async_conn() as client:
            await client.send_command(
                DocumentName="AWS-RunShellScript", InstanceIds=[self.instance_id],
                Parameters={"commands": cancel_commands(self.job_id), "executionTimeout": ["60"]},
                Comment=f"sim2real scancel {self.job_id}"[:100],
            )
