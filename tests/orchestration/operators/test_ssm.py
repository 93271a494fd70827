"""WorkstationCommandOperator / WorkstationStopOperator / WorkstationCommandTrigger.

EC2 and S3 run on moto (ThreadedMotoServer). SSM on the sync path is a botocore Stubber on the
hook's client (moto has no DescribeInstanceInformation/CancelCommand and only ever reports
Success); the trigger runs against moto with the invocation's status edited in moto's backend.
"""

from __future__ import annotations

import asyncio
import json

import boto3
import pytest
from botocore.stub import ANY, Stubber
from moto.ssm.models import ssm_backends
from moto.ssm.responses import SimpleSystemManagerResponse

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException
from airflow.sdk.bases.operator import ExecutorSafeguard
from airflow.sdk.exceptions import TaskDeferred
from sim2real.orchestration.hooks.workstation import ssm_output_key
from sim2real.orchestration.operators.ssm import WorkstationCommandOperator, WorkstationStopOperator
from sim2real.orchestration.triggers.ssm import WorkstationCommandTrigger, WorkstationInstanceTrigger

from operator_helpers import first_event

ExecutorSafeguard.test_mode = True
ACCOUNT, REGION = "123456789012", "us-east-1"
BUCKET = "sim2real-artifacts"
PREFIX = "ssm-output/run-1"
CMD = "11111111-2222-3333-4444-555555555555"


@pytest.fixture(scope="module")
def moto_endpoint(moto_endpoint):
    """The module's moto server (conftest) with the SSM output bucket."""
    boto3.client("s3", region_name=REGION, endpoint_url=moto_endpoint).create_bucket(Bucket=BUCKET)
    return moto_endpoint


@pytest.fixture
def ti_task_id():
    return "evaluate"


@pytest.fixture
def ec2(moto_endpoint):
    return boto3.client("ec2", region_name=REGION, endpoint_url=moto_endpoint)


@pytest.fixture
def s3(moto_endpoint):
    return boto3.client("s3", region_name=REGION, endpoint_url=moto_endpoint)


def workstation(ec2, value, state="running"):
    iid = ec2.run_instances(
        ImageId="ami-12345678", MinCount=1, MaxCount=1, InstanceType="g6.12xlarge",
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "sim2real:role", "Value": value}]}],
    )["Instances"][0]["InstanceId"]
    if state == "stopped":
        ec2.stop_instances(InstanceIds=[iid])
    return iid


def operator(value, **kwargs):
    return WorkstationCommandOperator(
        task_id="evaluate",
        workstation_tag_key="sim2real:role",
        workstation_tag_value=value,
        commands=["sim2real-evaluate --episodes 20"],
        execution_timeout_seconds=5400,
        output_s3_bucket=BUCKET,
        output_s3_key_prefix=PREFIX,
        waiter_delay=0,
        **kwargs,
    )


def stub_until_send(stub, iid):
    stub.add_response(
        "describe_instance_information",
        {"InstanceInformationList": [{"InstanceId": iid, "PingStatus": "Online"}]},
        {"Filters": [{"Key": "InstanceIds", "Values": [iid]}]},
    )
    stub.add_response(
        "send_command",
        {"Command": {"CommandId": CMD, "InstanceIds": [iid], "Status": "Pending"}},
        {
            "DocumentName": "AWS-RunShellScript",
            "InstanceIds": [iid],
            "Parameters": {"commands": ["sim2real-evaluate --episodes 20"], "executionTimeout": ["5400"]},
            "OutputS3BucketName": BUCKET,
            "OutputS3KeyPrefix": PREFIX,
            "Comment": ANY,
        },
    )


def invocation(iid, status, code=0, stdout=""):
    return {"CommandId": CMD, "InstanceId": iid, "Status": status, "StatusDetails": status, "ResponseCode": code,
            "StandardOutputContent": stdout}


