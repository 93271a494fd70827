"""BatchTrainingOperator, BatchTrainingHook and BatchTrainingJobTrigger against moto.

Sync paths run under ``moto.mock_aws`` (Batch without Docker: jobs finish inside SubmitJob);
the trigger runs against ``ThreadedMotoServer`` (aiobotocore needs an endpoint). moto cannot hold
a job in RUNNABLE with a statusReason, so ``Job.describe`` is wrapped to report a scripted status
sequence per job (``script`` fixture); the server runs in this process, so the wrap applies to it too.
moto also omits ``nodeProperties`` from ``DescribeJobDefinitions``; the ``moto_batch_gaps`` fixture
adds it back (real AWS returns it).
"""

from __future__ import annotations

import asyncio
import re
import time

import boto3
import pytest
from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException, TaskDeferred
from moto import mock_aws
from moto.batch.models import BatchBackend, Job, JobDefinition
from moto.core import DEFAULT_ACCOUNT_ID
from sim2real.orchestration.config import RUN_KEY_TAG
from sim2real.orchestration.hooks.batch import IMAGE_DIGEST_TAG, BatchTrainingHook
from sim2real.orchestration.operators.batch import BatchTrainingOperator
from sim2real.orchestration.sensors.sweep import SweepLaneSensor
from sim2real.orchestration.triggers.batch import BatchTrainingJobTrigger

from operator_helpers import first_event

REGION = "us-east-1"
QUEUE = "sim2real-gpu"
CE = "sim2real-gpu-ce"
JOBDEF = "sim2real-train"
RUN_KEY = "sim-to-real-manual-2026-11-29-abcdef12"
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
IMAGE_A = f"{DEFAULT_ACCOUNT_ID}.dkr.ecr.{REGION}.amazonaws.com/sim2real-training@{DIGEST_A}"
IMAGE_B = f"{DEFAULT_ACCOUNT_ID}.dkr.ecr.{REGION}.amazonaws.com/sim2real-training@{DIGEST_B}"
INTERMEDIATE = ["SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING"]
MOTO_BATCH = {"batch": {"use_docker": False}}
NOW_MS = int(time.time() * 1000)


class RecordingLog:
    """Stand-in logger that keeps the formatted messages."""

    def __init__(self):
        self.messages: list[str] = []

    def _record(self, msg, *args, **kwargs):
        self.messages.append(msg % args if args else msg)

    info = warning = error = debug = exception = _record


@pytest.fixture
def moto_batch_gaps(monkeypatch):
    original = JobDefinition.describe

    def describe(self):
        result = original(self)
        if self.node_properties is not None:
            result["nodeProperties"] = self.node_properties
        return result

    monkeypatch.setattr(JobDefinition, "describe", describe)


@pytest.fixture
def script(monkeypatch):
    """``script[job_id or "*"] = [(status, statusReason, exitCode), ...]``: DescribeJobs reports them in
    order (the last one repeats). ``script["terminated"]`` records TerminateJob calls."""
    scripts: dict = {"terminated": []}
    calls: dict = {}
    original = Job.describe
    original_terminate = BatchBackend.terminate_job

    def describe(self):
        result = original(self)
        steps = scripts.get(self.job_id) or scripts.get("*")
        if steps:
            i = calls.get(self.job_id, 0)
            calls[self.job_id] = i + 1
            status, reason, exit_code = steps[min(i, len(steps) - 1)]
            result["status"] = status
            result.pop("statusReason", None)
            if reason:
                result["statusReason"] = reason
            if exit_code is not None:
                result.setdefault("container", {})["exitCode"] = exit_code
            if status in ("SUBMITTED", "PENDING", "RUNNABLE"):
                result["attempts"] = []
        return result

    def terminate_job(self, job_id, reason):
        scripts["terminated"].append((job_id, reason))
        return original_terminate(self, job_id, reason)

    monkeypatch.setattr(Job, "describe", describe)
    monkeypatch.setattr(BatchBackend, "terminate_job", terminate_job)
    return scripts


