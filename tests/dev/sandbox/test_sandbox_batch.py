"""Batch responder: SubmitJob runs the launcher locally, logs go to CloudWatch, exit code decides."""

from __future__ import annotations

import json

import boto3
import pytest
from sandbox_helpers import SCRIPTS, wait_until

from sim2real.dev.sandbox import Sandbox

# integration (not in make test-unit): one sandbox per module (tests/dev/sandbox/conftest.py)
pytestmark = pytest.mark.integration

QUEUE, JOBDEF = "sim2real-gpu", "sim2real-train"


def _submit(sb: Sandbox, name: str, env: dict[str, str] | None = None, nodes: int = 1) -> str:
    overrides = {"numNodes": nodes, "nodePropertyOverrides": [{"targetNodes": "0:", "containerOverrides": {
        "environment": [{"name": k, "value": v} for k, v in (env or {}).items()]}}]}
    return sb.client("batch").submit_job(jobName=name, jobQueue=QUEUE, jobDefinition=JOBDEF,
                                         nodeOverrides=overrides, tags={"sim2real:run-key": name})["jobId"]


def _terminal(sb: Sandbox, job_id: str) -> dict:
    def done():
        job = sb.client("batch").describe_jobs(jobs=[job_id])["jobs"][0]
        return job if job["status"] in ("SUCCEEDED", "FAILED") else None

    return wait_until(done, timeout=60)


def _log_messages(sb: Sandbox, stream: str) -> list[str]:
    events = sb.client("logs").get_log_events(logGroupName="/aws/batch/job", logStreamName=stream)["events"]
    return [e["message"] for e in events]


def test_job_succeeds_with_overrides_and_logs(sb: Sandbox) -> None:
    job_id = _submit(sb, "ok-job", {"MAX_ITERATIONS": "7", "RUN_KEY": "rk-1"}, nodes=2)
    job = _terminal(sb, job_id)
    assert job["status"] == "SUCCEEDED"
    assert job["nodeProperties"]["numNodes"] == 2
    assert job["tags"] == {"sim2real:run-key": "ok-job"}
    statuses = [e.data["status"] for e in sb.events.find("batch", "job-status", job_id=job_id)]
    assert statuses == ["SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED"]
    main_stream = job["attempts"][0]["container"]["logStreamName"]
    assert main_stream.startswith("sim2real-train/default/")
    lines = _log_messages(sb, main_stream)
    assert "launcher node=0 nodes=1 main=0 procs=1" in lines
    assert "TASK=Reacher-v5 MAX_ITERATIONS=7 RUN_KEY=rk-1" in lines  # job-definition default + override
    assert f"job={job_id} endpoint={sb.endpoint_url}" in lines
    assert "sees bucket 200" in lines
    # every node has a stream; node 1 says it was not run locally
    streams = [c["logStreamName"] for c in job["attempts"][0]["taskProperties"][0]["containers"]]
    assert len(streams) == 2 and streams[0] == main_stream
    node1 = sb.client("batch").describe_jobs(jobs=[f"{job_id}#1"])["jobs"][0]
    assert node1["nodeDetails"] == {"nodeIndex": 1, "isMainNode": False}
    assert node1["container"]["logStreamName"] == streams[1]
    assert "not run locally" in _log_messages(sb, streams[1])[0]


def test_failing_job_reports_exit_code(sb: Sandbox) -> None:
    sb.batch.launcher = SCRIPTS / "launcher_fail.sh"
    job = _terminal(sb, _submit(sb, "fail-job"))
    assert job["status"] == "FAILED"
    assert job["statusReason"] == "Essential container in task exited"
    assert job["container"]["exitCode"] == 3
    assert job["attempts"][0]["container"]["exitCode"] == 3
    assert _log_messages(sb, job["attempts"][0]["container"]["logStreamName"]) == ["about to fail", "boom"]


def test_terminate_kills_running_job(sb: Sandbox) -> None:
    sb.batch.launcher = SCRIPTS / "launcher_sleep.sh"
    job_id = _submit(sb, "long-job")
    batch = sb.client("batch")
    wait_until(lambda: batch.describe_jobs(jobs=[job_id])["jobs"][0]["status"] == "RUNNING")
    process = sb.batch.jobs[job_id].process
    assert process is not None
    batch.terminate_job(jobId=job_id, reason="Task killed by the user")
    job = _terminal(sb, job_id)
    assert job["status"] == "FAILED"
    assert job["statusReason"] == "Task killed by the user"
    assert process.wait(timeout=15) != 0
    assert "should never get here" not in _log_messages(sb, job["attempts"][0]["container"]["logStreamName"])


