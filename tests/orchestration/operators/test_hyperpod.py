"""HyperPodScaleOperator / HyperPodHook / HyperPodScaleTrigger.

DescribeCluster/ListClusterNodes come from moto; moto has no UpdateCluster, so the sync path
uses botocore's Stubber fed with moto's real DescribeCluster output (the Stubber checks the
UpdateCluster request against the SageMaker service model).
"""

from __future__ import annotations

import copy

import boto3
import pytest
from botocore.stub import Stubber
from moto.sagemaker.models import sagemaker_backends

from airflow.providers.common.compat.sdk import AirflowException
from airflow.sdk.bases.operator import ExecutorSafeguard
from airflow.sdk.exceptions import TaskDeferred
from sim2real.contract import task_ids as ids
from sim2real.orchestration.hooks.hyperpod import instance_group_specs
from sim2real.orchestration.operators.hyperpod import HyperPodScaleOperator
from sim2real.orchestration.triggers.hyperpod import HyperPodScaleTrigger

from operator_helpers import first_event

ExecutorSafeguard.test_mode = True
ACCOUNT, REGION = "123456789012", "us-east-1"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/hyperpod"


@pytest.fixture
def ti_task_id():
    return "scale"


@pytest.fixture(scope="module")
def sm(moto_endpoint):
    return boto3.client("sagemaker", region_name=REGION, endpoint_url=moto_endpoint)


def _group(name, itype, count):
    return {
        "InstanceGroupName": name,
        "InstanceType": itype,
        "InstanceCount": count,
        "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/scripts/", "OnCreate": "on_create.sh"},
        "ExecutionRole": ROLE,
        "ThreadsPerCore": 1,
        "InstanceStorageConfigs": [{"EbsVolumeConfig": {"VolumeSizeInGB": 500}}],
    }


@pytest.fixture(scope="module")
def cluster(sm):
    sm.create_cluster(
        ClusterName="hp",
        InstanceGroups=[_group("head", "ml.m5.xlarge", 1), _group("gpu", "ml.g5.12xlarge", 2), _group("login", "ml.t3.medium", 1)],
    )
    return "hp"


def _scaled(describe, group, count, status="InService"):
    out = copy.deepcopy(describe)
    out.pop("ResponseMetadata", None)
    out["ClusterStatus"] = status
    for g in out["InstanceGroups"]:
        if g["InstanceGroupName"] == group:
            g["CurrentCount"] = g["TargetCount"] = count
    return out


def _stub_update(stub, describe):
    """The scale's first two answers: DescribeCluster (the cluster as moto has it), then UpdateCluster's."""
    stub.add_response("describe_cluster", {k: v for k, v in describe.items() if k != "ResponseMetadata"})
    stub.add_response("update_cluster", {"ClusterArn": describe["ClusterArn"]})


def _nodes(group, n, status="Running"):
    return {
        "ClusterNodeSummaries": [
            {"InstanceGroupName": group, "InstanceId": f"i-{group}-{i}", "InstanceType": "ml.g5.12xlarge",
             "LaunchTime": 0, "InstanceStatus": {"Status": status}}
            for i in range(n)
        ]
    }


def test_update_cluster_request_lists_every_group(sm, cluster, context):
    describe = sm.describe_cluster(ClusterName=cluster)
    op = HyperPodScaleOperator(task_id="s", cluster_name=cluster, instance_group_name="gpu", target_count=4, waiter_delay=0)
    expected_groups = [
        {**_group("head", "ml.m5.xlarge", 1)},
        {**_group("gpu", "ml.g5.12xlarge", 4)},
        {**_group("login", "ml.t3.medium", 1)},
    ]
    with Stubber(op.hook.conn) as stub:
        stub.add_response("describe_cluster", {k: v for k, v in describe.items() if k != "ResponseMetadata"}, {"ClusterName": cluster})
        stub.add_response(
            "update_cluster", {"ClusterArn": describe["ClusterArn"]}, {"ClusterName": cluster, "InstanceGroups": expected_groups}
        )
        stub.add_response("describe_cluster", _scaled(describe, "gpu", 2, status="Updating"), {"ClusterName": cluster})
        with pytest.raises(TaskDeferred) as deferred:  # not at the target yet: the wait is deferred
            op.execute(context)
        stub.assert_no_pending_responses()
    assert deferred.value.kwargs["result"] == {
        "cluster_name": "hp", "cluster_arn": describe["ClusterArn"], "instance_group_name": "gpu",
        "previous_count": 2, "target_count": 4, "current_count": None, "updated": True,
    }