def setup_batch(endpoint_url: str | None = None) -> dict:
    kw = {"region_name": REGION, "endpoint_url": endpoint_url}
    role = boto3.client("iam", **kw).create_role(RoleName="batch-service", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    batch = boto3.client("batch", **kw)
    ce = batch.create_compute_environment(
        computeEnvironmentName=CE, type="UNMANAGED", state="ENABLED", serviceRole=role
    )["computeEnvironmentArn"]
    batch.create_job_queue(
        jobQueueName=QUEUE,
        state="ENABLED",
        priority=1,
        computeEnvironmentOrder=[{"order": 1, "computeEnvironment": ce}],
    )
    batch.register_job_definition(
        jobDefinitionName=JOBDEF,
        type="multinode",
        nodeProperties={
            "numNodes": 2,
            "mainNode": 0,
            "nodeRangeProperties": [
                {
                    "targetNodes": "0:",
                    "container": {
                        "image": "public.ecr.aws/placeholder:latest",
                        "vcpus": 4,
                        "memory": 2048,
                        "command": ["bash", "distributed_run.bash"],
                    },
                }
            ],
        },
    )
    return {"batch": batch, "logs": boto3.client("logs", **kw)}


def make_op(**kw) -> BatchTrainingOperator:
    args = dict(
        task_id="train",
        job_definition=JOBDEF,
        job_queue=QUEUE,
        image_uri=IMAGE_A,
        num_nodes=2,
        run_key=RUN_KEY,
        environment={"TASK": "Reacher-v5", "MAX_ITERATIONS": 40},
        runnable_timeout_seconds=3600,
        poll_interval=0,
        max_retries=1,
    )
    args.update(kw)
    return BatchTrainingOperator(**args)


def jobs_named(batch, name=RUN_KEY) -> list[dict]:
    return batch.list_jobs(jobQueue=QUEUE, filters=[{"name": "JOB_NAME", "values": [name]}])["jobSummaryList"]


# -- job definition pinning -------------------------------------------------------------------
@mock_aws(config=MOTO_BATCH)
def test_job_definition_revision_reused_when_digest_unchanged_new_when_changed(aws_env, moto_batch_gaps):
    setup_batch()
    hook = BatchTrainingHook()
    first, reused = hook.ensure_job_definition(JOBDEF, IMAGE_A)
    assert reused is False and first["revision"] == 2
    assert first["nodeProperties"]["nodeRangeProperties"][0]["container"]["image"] == IMAGE_A
    tags = hook.conn.describe_job_definitions(jobDefinitions=[first["jobDefinitionArn"]])["jobDefinitions"][0]["tags"]
    assert tags[IMAGE_DIGEST_TAG] == DIGEST_A
    again, reused = hook.ensure_job_definition(JOBDEF, IMAGE_A)
    assert reused is True and again["jobDefinitionArn"] == first["jobDefinitionArn"]
    changed, reused = hook.ensure_job_definition(JOBDEF, IMAGE_B)
    assert reused is False and changed["revision"] == 3
    assert changed["nodeProperties"]["nodeRangeProperties"][0]["container"]["image"] == IMAGE_B


# -- success, contract shape, tags, overrides (a job already over: settled without deferring) --
@mock_aws(config=MOTO_BATCH)
def test_success_returns_contract_dict(aws_env, moto_batch_gaps, script):
    clients = setup_batch()
    script["*"] = [("SUCCEEDED", None, 0)]
    submitted = {}
    op = make_op()
    original_submit = op.hook.conn.submit_job

    def spy_submit(**kwargs):
        submitted.update(kwargs)
        return original_submit(**kwargs)

    op.hook.conn.submit_job = spy_submit
    result = op.execute({})
    assert set(result) >= {"job_id", "job_name", "job_definition_arn", "status", "attempts", "log_streams", "num_nodes"}
    assert result["status"] == "SUCCEEDED" and result["job_name"] == RUN_KEY and result["num_nodes"] == 2
    assert result["job_definition_arn"].endswith(f"{JOBDEF}:2") and result["reattached"] is False
    assert [s["node_index"] for s in result["log_streams"]] == [0, 1]
    assert result["log_streams"][0]["job_id"] == f"{result['job_id']}#0"
    assert result["log_streams"][0]["log_stream_name"] and result["log_streams"][0]["log_group"] == "/aws/batch/job"
    assert submitted["tags"] == {RUN_KEY_TAG: RUN_KEY}
    assert submitted["jobDefinition"] == result["job_definition_arn"]
    override = submitted["nodeOverrides"]
    assert override["numNodes"] == 2
    assert override["nodePropertyOverrides"][0]["targetNodes"] == "0:"
    env = {e["name"]: e["value"] for e in override["nodePropertyOverrides"][0]["containerOverrides"]["environment"]}
    assert env == {"TASK": "Reacher-v5", "MAX_ITERATIONS": "40", "RUN_KEY": RUN_KEY, "IMAGE_DIGEST": DIGEST_A}
    desc = clients["batch"].describe_jobs(jobs=[result["job_id"]])["jobs"][0]
    assert desc["tags"][RUN_KEY_TAG] == RUN_KEY


@mock_aws(config=MOTO_BATCH)
def test_log_stream_failure_does_not_change_outcome(aws_env, moto_batch_gaps, monkeypatch, script):
    setup_batch()
    script["*"] = [("SUCCEEDED", None, 0)]

    def boom(*a, **k):
        raise RuntimeError("CloudWatch is down")

    monkeypatch.setattr(BatchTrainingHook, "node_log_streams", boom)
    monkeypatch.setattr(BatchTrainingHook, "get_job_all_awslogs_info", boom)
    result = make_op().execute({})
    assert result["status"] == "SUCCEEDED" and result["log_streams"] == []


# -- reattach ---------------------------------------------------------------------------------
@mock_aws(config=MOTO_BATCH)
def test_reattach_after_crash_right_after_submit(aws_env, moto_batch_gaps, script):
    clients = setup_batch()
    script["*"] = [("RUNNING", None, None)]
    crashed = make_op()
    original_submit = crashed.hook.conn.submit_job

    def submit_then_crash(**kwargs):
        original_submit(**kwargs)
        raise RuntimeError("worker lost right after SubmitJob")

    crashed.hook.conn.submit_job = submit_then_crash
    with pytest.raises(AirflowException, match="worker lost"):
        crashed.execute({})
    assert len(jobs_named(clients["batch"])) == 1

    script["*"] = [("SUCCEEDED", None, 0)]
    retry = make_op()
    result = retry.execute({})
    assert result["reattached"] is True and result["status"] == "SUCCEEDED"
    assert [j["jobId"] for j in jobs_named(clients["batch"])] == [result["job_id"]]


class _Try:
    """The running task instance's try counters, as Airflow sets them (``context["ti"]``)."""

    def __init__(self, try_number: int, max_tries: int):
        self.try_number, self.max_tries = try_number, max_tries


@mock_aws(config=MOTO_BATCH)
def test_a_cleared_task_terminates_the_earlier_tries_job_and_submits_a_new_one(aws_env, moto_batch_gaps, script):
    """Before: the first try after a person's clear reattached to the cleared try's job when it looked before the
    trigger's stop landed (a busy triggerer): the clear silently continued the old job, and its stop never came
    (the trigger saw the task deferred again and took it for a hand-over)."""
    clients = setup_batch()
    script["*"] = [("RUNNING", None, None)]
    with pytest.raises(TaskDeferred):
        make_op(retries=2).execute({"ti": _Try(1, 2)})
    [old] = jobs_named(clients["batch"])
    script[old["jobId"]] = [("RUNNING", None, None)]
    script["*"] = [("SUCCEEDED", None, 0)]
    # clear_task_instances: max_tries = try_number (1) + retries (2); the new try is try 2
    result = make_op(retries=2).execute({"ti": _Try(2, 3)})
    assert result["reattached"] is False and result["job_id"] != old["jobId"]
    assert script["terminated"] == [(old["jobId"], "sim2real: superseded by try 2 of the cleared task")]


@mock_aws(config=MOTO_BATCH)
def test_a_retry_reattaches_to_the_running_job(aws_env, moto_batch_gaps, script):
    clients = setup_batch()
    script["*"] = [("RUNNING", None, None)]
    with pytest.raises(TaskDeferred):
        make_op(retries=2).execute({"ti": _Try(1, 2)})
    script["*"] = [("SUCCEEDED", None, 0)]
    result = make_op(retries=2).execute({"ti": _Try(2, 2)})  # a retry: max_tries unchanged
    assert result["reattached"] is True and script["terminated"] == []
    assert [j["jobId"] for j in jobs_named(clients["batch"])] == [result["job_id"]]


@mock_aws(config=MOTO_BATCH)
def test_failed_job_is_not_reattached(aws_env, moto_batch_gaps, monkeypatch):
    clients = setup_batch()
    monkeypatch.setenv("MOTO_SIMPLE_BATCH_FAIL_AFTER", "0")
    with pytest.raises(AirflowException):
        make_op().execute({})
    monkeypatch.delenv("MOTO_SIMPLE_BATCH_FAIL_AFTER")
    result = make_op().execute({})
    assert result["reattached"] is False
    statuses = sorted(j["status"] for j in jobs_named(clients["batch"]))
    assert statuses == ["FAILED", "SUCCEEDED"]


# -- a job already over when the task would defer: the step function settles it -------------
@pytest.mark.parametrize("status", ["SUCCEEDED", "FAILED", *INTERMEDIATE])
@mock_aws(config=MOTO_BATCH)
def test_job_already_over_settles_else_defers(aws_env, moto_batch_gaps, script, status):
    setup_batch()
    reason = "Essential container in task exited" if status == "FAILED" else None
    script["*"] = [(status, reason, 137 if status == "FAILED" else None)]
    op = make_op(runnable_timeout_seconds=None)
    if status == "SUCCEEDED":
        assert op.execute({})["status"] == "SUCCEEDED"
        return
    if status == "FAILED":
        with pytest.raises(AirflowFailException) as err:
            op.execute({})
        message = str(err.value)
        assert "ended FAILED" in message and "exit code=137" in message
        assert "failure class OUT_OF_MEMORY" in message and reason in message
        return
    with pytest.raises(TaskDeferred):
        op.execute({})


@mock_aws(config=MOTO_BATCH)
def test_failure_classified_from_log_tail_is_retryable(aws_env, moto_batch_gaps, script):
    clients = setup_batch()
    script["*"] = [("FAILED", "Essential container in task exited", 1)]
    op = make_op()
    with pytest.raises(AirflowException) as err:
        # log stream of node 0 exists once the job ran: write a rendezvous failure into it
        original = BatchTrainingHook.log_tail

        def log_tail(self, group, stream, limit=50):
            clients["logs"].create_log_group(logGroupName=group)
            clients["logs"].create_log_stream(logGroupName=group, logStreamName=stream)
            clients["logs"].put_log_events(
                logGroupName=group,
                logStreamName=stream,
                logEvents=[
                    {"timestamp": NOW_MS, "message": "Traceback (most recent call last):"},
                    {
                        "timestamp": NOW_MS + 1,
                        "message": "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError",
                    },
                ],
            )
            return original(self, group, stream, limit)

        BatchTrainingHook.log_tail = log_tail
        try:
            op.execute({})
        finally:
            BatchTrainingHook.log_tail = original
    assert not isinstance(err.value, AirflowFailException)
    assert "failure class NCCL_RENDEZVOUS" in str(err.value) and "RendezvousTimeoutError" in str(err.value)


@mock_aws(config=MOTO_BATCH)
def test_on_kill_terminates(aws_env, moto_batch_gaps, script):
    setup_batch()
    script["*"] = [("SUCCEEDED", None, 0)]
    op = make_op()
    op.on_kill()  # nothing started: no call
    assert script["terminated"] == []
    op.execute({})
    op.on_kill()
    assert [j for j, _ in script["terminated"]] == [op.job_id]


# -- deferred wait ----------------------------------------------------------------------------
@mock_aws(config=MOTO_BATCH)
def test_defers_with_our_trigger_and_execute_complete(aws_env, moto_batch_gaps, script):
    setup_batch()
    script["*"] = [("RUNNABLE", None, None)]
    op = make_op(runnable_timeout_seconds=900, poll_interval=15, max_retries=100)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, BatchTrainingJobTrigger)
    path, kwargs = trigger.serialize()
    assert path == "sim2real.orchestration.triggers.batch.BatchTrainingJobTrigger"
    assert kwargs["job_id"] == op.job_id and kwargs["runnable_timeout_seconds"] == 900
    assert kwargs["waiter_delay"] == 15 and kwargs["waiter_max_attempts"] == 100
    assert BatchTrainingJobTrigger(**kwargs).serialize() == (path, kwargs)

    with pytest.raises(AirflowFailException, match="failure class CAPACITY"):
        op.execute_complete(
            {},
            {
                "status": "failure",
                "job_id": op.job_id,
                "job_status": "RUNNABLE",
                "reason": "runnable_timeout",
                "message": "stayed RUNNABLE",
            },
        )
    with pytest.raises(AirflowException, match="no end after") as err:
        op.execute_complete({}, {"status": "timeout", "job_id": op.job_id, "message": "no end after 100 polls"})
    assert not isinstance(err.value, AirflowFailException)
    with pytest.raises(ValueError, match="unexpected trigger event"):  # one set of event names
        op.execute_complete({}, {"status": "error", "job_id": op.job_id, "message": "throttled"})
    script[op.job_id] = [("FAILED", "Host EC2 (instance i-0123456789abcdef0) terminated.", None)]
    with pytest.raises(AirflowException) as err:
        op.execute_complete({}, {"status": "failure", "job_id": op.job_id, "job_status": "FAILED", "message": "x"})
    assert "failure class SPOT_RECLAIM" in str(err.value) and not isinstance(err.value, AirflowFailException)
    script[op.job_id] = [("SUCCEEDED", None, 0)]
    assert op.execute_complete({}, {"status": "success", "job_id": op.job_id})["status"] == "SUCCEEDED"