def test_stuck_runnable_fault_then_terminate(sb: Sandbox) -> None:
    sb.faults["batch_stuck_runnable"] = True
    job_id = _submit(sb, "stuck-job")
    batch = sb.client("batch")
    job = wait_until(lambda: (j := batch.describe_jobs(jobs=[job_id])["jobs"][0]).get("statusReason") and j)
    assert job["status"] == "RUNNABLE"
    assert job["statusReason"].startswith("CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY")
    assert "g6.12xlarge" in job["statusReason"]
    batch.terminate_job(jobId=job_id, reason="RUNNABLE past the budget")
    job = _terminal(sb, job_id)
    assert (job["status"], job["statusReason"]) == ("FAILED", "RUNNABLE past the budget")
    assert job["attempts"] == []


def test_list_jobs_by_name_finds_the_run(sb: Sandbox) -> None:
    job_id = _submit(sb, "reattach-me")
    _terminal(sb, job_id)
    listed = sb.client("batch").list_jobs(jobQueue=QUEUE, filters=[{"name": "JOB_NAME", "values": ["reattach-me"]}])
    assert [j["jobId"] for j in listed["jobSummaryList"]] == [job_id]


def test_real_launcher_runs_the_selfcheck(sb: Sandbox) -> None:
    """The repository's distributed_run.bash under the Batch environment the sandbox gives it."""
    launcher = sb.repo_root / "containers/rl/distributed_run.bash"
    if not launcher.is_file():
        pytest.skip("containers/rl/distributed_run.bash not present")
    sb.batch.launcher = launcher
    job = _terminal(sb, _submit(sb, "selfcheck-job", {
        "TRAIN_ENTRYPOINT": "-m sim2real.workloads.selfcheck", "EXPECTED_WORLD_SIZE": "1"}))
    lines = _log_messages(sb, job["attempts"][0]["container"]["logStreamName"])
    assert job["status"] == "SUCCEEDED", lines
    results = [json.loads(line) for line in lines if line.startswith('{"selfcheck"')]
    assert [(r["selfcheck"], r["world_size"]) for r in results] == [("ok", 1)]


def test_airflow_env_points_at_the_sandbox(sb: Sandbox) -> None:
    env = sb.airflow_env()
    conn = json.loads(env["AIRFLOW_CONN_AWS_DEFAULT"])
    assert conn["conn_type"] == "aws"
    assert conn["extra"] == {"region_name": "us-east-1", "endpoint_url": sb.endpoint_url}
    assert json.loads(env["AIRFLOW_VAR_SIM2REAL_ENVIRONMENT"]) == sb.config
    assert sb.config["sandbox"] is True
    assert env["AWS_ENDPOINT_URL"] == sb.endpoint_url and env["AWS_DEFAULT_REGION"] == "us-east-1"
    client = boto3.client("batch", endpoint_url=conn["extra"]["endpoint_url"], region_name="us-east-1",
                          aws_access_key_id=conn["login"], aws_secret_access_key=conn["password"])
    ce = client.describe_compute_environments(computeEnvironments=[sb.config["batch"]["compute_environment"]])
    resources = ce["computeEnvironments"][0]
    assert (resources["state"], resources["status"]) == ("ENABLED", "VALID")
    assert resources["computeResources"]["maxvCpus"] >= 48


def _queued_events(sb: Sandbox, key: str, want: int, timeout: float = 30.0) -> list[dict]:
    """Wait-event queue messages about ``key`` (deleted once read), in arrival order, until ``want`` came."""
    from sim2real.orchestration.events.envelope import EventEnvelope

    sqs, url = sb.client("sqs"), sb.config["events"]["queue_url"]
    found: list[dict] = []

    def collect():
        for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", []):
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            if EventEnvelope.parse(m["Body"]).resource_key().ident == key:
                found.append(json.loads(m["Body"]))
        return found if len(found) >= want else None

    wait_until(collect, timeout=timeout, interval=0.0)
    return found


