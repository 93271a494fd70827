"""GpuCapacityPreflightOperator and compute_verdict. moto implements Service Quotas only for
``vpc``; ``ServiceQuotasBackend.get_service_quota`` is patched to answer ec2 codes (moto gap)."""

from __future__ import annotations

from datetime import datetime, timezone

import boto3
import pytest
from airflow.providers.common.compat.sdk import AirflowFailException
from moto import mock_aws
from moto.servicequotas.models import ServiceQuotasBackend
from sim2real.orchestration.hooks.service_quotas import G_VT, INF, STANDARD, TRN, P, quota_for_instance_type
from sim2real.orchestration.operators.quota import GpuCapacityPreflightOperator, compute_verdict

REGION = "us-east-1"
CE = "sim2real-gpu-ce"
QUEUE = "sim2real-gpu"


@pytest.fixture
def ec2_quota(monkeypatch):
    values = {"L-DB2E81BA": 96.0}

    def get_service_quota(self, service_code, quota_code):
        if service_code == "ec2" and quota_code in values:
            return {
                "ServiceCode": "ec2",
                "QuotaCode": quota_code,
                "QuotaName": G_VT.quota_name,
                "Value": values[quota_code],
                "Unit": "None",
                "Adjustable": True,
                "GlobalQuota": False,
            }
        raise AssertionError(f"unexpected quota {service_code}/{quota_code}")

    monkeypatch.setattr(ServiceQuotasBackend, "get_service_quota", get_service_quota)
    return values


def put_usage(vcpus: float, usage_class: str = "G/OnDemand") -> None:
    boto3.client("cloudwatch", region_name=REGION).put_metric_data(
        Namespace="AWS/Usage",
        MetricData=[
            {
                "MetricName": "ResourceCount",
                "Dimensions": [
                    {"Name": "Service", "Value": "EC2"},
                    {"Name": "Type", "Value": "Resource"},
                    {"Name": "Resource", "Value": "vCPU"},
                    {"Name": "Class", "Value": usage_class},
                ],
                "Timestamp": datetime.now(timezone.utc),
                "Value": vcpus,
                "Unit": "None",
            }
        ],
    )


