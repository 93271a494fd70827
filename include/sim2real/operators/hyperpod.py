"""Scale one SageMaker HyperPod instance group (whole instance-group list sent to UpdateCluster).

Sources: Amazon SageMaker API Reference — DescribeCluster, UpdateCluster ("instance groups not
listed are deleted" semantics: the request carries the full list), ListClusterNodes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.utils import validate_execute_complete_event
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.common.compat.sdk import AirflowException, conf
from sim2real.hooks.hyperpod import HyperPodHook, instance_group_specs, scale_state
from sim2real.links.sagemaker import HyperPodClusterLink
from sim2real.triggers.hyperpod import HyperPodScaleTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context


class HyperPodScaleOperator(AwsBaseOperator[HyperPodHook]):
    """Set ``instance_group_name``'s instance count to ``target_count`` and wait for the nodes.

    DescribeCluster → UpdateCluster with EVERY instance group (each spec copied from the
    describe output, only the target group's ``InstanceCount`` changed; skipped when the group
    already targets ``target_count``) → wait until the cluster is InService, the group's
    CurrentCount == target_count and that many of its nodes are Running (ListClusterNodes).
    Cluster Failed/RollingBack/Deleting fails the task.

    :param cluster_name: HyperPod cluster name or ARN.
    :param instance_group_name: the group to scale.
    :param target_count: wanted instance count (>= 0).
    :param wait_for_completion: wait for the nodes (default True).
    :param waiter_delay: seconds between polls (default 60).
    :param waiter_max_attempts: polls before failing (default 120).
    :param deferrable: wait in the triggerer (default ``[operators] default_deferrable``, True).
    :return: ``{"cluster_name", "cluster_arn", "instance_group_name", "previous_count",
        "target_count", "current_count", "updated": bool}``.
    :raises ValueError: negative/non-integer count, unknown group (message lists the groups).
    :raises AirflowException: the cluster failed or the nodes did not come up in time.
    """

    aws_hook_class = HyperPodHook
    template_fields: Sequence[str] = aws_template_fields("cluster_name", "instance_group_name", "target_count")
    operator_extra_links = (HyperPodClusterLink(),)

    def __init__(
        self,
        *,
        cluster_name: str,
        instance_group_name: str,
        target_count: int,
        wait_for_completion: bool = True,
        waiter_delay: int = 60,
        waiter_max_attempts: int = 120,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=True),
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.cluster_name = cluster_name
        self.instance_group_name = instance_group_name
        self.target_count = target_count
        self.wait_for_completion = wait_for_completion
        self.waiter_delay = waiter_delay
        self.waiter_max_attempts = waiter_max_attempts
        self.deferrable = deferrable

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            target = int(self.target_count)
        except (TypeError, ValueError):
            raise ValueError(f"target_count must be an integer, got {self.target_count!r}") from None
        if target < 0:
            raise ValueError(f"target_count must be >= 0, got {target}")
        describe = self.hook.conn.describe_cluster(ClusterName=self.cluster_name)
        specs, previous = instance_group_specs(self.hook.conn, describe, self.instance_group_name, target)
        name = describe.get("ClusterName", self.cluster_name)
        updated = previous != target
        if updated:
            self.log.info(
                "UpdateCluster %s: group %s %s -> %s (sending all %d groups)",
                name, self.instance_group_name, previous, target, len(specs),
            )
            self.hook.conn.update_cluster(ClusterName=self.cluster_name, InstanceGroups=specs)
        else:
            self.log.info("Group %s of %s already targets %s instances", self.instance_group_name, name, target)
        HyperPodClusterLink.persist(
            context=context, operator=self, region_name=self.hook.conn_region_name,
            aws_partition=self.hook.conn_partition, cluster_name=name,
        )
        result = {
            "cluster_name": name,
            "cluster_arn": describe.get("ClusterArn"),
            "instance_group_name": self.instance_group_name,
            "previous_count": previous,
            "target_count": target,
            "current_count": None,
            "updated": updated,
        }
        if not self.wait_for_completion:
            return result
        if self.deferrable:
            self.defer(
                trigger=HyperPodScaleTrigger(
                    cluster_name=self.cluster_name,
                    instance_group_name=self.instance_group_name,
                    target_count=target,
                    waiter_delay=self.waiter_delay,
                    waiter_max_attempts=self.waiter_max_attempts,
                    aws_conn_id=self.aws_conn_id,
                    region_name=self.region_name,
                    verify=self.verify,
                    botocore_config=self.botocore_config,
                ),
                method_name="execute_complete",
                kwargs={"result": result},
                timeout=timedelta(seconds=self.waiter_delay * self.waiter_max_attempts + 120),
            )
        text = ""
        for attempt in range(self.waiter_max_attempts):
            if attempt:
                time.sleep(self.waiter_delay)
            describe = self.hook.conn.describe_cluster(ClusterName=self.cluster_name)
            nodes = (
                self.hook.list_group_nodes(self.cluster_name, self.instance_group_name)
                if describe.get("ClusterStatus") == "InService"
                else None
            )
            outcome, text = scale_state(self.hook.waiter_path, describe, nodes, self.instance_group_name, target)
            if outcome == "success":
                return {**result, "current_count": target}
            if outcome == "failure":
                raise AirflowException(self._failure(text))
            self.log.info("HyperPod %s: %s", name, text)
        raise AirflowException(self._failure(f"timed out after {self.waiter_max_attempts} polls; {text}"))

    def _failure(self, text: str) -> str:
        return (
            f"Scaling HyperPod cluster {self.cluster_name} group {self.instance_group_name} to "
            f"{self.target_count} failed: {text}. Check DescribeCluster/ListClusterNodes and the "
            "cluster's CloudWatch logs (/aws/sagemaker/Clusters/...); capacity or quota may be short."
        )

    def execute_complete(
        self, context: Context, event: dict[str, Any] | None = None, result: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Resume after the trigger."""
        event = validate_execute_complete_event(event)
        if event["status"] != "success":
            raise AirflowException(self._failure(event.get("message", str(event))))
        return {**(result or {}), "current_count": event.get("current_count")}