# ---------------------------------------------------------------- sync
def test_success_reads_full_stdout_from_s3(moto_endpoint, ec2, s3, context):
    iid = workstation(ec2, "ws-success")
    full = "".join(f"episode {i} success=1\n" for i in range(2000))
    assert len(full) > 24_000
    s3.put_object(Bucket=BUCKET, Key=ssm_output_key(PREFIX, CMD, iid), Body=full.encode())
    op = operator("ws-success")
    with Stubber(op.hook.conn) as stub:
        stub_until_send(stub, iid)
        stub.add_response("get_command_invocation", invocation(iid, "Success"), {"CommandId": CMD, "InstanceId": iid})
        stub.add_response("get_command_invocation", invocation(iid, "Success", stdout=full[:24_000]), {"CommandId": CMD, "InstanceId": iid})
        result = op.execute(context)
    assert result == {
        "command_id": CMD,
        "instance_id": iid,
        "status": "Success",
        "response_code": 0,
        "stdout": full,
        "stdout_s3_uri": f"s3://{BUCKET}/{PREFIX}/{CMD}/{iid}/awsrunShellScript/0.awsrunShellScript/stdout",
        "started_instance": False,
    }
    assert context["ti"].xcom["started_instance"] is False
    assert context["ti"].xcom["instance_id"] == iid


@pytest.mark.parametrize(("status", "code"), [("Failed", 1), ("Cancelled", -1), ("TimedOut", -1), ("Cancelling", -1)])
def test_failure_statuses_fail_within_one_poll(moto_endpoint, ec2, s3, context, status, code):
    value = f"ws-{status.lower()}"
    iid = workstation(ec2, value)
    s3.put_object(Bucket=BUCKET, Key=ssm_output_key(PREFIX, CMD, iid, "stderr"), Body=b"Traceback: boom")
    op = operator(value)
    with Stubber(op.hook.conn) as stub:
        stub_until_send(stub, iid)
        stub.add_response("get_command_invocation", invocation(iid, status, code), {"CommandId": CMD, "InstanceId": iid})
        with pytest.raises(AirflowException) as err:
            op.execute(context)
        stub.assert_no_pending_responses()
    assert f"ended {status}" in str(err.value) and iid in str(err.value) and CMD in str(err.value)
    assert "Traceback: boom" in str(err.value)


def test_an_api_error_right_after_send_is_not_the_commands_failure(moto_endpoint, ec2, s3, context):
    """AccessDenied on GetCommandInvocation says nothing about the command: the task fails retryably with the
    API error (not "ended Failed ... exited non-zero") and cancels the command it sent."""
    iid = workstation(ec2, "ws-denied")
    op = operator("ws-denied")
    with Stubber(op.hook.conn) as stub:
        stub_until_send(stub, iid)
        stub.add_client_error("get_command_invocation", service_error_code="AccessDeniedException",
                              service_message="not authorized to perform ssm:GetCommandInvocation",
                              http_status_code=400, expected_params={"CommandId": CMD, "InstanceId": iid})
        stub.add_response("cancel_command", {}, {"CommandId": CMD, "InstanceIds": [iid]})
        with pytest.raises(AirflowException) as err:
            op.execute(context)
        stub.assert_no_pending_responses()
    assert not isinstance(err.value, AirflowFailException)
    message = str(err.value)
    assert "AccessDenied" in message and "GetCommandInvocation" in message and f"cancelled on {iid}" in message
    assert "exited non-zero" not in message and "ended Failed" not in message