def make_ce(state: str = "ENABLED") -> None:
    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(RoleName="batch-service", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    batch = boto3.client("batch", region_name=REGION)
    ce = batch.create_compute_environment(computeEnvironmentName=CE, type="UNMANAGED", state=state, serviceRole=role)
    batch.create_job_queue(
        jobQueueName=QUEUE,
        state="ENABLED",
        priority=1,
        computeEnvironmentOrder=[{"order": 1, "computeEnvironment": ce["computeEnvironmentArn"]}],
    )


@pytest.mark.parametrize(
    ("instance_type", "quota"),
    [
        ("g6.12xlarge", G_VT),
        ("g5.xlarge", G_VT),
        ("vt1.3xlarge", G_VT),
        ("p5.48xlarge", P),
        ("p4d.24xlarge", P),
        ("m7i.large", STANDARD),
        ("c5.xlarge", STANDARD),
        ("inf2.xlarge", INF),
        ("trn1.32xlarge", TRN),
        ("i4i.large", STANDARD),
        ("dl1.24xlarge", quota_for_instance_type("dl1.24xlarge")),
    ],
)
def test_quota_table(instance_type, quota):
    assert quota_for_instance_type(instance_type) == quota


def test_quota_table_unknown_family():
    with pytest.raises(ValueError, match="pass quota_code"):
        quota_for_instance_type("q9.large")
    with pytest.raises(ValueError):
        quota_for_instance_type("")


@mock_aws
def test_preflight_ok_returns_verdict(aws_env, ec2_quota):
    make_ce()
    put_usage(24)
    verdict = GpuCapacityPreflightOperator(
        task_id="preflight", instance_type="g6.12xlarge", num_nodes=1, compute_environment=CE
    ).execute({})
    assert verdict["ok"] is True
    assert verdict["vcpu_per_node"] == 48 and verdict["gpus_per_node"] == 4 and verdict["needed_vcpu"] == 48
    assert verdict["quota_code"] == "L-DB2E81BA" and verdict["quota_name"] == G_VT.quota_name
    assert verdict["limit_vcpu"] == 96.0 and verdict["in_use_vcpu"] == 24.0 and verdict["available_vcpu"] == 72.0
    assert verdict["compute_environment"]["state"] == "ENABLED" and verdict["compute_environment"]["status"] == "VALID"


@mock_aws
def test_preflight_refuses_below_need_before_any_submit(aws_env, ec2_quota):
    make_ce()
    put_usage(24)
    op = GpuCapacityPreflightOperator(
        task_id="preflight", instance_type="g6.12xlarge", num_nodes="2", compute_environment=CE
    )
    with pytest.raises(AirflowFailException) as err:
        op.execute({})
    message = str(err.value)
    assert G_VT.quota_name in message and "L-DB2E81BA" in message
    assert "96 vCPU" in message and "24 in use" in message and "needs 96 vCPU" in message
    assert (
        "aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-DB2E81BA "
        "--desired-value 120 --region us-east-1"
    ) in message
    assert (
        boto3.client("batch", region_name=REGION).list_jobs(jobQueue=QUEUE, jobStatus="SUBMITTED")["jobSummaryList"]
        == []
    )


@mock_aws
def test_preflight_refuses_disabled_compute_environment(aws_env, ec2_quota):
    make_ce(state="DISABLED")
    with pytest.raises(AirflowFailException, match="state=DISABLED"):
        GpuCapacityPreflightOperator(
            task_id="p", instance_type="g6.12xlarge", num_nodes=1, compute_environment=CE
        ).execute({})


@mock_aws
def test_preflight_bad_input(aws_env, ec2_quota):
    with pytest.raises(ValueError, match="num_nodes"):
        GpuCapacityPreflightOperator(task_id="p", instance_type="g6.12xlarge", num_nodes=0).execute({})
    with pytest.raises(ValueError, match="num_nodes"):
        GpuCapacityPreflightOperator(task_id="p", instance_type="g6.12xlarge", num_nodes="two").execute({})


def managed_ce(**over):
    ce = {
        "computeEnvironmentName": CE,
        "type": "MANAGED",
        "state": "ENABLED",
        "status": "VALID",
        "computeResources": {"maxvCpus": 192, "desiredvCpus": 0, "instanceTypes": ["g6.12xlarge"]},
    }
    ce.update(over)
    return ce


VERDICT_CASES = [
    # id, num_nodes, limit, in use, ce, ok, message fragment
    ("fits", 2, 192, 0, managed_ce(), True, None),
    ("exactly-fits", 2, 144, 48, managed_ce(), True, None),
    ("quota-short", 2, 64, 0, managed_ce(), False, "--desired-value 96 --region us-east-1"),
    ("quota-used", 1, 96, 72, managed_ce(), False, "--desired-value 120"),
    ("ce-max-too-small", 4, 1000, 0, managed_ce(computeResources={"maxvCpus": 96}), False, "maxvCpus=96 < 192"),
    ("ce-invalid", 1, 1000, 0, managed_ce(status="INVALID", statusReason="subnet gone"), False, "subnet gone"),
    ("ce-disabled", 1, 1000, 0, managed_ce(state="DISABLED"), False, "state=DISABLED"),
    ("ce-unmanaged-no-max", 4, 1000, 0, managed_ce(type="UNMANAGED", computeResources=None), True, None),
]


@pytest.mark.parametrize(
    ("num_nodes", "limit", "in_use", "ce", "ok", "fragment"),
    [c[1:] for c in VERDICT_CASES],
    ids=[c[0] for c in VERDICT_CASES],
)
def test_compute_verdict_table(num_nodes, limit, in_use, ce, ok, fragment):
    verdict = compute_verdict(
        instance_type="g6.12xlarge",
        vcpu_per_node=48,
        gpus_per_node=4,
        num_nodes=num_nodes,
        service_code="ec2",
        quota_code=G_VT.quota_code,
        quota_name=G_VT.quota_name,
        limit_vcpu=limit,
        in_use_vcpu=in_use,
        compute_environment=ce,
        compute_environment_name=CE,
        region=REGION,
    )
    assert verdict["ok"] is ok
    assert verdict["needed_vcpu"] == 48 * num_nodes
    if fragment:
        assert any(fragment in p for p in verdict["problems"])
    else:
        assert verdict["problems"] == [] and verdict["request_command"] is None


def test_compute_verdict_missing_ce():
    verdict = compute_verdict(
        instance_type="g6.12xlarge",
        vcpu_per_node=48,
        gpus_per_node=4,
        num_nodes=1,
        service_code="ec2",
        quota_code="L-DB2E81BA",
        quota_name="q",
        limit_vcpu=96,
        in_use_vcpu=0,
        compute_environment=None,
        compute_environment_name="nope",
    )
    assert verdict["ok"] is False and "not found" in verdict["problems"][0]


@pytest.fixture
def moto_node_properties(monkeypatch):
    """moto 5.2.5 leaves ``nodeProperties`` out of DescribeJobDefinitions; AWS returns it."""
    from moto.batch.models import JobDefinition

    original = JobDefinition.describe

    def describe(jd):
        result = original(jd)
        if getattr(jd, "node_properties", None) is not None:
            result["nodeProperties"] = jd.node_properties
        return result

    monkeypatch.setattr(JobDefinition, "describe", describe)


def register_job_definition(gpus: int, vcpus: int = 4, memory_mib: int = 16000) -> None:
    """A multinode job definition asking for ``gpus`` GPUs per node (AWS Batch RegisterJobDefinition shape)."""
    boto3.client("batch", region_name=REGION).register_job_definition(
        jobDefinitionName="sim2real-train", type="multinode",
        nodeProperties={"numNodes": 2, "mainNode": 0, "nodeRangeProperties": [{
            "targetNodes": "0:", "container": {"image": "busybox", "command": ["true"], "resourceRequirements": [
                {"type": "GPU", "value": str(gpus)}, {"type": "VCPU", "value": str(vcpus)},
                {"type": "MEMORY", "value": str(memory_mib)}]}}]})


@mock_aws
def test_preflight_refuses_an_instance_type_with_fewer_gpus_than_the_job_definition(aws_env, ec2_quota, moto_node_properties):
    """g6.xlarge has 1 GPU; a 4-GPU job definition on 2 nodes would sit RUNNABLE on AWS."""
    make_ce()
    register_job_definition(gpus=4)
    op = GpuCapacityPreflightOperator(task_id="p", instance_type="g6.xlarge", num_nodes=2, compute_environment=CE,
                                      job_definition="sim2real-train")
    with pytest.raises(AirflowFailException) as err:
        op.execute({})
    message = str(err.value)
    assert "sim2real-train:1 asks for GPU 4 per node" in message and "g6.xlarge has 1" in message
    assert "RUNNABLE" in message


@mock_aws
def test_preflight_refuses_vcpus_and_memory_beyond_the_instance(aws_env, ec2_quota, moto_node_properties):
    make_ce()
    register_job_definition(gpus=1, vcpus=8, memory_mib=64000)  # g6.xlarge: 4 vCPU, 16 GiB
    with pytest.raises(AirflowFailException) as err:
        GpuCapacityPreflightOperator(task_id="p", instance_type="g6.xlarge", num_nodes=1, compute_environment=CE,
                                     job_definition="sim2real-train").execute({})
    assert "VCPU 8 per node" in str(err.value) and "MEMORY 64000 MiB per node" in str(err.value)
    assert "asks for GPU" not in str(err.value)  # 1 GPU fits g6.xlarge


@mock_aws
def test_preflight_passes_a_job_definition_that_fits(aws_env, ec2_quota, moto_node_properties):
    make_ce()
    register_job_definition(gpus=4, vcpus=48, memory_mib=180000)  # g6.12xlarge: 4 L4, 48 vCPU, 192 GiB
    verdict = GpuCapacityPreflightOperator(task_id="p", instance_type="g6.12xlarge", num_nodes=1,
                                           compute_environment=CE, job_definition="sim2real-train").execute({})
    assert verdict["ok"] is True


@mock_aws
def test_preflight_refuses_a_missing_job_definition(aws_env, ec2_quota):
    make_ce()
    with pytest.raises(AirflowFailException, match="'nope' has no ACTIVE revision"):
        GpuCapacityPreflightOperator(task_id="p", instance_type="g6.12xlarge", num_nodes=1, compute_environment=CE,
                                     job_definition="nope").execute({})