def test_specs_drop_describe_only_fields_and_map_counts(sm, cluster):
    describe = sm.describe_cluster(ClusterName=cluster)
    describe["InstanceGroups"][0].update(MinCount=1, Status="InService", ActiveOperations={"Scaling": 1}, DesiredImageId="ami-1")
    specs, previous = instance_group_specs(sm, describe, "head", 0)
    assert previous == 1
    head = specs[0]
    assert head["InstanceCount"] == 0 and head["MinInstanceCount"] == 1 and head["ImageId"] == "ami-1"
    assert not {"CurrentCount", "TargetCount", "MinCount", "Status", "ActiveOperations"} & set(head)
    assert [s["InstanceGroupName"] for s in specs] == ["head", "gpu", "login"]


def test_unknown_group_lists_groups(sm, cluster, context):
    op = HyperPodScaleOperator(task_id="s", cluster_name=cluster, instance_group_name="gpu-big", target_count=1)
    with pytest.raises(ValueError, match="no instance group 'gpu-big'; its groups are: head, gpu, login"):
        op.execute(context)


@pytest.mark.parametrize("count", [-1, "many"])
def test_bad_count(cluster, context, count):
    op = HyperPodScaleOperator(task_id="s", cluster_name=cluster, instance_group_name="gpu", target_count=count)
    with pytest.raises(ValueError, match="target_count"):
        op.execute(context)


def test_already_at_target_skips_update_and_waits(sm, cluster, context):
    # moto: gpu group is InService with 2 Running nodes; no UpdateCluster (moto would answer 500).
    op = HyperPodScaleOperator(task_id="s", cluster_name=cluster, instance_group_name="gpu", target_count=2, waiter_delay=0)
    result = op.execute(context)
    assert result["updated"] is False and result["current_count"] == 2


def test_cluster_failure_fails(sm, cluster, context):
    describe = sm.describe_cluster(ClusterName=cluster)
    op = HyperPodScaleOperator(task_id="s", cluster_name=cluster, instance_group_name="gpu", target_count=8, waiter_delay=0)
    with Stubber(op.hook.conn) as stub:
        _stub_update(stub, describe)
        failed = _scaled(describe, "gpu", 2, status="RollingBack")
        failed["FailureMessage"] = "InsufficientInstanceCapacity for ml.g5.12xlarge"
        stub.add_response("describe_cluster", failed)
        with pytest.raises(AirflowException, match="RollingBack: InsufficientInstanceCapacity"):
            op.execute(context)


def test_deferrable_defers_after_update(sm, cluster, context):
    describe = sm.describe_cluster(ClusterName=cluster)
    op = HyperPodScaleOperator(task_id="s", cluster_name=cluster, instance_group_name="gpu", target_count=3)
    with Stubber(op.hook.conn) as stub:
        _stub_update(stub, describe)
        stub.add_response("describe_cluster", _scaled(describe, "gpu", 3, status="Updating"))
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context)
    trigger = deferred.value.trigger
    assert isinstance(trigger, HyperPodScaleTrigger) and trigger.target_count == 3


def test_a_group_already_at_its_target_completes_without_deferring(sm, cluster, context):
    """No trigger race: a group whose nodes are already Running at the target is settled in the task."""
    describe = sm.describe_cluster(ClusterName=cluster)
    op = HyperPodScaleOperator(task_id="s", cluster_name=cluster, instance_group_name="gpu", target_count=3)
    with Stubber(op.hook.conn) as stub:
        _stub_update(stub, describe)
        stub.add_response("describe_cluster", _scaled(describe, "gpu", 3))
        stub.add_response("list_cluster_nodes", _nodes("gpu", 3))
        assert op.execute(context)["current_count"] == 3  # no TaskDeferred


@pytest.mark.parametrize(
    ("status", "target", "expected"),
    [("InService", 2, "success"), ("InService", 3, "timeout"), ("Updating", 2, "timeout"),
     ("Failed", 2, "failure"), ("RollingBack", 2, "failure")],
)
def test_trigger_states(sm, cluster, context, status, target, expected):
    backend = sagemaker_backends[ACCOUNT][REGION]
    backend.clusters[cluster].status = status
    try:
        event = first_event(
            HyperPodScaleTrigger(cluster_name=cluster, instance_group_name="gpu", target_count=target, waiter_delay=0,
                                 waiter_max_attempts=1)
        )
    finally:
        backend.clusters[cluster].status = "InService"
    assert event["status"] == expected
    op = HyperPodScaleOperator(task_id="s", cluster_name=cluster, instance_group_name="gpu", target_count=target)
    if expected == "success":
        assert op.execute_complete(context, event, result={"cluster_name": cluster})["current_count"] == 2
    else:
        with pytest.raises(AirflowException, match="Scaling HyperPod cluster hp"):
            op.execute_complete(context, event, result={})


