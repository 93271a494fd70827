"""Each declared waiter JSON, loaded with botocore's waiter model and run against documented response shapes.

Shapes follow the AWS API references: AWS Batch DescribeJobs (``jobs[].status``), AWS CodeBuild BatchGetBuilds
(``builds[].buildStatus``), Amazon SageMaker DescribePipelineExecution (``PipelineExecutionStatus``),
DescribeModelPackage (``ModelApprovalStatus``), DescribeCluster (``ClusterStatus``), AWS IoT Greengrass V2
ListEffectiveDeployments (``effectiveDeployments[].coreDeviceExecutionStatus``). Every acceptor runs: a
status the waiter does not map matches no acceptor, which botocore treats as "keep waiting".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from botocore.waiter import WaiterModel

from airflow.providers.amazon.aws.hooks.base_aws import AwsGenericHook

WAITERS = Path(__file__).resolve().parents[2] / "include" / "sim2real" / "orchestration" / "waiters"


def _outcome(file: str, name: str, response: dict, parameters: dict | None = None) -> str | None:
    config = json.loads((WAITERS / file).read_text())
    config = AwsGenericHook._apply_parameters_value(config, name, parameters)
    waiter = WaiterModel(config).get_waiter(name)
    for acceptor in waiter.acceptors:
        if acceptor.matcher_func(response):
            return acceptor.state
    return None


def test_every_file_loads_as_a_version_2_model_with_operations():
    files = sorted(p.name for p in WAITERS.glob("*.json"))
    assert files == ["batch_ext.json", "codebuild.json", "greengrassv2.json", "sagemaker_ext.json"]
    for file in files:
        config = json.loads((WAITERS / file).read_text())
        model = WaiterModel(config)
        assert model.version == 2 and model.waiter_names
        for name in model.waiter_names:
            waiter = model.get_waiter(name)
            assert waiter.operation and waiter.acceptors and waiter.max_attempts > 0 and waiter.delay > 0


@pytest.mark.parametrize("status, expected", [
    ("SUCCEEDED", "success"), ("FAILED", "failure"), ("SUBMITTED", "retry"), ("PENDING", "retry"),
    ("RUNNABLE", "retry"), ("STARTING", "retry"), ("RUNNING", "retry"), ("UNHEARD_OF", None),
])
def test_batch_training_job_complete(status, expected):
    assert _outcome("batch_ext.json", "training_job_complete", {"jobs": [{"jobId": "j", "status": status}]}) == expected


@pytest.mark.parametrize("status, expected", [
    ("SUCCEEDED", "success"), ("FAILED", "failure"), ("FAULT", "failure"), ("TIMED_OUT", "failure"),
    ("STOPPED", "failure"), ("IN_PROGRESS", "retry"),
])
def test_codebuild_build_complete(status, expected):
    assert _outcome("codebuild.json", "build_complete", {"builds": [{"id": "p:1", "buildStatus": status}]}) == expected


@pytest.mark.parametrize("status, expected", [
    ("Succeeded", "success"), ("Failed", "failure"), ("Stopped", "failure"), ("CompletedWithFailures", "failure"),
    ("Executing", "retry"), ("Stopping", "retry"),
])
def test_sagemaker_pipeline_execution_terminal(status, expected):
    assert _outcome("sagemaker_ext.json", "pipeline_execution_terminal", {"PipelineExecutionStatus": status}) == expected


@pytest.mark.parametrize("status, expected", [
    ("Approved", "success"), ("Rejected", "failure"), ("PendingManualApproval", "retry"),
])
def test_sagemaker_model_package_approved(status, expected):
    assert _outcome("sagemaker_ext.json", "model_package_approved", {"ModelApprovalStatus": status}) == expected


@pytest.mark.parametrize("response, expected", [
    ({"ClusterStatus": "InService"}, "success"), ({"ClusterStatus": "Failed"}, "failure"),
    ({"ClusterStatus": "RollingBack"}, "failure"), ({"ClusterStatus": "Deleting"}, "failure"),
    ({"ClusterStatus": "Creating"}, None), ({"ClusterStatus": "Updating"}, None),
    ({"Error": {"Code": "ResourceNotFound", "Message": "no cluster"}}, "failure"),
])
def test_sagemaker_cluster_in_service(response, expected):
    assert _outcome("sagemaker_ext.json", "cluster_in_service", response) == expected


def test_greengrass_waiters():
    config = json.loads((WAITERS / "greengrassv2.json").read_text())
    names = sorted(config["waiters"])
    assert "core_device_deployment_complete" in names
    for status, expected in [("SUCCEEDED", "success"), ("COMPLETED", "success"), ("FAILED", "failure"),
                             ("TIMED_OUT", "failure"), ("REJECTED", "failure"), ("CANCELED", "failure"),
                             ("QUEUED", "retry"), ("IN_PROGRESS", "retry")]:
        response = {"effectiveDeployments": [{"deploymentId": "d-1", "coreDeviceExecutionStatus": status},
                                             {"deploymentId": "other", "coreDeviceExecutionStatus": "FAILED"}]}
        got = _outcome("greengrassv2.json", "core_device_deployment_complete", response, {"DEPLOYMENT_ID": "d-1"})
        assert got == expected, status
    # the deployment not received yet: another deployment's failure does not count
    response = {"effectiveDeployments": [{"deploymentId": "other", "coreDeviceExecutionStatus": "FAILED"}]}
    assert _outcome("greengrassv2.json", "core_device_deployment_complete", response,
                    {"DEPLOYMENT_ID": "d-1"}) is None
