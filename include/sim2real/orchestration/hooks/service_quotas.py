"""Hooks and the one table for the EC2 On-Demand vCPU quota check.

EC2 On-Demand instance limits are vCPU-based, one quota per instance *family group*
(Amazon EC2 User Guide, "Amazon EC2 service quotas" / "On-Demand Instance quotas"; names and
codes as shown by the Service Quotas console and ``aws service-quotas list-service-quotas
--service-code ec2``). Current usage is the CloudWatch metric ``AWS/Usage`` ``ResourceCount``
with dimensions ``Service=EC2, Type=Resource, Resource=vCPU, Class=<class>/OnDemand``
(Service Quotas User Guide, "Amazon EC2 usage metrics"; it is the ``UsageMetric`` that
``GetServiceQuota`` returns for these quotas).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook


@dataclass(frozen=True)
class Ec2VcpuQuota:
    """One EC2 On-Demand vCPU quota.

    :param quota_code: Service Quotas code (service ``ec2``).
    :param quota_name: name in the Service Quotas console.
    :param usage_class: ``Class`` dimension of ``AWS/Usage`` ``ResourceCount``.
    """

    quota_code: str
    quota_name: str
    usage_class: str


STANDARD = Ec2VcpuQuota(
    "L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances", "Standard/OnDemand"
)
G_VT = Ec2VcpuQuota("L-DB2E81BA", "Running On-Demand G and VT instances", "G/OnDemand")
P = Ec2VcpuQuota("L-417A185B", "Running On-Demand P instances", "P/OnDemand")
F = Ec2VcpuQuota("L-74FC7D96", "Running On-Demand F instances", "F/OnDemand")
INF = Ec2VcpuQuota("L-1945791B", "Running On-Demand Inf instances", "Inf/OnDemand")
TRN = Ec2VcpuQuota("L-2C3B7624", "Running On-Demand Trn instances", "Trn/OnDemand")
X = Ec2VcpuQuota("L-7295265B", "Running On-Demand X instances", "X/OnDemand")
DL = Ec2VcpuQuota("L-6E869C2A", "Running On-Demand DL instances", "DL/OnDemand")
HPC = Ec2VcpuQuota("L-F7808C92", "Running On-Demand HPC instances", "HPC/OnDemand")
HIGH_MEMORY = Ec2VcpuQuota("L-43DA4232", "Running On-Demand High Memory instances", "HighMem/OnDemand")

#: Instance family prefix (lower case, the letters before the generation digit) -> quota.
#: Matched longest prefix first (``inf`` before ``i``, ``dl`` before ``d``, ``hpc`` before ``h``).
EC2_ON_DEMAND_VCPU_QUOTAS: dict[str, Ec2VcpuQuota] = {
    "trn": TRN,
    "inf": INF,
    "hpc": HPC,
    "dl": DL,
    "vt": G_VT,
    "u-": HIGH_MEMORY,
    "g": G_VT,
    "p": P,
    "f": F,
    "x": X,
    **{letter: STANDARD for letter in "acdhimrtz"},
}


def quota_for_instance_type(instance_type: str) -> Ec2VcpuQuota:
    """
    The On-Demand vCPU quota that governs ``instance_type``.

    :param instance_type: e.g. ``g6.12xlarge``, ``p5.48xlarge``, ``inf2.xlarge``.
    :raises ValueError: when the family is not in :data:`EC2_ON_DEMAND_VCPU_QUOTAS`
        (pass ``quota_code`` explicitly then).
    """
    family = (instance_type or "").split(".", 1)[0].lower()
    for prefix in sorted(EC2_ON_DEMAND_VCPU_QUOTAS, key=len, reverse=True):
        if family.startswith(prefix) and family:
            return EC2_ON_DEMAND_VCPU_QUOTAS[prefix]
    raise ValueError(
        f"no EC2 On-Demand vCPU quota known for instance type {instance_type!r}; pass quota_code "
        "(see `aws service-quotas list-service-quotas --service-code ec2`)"
    )


def quota_by_code(quota_code: str) -> Ec2VcpuQuota | None:
    """The table row with ``quota_code``, or None."""
    for quota in EC2_ON_DEMAND_VCPU_QUOTAS.values():
        if quota.quota_code == quota_code:
            return quota
    return None


class ServiceQuotasHook(AwsBaseHook):
    """
    Interact with Service Quotas (thin hook, ``client_type="service-quotas"``).

    Additional arguments (such as ``aws_conn_id``) are passed down to ``AwsBaseHook``.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs["client_type"] = "service-quotas"
        super().__init__(*args, **kwargs)

    def get_service_quota(self, service_code: str, quota_code: str) -> dict[str, Any]:
        """
        ``GetServiceQuota`` -> the ``Quota`` object (``QuotaName``, ``QuotaCode``, ``Value`` (float),
        ``Unit``, ``Adjustable``, ``UsageMetric``...). Falls back to ``GetAWSDefaultServiceQuota``
        when the account has no applied value (``NoSuchResourceException``).
        """
        client = self.conn
        try:
            return client.get_service_quota(ServiceCode=service_code, QuotaCode=quota_code)["Quota"]
        except client.exceptions.NoSuchResourceException:
            return client.get_aws_default_service_quota(ServiceCode=service_code, QuotaCode=quota_code)["Quota"]


    def find_quota_by_name(self, service_code: str, quota_name: str) -> dict[str, Any] | None:
        """The quota of ``service_code`` whose ``QuotaName`` equals ``quota_name`` (case-insensitive),
        from ``ListServiceQuotas`` (applied values) then ``ListAWSDefaultServiceQuotas``; None if absent.

        Used for quotas known by name only, e.g. SageMaker HyperPod's ``"<instance type> for cluster
        usage"`` (unit: instances), whose codes are not documented per instance type.
        """
        wanted = quota_name.strip().lower()
        for operation in ("list_service_quotas", "list_aws_default_service_quotas"):
            paginator = self.conn.get_paginator(operation)
            for page in paginator.paginate(ServiceCode=service_code):
                for quota in page.get("Quotas", []):
                    if str(quota.get("QuotaName", "")).strip().lower() == wanted:
                        return quota
        return None


