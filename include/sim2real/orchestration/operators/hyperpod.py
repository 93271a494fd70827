"""SageMaker HyperPod: scale one instance group (the Slurm job on its nodes: :mod:`.hyperpod_slurm`).

Sources: Amazon SageMaker API Reference — DescribeCluster, UpdateCluster ("instance groups not
listed are deleted" semantics: the request carries the full list), ListClusterNodes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.common.compat.sdk import AirflowException, AirflowSkipException

from sim2real.orchestration.hooks.hyperpod import HyperPodHook, instance_group_specs
from sim2real.orchestration.links.sagemaker import HyperPodClusterLink
from sim2real.orchestration.triggers.base import defer_wait
from sim2real.orchestration.triggers.hyperpod import HyperPodScaleTrigger
from sim2real.orchestration.waits.core import WaitState, event_outcome
from sim2real.orchestration.waits.hyperpod import NODES_KEY, hyperpod_scale_step

if TYPE_CHECKING:
    from airflow.sdk import Context


#: ClusterStatus values in which UpdateCluster can never succeed (DescribeCluster, API reference).
CLUSTER_FAILED_STATES = frozenset({"Failed", "RollingBack", "Deleting"})


#: XCom key of a scale try's deadline for getting an UpdateCluster through (epoch s; shared by its deferrals).
XCOM_UPDATE_DEADLINE = "update_deadline"


class HyperPodScaleOperator(AwsBaseOperator[HyperPodHook]):
    """Set ``instance_group_name``'s instance count to ``target_count`` and wait for the nodes.

    DescribeCluster (a cluster still Creating / Updating / SystemUpdating, or an UpdateCluster answered
    ConflictException, is waited out deferred: the triggerer polls every ``waiter_delay`` until InService, then the
    task tries again; no worker slot is held) → UpdateCluster
    with EVERY instance group (each spec copied from the
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
    :param only_after_task_id: scale only if that task of the run handed on a result (the scale-up a
        scale-down undoes); otherwise skip without any AWS call, so a teardown never resizes a cluster
        its run did not scale (e.g. a run on the other training backend).
    :return: ``{"cluster_name", "cluster_arn", "instance_group_name", "previous_count",
        "target_count", "current_count", "updated": bool}``.
    :raises ValueError: negative/non-integer count, unknown group (message lists the groups).
    :raises AirflowException: the cluster failed or is being deleted, it was not InService for an update
        within ``waiter_delay`` × ``waiter_max_attempts`` seconds, or the nodes did not come up in time.
    """

    #: Always True: the wait runs in the triggerer (there is no blocking mode); read by the DAG checks.
    deferrable = True

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
        only_after_task_id: str | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.cluster_name = cluster_name
        self.instance_group_name = instance_group_name
        self.target_count = target_count
        self.wait_for_completion = wait_for_completion
        self.only_after_task_id = only_after_task_id
        self.waiter_delay = waiter_delay
        self.waiter_max_attempts = waiter_max_attempts

    def execute(self, context: Context) -> dict[str, Any]:
        """Scale the group (see the class)."""
        if self.only_after_task_id and context["ti"].xcom_pull(task_ids=self.only_after_task_id) is None:
            # The cluster link's key is still written (links are rendered for a skipped task too; a missing
            # key is logged as an error-level XCom 404). Reading the region reads no AWS API.
            HyperPodClusterLink.persist(context=context, operator=self,
                                        region_name=self.region_name or self.hook.conn_region_name,
                                        aws_partition="aws", cluster_name=self.cluster_name)
            raise AirflowSkipException(
                f"{self.only_after_task_id} did not scale {self.cluster_name or 'the cluster'} in this run: "
                f"nothing to undo on group {self.instance_group_name}")
        try:
            target = int(self.target_count)
        except (TypeError, ValueError):
            raise ValueError(f"target_count must be an integer, got {self.target_count!r}") from None
        if target < 0:
            raise ValueError(f"target_count must be >= 0, got {target}")
        update = self._update(target)
        if isinstance(update, str):  # busy (Updating, or another update's ConflictException): wait deferred
            self._defer_until_in_service(context, target, update)
        describe, previous, updated = update
        name = describe.get("ClusterName", self.cluster_name)
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
        # Already at the target (or failed): settled here, no trigger that would fire at once.
        outcome, text = self._scale_state(target)
        if outcome == "success":
            self.log.info("HyperPod %s: group %s already at %s: not deferring", name, self.instance_group_name,
                          target)
            return {**result, "current_count": target}
        if outcome == "failure":
            raise AirflowException(self._failure(text))
        defer_wait(self, HyperPodScaleTrigger, method_name="execute_complete", kwargs={"result": result},
                   waiter_delay=self.waiter_delay, waiter_max_attempts=self.waiter_max_attempts,
                   cluster_name=self.cluster_name, instance_group_name=self.instance_group_name, target_count=target)

    def _scale_state(self, target: int) -> tuple[str, str]:
        """One poll of the group (``DescribeCluster`` + ``ListClusterNodes`` once InService) decided by the
        wait's step function (:func:`~sim2real.orchestration.waits.hyperpod.hyperpod_scale_step`):
        ``(outcome, text)``, outcome ``success`` / ``failure`` / ``retry``."""
        describe = self.hook.conn.describe_cluster(ClusterName=self.cluster_name)
        if describe.get("ClusterStatus") == "InService":
            describe = {**describe, NODES_KEY: self.hook.list_group_nodes(self.cluster_name, self.instance_group_name)}
        step = hyperpod_scale_step(describe, WaitState(params={
            "cluster_name": self.cluster_name, "instance_group_name": self.instance_group_name,
            "target_count": target}))
        return step.outcome, step.reason

    def _update(self, target: int) -> tuple[dict[str, Any], int, bool] | str:
        """UpdateCluster when the cluster is InService: ``(describe, previous_target, updated)``, skipped (not
        updated) when the group already targets ``target``; or, while the cluster is Creating / Updating /
        SystemUpdating or UpdateCluster answers ConflictException (another update still running), the status
        text (the caller waits for InService in the triggerer and calls again).

        :raises AirflowException: the cluster is Failed / RollingBack / Deleting.
        """
        describe = self.hook.conn.describe_cluster(ClusterName=self.cluster_name)
        specs, previous = instance_group_specs(self.hook.conn, describe, self.instance_group_name, target)
        name = describe.get("ClusterName", self.cluster_name)
        status = describe.get("ClusterStatus", "unknown")
        if previous == target:
            self.log.info("Group %s of %s already targets %s instances", self.instance_group_name, name, target)
            return describe, previous, False
        if status in CLUSTER_FAILED_STATES:
            raise AirflowException(self._failure(f"the cluster is {status}; it cannot be updated"))
        if status != "InService":
            return f"the cluster is {status}"
        self.log.info(
            "UpdateCluster %s: group %s %s -> %s (sending all %d groups)",
            name, self.instance_group_name, previous, target, len(specs),
        )
        try:
            self.hook.conn.update_cluster(ClusterName=self.cluster_name, InstanceGroups=specs)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ConflictException":
                raise
            return f"UpdateCluster answered ConflictException: {error.response['Error'].get('Message', '')}"
        return describe, previous, True

    def _defer_until_in_service(self, context: Context, target: int, status: str) -> None:
        """Defer until the cluster is InService again (:class:`HyperPodScaleTrigger` with no count), then
        :meth:`resume_update` tries the UpdateCluster again. All such waits of a try share one deadline,
        ``waiter_delay`` × ``waiter_max_attempts`` after the first (XCom :data:`XCOM_UPDATE_DEADLINE`: a try's XComs
        outlive its deferrals, which ``dag.test()``'s resume kwargs do not); past it the task fails."""
        ti = context["ti"]
        now = time.time()
        deadline = ti.xcom_pull(task_ids=ti.task_id, key=XCOM_UPDATE_DEADLINE)
        if deadline is None:
            deadline = now + max(1, int(self.waiter_delay)) * max(1, int(self.waiter_max_attempts))
            ti.xcom_push(key=XCOM_UPDATE_DEADLINE, value=deadline)
        remaining = float(deadline) - now
        if remaining <= 0:
            raise AirflowException(self._failure(
                f"the cluster was not InService for an UpdateCluster within "
                f"{int(self.waiter_delay) * int(self.waiter_max_attempts)} s (last: {status})"))
        self.log.info("HyperPod %s: %s; waiting in the triggerer for InService (polls %s s apart, %.0f s left) "
                      "before UpdateCluster of group %s to %s", self.cluster_name, status, self.waiter_delay,
                      remaining, self.instance_group_name, target)
        defer_wait(self, HyperPodScaleTrigger, method_name="resume_update", waiter_delay=self.waiter_delay,
                   waiter_max_attempts=max(1, math.ceil(remaining / max(1, int(self.waiter_delay)))),
                   cluster_name=self.cluster_name, instance_group_name=self.instance_group_name, target_count=None)

    def resume_update(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after a wait for an InService cluster: fail on the trigger's failure or timeout, else scale
        (:meth:`execute`) again."""
        status, message = event_outcome(event, f"HyperPod cluster {self.cluster_name}")
        if status != "success":
            raise AirflowException(self._failure(f"waiting for InService before UpdateCluster: {status}: {message}"))
        return self.execute(context)

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
        status, message = event_outcome(event, f"HyperPod cluster {self.cluster_name}")
        if status != "success":
            raise AirflowException(self._failure(f"{status}: {message}"))
        # The deferral kwargs are not handed back by every runner (dag.test passes only the event).
        fallback = {"cluster_name": self.cluster_name, "cluster_arn": None,
                    "instance_group_name": self.instance_group_name, "previous_count": None,
                    "target_count": int(self.target_count), "updated": None}
        return {**fallback, **(result or {}), "current_count": event.get("current_count")}