def test_a_stopped_workstation_is_started_waited_for_deferred_and_recorded(moto_endpoint, ec2, s3, context,
                                                                          monkeypatch):
    """StartInstances, then the wait for running + agent Online runs in the triggerer (it took a worker slot for
    up to ~20 minutes before); the resume sends the command; the teardown's wait for stopped is deferred too."""
    monkeypatch.setattr("time.sleep", lambda s: pytest.fail(f"the worker slept {s} s"))
    iid = workstation(ec2, "ws-stopped", state="stopped")
    with pytest.raises(TaskDeferred) as deferred:
        operator("ws-stopped", instance_ready_timeout_seconds=900).execute(context)
    trigger = deferred.value.trigger
    assert isinstance(trigger, WorkstationInstanceTrigger) and (trigger.instance_id, trigger.until) == (iid, "running")
    assert deferred.value.method_name == "resume_for_instance" and trigger.attempts * trigger.waiter_delay >= 900
    assert context["ti"].xcom["started_instance"] is True  # recorded before the wait: the teardown stops it
    assert ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]["State"]["Name"] == "running"

    s3.put_object(Bucket=BUCKET, Key=ssm_output_key(PREFIX, CMD, iid), Body=b"ok\n")
    op = operator("ws-stopped")
    with Stubber(op.hook.conn) as stub:
        stub_until_send(stub, iid)  # running, agent Online: the command goes out
        stub.add_response("get_command_invocation", invocation(iid, "Success"))
        stub.add_response("get_command_invocation", invocation(iid, "Success", stdout="ok\n"))
        result = op.resume_for_instance(context, {"status": "success", "message": "ready", "instance_id": iid,
                                                  "instance_state": "running", "ping_status": "Online"},
                                        **deferred.value.kwargs)
    assert result["started_instance"] is True and result["stdout"] == "ok\n"

    stop = WorkstationStopOperator(task_id="stop", command_task_id="evaluate", wait_for_stopped=True, waiter_delay=1)
    with pytest.raises(TaskDeferred) as stopping:
        stop.execute(context)
    assert (stopping.value.trigger.instance_id, stopping.value.trigger.until) == (iid, "stopped")
    assert ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]["State"]["Name"] == "stopped"
    event = first_event(stopping.value.trigger)
    assert event["status"] == "success" and event["instance_state"] == "stopped", event
    assert stop.execute_complete(context, event, **stopping.value.kwargs) == {
        "instance_id": iid, "stopped": True, "reason": "started by this run"}


def test_a_workstation_that_does_not_become_ready_fails_naming_it_and_the_fix(context):
    event = {"status": "timeout", "message": "EC2 instance i-1 is running; its SSM agent is ConnectionLost",
             "instance_id": "i-1", "instance_state": "running", "ping_status": "ConnectionLost"}
    with pytest.raises(AirflowException, match="Workstation i-1 did not become ready .*ConnectionLost.*"
                                               "AmazonSSMManagedInstanceCore"):
        operator("ws-any").resume_for_instance(context, event)


def _described(state):
    return {"Reservations": [{"Instances": [{"InstanceId": "i-1", "State": {"Name": state}}]}]}


def test_a_workstation_stopped_again_while_starting_fails_the_wait_at_once():
    """botocore's InstanceRunning waiter keeps waiting on 'stopped'; after a poll interval, a started workstation
    that is stopped again was stopped by someone else: fail now, not at the 10-minute timeout."""
    from sim2real.orchestration.waits.core import WaitState
    from sim2real.orchestration.waits.ssm import instance_step

    state = WaitState(params={"instance_id": "i-1", "until": "running"})
    first = instance_step(_described("stopped"), state)  # right after StartInstances: not yet pending
    assert first.outcome == "retry"
    assert instance_step(_described("stopped"), state.after(first)).outcome == "failure"


@pytest.mark.parametrize(("until", "state", "ping", "expected"), [
    ("running", "pending", None, "retry"),
    ("running", "running", None, "retry"),  # the agent has not registered yet
    ("running", "running", "ConnectionLost", "retry"),
    ("running", "running", "Online", "success"),
    ("running", "stopping", None, "failure"),  # someone stopped it meanwhile (botocore InstanceRunning)
    ("running", "terminated", None, "failure"),
    ("stopped", "stopping", None, "retry"),
    ("stopped", "stopped", None, "success"),
    ("stopped", "pending", None, "failure"),  # someone started it meanwhile (botocore InstanceStopped)
])
def test_the_instance_step(until, state, ping, expected):
    from sim2real.orchestration.waits.core import WaitState
    from sim2real.orchestration.waits.ssm import PING_STATUS_KEY, instance_step

    step = instance_step({**_described(state), PING_STATUS_KEY: ping},
                         WaitState(params={"instance_id": "i-1", "until": until}))
    assert step.outcome == expected, step.reason
    assert step.payload == {"instance_id": "i-1", "instance_state": state, "ping_status": ping}


def test_the_instance_trigger_serializes_round_trip():
    trigger = WorkstationInstanceTrigger(instance_id="i-1", until="running", waiter_delay=5, waiter_max_attempts=3)
    path, kwargs = trigger.serialize()
    assert path == "sim2real.orchestration.triggers.ssm.WorkstationInstanceTrigger"
    assert WorkstationInstanceTrigger(**kwargs).serialize() == (path, kwargs)


