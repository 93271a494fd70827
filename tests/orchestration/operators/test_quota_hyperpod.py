"""HyperPodCapacityPreflightOperator: the SageMaker "<type> for cluster usage" quota, found by name.

SageMaker clusters come from moto (in process); Service Quotas ``ListServiceQuotas`` for ``sagemaker``
is not in moto, so it is answered by botocore's Stubber (request shapes checked against the model).
"""

from __future__ import annotations

import boto3
import pytest
from airflow.providers.common.compat.sdk import AirflowFailException
from botocore.stub import Stubber
from moto import mock_aws

from sim2real.orchestration.operators.quota import HyperPodCapacityPreflightOperator, hyperpod_quota_name

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/hp"


def _group(name, itype, count):
    return {"InstanceGroupName": name, "InstanceType": itype, "InstanceCount": count, "ExecutionRole": ROLE,
            "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lc/scripts/", "OnCreate": "on_create.sh"},
            "ThreadsPerCore": 1}


@pytest.fixture
def clusters(aws_env):
    with mock_aws():
        sm = boto3.client("sagemaker", region_name=REGION)
        sm.create_cluster(ClusterName="hp", InstanceGroups=[_group("head", "ml.m5.xlarge", 1),
                                                            _group("gpu", "ml.g5.12xlarge", 2)])
        sm.create_cluster(ClusterName="other", InstanceGroups=[_group("gpu", "ml.g5.12xlarge", 1)])
        yield sm


def _operator(target: int) -> HyperPodCapacityPreflightOperator:
    return HyperPodCapacityPreflightOperator(task_id="hp_preflight", cluster_name="hp", instance_group_name="gpu",
                                             target_count=target, region_name=REGION)


def _stub_quota(op, value: float | None) -> Stubber:
    stub = Stubber(op.hook.conn)
    quotas = [{"ServiceCode": "sagemaker", "QuotaCode": "L-11111111", "QuotaName": "ml.m5.xlarge for cluster usage",
               "Value": 10.0}]
    if value is not None:
        quotas.append({"ServiceCode": "sagemaker", "QuotaCode": "L-6B6D8A2C",
                       "QuotaName": hyperpod_quota_name("ml.g5.12xlarge"), "Value": value})
    stub.add_response("list_service_quotas", {"Quotas": quotas}, {"ServiceCode": "sagemaker"})
    if value is None:
        stub.add_response("list_aws_default_service_quotas", {"Quotas": []}, {"ServiceCode": "sagemaker"})
    stub.activate()
    return stub


def test_scale_up_within_quota_counts_every_cluster(clusters):
    op = _operator(4)
    _stub_quota(op, 8.0)
    verdict = op.execute({})
    # 2 (hp/gpu) + 1 (other/gpu) in use; 2 more needed; 8 allowed.
    assert verdict["ok"] and verdict["in_use_instances"] == 3 and verdict["needed_instances"] == 2
    assert verdict["quota_code"] == "L-6B6D8A2C" and verdict["instance_type"] == "ml.g5.12xlarge"


def test_scale_up_beyond_quota_is_refused_with_the_request_command(clusters):
    op = _operator(6)
    _stub_quota(op, 4.0)
    with pytest.raises(AirflowFailException) as err:
        op.execute({})
    msg = str(err.value)
    assert "ml.g5.12xlarge for cluster usage" in msg and "L-6B6D8A2C" in msg and "3 in use" in msg
    assert ("aws service-quotas request-service-quota-increase --service-code sagemaker --quota-code L-6B6D8A2C "
            "--desired-value 7 --region us-east-1") in msg


def test_missing_quota_and_unknown_group(clusters):
    op = _operator(1)
    _stub_quota(op, None)
    with pytest.raises(AirflowFailException, match="No Service Quotas entry"):
        op.execute({})
    bad = HyperPodCapacityPreflightOperator(task_id="x", cluster_name="hp", instance_group_name="nope",
                                            target_count=1, region_name=REGION)
    with pytest.raises(ValueError, match="no instance group 'nope'"):
        bad.execute({})
