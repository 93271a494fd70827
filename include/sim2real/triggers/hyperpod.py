"""Trigger waiting until a HyperPod instance group reached its target count, all nodes Running."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.providers.amazon.aws.triggers.base import AwsBaseWaiterTrigger
from airflow.triggers.base import TriggerEvent
from sim2real.hooks.hyperpod import HyperPodHook, scale_state


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