@mock_aws(config=MOTO_BATCH)
def test_job_already_over_completes_without_deferring(aws_env, moto_batch_gaps, script):
    """No trigger race: a job that ended before the task would defer (a retry reattaching to it) is settled."""
    setup_batch()
    script["*"] = [("SUCCEEDED", None, 0)]
    op = make_op(runnable_timeout_seconds=900, poll_interval=15, max_retries=100)
    assert op.execute({})["status"] == "SUCCEEDED"  # no TaskDeferred


# -- trigger against ThreadedMotoServer -------------------------------------------------------
def submit_on_server(endpoint: str) -> str:
    clients = setup_batch(endpoint)
    return clients["batch"].submit_job(jobName=RUN_KEY, jobQueue=QUEUE, jobDefinition=JOBDEF)["jobId"]


@pytest.mark.parametrize("status", ["SUCCEEDED", "FAILED", *INTERMEDIATE])
def test_trigger_status_table_one_poll(moto_server, moto_batch_gaps, script, status):
    job_id = submit_on_server(moto_server)
    script[job_id] = [(status, "Essential container in task exited" if status == "FAILED" else None, None)]
    trigger = BatchTrainingJobTrigger(
        job_id=job_id, runnable_timeout_seconds=None, waiter_delay=0, waiter_max_attempts=1
    )
    event = first_event(trigger)
    assert event["job_id"] == job_id
    expected = {"SUCCEEDED": "success", "FAILED": "failure"}.get(status, "timeout")
    assert event["status"] == expected
    if status == "FAILED":
        assert event["job_status"] == "FAILED" and "Essential container" in event["message"]
    if expected == "timeout":
        assert "no end after 1 polls" in event["message"]
    assert script["terminated"] == []