def test_every_job_state_change_reaches_the_wait_event_queue_as_aws_sends_it(sb: Sandbox) -> None:
    """moto's EventBridge applies the provisioned rule (detail.jobQueue = the project's queue) and delivers the
    ``Batch Job State Change`` envelope to the SQS queue; the detail is the DescribeJobs job."""
    from botocore.session import get_session

    from sim2real.orchestration.events.envelope import EventEnvelope

    sb.client("sqs").purge_queue(QueueUrl=sb.config["events"]["queue_url"])
    job_id = _submit(sb, "evented-job")
    assert _terminal(sb, job_id)["status"] == "SUCCEEDED"
    events = _queued_events(sb, job_id, want=6)
    assert [e["detail"]["status"] for e in events] == ["SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING",
                                                       "SUCCEEDED"]
    first = events[0]
    assert (first["source"], first["detail-type"]) == ("aws.batch", "Batch Job State Change")
    assert first["resources"] == [first["detail"]["jobArn"]]
    assert first["detail"]["jobQueue"].endswith(":job-queue/sim2real-gpu")
    job_shape = get_session().get_service_model("batch").operation_model("DescribeJobs").output_shape
    members = set(job_shape.members["jobs"].member.members)
    assert set(events[-1]["detail"]) <= members, set(events[-1]["detail"]) - members
    assert EventEnvelope.parse(json.dumps(events[-1])).describe_response()["jobs"][0]["status"] == "SUCCEEDED"


def test_event_faults_drop_and_duplicate(sb: Sandbox) -> None:
    sb.faults["events_drop"] = ["Batch Job State Change"]
    dropped = _submit(sb, "dropped-events")
    assert _terminal(sb, dropped)["status"] == "SUCCEEDED"
    assert len(sb.events.find("events", "dropped", key=dropped)) == 6
    sb.faults.pop("events_drop")
    sb.faults["events_duplicate"] = 1
    duplicated = _submit(sb, "duplicated-events")
    assert _terminal(sb, duplicated)["status"] == "SUCCEEDED"
    events = _queued_events(sb, duplicated, want=7)
    assert events[0]["id"] == events[1]["id"] and events[0]["detail"]["status"] == "SUBMITTED"
    assert not [e for e in events if e["detail"]["jobId"] == dropped]


def test_rule_delivery_builds_no_jsonpath_parser_per_event(sb: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """moto's EventBridge builds each delivered event from its template's 8 JSONPath input paths, and jsonpath-ng
    builds a new PLY parser (its LALR tables too) for every path it parses: 8 builds, about 0.3 s of CPU, per
    event, which limited the sandbox to about 3 events per second. With the sandbox's patch each path's parser is
    built at most once, however many events go through the rule; every event still reaches the queue once."""
    from jsonpath_ng.ext import parser as jsonpath_parser
    from moto.events.utils import EventTemplateParser

    from sim2real.orchestration.events.envelope import EventEnvelope

    built: list[str] = []
    init = jsonpath_parser.ExtendedJsonPathParser.__init__

    def counting_init(self, *args, **kwargs):
        built.append(type(self).__name__)
        init(self, *args, **kwargs)

    monkeypatch.setattr(jsonpath_parser.ExtendedJsonPathParser, "__init__", counting_init)
    sqs, url = sb.client("sqs"), sb.config["events"]["queue_url"]
    queue_arn = f"arn:aws:batch:{sb.region}:{sb.account_id}:job-queue/{QUEUE}"
    count = 30
    job_ids = [f"jsonpath-{i:02d}" for i in range(count)]
    for job_id in job_ids:
        sb.aws_events.batch_job({"jobId": job_id, "jobName": job_id, "jobQueue": queue_arn, "status": "RUNNING",
                                 "jobArn": f"arn:aws:batch:{sb.region}:{sb.account_id}:job/{job_id}"})
    arrived: list[dict] = []

    def all_arrived():
        for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", []):
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            if EventEnvelope.parse(m["Body"]).resource_key().ident in job_ids:
                arrived.append(json.loads(m["Body"]))
        return len(arrived) >= count

    wait_until(all_arrived, timeout=2.0 * count, interval=0.0)   # generous: the fix delivers 30 events in < 1 s
    assert sorted(e["detail"]["jobId"] for e in arrived) == job_ids
    assert {(e["source"], e["detail-type"]) for e in arrived} == {("aws.batch", "Batch Job State Change")}
    assert len(built) <= len(EventTemplateParser.DEFAULT_EVENT_INPUT_PATHS_MAP), (len(built), count)
