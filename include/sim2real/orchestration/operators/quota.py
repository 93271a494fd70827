"""Refuse a GPU training run before any spend when the EC2 quota or the Batch compute
environment cannot hold it."""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook
from airflow.providers.amazon.aws.hooks.ec2 import EC2Hook
from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from sim2real.orchestration.hooks.batch import BatchTrainingHook, validated_num_nodes
from sim2real.orchestration.hooks.service_quotas import (
    CloudWatchUsageHook,
    ServiceQuotasHook,
    quota_by_code,
    quota_for_instance_type,
)

if TYPE_CHECKING:
    from airflow.sdk import Context


def quota_increase_command(service_code: str, quota_code: str, desired_value: float, region: str | None) -> str:
    """The AWS CLI command that asks for ``desired_value`` (Service Quotas ``RequestServiceQuotaIncrease``)."""
    value = int(math.ceil(desired_value))
    cmd = (
        f"aws service-quotas request-service-quota-increase --service-code {shlex.quote(service_code)} "
        f"--quota-code {shlex.quote(quota_code)} --desired-value {value}"
    )
    return cmd + (f" --region {shlex.quote(region)}" if region else "")


def summarize_compute_environment(ce: dict[str, Any] | None) -> dict[str, Any]:
    """Reduce a ``DescribeComputeEnvironments`` entry to the fields the verdict reports."""
    if not ce:
        return {}
    resources = ce.get("computeResources") or {}
    return {
        "name": ce.get("computeEnvironmentName"),
        "arn": ce.get("computeEnvironmentArn"),
        "type": ce.get("type"),
        "state": ce.get("state"),
        "status": ce.get("status"),
        "status_reason": ce.get("statusReason"),
        "max_vcpus": resources.get("maxvCpus"),
        "desired_vcpus": resources.get("desiredvCpus"),
        "instance_types": resources.get("instanceTypes"),
    }


def compute_verdict(
    *,
    instance_type: str,
    vcpu_per_node: int,
    gpus_per_node: int,
    num_nodes: int,
    service_code: str,
    quota_code: str,
    quota_name: str,
    limit_vcpu: float,
    in_use_vcpu: float,
    compute_environment: dict[str, Any] | None = None,
    compute_environment_name: str | None = None,
    region: str | None = None,
    shape_problems: list[str] | None = None,
) -> dict[str, Any]:
    """
    Decide whether ``num_nodes`` × ``instance_type`` fits (pure; no AWS calls).

    Needed vCPUs = ``num_nodes * vcpu_per_node``; available = ``limit - in use``. The compute
    environment (a ``DescribeComputeEnvironments`` entry, or None to skip) must be
    ``status == VALID``, ``state == ENABLED`` and, when MANAGED, ``maxvCpus >= needed``.
    ``shape_problems`` (:func:`sim2real.orchestration.operators.preflight.job_shape_problems`: the job definition's
    per-node GPU/VCPU/MEMORY against the instance type) are added to the problems as they are.

    :return: ``{"instance_type", "vcpu_per_node", "gpus_per_node", "num_nodes", "needed_vcpu",
        "quota_name", "quota_code", "limit_vcpu", "in_use_vcpu", "available_vcpu",
        "compute_environment": {...}, "ok": bool, "problems": [str], "request_command": str | None}``.
        ``request_command`` is the exact ``aws service-quotas request-service-quota-increase`` command
        asking for ``in use + needed`` when the quota is short.
    """
    needed = int(num_nodes) * int(vcpu_per_node)
    available = float(limit_vcpu) - float(in_use_vcpu)
    problems: list[str] = list(shape_problems or [])
    command = None
    if available < needed:
        command = quota_increase_command(service_code, quota_code, float(in_use_vcpu) + needed, region)
        problems.append(
            f"EC2 quota {quota_name!r} ({quota_code}) is {limit_vcpu:g} vCPU with {in_use_vcpu:g} in use "
            f"({available:g} available) but {num_nodes} x {instance_type} needs {needed} vCPU. "
            f"Request more with: {command}"
        )
    ce = summarize_compute_environment(compute_environment)
    if compute_environment_name and not compute_environment:
        problems.append(f"Batch compute environment {compute_environment_name!r} not found")
    if ce:
        if ce.get("status") != "VALID" or ce.get("state") != "ENABLED":
            problems.append(
                f"Batch compute environment {ce['name']!r} is status={ce.get('status')} state={ce.get('state')} "
                f"(reason: {ce.get('status_reason')}); it must be VALID and ENABLED "
                f"(aws batch update-compute-environment --compute-environment {ce['name']} --state ENABLED)"
            )
        if ce.get("type") != "UNMANAGED" and ce.get("max_vcpus") is not None and ce["max_vcpus"] < needed:
            problems.append(
                f"Batch compute environment {ce['name']!r} has maxvCpus={ce['max_vcpus']} < {needed} vCPU needed "
                f"(aws batch update-compute-environment --compute-environment {ce['name']} "
                f"--compute-resources maxvCpus={needed})"
            )
    return {
        "instance_type": instance_type,
        "vcpu_per_node": int(vcpu_per_node),
        "gpus_per_node": int(gpus_per_node),
        "num_nodes": int(num_nodes),
        "needed_vcpu": needed,
        "quota_name": quota_name,
        "quota_code": quota_code,
        "limit_vcpu": float(limit_vcpu),
        "in_use_vcpu": float(in_use_vcpu),
        "available_vcpu": available,
        "compute_environment": ce,
        "ok": not problems,
        "problems": problems,
        "request_command": command,
    }