def test_trigger_runnable_past_budget_fails_and_terminates(moto_server, moto_batch_gaps, script):
    job_id = submit_on_server(moto_server)
    reason = "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - no g6.12xlarge capacity in the subnets' AZs"
    script[job_id] = [("RUNNABLE", reason, None)]
    event = first_event(
        BatchTrainingJobTrigger(job_id=job_id, runnable_timeout_seconds=0, waiter_delay=0, waiter_max_attempts=5)
    )
    assert event["status"] == "failure" and event["reason"] == "runnable_timeout" and event["job_status"] == "RUNNABLE"
    assert reason in event["message"] and f"compute environment {CE}: state=ENABLED" in event["message"]
    assert "desiredvCpus" in event["message"]
    assert [j for j, _ in script["terminated"]] == [job_id]


def test_runnable_diagnosis_survives_a_failed_terminate(moto_server, moto_batch_gaps, script, monkeypatch):
    """TerminateJob refused: the event says the job was NOT stopped and still carries the compute environments."""
    job_id = submit_on_server(moto_server)
    script[job_id] = [("RUNNABLE", "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY", None)]

    def refuse(self, job_id, reason):
        from moto.batch.exceptions import ClientException
        raise ClientException("not authorized to perform batch:TerminateJob")

    monkeypatch.setattr(BatchBackend, "terminate_job", refuse)
    event = first_event(
        BatchTrainingJobTrigger(job_id=job_id, runnable_timeout_seconds=0, waiter_delay=0, waiter_max_attempts=5)
    )
    assert event["status"] == "failure" and event["action"]["done"] is False
    assert "TerminateJob" in event["message"] and f"compute environment {CE}: state=ENABLED" in event["message"]


