"""EC2 service quotas and their CloudWatch usage metric; SageMaker HyperPod cluster-usage quotas.

moto 5.2.5's Service Quotas knows only ``vpc``. The sandbox answers GetServiceQuota,
GetAWSDefaultServiceQuota, ListServiceQuotas and ListAWSDefaultServiceQuotas for ``ec2`` with the
configured vCPU limits, and publishes the in-use vCPU count the way AWS does: metric
``AWS/Usage`` ``ResourceCount`` with dimensions Service=EC2, Type=Resource, Resource=vCPU,
Class=<G|P|Standard>/OnDemand (refreshed every 30 s so "the last N minutes" always has data).
For ``sagemaker`` it lists the HyperPod ``"<instance type> for cluster usage"`` quotas
(:data:`SAGEMAKER_CLUSTER_QUOTAS`, instances).
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from typing import TYPE_CHECKING, Any

from moto.servicequotas.exceptions import NoSuchResource
from moto.servicequotas.models import ServiceQuotasBackend
from moto.servicequotas.responses import ServiceQuotasResponse

from sim2real.dev.sandbox._core import PREFIX, Patcher, active, log, safe_thread

if TYPE_CHECKING:
    from sim2real.dev.sandbox.server import Sandbox

#: quota code -> (name, usage class). Names as the Service Quotas console shows them.
EC2_QUOTAS: dict[str, tuple[str, str]] = {
    "L-DB2E81BA": ("Running On-Demand G and VT instances", "G"),
    "L-417A185B": ("Running On-Demand P instances", "P"),
    "L-1216C47A": ("Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances", "Standard"),
}
DEFAULT_LIMITS = {"L-DB2E81BA": 96.0, "L-417A185B": 0.0, "L-1216C47A": 256.0}
#: SageMaker HyperPod "<instance type> for cluster usage" quotas (instances) the sandbox answers for
#: (the codes are made up: AWS does not document them per type; the preflight finds the quota by name).
SAGEMAKER_CLUSTER_QUOTAS: dict[str, float] = {"ml.m5.xlarge": 4.0, "ml.g6.12xlarge": 4.0, "ml.g5.12xlarge": 4.0}


class QuotaResponder:
    def __init__(self, sandbox: Sandbox, limits: dict[str, float] | None, usage: dict[str, float] | None) -> None:
        self.sandbox = sandbox
        self.limits = {**DEFAULT_LIMITS, **(limits or {})}
        self.usage = {"G": 0.0, "P": 0.0, "Standard": 0.0, **(usage or {})}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sagemaker_quotas(self) -> list[dict[str, Any]]:
        """HyperPod cluster-usage quotas (:data:`SAGEMAKER_CLUSTER_QUOTAS`)."""
        out = []
        for i, (instance_type, limit) in enumerate(sorted(SAGEMAKER_CLUSTER_QUOTAS.items())):
            code = f"L-5A1D{i:04d}"
            out.append({
                "ServiceCode": "sagemaker", "ServiceName": "Amazon SageMaker",
                "QuotaArn": f"arn:aws:servicequotas:{self.sandbox.region}:{self.sandbox.account_id}:sagemaker/{code}",
                "QuotaCode": code, "QuotaName": f"{instance_type} for cluster usage", "Value": float(limit),
                "Unit": "None", "Adjustable": True, "GlobalQuota": False, "QuotaAppliedAtLevel": "ACCOUNT",
            })
        return out

    def quota(self, code: str) -> dict[str, Any]:
        if code not in EC2_QUOTAS:
            raise NoSuchResource
        name, klass = EC2_QUOTAS[code]
        return {
            "ServiceCode": "ec2", "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "QuotaArn": f"arn:aws:servicequotas:{self.sandbox.region}:{self.sandbox.account_id}:ec2/{code}",
            "QuotaCode": code, "QuotaName": name, "Value": float(self.limits.get(code, 0.0)), "Unit": "None",
            "Adjustable": True, "GlobalQuota": False,
            "UsageMetric": {
                "MetricNamespace": "AWS/Usage", "MetricName": "ResourceCount",
                "MetricDimensions": {"Service": "EC2", "Type": "Resource", "Resource": "vCPU", "Class": f"{klass}/OnDemand"},
                "MetricStatisticRecommendation": "Maximum",
            },
            "QuotaAppliedAtLevel": "ACCOUNT",
        }

    def install(self, patcher: Patcher) -> None:
        original_get = ServiceQuotasBackend.get_service_quota
        original_defaults = ServiceQuotasBackend.list_aws_default_service_quotas

        def get_service_quota(backend: ServiceQuotasBackend, service_code: str, quota_code: str) -> dict[str, Any]:
            if service_code == "ec2":
                return active().quotas.quota(quota_code)
            return original_get(backend, service_code, quota_code)

        def list_defaults(backend: ServiceQuotasBackend, service_code: str) -> list[dict[str, Any]]:
            if service_code == "ec2":
                return [active().quotas.quota(c) for c in EC2_QUOTAS]
            if service_code == "sagemaker":
                return active().quotas.sagemaker_quotas()
            return original_defaults(backend, service_code)

        def list_service_quotas(resp: ServiceQuotasResponse) -> str:
            params = json.loads(resp.body or "{}")
            quotas = resp.backend.list_aws_default_service_quotas(str(params.get("ServiceCode")))
            code = params.get("QuotaCode")
            return json.dumps({"Quotas": [q for q in quotas if not code or q["QuotaCode"] == code]})

        def get_aws_default_service_quota(resp: ServiceQuotasResponse) -> str:
            params = json.loads(resp.body or "{}")
            quota = resp.backend.get_service_quota(str(params.get("ServiceCode")), str(params.get("QuotaCode")))
            return json.dumps({"Quota": quota})

        patcher.setattr(ServiceQuotasBackend, "get_service_quota", get_service_quota)
        patcher.setattr(ServiceQuotasBackend, "list_aws_default_service_quotas", list_defaults)
        patcher.setattr(ServiceQuotasResponse, "list_service_quotas", list_service_quotas)
        patcher.setattr(ServiceQuotasResponse, "get_aws_default_service_quota", get_aws_default_service_quota)

    def start_publishing(self) -> None:
        self.publish()
        self._thread = safe_thread(self._loop, "quota-usage")

    def _loop(self) -> None:
        while not self._stop.wait(30):
            self.publish()

    def publish(self) -> None:
        """Put the configured in-use vCPU counts as AWS/Usage ResourceCount data points (now)."""
        try:
            cw = self.sandbox.client("cloudwatch", internal=True)
            now = dt.datetime.now(dt.timezone.utc)
            cw.put_metric_data(Namespace="AWS/Usage", MetricData=[
                {"MetricName": "ResourceCount", "Timestamp": now, "Value": float(value), "Unit": "None",
                 "Dimensions": [{"Name": "Service", "Value": "EC2"}, {"Name": "Type", "Value": "Resource"},
                                {"Name": "Resource", "Value": "vCPU"}, {"Name": "Class", "Value": f"{klass}/OnDemand"}]}
                for klass, value in self.usage.items()
            ])
        except Exception as exc:  # noqa: BLE001
            log.warning("%s could not publish AWS/Usage data: %s", PREFIX, exc)

    def set_usage(self, klass: str, vcpus: float) -> None:
        """Change the in-use vCPU count of a class (G, P, Standard) and publish it."""
        self.usage[klass] = float(vcpus)
        self.publish()

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
