"""hyperpod_scale_step: DescribeCluster + ListClusterNodes responses (Amazon SageMaker API Reference) -> Step."""

from __future__ import annotations

import pytest

from sim2real.orchestration.waits.core import WaitState
from sim2real.orchestration.waits.hyperpod import NODES_KEY, hyperpod_scale_step

STATE = WaitState(params={"cluster_name": "c", "instance_group_name": "gpu", "target_count": 2})


def _cluster(status, current=2, nodes=None, **extra):
    response = {"ClusterName": "c", "ClusterStatus": status,
                "InstanceGroups": [{"InstanceGroupName": "gpu", "CurrentCount": current, "TargetCount": 2}], **extra}
    if nodes is not None:
        response[NODES_KEY] = [{"InstanceGroupName": "gpu", "InstanceStatus": {"Status": s}} for s in nodes]
    return response


def test_in_service_at_target_with_running_nodes_succeeds():
    step = hyperpod_scale_step(_cluster("InService", nodes=["Running", "Running"]), STATE)
    assert step.outcome == "success" and step.payload == {"cluster_name": "c", "current_count": 2}


def test_in_service_but_nodes_not_up_or_not_listed_retries():
    assert hyperpod_scale_step(_cluster("InService", nodes=["Running", "Pending"]), STATE).outcome == "retry"
    assert hyperpod_scale_step(_cluster("InService", current=1, nodes=["Running"]), STATE).outcome == "retry"
    assert hyperpod_scale_step(_cluster("InService"), STATE).outcome == "retry"


@pytest.mark.parametrize("status", ["Failed", "RollingBack", "Deleting"])
def test_failed_cluster_fails_with_its_message(status):
    step = hyperpod_scale_step(_cluster(status, FailureMessage="capacity"), STATE)
    assert step.outcome == "failure" and status in step.reason and "capacity" in step.reason


@pytest.mark.parametrize("status", ["Creating", "Updating", "SystemUpdating", "SomethingNew"])
def test_transitional_and_unknown_statuses_retry(status):
    assert hyperpod_scale_step(_cluster(status), STATE).outcome == "retry"


def test_api_errors():
    assert hyperpod_scale_step({"Error": {"Code": "ThrottlingException"}}, STATE).outcome == "retry"
    step = hyperpod_scale_step({"Error": {"Code": "ResourceNotFound", "Message": "no cluster"}}, STATE)
    assert step.outcome == "failure" and step.payload["cluster_name"] == "c"