def test_stopped_without_start_if_stopped_fails(moto_endpoint, ec2, context):
    workstation(ec2, "ws-nostart", state="stopped")
    with pytest.raises(AirflowException, match="start_if_stopped=False"):
        operator("ws-nostart", start_if_stopped=False).execute(context)


def test_stop_operator_leaves_instance_it_did_not_start(moto_endpoint, ec2, context):
    iid = workstation(ec2, "ws-keep")
    out = WorkstationStopOperator(task_id="stop", instance_id=iid, started="False").execute(context)
    assert out["stopped"] is False
    assert ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]["State"]["Name"] == "running"


def test_tag_must_select_exactly_one_instance(moto_endpoint, ec2, context):
    with pytest.raises(ValueError, match="No EC2 instance"):
        operator("ws-nobody").execute(context)
    workstation(ec2, "ws-two")
    workstation(ec2, "ws-two")
    with pytest.raises(ValueError, match="2 EC2 instances"):
        operator("ws-two").execute(context)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"commands": []}, "non-empty list"), ({"commands": "echo hi"}, "non-empty list"),
     ({"execution_timeout_seconds": 0}, "1..172800"), ({"output_s3_bucket": ""}, "output_s3_bucket")],
)
def test_bad_arguments_refused(moto_endpoint, context, kwargs, match):
    base = dict(task_id="e", workstation_tag_key="k", workstation_tag_value="v", commands=["true"],
                execution_timeout_seconds=60, output_s3_bucket=BUCKET, output_s3_key_prefix=PREFIX)
    with pytest.raises(ValueError, match=match):
        WorkstationCommandOperator(**{**base, **kwargs}).execute(context)


def test_defers_with_resolved_instance_ids(moto_endpoint, ec2, context):
    iid = workstation(ec2, "ws-defer")
    op = operator("ws-defer")
    with Stubber(op.hook.conn) as stub:
        stub_until_send(stub, iid)
        stub.add_response("get_command_invocation", invocation(iid, "InProgress"), {"CommandId": CMD, "InstanceId": iid})
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context)
    trigger = deferred.value.trigger
    assert isinstance(trigger, WorkstationCommandTrigger)
    assert trigger.instance_ids == [iid] and trigger.command_id == CMD
    assert deferred.value.kwargs == {"started_instance": False}
    assert trigger.attempts * max(1, trigger.waiter_delay) >= 5400  # default covers executionTimeout


@pytest.mark.parametrize("status", ["Success", "Failed"])
def test_command_already_over_completes_without_deferring(moto_endpoint, ec2, s3, context, status):
    """No trigger race: a command that ended before the task would defer is settled in the task."""
    iid = workstation(ec2, f"ws-over-{status}")
    s3.put_object(Bucket=BUCKET, Key=ssm_output_key(PREFIX, CMD, iid), Body=b"episode 0 success=1\n")
    op = operator(f"ws-over-{status}")
    with Stubber(op.hook.conn) as stub:
        stub_until_send(stub, iid)
        for _ in range(2):
            stub.add_response("get_command_invocation", invocation(iid, status, 0 if status == "Success" else 1),
                              {"CommandId": CMD, "InstanceId": iid})
        if status == "Success":
            assert op.execute(context)["status"] == "Success"  # no TaskDeferred
        else:
            with pytest.raises(AirflowFailException, match="ended Failed"):
                op.execute(context)


def test_on_kill_cancels_command(moto_endpoint, ec2, context):
    iid = workstation(ec2, "ws-kill")
    op = operator("ws-kill", waiter_max_attempts=1)
    with Stubber(op.hook.conn) as stub:
        stub_until_send(stub, iid)
        stub.add_response("get_command_invocation", invocation(iid, "InProgress"))
        with pytest.raises(TaskDeferred):
            op.execute(context)
        stub.add_response("cancel_command", {}, {"CommandId": CMD, "InstanceIds": [iid]})
        op.on_kill()
        stub.assert_no_pending_responses()


# ---------------------------------------------------------------- trigger (aiobotocore -> moto)
def _sent_command(moto_endpoint, ec2, value):
    iid = workstation(ec2, value)
    ssm = boto3.client("ssm", region_name=REGION, endpoint_url=moto_endpoint)
    cid = ssm.send_command(InstanceIds=[iid], DocumentName="AWS-RunShellScript", Parameters={"commands": ["true"]})["Command"]["CommandId"]
    return iid, cid