class CloudWatchUsageHook(AwsBaseHook):
    """
    Read ``AWS/Usage`` metrics from CloudWatch (thin hook, ``client_type="cloudwatch"``).

    Additional arguments (such as ``aws_conn_id``) are passed down to ``AwsBaseHook``.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs["client_type"] = "cloudwatch"
        super().__init__(*args, **kwargs)

    def ec2_vcpu_in_use(self, usage_class: str, lookback: timedelta = timedelta(minutes=15)) -> float:
        """
        vCPUs of running On-Demand instances of ``usage_class`` (e.g. ``G/OnDemand``).

        ``GetMetricStatistics`` ``AWS/Usage`` ``ResourceCount`` (dims Service=EC2, Type=Resource,
        Resource=vCPU, Class=usage_class), statistic Maximum, 60 s period over ``lookback``; the
        latest datapoint. No datapoint (nothing running) -> 0.0.
        """
        now = datetime.now(timezone.utc)
        response = self.conn.get_metric_statistics(
            Namespace="AWS/Usage",
            MetricName="ResourceCount",
            Dimensions=[
                {"Name": "Service", "Value": "EC2"},
                {"Name": "Type", "Value": "Resource"},
                {"Name": "Resource", "Value": "vCPU"},
                {"Name": "Class", "Value": usage_class},
            ],
            StartTime=now - lookback,
            # A minute past now: the current minute's datapoint is inside the last period whatever the
            # alignment of the 60 s periods (without it, a datapoint of the last seconds could fall out).
            EndTime=now + timedelta(seconds=60),
            Period=60,
            Statistics=["Maximum"],
        )
        points = sorted(response.get("Datapoints") or [], key=lambda p: p["Timestamp"])
        return float(points[-1]["Maximum"]) if points else 0.0