def test_trigger_serializes_round_trip():
    t = HyperPodScaleTrigger(cluster_name="hp", instance_group_name="gpu", target_count=2, waiter_delay=1, waiter_max_attempts=2)
    path, kwargs = t.serialize()
    assert path == "sim2real.orchestration.triggers.hyperpod.HyperPodScaleTrigger"
    assert HyperPodScaleTrigger(**kwargs).serialize() == (path, kwargs)


def test_an_updating_cluster_is_waited_out_in_the_triggerer_then_updated(sm, cluster, context, monkeypatch):
    """A scale-down while the scale-up is still Updating: the task defers until InService (no sleep in the
    worker), then its resume sends the UpdateCluster."""
    monkeypatch.setattr("time.sleep", lambda s: pytest.fail(f"the worker slept {s} s"))
    describe = {k: v for k, v in sm.describe_cluster(ClusterName=cluster).items() if k != "ResponseMetadata"}
    op = HyperPodScaleOperator(task_id="s", cluster_name=cluster, instance_group_name="gpu", target_count=0,
                               wait_for_completion=False, waiter_delay=7, waiter_max_attempts=5)
    with Stubber(op.hook.conn) as stub:
        stub.add_response("describe_cluster", _scaled(describe, "gpu", 2, status="Updating"), {"ClusterName": cluster})
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context)
        stub.assert_no_pending_responses()
    trigger = deferred.value.trigger
    assert isinstance(trigger, HyperPodScaleTrigger) and trigger.target_count is None
    assert deferred.value.method_name == "resume_update" and not deferred.value.kwargs  # dag.test() drops kwargs
    assert trigger.attempts == 5 and context["ti"].xcom["update_deadline"] > 0  # one deadline for all such waits
    with Stubber(op.hook.conn) as stub:
        stub.add_response("describe_cluster", _scaled(describe, "gpu", 2), {"ClusterName": cluster})
        stub.add_response("update_cluster", {"ClusterArn": describe["ClusterArn"]})
        result = op.resume_update(context, {"status": "success", "message": "InService"})
        stub.assert_no_pending_responses()
    assert result["updated"] is True and result["previous_count"] == 2 and result["target_count"] == 0


def test_a_conflict_is_waited_out_in_the_triggerer(sm, cluster, context):
    describe = {k: v for k, v in sm.describe_cluster(ClusterName=cluster).items() if k != "ResponseMetadata"}
    op = HyperPodScaleOperator(task_id="s", cluster_name=cluster, instance_group_name="gpu", target_count=0,
                               wait_for_completion=False, waiter_delay=7, waiter_max_attempts=5)
    with Stubber(op.hook.conn) as stub:
        stub.add_response("describe_cluster", _scaled(describe, "gpu", 2), {"ClusterName": cluster})
        stub.add_client_error("update_cluster", service_error_code="ConflictException",
                              service_message="Cluster is being updated", http_status_code=400)
        with pytest.raises(TaskDeferred) as deferred:
            op.resume_update(context, {"status": "success", "message": "InService"})
    assert deferred.value.trigger.target_count is None


def test_the_wait_for_in_service_failing_fails_the_scale(context):
    op = HyperPodScaleOperator(task_id="s", cluster_name="hp", instance_group_name="gpu", target_count=0)
    with pytest.raises(AirflowException, match="waiting for InService before UpdateCluster: failure: .*RollingBack"):
        op.resume_update(context, {"status": "failure", "message": "HyperPod hp: cluster is RollingBack"})


@pytest.mark.parametrize(("statuses", "expected"), [
    (["InService", "InService"], ["retry", "success"]),  # busy a moment ago: one poll interval before trusting it
    (["Updating", "InService"], ["retry", "success"]),
    (["Updating", "Failed"], ["retry", "failure"]),
])
def test_the_ready_for_update_step(statuses, expected):
    from sim2real.orchestration.waits.core import WaitState
    from sim2real.orchestration.waits.hyperpod import hyperpod_scale_step

    state = WaitState(params={"cluster_name": "hp", "instance_group_name": "gpu", "target_count": None})
    got = []
    for status in statuses:
        step = hyperpod_scale_step({"ClusterStatus": status, "InstanceGroups": []}, state)
        got.append(step.outcome)
        state = state.after(step)
    assert got == expected


def test_the_ready_for_update_trigger_lists_no_nodes(sm, cluster):
    trigger = HyperPodScaleTrigger(cluster_name=cluster, instance_group_name="gpu", target_count=None,
                                   waiter_delay=0, waiter_max_attempts=3)
    event = first_event(trigger)
    assert event["status"] == "success" and "ready for UpdateCluster" in event["message"], event
    path, kwargs = trigger.serialize()
    assert HyperPodScaleTrigger(**kwargs).serialize() == (path, kwargs)


