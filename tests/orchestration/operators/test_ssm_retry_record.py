"""Regression: a workstation started by the first try of the evaluation must still be stopped when
that try fails and a retry runs (a retry's XComs start empty, so the record lives on an instance tag)."""

from __future__ import annotations

from types import SimpleNamespace

import boto3
import pytest
from moto import mock_aws

from airflow.sdk.exceptions import TaskDeferred

from operator_helpers import FakeTI
from sim2real.contract import task_ids as ids
from sim2real.orchestration.operators.ssm import STARTED_BY_TAG, WorkstationCommandOperator, WorkstationStopOperator
from sim2real.orchestration.triggers.ssm import WorkstationInstanceTrigger
from sim2real.contract.run_key import make_run_key

REGION = "us-east-1"
RUN_ID = "manual__2026-11-30T00:00:00+00:00"


@pytest.fixture
def workstation(aws_env):
    with mock_aws():
        ec2 = boto3.client("ec2", region_name=REGION)
        # moto does not check the AMI id (and the tests run without its default AMIs)
        iid = ec2.run_instances(ImageId="ami-0abcdef1234567890", MinCount=1, MaxCount=1, InstanceType="g6.12xlarge",
                                TagSpecifications=[{"ResourceType": "instance", "Tags": [
                                    {"Key": "sim2real:role", "Value": "workstation"}]}])["Instances"][0]["InstanceId"]
        ec2.stop_instances(InstanceIds=[iid])
        yield ec2, iid


def _context(ti):
    return {"ti": ti, "dag": SimpleNamespace(dag_id="sim_to_real"), "run_id": RUN_ID}


def _command_op():
    op = WorkstationCommandOperator(task_id="run_evaluation", workstation_tag_key="sim2real:role",
                                    workstation_tag_value="workstation", commands=["true"],
                                    execution_timeout_seconds=60, output_s3_bucket="b", output_s3_key_prefix="p",
                                    region_name=REGION)
    op.hook.agent_ping_status = lambda *a, **k: "Online"  # moto has no SSM agent
    return op


def _ensure(ti):
    """``_ensure_running`` across the deferral a start makes (WorkstationInstanceTrigger until running; the
    resume runs it again and finds the instance running)."""
    try:
        return _command_op()._ensure_running(_context(ti))
    except TaskDeferred as deferred:
        assert isinstance(deferred.trigger, WorkstationInstanceTrigger) and deferred.trigger.until == "running"
        return _command_op()._ensure_running(_context(ti))


def test_retry_knows_the_run_started_the_workstation_and_the_stop_still_happens(workstation):
    ec2, iid = workstation
    first_try = FakeTI(ids.RUN_EVALUATION)
    assert _ensure(first_try) == (iid, True)
    tags = {t["Key"]: t["Value"] for t in ec2.describe_tags()["Tags"] if t["ResourceId"] == iid}
    assert tags[STARTED_BY_TAG] == make_run_key("sim_to_real", RUN_ID)

    # Retry: the instance is already running; the XComs of the first try are gone.
    retry = FakeTI(ids.RUN_EVALUATION)
    assert _ensure(retry) == (iid, True)

    # Even with a retry that recorded "not started", the stop reads the tag and stops the instance.
    retry.xcom.update({"started_instance": False, "instance_id": iid})
    stop = WorkstationStopOperator(task_id="stop_workstation", command_task_id=ids.RUN_EVALUATION,
                                   wait_for_stopped=False, region_name=REGION)
    result = stop.execute(_context(retry))
    assert result["stopped"] is True
    state = ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state in ("stopping", "stopped")
    assert not [t for t in ec2.describe_tags()["Tags"] if t["ResourceId"] == iid and t["Key"] == STARTED_BY_TAG]


def test_an_instance_started_by_another_run_is_left_alone(workstation):
    ec2, iid = workstation
    ec2.start_instances(InstanceIds=[iid])
    ec2.create_tags(Resources=[iid], Tags=[{"Key": STARTED_BY_TAG, "Value": "some-other-run-0000"}])
    ti = FakeTI(ids.RUN_EVALUATION)
    assert _ensure(ti) == (iid, False)
    ti.xcom.update({"started_instance": False, "instance_id": iid})
    stop = WorkstationStopOperator(task_id="stop_workstation", command_task_id=ids.RUN_EVALUATION,
                                   wait_for_stopped=False, region_name=REGION)
    assert stop.execute(_context(ti))["stopped"] is False


def _stop_by_tag():
    return WorkstationStopOperator(task_id="stop_workstation", command_task_id=ids.RUN_EVALUATION,
                                   workstation_tag_key="sim2real:role", workstation_tag_value="workstation",
                                   wait_for_stopped=False, region_name=REGION)


def test_without_any_record_of_the_command_the_workstation_this_run_started_is_found_by_its_tags(workstation):
    """A sweep's candidate evaluations started the workstation, then the sweep failed: this run's own
    evaluation never ran, so there is no instance id in its XCom, and the stop must still happen."""
    ec2, iid = workstation
    candidate_try = FakeTI("sweep.run_evaluation")
    assert _ensure(candidate_try) == (iid, True)
    result = _stop_by_tag().execute(_context(FakeTI(ids.RUN_EVALUATION)))  # no XCom at all
    assert result["stopped"] is True and result["instance_id"] == iid
    state = ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state in ("stopping", "stopped")


def test_without_a_record_a_workstation_another_run_started_is_left_running(workstation):
    ec2, iid = workstation
    ec2.start_instances(InstanceIds=[iid])
    ec2.create_tags(Resources=[iid], Tags=[{"Key": STARTED_BY_TAG, "Value": "some-other-run-0000"}])
    result = _stop_by_tag().execute(_context(FakeTI(ids.RUN_EVALUATION)))
    assert result["stopped"] is False and result["instance_id"] is None
    state = ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state == "running"