def _set_status(cid, status, code):
    command = ssm_backends[ACCOUNT][REGION].get_command_by_id(cid)
    for inv in command.invocations:
        inv.update(Status=status, StatusDetails=status, ResponseCode=code)


@pytest.mark.parametrize(
    ("status", "expected"),
    [("Success", "success"), ("Failed", "failure"), ("Cancelled", "failure"), ("TimedOut", "failure"),
     ("Cancelling", "failure"), ("InProgress", "timeout"), ("Pending", "timeout"), ("Delayed", "timeout")],
)
def test_trigger_status_table(moto_endpoint, ec2, context, status, expected):
    iid, cid = _sent_command(moto_endpoint, ec2, f"ws-trig-{status.lower()}")
    _set_status(cid, status, 0 if status == "Success" else 2)
    # moto has no ListCommandInvocations: the trigger only uses GetCommandInvocation per instance id.
    event = first_event(WorkstationCommandTrigger(command_id=cid, instance_ids=[iid], waiter_delay=0, waiter_max_attempts=1))
    assert event["status"] == expected
    if expected == "failure":
        assert event["command_status"] == status and event["instance_id"] == iid
        op = operator(f"ws-trig-{status.lower()}")
        with pytest.raises(AirflowException, match=f"ended {status}"):
            op.execute_complete(context, event)
    if expected == "success":
        assert event["invocations"] == {iid: {"status": "Success", "response_code": 0}}


def test_trigger_waits_for_every_instance(moto_endpoint, ec2):
    iid1, cid = _sent_command(moto_endpoint, ec2, "ws-multi-a")
    iid2 = workstation(ec2, "ws-multi-b")
    # The second instance never received the command: InvocationDoesNotExist keeps it pending.
    event = first_event(WorkstationCommandTrigger(command_id=cid, instance_ids=[iid1, iid2], waiter_delay=0, waiter_max_attempts=2))
    assert event["status"] == "timeout" and event["pending"] == {iid2: "Pending"}


def test_trigger_on_kill_cancels_command(moto_endpoint, monkeypatch):
    calls = []

    def cancel_command(self):
        calls.append(json.loads(self.body))
        return "{}"

    monkeypatch.setattr(SimpleSystemManagerResponse, "cancel_command", cancel_command, raising=False)
    trigger = WorkstationCommandTrigger(command_id=CMD, instance_ids=["i-0123456789abcdef0"], waiter_delay=0)
    asyncio.run(trigger.on_kill())
    assert calls == [{"CommandId": CMD, "InstanceIds": ["i-0123456789abcdef0"]}]


def test_trigger_serializes_round_trip():
    t = WorkstationCommandTrigger(command_id=CMD, instance_ids=["i-1"], waiter_delay=5, waiter_max_attempts=9)
    path, kwargs = t.serialize()
    assert path == "sim2real.orchestration.triggers.ssm.WorkstationCommandTrigger"
    assert WorkstationCommandTrigger(**kwargs).serialize() == (path, kwargs)


@pytest.mark.parametrize(("code", "stderr", "needle"), [
    (2, b"sim2real-evaluate: error: unrecognized arguments: --contract-version 1",
     "from before contract version 1 (it does not know --contract-version)"),
    (4, b"[sim2real] error: the DAG speaks evaluator contract version 2, the workstation's sim2real-evaluate "
        b"version 1: install ...", "evaluator contract mismatch"),
])
def test_an_evaluator_of_another_contract_version_is_named_in_the_failure(moto_endpoint, ec2, s3, context, code,
                                                                          stderr, needle):
    value = f"ws-contract-{code}"
    iid = workstation(ec2, value)
    s3.put_object(Bucket=BUCKET, Key=ssm_output_key(PREFIX, CMD, iid, "stderr"), Body=stderr)
    op = operator(value)  # its command runs sim2real-evaluate
    with Stubber(op.hook.conn) as stub:
        stub_until_send(stub, iid)
        stub.add_response("get_command_invocation", invocation(iid, "Failed", code), {"CommandId": CMD, "InstanceId": iid})
        with pytest.raises(AirflowFailException) as err:
            op.execute(context)
    assert needle in str(err.value) and "the command exited non-zero" not in str(err.value), str(err.value)