class GpuCapacityPreflightOperator(AwsBaseOperator[ServiceQuotasHook]):
    """
    Check, before any spend, that the account can run ``num_nodes`` × ``instance_type``.

    Reads vCPUs / GPUs / memory per node from EC2 ``DescribeInstanceTypes`` (``VCpuInfo.DefaultVCpus``,
    ``GpuInfo.Gpus[].Count``, ``MemoryInfo.SizeInMiB``), the job definition's per-node
    ``resourceRequirements`` from Batch ``DescribeJobDefinitions`` (latest ACTIVE revision; each must fit
    one instance: :func:`sim2real.orchestration.operators.preflight.job_shape_problems`), the quota from Service Quotas
    ``GetServiceQuota`` (code from
    :data:`sim2real.orchestration.hooks.service_quotas.EC2_ON_DEMAND_VCPU_QUOTAS` unless ``quota_code`` is given),
    current usage from CloudWatch ``AWS/Usage`` ``ResourceCount``, and the Batch compute
    environment from ``DescribeComputeEnvironments``; the decision is :func:`compute_verdict`.

    :param instance_type: EC2 instance type of the training nodes, e.g. ``g6.12xlarge`` (templated).
    :param num_nodes: number of nodes (int, or a string of digits after templating) (templated).
    :param compute_environment: Batch compute environment name/ARN to check; None skips it (templated).
    :param job_definition: Batch job definition (name = latest ACTIVE revision, or ``name:revision`` / ARN)
        whose per-node ``resourceRequirements`` must fit ``instance_type``; None skips it (templated).
    :param quota_code: Service Quotas code; None = looked up from the instance family (templated).
    :param service_code: Service Quotas service code (default ``ec2``).
    :return: the verdict dict of :func:`compute_verdict` with ``ok=True``.
    :raises AirflowFailException: (no retries) when the quota or the compute environment cannot hold
        the run, when the job definition has no ACTIVE revision, or when one node of it needs more GPUs,
        vCPUs or memory than one ``instance_type`` has (the job would stay RUNNABLE); the message has the quota name,
        code, limit, in use, needed and the exact
        ``aws service-quotas request-service-quota-increase`` command.
    :raises ValueError: bad input (num_nodes < 1, unknown instance type / family).
    """

    aws_hook_class = ServiceQuotasHook
    ui_color = "#f3e5ab"
    template_fields: Sequence[str] = aws_template_fields(
        "instance_type", "num_nodes", "compute_environment", "job_definition", "quota_code", "service_code"
    )

    def __init__(
        self,
        *,
        instance_type: str,
        num_nodes: int | str,
        compute_environment: str | None = None,
        job_definition: str | None = None,
        quota_code: str | None = None,
        service_code: str = "ec2",
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.instance_type = instance_type
        self.num_nodes = num_nodes
        self.compute_environment = compute_environment
        self.job_definition = job_definition
        self.quota_code = quota_code
        self.service_code = service_code

    def execute(self, context: Context) -> dict[str, Any]:
        num_nodes = validated_num_nodes(self.num_nodes)

        ec2 = EC2Hook(api_type="client_type", **self._hook_parameters).conn
        types = ec2.describe_instance_types(InstanceTypes=[self.instance_type])["InstanceTypes"]
        if not types:
            raise ValueError(f"EC2 DescribeInstanceTypes does not know instance type {self.instance_type!r}")
        info = types[0]
        vcpu = int(info["VCpuInfo"]["DefaultVCpus"])
        gpus = sum(int(g.get("Count", 0)) for g in (info.get("GpuInfo") or {}).get("Gpus", []))

        if self.quota_code:
            row = quota_by_code(self.quota_code)
            quota_code = self.quota_code
        else:
            row = quota_for_instance_type(self.instance_type)
            quota_code = row.quota_code
        quota = self.hook.get_service_quota(self.service_code, quota_code)
        usage_class = row.usage_class if row else None
        if usage_class is None:
            dims = ((quota.get("UsageMetric") or {}).get("MetricDimensions")) or {}
            usage_class = dims.get("Class")
        in_use = CloudWatchUsageHook(**self._hook_parameters).ec2_vcpu_in_use(usage_class) if usage_class else 0.0

        shape_problems: list[str] = []
        if self.job_definition:
            from sim2real.orchestration.operators.preflight import job_shape_problems

            try:
                jobdef = BatchTrainingHook(**self._hook_parameters).latest_active_job_definition(self.job_definition)
            except AirflowException as err:  # no ACTIVE revision
                shape_problems.append(f"{err}: set batch.job_definition in the environment config")
            else:
                shape_problems = job_shape_problems(jobdef, self.instance_type, info)

        ce_desc = None
        if self.compute_environment:
            batch = BatchClientHook(**self._hook_parameters).client
            found = batch.describe_compute_environments(computeEnvironments=[self.compute_environment])
            ce_desc = (found.get("computeEnvironments") or [None])[0]

        verdict = compute_verdict(
            instance_type=self.instance_type,
            vcpu_per_node=vcpu,
            gpus_per_node=gpus,
            num_nodes=num_nodes,
            service_code=self.service_code,
            quota_code=quota_code,
            quota_name=quota.get("QuotaName") or (row.quota_name if row else quota_code),
            limit_vcpu=float(quota["Value"]),
            in_use_vcpu=in_use,
            compute_environment=ce_desc,
            compute_environment_name=self.compute_environment,
            region=self.hook.conn_region_name,
            shape_problems=shape_problems,
        )
        self.log.info(
            "Preflight %s x %s: needed %s vCPU, quota %s (%s) limit %s, in use %s, compute environment %s",
            num_nodes,
            self.instance_type,
            verdict["needed_vcpu"],
            verdict["quota_name"],
            quota_code,
            verdict["limit_vcpu"],
            verdict["in_use_vcpu"],
            verdict["compute_environment"] or "not checked",
        )
        if not verdict["ok"]:
            raise AirflowFailException("GPU capacity preflight refused the run: " + " | ".join(verdict["problems"]))
        return verdict


def hyperpod_quota_name(instance_type: str) -> str:
    """Service Quotas name of the SageMaker HyperPod instance quota (unit: instances), e.g.
    ``"ml.g5.12xlarge for cluster usage"`` (Service Quotas console, service ``sagemaker``)."""
    return f"{instance_type} for cluster usage"


class HyperPodCapacityPreflightOperator(AwsBaseOperator[ServiceQuotasHook]):
    """
    Check, before scaling up, that SageMaker's HyperPod instance quota holds the new group size.

    Reads the group's instance type and current count from SageMaker ``DescribeCluster``, the quota
    ``"<instance type> for cluster usage"`` (instances; Service Quotas ``ListServiceQuotas`` for
    ``sagemaker``, by name) and the instances of that type already in use by every cluster of the
    account and region (``ListClusters`` + ``DescribeCluster``: ``CurrentCount`` per group).
    Needed = ``target_count - current count of the group`` more instances.

    :param cluster_name: HyperPod cluster name or ARN (templated).
    :param instance_group_name: the group to scale (templated).
    :param target_count: instances the group will have (templated).
    :return: ``{"cluster_name", "instance_group_name", "instance_type", "current_count", "target_count",
        "needed_instances", "quota_name", "quota_code", "limit_instances", "in_use_instances",
        "available_instances", "ok": True}``.
    :raises AirflowFailException: (no retries) when the quota is missing or too small; the message has
        the quota name, code, limit, in use, needed and the ``request-service-quota-increase`` command.
    :raises ValueError: unknown instance group, or target_count < 0.
    """

    aws_hook_class = ServiceQuotasHook
    ui_color = "#f3e5ab"
    template_fields: Sequence[str] = aws_template_fields("cluster_name", "instance_group_name", "target_count")

    def __init__(self, *, cluster_name: str, instance_group_name: str, target_count: int | str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.cluster_name = cluster_name
        self.instance_group_name = instance_group_name
        self.target_count = target_count

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow.providers.amazon.aws.hooks.sagemaker import SageMakerHook

        target = int(self.target_count)
        if target < 0:
            raise ValueError(f"target_count must be >= 0, got {target}")
        sagemaker = SageMakerHook(**self._hook_parameters).conn
        cluster = sagemaker.describe_cluster(ClusterName=self.cluster_name)
        groups = {g["InstanceGroupName"]: g for g in cluster.get("InstanceGroups", [])}
        if self.instance_group_name not in groups:
            raise ValueError(f"HyperPod cluster {self.cluster_name!r} has no instance group "
                             f"{self.instance_group_name!r} (groups: {sorted(groups)})")
        group = groups[self.instance_group_name]
        instance_type = group["InstanceType"]
        current = int(group.get("CurrentCount") or 0)
        needed = max(0, target - current)

        in_use = 0
        for page in sagemaker.get_paginator("list_clusters").paginate():
            for summary in page.get("ClusterSummaries", []):
                desc = sagemaker.describe_cluster(ClusterName=summary["ClusterArn"])
                in_use += sum(int(g.get("CurrentCount") or 0) for g in desc.get("InstanceGroups", [])
                              if g.get("InstanceType") == instance_type)

        name = hyperpod_quota_name(instance_type)
        region = self.hook.conn_region_name
        quota = self.hook.find_quota_by_name("sagemaker", name)
        if quota is None:
            raise AirflowFailException(
                f"No Service Quotas entry {name!r} for service sagemaker in {region}: this account cannot run "
                f"{instance_type} in HyperPod clusters here; ask for it in the Service Quotas console")
        limit = float(quota["Value"])
        available = limit - in_use
        verdict = {
            "cluster_name": self.cluster_name, "instance_group_name": self.instance_group_name,
            "instance_type": instance_type, "current_count": current, "target_count": target,
            "needed_instances": needed, "quota_name": quota.get("QuotaName", name),
            "quota_code": quota.get("QuotaCode"), "limit_instances": limit, "in_use_instances": in_use,
            "available_instances": available, "ok": needed <= available,
        }
        if not verdict["ok"]:
            command = quota_increase_command("sagemaker", str(quota.get("QuotaCode")), in_use + needed, region)
            raise AirflowFailException(
                f"SageMaker quota {verdict['quota_name']!r} ({verdict['quota_code']}) is {limit:g} instances with "
                f"{in_use} in use ({available:g} available) but scaling {self.cluster_name}/"
                f"{self.instance_group_name} from {current} to {target} needs {needed} more. "
                f"Request more with: {command}")
        self.log.info("HyperPod preflight %s/%s -> %s x %s: quota %s limit %g, in use %s: ok", self.cluster_name,
                      self.instance_group_name, target, instance_type, verdict["quota_name"], limit, in_use)
        return verdict