def test_trigger_on_kill_terminates_job(moto_server, moto_batch_gaps, script):
    job_id = submit_on_server(moto_server)
    asyncio.run(BatchTrainingJobTrigger(job_id=job_id).on_kill())
    assert [j for j, _ in script["terminated"]] == [job_id]
    asyncio.run(BatchTrainingJobTrigger(job_id=job_id, terminate_on_kill=False).on_kill())
    assert len(script["terminated"]) == 1


def test_trigger_logs_progress_while_running(moto_server, moto_batch_gaps, script):
    job_id = submit_on_server(moto_server)
    logs = boto3.client("logs", region_name=REGION, endpoint_url=moto_server)
    stream = boto3.client("batch", region_name=REGION, endpoint_url=moto_server).describe_jobs(jobs=[job_id])["jobs"][
        0
    ]["container"]["logStreamName"]
    logs.create_log_group(logGroupName="/aws/batch/job")
    logs.create_log_stream(logGroupName="/aws/batch/job", logStreamName=stream)
    line = "[sim2real] iteration=12/40 timesteps=12288 mean_reward=-20.1 elapsed_s=15.2 eta_s=35.0"
    logs.put_log_events(
        logGroupName="/aws/batch/job",
        logStreamName=stream,
        logEvents=[{"timestamp": NOW_MS, "message": "starting"}, {"timestamp": NOW_MS + 1, "message": line}],
    )
    script[job_id] = [("RUNNING", None, None)]
    trigger = BatchTrainingJobTrigger(job_id=job_id, waiter_delay=0, waiter_max_attempts=1)
    trigger._log = RecordingLog()
    event = first_event(trigger)
    assert event["status"] == "timeout"
    assert any(line in message for message in trigger._log.messages)