@pytest.mark.parametrize("status", ["Failed", "RollingBack", "Deleting"])
def test_update_refused_on_a_failed_cluster(sm, cluster, context, status):
    describe = {k: v for k, v in sm.describe_cluster(ClusterName=cluster).items() if k != "ResponseMetadata"}
    op = HyperPodScaleOperator(task_id="s", cluster_name=cluster, instance_group_name="gpu", target_count=0,
                               waiter_delay=0, waiter_max_attempts=5)
    with Stubber(op.hook.conn) as stub:
        stub.add_response("describe_cluster", _scaled(describe, "gpu", 2, status=status), {"ClusterName": cluster})
        with pytest.raises(AirflowException, match=f"the cluster is {status}"):
            op.execute(context)


def test_update_gives_up_at_the_tries_deadline_whatever_the_resumes(sm, cluster, context):
    """The waits for InService of one try share one deadline (waiter_delay x waiter_max_attempts after the first),
    kept in the try's XCom: resume kwargs do not survive dag.test()."""
    import time as _time

    describe = {k: v for k, v in sm.describe_cluster(ClusterName=cluster).items() if k != "ResponseMetadata"}
    op = HyperPodScaleOperator(task_id="s", cluster_name=cluster, instance_group_name="gpu", target_count=0,
                               waiter_delay=60, waiter_max_attempts=2)
    context["ti"].xcom["update_deadline"] = _time.time() - 1  # set by the first wait, 2 x 60 s ago
    with Stubber(op.hook.conn) as stub:
        stub.add_response("describe_cluster", _scaled(describe, "gpu", 2, status="Updating"), {"ClusterName": cluster})
        with pytest.raises(AirflowException, match="not InService for an UpdateCluster within 120 s"):
            op.resume_update(context, {"status": "success", "message": "InService"})
        stub.assert_no_pending_responses()


def test_the_wait_for_in_service_describes_every_poll_interval_with_events_on():
    """A cluster already InService when the wait begins announces no state change: with events on, the wait still
    describes every waiter_delay, not only at the 600 s reconcile."""
    ready = HyperPodScaleTrigger(cluster_name="hp", instance_group_name="gpu", target_count=None, waiter_delay=7)
    assert ready.max_event_wait(None, None) == 7.0
    counting = HyperPodScaleTrigger(cluster_name="hp", instance_group_name="gpu", target_count=2, waiter_delay=7)
    assert counting.max_event_wait(None, None) is None


def test_scale_down_skips_without_any_call_when_its_scale_up_did_not_run():
    """A teardown whose scale-up handed nothing on (e.g. a run on the Batch backend) must not resize the
    cluster: skipped before DescribeCluster (the operator's hook is never touched)."""
    from types import SimpleNamespace

    from airflow.providers.common.compat.sdk import AirflowSkipException

    from sim2real.orchestration.operators.hyperpod import HyperPodScaleOperator

    op = HyperPodScaleOperator(task_id="scale_down", cluster_name="sim2real-hyperpod", instance_group_name="gpu",
                               target_count=0, only_after_task_id=ids.HYPERPOD_SCALE_UP, region_name="us-east-1")
    pulled, pushed = [], {}
    ti = SimpleNamespace(xcom_pull=lambda task_ids: pulled.append(task_ids),
                         xcom_push=lambda key, value: pushed.__setitem__(key, value))
    op.__dict__["hook"] = None  # any AWS call would fail on this
    with pytest.raises(AirflowSkipException, match="hyperpod.scale_up did not scale sim2real-hyperpod"):
        op.execute({"ti": ti})
    assert pulled == [ids.HYPERPOD_SCALE_UP]
    # The cluster link's key is written anyway: a skipped task's links are rendered too.
    assert pushed["sim2real_hyperpod_cluster"]["cluster_name"] == "sim2real-hyperpod"


def test_group_nodes_are_read_across_pages_and_only_of_the_group_itself(sm, cluster):
    """ListClusterNodes' InstanceGroupNameContains matches by substring; the pages are followed (paginator)."""
    from sim2real.orchestration.hooks.hyperpod import HyperPodHook

    hook = HyperPodHook(aws_conn_id=None, region_name=REGION)
    first, second = _nodes("gpu", 2), _nodes("gpu-spare", 1)
    second["ClusterNodeSummaries"] += _nodes("gpu", 3)["ClusterNodeSummaries"][2:]
    with Stubber(hook.conn) as stub:
        stub.add_response("list_cluster_nodes", {**first, "NextToken": "page-2"},
                          {"ClusterName": cluster, "InstanceGroupNameContains": "gpu"})
        stub.add_response("list_cluster_nodes", second,
                          {"ClusterName": cluster, "InstanceGroupNameContains": "gpu", "NextToken": "page-2"})
        nodes = hook.list_group_nodes(cluster, "gpu")
        stub.assert_no_pending_responses()
    assert [n["InstanceId"] for n in nodes] == ["i-gpu-0", "i-gpu-1", "i-gpu-2"]
