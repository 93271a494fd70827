"""Triggers for SageMaker HyperPod: an instance group reaching its target count, a Slurm job ending."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from botocore.exceptions import ClientError

from airflow.providers.amazon.aws.triggers.base import AwsBaseWaiterTrigger
from airflow.triggers.base import TriggerEvent
from sim2real.hooks.hyperpod import HyperPodHook, scale_state
from sim2real.hooks.workstation import SSM_FAILURE_STATES, SSM_SUCCESS_STATES, WorkstationHook
from sim2real.slurm import (
    SLURM_FAILURE_STATES,
    SLURM_SUCCESS_STATES,
    cancel_commands,
    parse_status_output,
    status_commands,
)


class HyperPodScaleTrigger(AwsBaseWaiterTrigger):
    """Poll DescribeCluster + ListClusterNodes until :func:`~sim2real.hooks.hyperpod.scale_state` decides.

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
                    (g.get("CurrentCount") for g in describe.get("InstanceGroups", []) if g.get("InstanceGroupName") == self.instance_group_name),
                    None,
                )
                if outcome != "retry":
                    yield TriggerEvent({"status": outcome, "cluster_name": self.cluster_name, "message": text, "current_count": current})
                    return
                self.log.info("HyperPod %s: %s", self.cluster_name, text)
        yield TriggerEvent({"status": "timeout", "cluster_name": self.cluster_name, "message": text, "current_count": current})


class HyperPodSlurmJobTrigger(AwsBaseWaiterTrigger):
    """Poll a Slurm job's state through SSM Run Command on the cluster's head/login node.

    Each poll sends :func:`sim2real.slurm.status_commands` (``sacct``, else ``scontrol show job``) with
    ``AWS-RunShellScript`` to ``instance_id``, waits for that short command and parses its output.

    :param cluster_name: the HyperPod cluster (for messages).
    :param instance_id: the submit host (head/login node, SSM-managed).
    :param job_id: the Slurm job id.
    :param waiter_delay: seconds between polls.
    :param waiter_max_attempts: polls before a ``timeout`` event.
    :param max_failed_queries: consecutive status queries that fail (SSM command not Success, or the
        job unknown to both sacct and scontrol) before an ``error`` event.

    ``on_kill`` (the deferred task killed, Airflow 3.3+) always runs ``scancel``: a job nobody waits
    for would keep the GPU nodes busy.

    Events: ``{"status": "success" | "failure" | "timeout" | "error", "cluster_name", "job_id",
    "instance_id", "reattached", "state", "exit_code", "message"}`` (self-contained: the resumed task
    needs nothing else); ``failure`` for any state of
    :data:`~sim2real.slurm.SLURM_FAILURE_STATES`.
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

    def _event(self, status: str, state: str, exit_code: str, message: str) -> TriggerEvent:
        return TriggerEvent({"status": status, "cluster_name": self.cluster_name, "job_id": self.job_id,
                             "instance_id": self.instance_id, "reattached": self.reattached,
                             "state": state, "exit_code": exit_code, "message": message})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        failed_queries = 0
        state, exit_code, note = "UNKNOWN", "", ""
        async with await self.hook().get_async_conn() as client:
            for attempt in range(self.attempts):
                if attempt:
                    await asyncio.sleep(self.waiter_delay)
                inv = await self._run_script(client, status_commands(self.job_id))
                if inv.get("Status") != "Success":
                    failed_queries += 1
                    note = (f"status query on {self.instance_id} ended {inv.get('Status')}: "
                            f"{(inv.get('StandardErrorContent') or '')[-300:]}")
                else:
                    state, exit_code = parse_status_output(inv.get("StandardOutputContent", ""))
                    if state in SLURM_SUCCESS_STATES:
                        yield self._event("success", state, exit_code, f"Slurm job {self.job_id} {state}")
                        return
                    if state in SLURM_FAILURE_STATES:
                        yield self._event("failure", state, exit_code, f"Slurm job {self.job_id} {state}")
                        return
                    if state == "UNKNOWN":
                        failed_queries += 1
                        note = "neither sacct nor scontrol knows the job"
                    else:
                        failed_queries = 0
                        note = ""
                if failed_queries >= self.max_failed_queries:
                    yield self._event("error", state, exit_code,
                                      f"{failed_queries} status queries in a row failed; last: {note}")
                    return
                self.log.info("Slurm job %s on %s: %s%s", self.job_id, self.cluster_name, state,
                              f" ({note})" if note else "")
        yield self._event("timeout", state, exit_code,
                          f"still {state} after {self.attempts} polls {self.waiter_delay} s apart")

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