# -- a sweep: every candidate's job is submitted before any wait ------------------------------
@mock_aws(config=MOTO_BATCH)
def test_submit_only_returns_at_once_and_attach_waits_for_that_job_without_resubmitting(aws_env, moto_batch_gaps,
                                                                                        script):
    clients = setup_batch()
    script["*"] = [("RUNNING", None, None)]
    submitted = make_op(submit_only=True, job_name=f"sim2real-train-{RUN_KEY}-c0").execute({})  # no TaskDeferred
    assert set(submitted) == {"job_id", "job_name", "reattached", "job_definition_arn"}
    assert submitted["reattached"] is False and submitted["job_name"] == f"sim2real-train-{RUN_KEY}-c0"
    (job,) = jobs_named(clients["batch"], f"sim2real-train-{RUN_KEY}-c0")
    assert job["jobId"] == submitted["job_id"]

    waiting = make_op(attach_job_id=submitted["job_id"], job_name=f"sim2real-train-{RUN_KEY}-c0")
    waiting.hook.conn.submit_job = None  # attaching never submits (a call would fail the test)
    with pytest.raises(TaskDeferred) as deferred:
        waiting.execute({})
    assert deferred.value.trigger.job_id == submitted["job_id"]
    script["*"] = [("SUCCEEDED", None, 0)]
    done = make_op(attach_job_id=submitted["job_id"], job_name=f"sim2real-train-{RUN_KEY}-c0").execute({})
    assert done["job_id"] == submitted["job_id"] and done["status"] == "SUCCEEDED" and done["reattached"] is True
    # a job that failed is reported, not replaced by a new one (the sweep's wait has no resubmit)
    script["*"] = [("FAILED", "Essential container in task exited", 1)]
    with pytest.raises(AirflowException, match="FAILED"):
        make_op(attach_job_id=submitted["job_id"], job_name=f"sim2real-train-{RUN_KEY}-c0").execute({})
    assert len(jobs_named(clients["batch"], f"sim2real-train-{RUN_KEY}-c0")) == 1


# -- a sweep's lanes (SweepLaneSensor): candidate i submits once candidate i - P's job has ended ---------------

SWEEP_RUN_ID = "manual__2026-11-29T00:00:00+00:00"


class RecordingSupervisor:
    """The task process's channel to its supervisor (``task_runner.SUPERVISOR_COMMS``): records each
    ``GetTaskStates`` and answers as the Task Execution API's ``GET /task-instances/states`` does (Airflow 3.3
    ``get_task_instance_states``): ``{run_id: {"<task_id>_<map_index>": state}}`` for mapped task instances."""

    def __init__(self, run_id: str, states: dict[tuple[str, int], str]):
        self.run_id, self.states = run_id, states
        self.sent: list = []

    def send(self, msg):
        from airflow.sdk.execution_time.comms import TaskStatesResult

        self.sent.append(msg)
        return TaskStatesResult(task_states={self.run_id: {
            f"{t}_{i}": state for (t, i), state in self.states.items()
            if (msg.map_index is None or i == msg.map_index) and (not msg.task_ids or t in msg.task_ids)}})


class PullingTI:
    """The task instance's ``xcom_pull`` of the lane's previous candidate (key ``job_id``, one map index) and
    the Task SDK's own ``RuntimeTaskInstance.get_task_states`` over a :class:`RecordingSupervisor`."""

    dag_id = "sim_to_real"
    run_id = SWEEP_RUN_ID

    def __init__(self, job_ids: dict[int, str], states: dict[tuple[str, int], str] | None = None):
        self.job_ids = job_ids
        self.supervisor = RecordingSupervisor(self.run_id, states or {})
        self.pulls: list[tuple] = []

    @property
    def state_queries(self) -> list[dict]:
        return [msg.model_dump(exclude_none=True, exclude={"type"}) for msg in self.supervisor.sent]

    def xcom_pull(self, *, task_ids, key, map_indexes):
        self.pulls.append((task_ids, key, map_indexes))
        return self.job_ids.get(map_indexes)

    def get_task_states(self, **kwargs):
        from unittest import mock

        from airflow.sdk.execution_time import task_runner

        with mock.patch.object(task_runner, "SUPERVISOR_COMMS", self.supervisor, create=True):
            return task_runner.RuntimeTaskInstance.get_task_states(**kwargs)


def _sensor(lane_after):
    return SweepLaneSensor(task_id="wait_for_slot", lane_after=lane_after, submit_task_id="sweep.submit_training",
                           train_task_id="sweep.train_policy", mode="reschedule", poke_interval=1)


def test_a_lanes_first_candidate_never_waits():
    ti = PullingTI({})
    assert _sensor(None).poke({"ti": ti}) is True and _sensor("None").poke({"ti": ti}) is True
    assert ti.pulls == [] and ti.state_queries == []


@pytest.mark.parametrize("status, free", [("RUNNING", False), ("RUNNABLE", False), ("SUCCEEDED", True)])
@mock_aws(config=MOTO_BATCH)
def test_a_candidate_waits_until_the_lanes_previous_job_has_ended(aws_env, moto_batch_gaps, script, status, free):
    setup_batch()
    script["*"] = [("RUNNING", None, None)]
    job_id = make_op(submit_only=True).execute({})["job_id"]
    ti = PullingTI({0: job_id}, {("sweep.submit_training", 0): "success", ("sweep.train_policy", 0): "deferred"})
    sensor = _sensor(0)
    assert sensor.poke({"ti": ti}) is False  # no TaskDeferred: the previous candidate's job is running
    script["*"] = [(status, None, 0 if status == "SUCCEEDED" else None)]
    assert _sensor(0).poke({"ti": ti}) is free
    assert ti.pulls[0] == ("sweep.submit_training", "job_id", 0)
    assert ti.state_queries[0] == {"dag_id": "sim_to_real", "run_ids": [SWEEP_RUN_ID],
                                   "task_ids": ["sweep.submit_training", "sweep.train_policy"]}


def test_a_candidate_waits_while_the_lanes_previous_one_has_not_submitted():
    ti = PullingTI({}, {("sweep.submit_training", 2): "up_for_retry", ("sweep.train_policy", 0): "success"})
    assert _sensor(2).poke({"ti": ti}) is False  # a try left


@pytest.mark.parametrize("task_id, state", [("sweep.submit_training", "failed"),
                                            ("sweep.submit_training", "upstream_failed"),
                                            ("sweep.train_policy", "failed")])
def test_a_candidate_fails_at_once_when_the_lanes_previous_one_failed(task_id, state):
    """The previous candidate will never write a job id (its submit failed after its retries, or a person marked
    it failed) or never succeed: the waiting one fails naming it instead of poking until its 13 h timeout."""
    from airflow.sdk.exceptions import AirflowFailException

    ti = PullingTI({}, {(task_id, 1): state, ("sweep.submit_training", 0): "success"})
    with pytest.raises(AirflowFailException, match=rf"the lane's previous candidate c1 can no longer succeed "
                                                   rf"\({re.escape(task_id)}\[1\] is {state}\)"):
        _sensor(1).poke({"ti": ti})
    assert ti.pulls == []


def test_a_candidate_does_not_start_when_another_lanes_candidate_failed():
    """c0 failed in another lane: the sweep cannot succeed, so c4 (lane after c1, still running) starts no job."""
    from airflow.sdk.exceptions import AirflowFailException

    ti = PullingTI({1: "job-c1"}, {("sweep.train_policy", 0): "failed", ("sweep.submit_training", 2): "upstream_failed",
                                   ("sweep.train_policy", 1): "deferred"})
    with pytest.raises(AirflowFailException, match=r"another candidate of the sweep c0 can no longer succeed "
                                                   r"\(sweep.train_policy\[0\] is failed; also "
                                                   r"sweep.submit_training\[2\] is upstream_failed\)"):
        _sensor(1).poke({"ti": ti})
    assert ti.pulls == []


@mock_aws(config=MOTO_BATCH)
def test_a_candidate_fails_when_the_lanes_previous_job_ended_failed(aws_env, moto_batch_gaps, script):
    """A FAILED job frees the lane but dooms the sweep: the waiting candidate fails instead of training for
    hours before ``pick_best`` could never run."""
    from airflow.sdk.exceptions import AirflowFailException

    setup_batch()
    script["*"] = [("FAILED", "Essential container in task exited", 1)]
    job_id = make_op(submit_only=True).execute({})["job_id"]
    ti = PullingTI({0: job_id}, {("sweep.submit_training", 0): "success", ("sweep.train_policy", 0): "running"})
    with pytest.raises(AirflowFailException, match=rf"c0's Batch job {job_id} .*ended FAILED \(Essential container"):
        _sensor(0).poke({"ti": ti})


def _lenient_sensor(lane_after, max_failed):
    return SweepLaneSensor(task_id="wait_for_slot", lane_after=lane_after, submit_task_id="sweep.submit_training",
                           train_task_id="sweep.train_policy", mode="reschedule", poke_interval=1,
                           max_failed=max_failed)


def test_a_failed_candidate_frees_its_lane_when_the_sweep_may_lose_it():
    """sweep_min_candidates below the candidates (max_failed 1): c1 failed, so c3 (lane after c1) starts at once
    instead of failing; the pick goes on among the survivors."""
    ti = PullingTI({}, {("sweep.train_policy", 1): "failed", ("sweep.submit_training", 0): "success"})
    assert _lenient_sensor(1, 1).poke({"ti": ti}) is True
    assert ti.pulls == []  # no job to wait for: its task failed
    # a failure in another lane does not block this one either (c2 waits for c0's running job as usual)
    ti = PullingTI({}, {("sweep.train_policy", 1): "failed"})
    assert _lenient_sensor(0, "1").poke({"ti": ti}) is False  # templated: a string; c0 has not submitted yet


def test_a_lane_fails_when_more_candidates_failed_than_the_sweep_may_lose():
    from airflow.sdk.exceptions import AirflowFailException

    ti = PullingTI({}, {("sweep.train_policy", 0): "failed", ("sweep.submit_training", 1): "upstream_failed"})
    with pytest.raises(AirflowFailException, match=r"2 candidate\(s\) can no longer succeed, more than the 1 the "
                                                   r"sweep may lose \(sweep_min_candidates\)"):
        _lenient_sensor(1, 1).poke({"ti": ti})


def test_a_candidate_lost_after_its_training_counts_against_the_sweeps_minimum():
    """c0 trained but its evaluation failed, c1's training failed: with max_failed 1 the sweep cannot reach its
    minimum any more, so a waiting candidate does not start its job (before, only submit/training failures
    counted, and c2 would have trained for a run that fails at its pick)."""
    from airflow.sdk.exceptions import AirflowFailException

    ti = PullingTI({}, {("sweep.train_policy", 0): "success", ("sweep.run_evaluation", 0): "failed",
                        ("sweep.train_policy", 1): "failed"})
    sensor = SweepLaneSensor(task_id="wait_for_slot", lane_after=1, submit_task_id="sweep.submit_training",
                             train_task_id="sweep.train_policy", later_task_ids=["sweep.run_evaluation"],
                             mode="reschedule", poke_interval=1, max_failed=1)
    with pytest.raises(AirflowFailException, match=r"also sweep.run_evaluation\[0\] is failed\): 2 candidate\(s\) can no "
                                                   r"longer succeed"):
        sensor.poke({"ti": ti})


@mock_aws(config=MOTO_BATCH)
def test_a_lanes_previous_job_that_ended_failed_frees_it_when_the_sweep_may_lose_it(aws_env, moto_batch_gaps, script):
    setup_batch()
    script["*"] = [("FAILED", "Host EC2 instance terminated", 1)]
    job_id = make_op(submit_only=True).execute({})["job_id"]
    ti = PullingTI({0: job_id}, {("sweep.submit_training", 0): "success", ("sweep.train_policy", 0): "running"})
    assert _lenient_sensor(0, 1).poke({"ti": ti}) is True
