"""Orphan sweeper (sim2real.orchestration.sweeper): finds what dead runs left running and stops it; a dry run only reports.

Batch, SageMaker, Greengrass v2 and SSM are answered by botocore's Stubber (every request and response is
checked against the real service models); the run records live in moto S3; what Airflow says about the DAG
runs (state, deploy task, tasks at work) is given by :class:`FakeRuns`.
"""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import ANY, Stubber

from airflow.providers.amazon.aws.hooks.s3 import S3Hook
from sim2real.orchestration.hooks.greengrass import GreengrassV2Hook
from sim2real.orchestration.hooks.workstation import WorkstationHook
from sim2real.contract.run_key import make_run_key
from sim2real.orchestration.orphans import Found, find_greengrass_deployments, parse_squeue, slurm_list_commands
from sim2real.orchestration.run_records import deployment_id, read_run_record, register_run
from sim2real.orchestration.sweeper import Current, sweep, verdict

REGION = "us-east-1"
BUCKET = "sim2real-artifacts-123456789012"
QUEUE = "sim2real-gpu"
PIPELINE = "sim2real-groot-finetune"
GROUP_ARN = "arn:aws:iot:us-east-1:123456789012:thinggroup/sim2real-robots"
DEAD = make_run_key("sim_to_real", "manual__2026-11-01T00:00:00+00:00")      # deleted in the UI
FINISHED = make_run_key("sim_to_real", "manual__2026-11-02T00:00:00+00:00")  # succeeded long ago
LIVE = make_run_key("sim_to_real_release", "manual__2026-11-03T00:00:00+00:00")
STRANGER = make_run_key("sim_to_real", "manual__2026-11-04T00:00:00+00:00")  # no run record
ENV = {"artifacts_bucket": BUCKET, "batch": {"job_queue": QUEUE}, "sagemaker": {"pipeline_name": PIPELINE},
       "greengrass": {"thing_group_name": "sim2real-robots"}}
FAILED = make_run_key("sim_to_real", "manual__2026-11-08T00:00:00+00:00")    # failed, its deploy task too
STATES = {("sim_to_real", "manual__2026-11-01T00:00:00+00:00"): None,
          ("sim_to_real", "manual__2026-11-02T00:00:00+00:00"): "success",
          ("sim_to_real_release", "manual__2026-11-03T00:00:00+00:00"): "running",
          ("sim_to_real", "manual__2026-11-08T00:00:00+00:00"): "failed"}


class FakeRuns:
    """What Airflow says about the DAG runs: :data:`STATES`, the runs whose deploy task succeeded, the runs
    with a task at work; every question is recorded in ``asked``."""

    def __init__(self, deployed=(), busy=()):
        self.deployed, self.working, self.asked = set(deployed), set(busy), []

    def state(self, dag_id, run_id):
        self.asked.append(("state", dag_id, run_id))
        return STATES[(dag_id, run_id)]

    def deploy_succeeded(self, dag_id, run_id):
        self.asked.append(("deploy_succeeded", dag_id, run_id))
        return run_id in self.deployed

    def busy(self, dag_id, run_id):
        self.asked.append(("busy", dag_id, run_id))
        return run_id in self.working


@pytest.fixture
def s3(moto_endpoint):
    client = boto3.client("s3", region_name=REGION, endpoint_url=moto_endpoint)
    if BUCKET not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=BUCKET)
    hook = S3Hook()
    for key, (dag_id, run_id) in {DEAD: ("sim_to_real", "manual__2026-11-01T00:00:00+00:00"),
                                  FINISHED: ("sim_to_real", "manual__2026-11-02T00:00:00+00:00"),
                                  LIVE: ("sim_to_real_release", "manual__2026-11-03T00:00:00+00:00"),
                                  FAILED: ("sim_to_real", "manual__2026-11-08T00:00:00+00:00")}.items():
        register_run(hook, BUCKET, dag_id=dag_id, run_id=run_id, run_key=key)
    return hook


def _job(job_id, key, status, tag=True):
    job = {"jobName": f"sim2real-train-{key}", "jobId": job_id, "jobQueue": QUEUE, "status": status,
           "startedAt": 1, "jobDefinition": "arn:aws:batch:us-east-1:123456789012:job-definition/sim2real-train:1"}
    if tag:
        job["tags"] = {"sim2real:run-key": key}
    return job


def stub_batch(stub, jobs, terminated=()):
    for status in ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING"):
        summaries = [{"jobId": j["jobId"], "jobName": j["jobName"]} for j in jobs if j["status"] == status]
        stub.add_response("list_jobs", {"jobSummaryList": summaries}, {"jobQueue": QUEUE, "jobStatus": status})
    if jobs:
        stub.add_response("describe_jobs", {"jobs": jobs}, {"jobs": [j["jobId"] for j in
                                                                    sorted(jobs, key=lambda j: BATCH_ORDER[j["status"]])]})
    for job_id in terminated:
        stub.add_response("terminate_job", {}, {"jobId": job_id, "reason": ANY})


BATCH_ORDER = {s: i for i, s in enumerate(("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING"))}


def stub_pipeline(stub, executions, stopped=(), next_token=None, token=None):
    """One ListPipelineExecutions page of ``(id, display name, status[, StartTime])``."""
    page = {"PipelineExecutionSummaries": [
        {"PipelineExecutionArn": f"arn:aws:sagemaker:us-east-1:123456789012:pipeline/{PIPELINE}/execution/{e[0]}",
         "PipelineExecutionStatus": e[2], "PipelineExecutionDisplayName": e[1], **({"StartTime": e[3]} if len(e) > 3 else {})}
        for e in executions]}
    if next_token:
        page["NextToken"] = next_token
    stub.add_response("list_pipeline_executions", page,
                      {"PipelineName": PIPELINE, "SortBy": "CreationTime", "SortOrder": "Descending",
                       **({"NextToken": token} if token else {})})
    for eid in stopped:
        stub.add_response("stop_pipeline_execution", {"PipelineExecutionArn": "arn"},
                          {"PipelineExecutionArn": f"arn:aws:sagemaker:us-east-1:123456789012:pipeline/{PIPELINE}"
                                                   f"/execution/{eid}", "ClientRequestToken": ANY})


def stub_greengrass(stub, deployments, device_status, cancelled=()):
    stub.add_response("list_deployments", {"deployments": [
        {"targetArn": GROUP_ARN, "deploymentId": dep_id, "deploymentName": f"sim2real-{key}",
         "deploymentStatus": "ACTIVE", "isLatestForTarget": True} for dep_id, key in deployments]},
        {"historyFilter": "LATEST_ONLY"})
    for dep_id, _ in deployments:
        stub.add_response("list_core_devices", {"coreDevices": [{"coreDeviceThingName": t} for t in device_status]},
                          {"thingGroupArn": GROUP_ARN})
        for thing, status in device_status.items():
            stub.add_response("list_effective_deployments", {"effectiveDeployments": [
                {"deploymentId": dep_id, "deploymentName": "d", "targetArn": GROUP_ARN,
                 "coreDeviceExecutionStatus": status, "creationTimestamp": 0, "modifiedTimestamp": 0}]},
                {"coreDeviceThingName": thing})
    for dep_id in cancelled:
        stub.add_response("cancel_deployment", {"message": "SUCCESS"}, {"deploymentId": dep_id})


def clients():
    return {"batch": boto3.client("batch", region_name=REGION), "sagemaker": boto3.client("sagemaker", region_name=REGION),
            "greengrass": GreengrassV2Hook(region_name=REGION), "workstation": WorkstationHook(region_name=REGION)}


def run(dry_run, jobs, executions, deployments, devices, terminated=(), stopped=(), cancelled=(), current=None,
        runs=None):
    c = clients()
    with Stubber(c["batch"]) as b, Stubber(c["sagemaker"]) as sm, Stubber(c["greengrass"].conn) as gg:
        stub_batch(b, jobs, terminated)
        stub_pipeline(sm, executions, stopped)
        stub_greengrass(gg, deployments, devices, cancelled)
        report = sweep(ENV, clients=c, s3_hook=S3Hook(), dry_run=dry_run, current=current,
                       runs=runs or FakeRuns())
        for stub in (b, sm, gg):
            stub.assert_no_pending_responses()  # every stop call made, and no other
    return report


JOBS = [_job("j-dead", DEAD, "RUNNING"), _job("j-live", LIVE, "RUNNABLE"), _job("j-stranger", STRANGER, "RUNNING"),
        _job("j-finished", FINISHED, "STARTING", tag=False)]
EXECUTIONS = [("e-dead", DEAD, "Executing"), ("e-live", LIVE, "Executing"), ("e-old", FINISHED, "Succeeded")]
DEPLOYMENTS = [("d-finished", FINISHED)]


def test_orphans_of_deleted_and_finished_runs_are_stopped(s3, caplog):
    """Jobs and executions of a deleted or finished run are stopped; a deployment only when its run was deleted
    or ended without its deploy task succeeding; the release a successful run deployed is left alone."""
    caplog.set_level("INFO", logger="sim2real.orchestration.sweeper")
    report = run(False, JOBS, EXECUTIONS, [("d-finished", FINISHED), ("d-failed", FAILED), ("d-dead", DEAD)],
                 {"robot-1": "SUCCEEDED", "robot-2": "IN_PROGRESS"},
                 terminated=["j-dead", "j-finished"], stopped=["e-dead"], cancelled=["d-failed", "d-dead"])
    stopped = {(r["kind"], r["id"]): r["action"] for r in report["stopped"]}
    assert stopped == {("batch_job", "j-dead"): "TerminateJob", ("batch_job", "j-finished"): "TerminateJob",
                       ("pipeline_execution", f"arn:aws:sagemaker:us-east-1:123456789012:pipeline/{PIPELINE}"
                                              "/execution/e-dead"): "StopPipelineExecution",
                       ("greengrass_deployment", "d-failed"): "CancelDeployment",
                       ("greengrass_deployment", "d-dead"): "CancelDeployment"}
    verdicts = {r["id"]: r["verdict"] for r in report["found"]}
    assert verdicts["j-live"] == "watched" and verdicts["j-stranger"] == "unregistered"
    assert verdicts["d-finished"] == "released"
    assert "deploy task did not succeed" in {r["id"]: r["why"] for r in report["found"]}["d-failed"]
    assert report["errors"] == []
    assert "no longer exists (deleted)" in caplog.text and "Stopped orphan batch_job j-dead" in caplog.text


def test_current_release_still_reaching_a_new_robot_is_left_alone(s3):
    """A successful run's deployment that one robot finished and a new (or offline) robot still has QUEUED is the
    group's current release: the sweeper must not cancel it, or the new robot never gets the model."""
    runs = FakeRuns()
    report = run(False, [], [], DEPLOYMENTS, {"robot-1": "SUCCEEDED", "robot-new": "QUEUED"}, runs=runs)
    assert [(r["id"], r["verdict"]) for r in report["found"]] == [("d-finished", "released")]
    assert report["orphans"] == [] and report["stopped"] == []


def test_the_automatic_rollback_of_a_failed_run_is_never_an_orphan(s3):
    """A failed run's deploy task rolled the group back to the last good release (``sim2real-<key>-rollback``); a
    robot that joined later still has it QUEUED. Cancelling it would keep the good release from that robot: the
    sweep does not even list it (no ListCoreDevices / CancelDeployment is stubbed: a call would fail)."""
    hook = GreengrassV2Hook(region_name=REGION)
    with Stubber(hook.conn) as gg:
        gg.add_response("list_deployments", {"deployments": [
            {"targetArn": GROUP_ARN, "deploymentId": "d-rollback", "deploymentName": f"sim2real-{FAILED}-rollback",
             "deploymentStatus": "ACTIVE", "isLatestForTarget": True}]}, {"historyFilter": "LATEST_ONLY"})
        assert find_greengrass_deployments(hook) == []
        gg.assert_no_pending_responses()


def test_deployment_of_a_failed_run_whose_deploy_task_succeeded_is_left_alone(s3):
    """The run failed after deploy_to_robots succeeded (e.g. in write_lineage): the deployment is still the release."""
    runs = FakeRuns(deployed=["manual__2026-11-08T00:00:00+00:00"])
    report = run(False, [], [], [("d-failed", FAILED)], {"robot-new": "QUEUED"}, runs=runs)
    assert [(r["id"], r["verdict"]) for r in report["found"]] == [("d-failed", "released")]
    assert ("deploy_succeeded", "sim_to_real", "manual__2026-11-08T00:00:00+00:00") in runs.asked


def test_records_of_another_airflow_deployment_are_reported_never_stopped(s3, monkeypatch):
    """A record written by another Airflow (MWAA seen from a developer's dag.test, or the reverse) names that
    deployment: the run is not this Airflow's to judge ("no such DAG run" here means nothing), so it is foreign."""
    monkeypatch.setenv("AIRFLOW__SIM2REAL__DEPLOYMENT_ID", "mwaa:sim2real")
    assert deployment_id() == "mwaa:sim2real"
    prod = make_run_key("sim_to_real", "scheduled__2026-11-09T02:00:00+00:00")
    register_run(s3, BUCKET, dag_id="sim_to_real", run_id="scheduled__2026-11-09T02:00:00+00:00", run_key=prod,
                 run_type="scheduled")
    assert read_run_record(s3, BUCKET, prod)["deployment"] == "mwaa:sim2real"
    monkeypatch.setenv("AIRFLOW__SIM2REAL__DEPLOYMENT_ID", "")  # a developer's dag.test: local:<user>@<host>
    assert deployment_id().startswith("local:")
    runs = FakeRuns()
    # DEAD's record (fixture) was written by this machine's deployment: still an orphan here.
    report = run(False, [_job("j-prod", prod, "RUNNING"), _job("j-dead", DEAD, "RUNNING")], [], [], {},
                 terminated=["j-dead"], runs=runs)
    verdicts = {r["id"]: (r["verdict"], r["why"]) for r in report["found"]}
    assert verdicts["j-prod"][0] == "foreign" and "mwaa:sim2real" in verdicts["j-prod"][1]
    assert [r["id"] for r in report["stopped"]] == ["j-dead"]
    assert not any(run_id.startswith("scheduled__") for _, _, run_id in runs.asked)  # not even asked
    from sim2real.orchestration.sweeper import summary_lines

    assert any(line.startswith("foreign, not stopped: batch_job j-prod") for line in summary_lines(report))


def test_a_record_without_deployment_is_foreign():
    found = Found("batch_job", "j", "n", DEAD, "RUNNING", "q")
    old = {"dag_id": "sim_to_real", "run_id": "manual__2026-11-01T00:00:00+00:00", "run_key": DEAD}
    assert verdict(found, old, FakeRuns(), deployment="mwaa:sim2real")[0] == "foreign"


def test_dry_run_only_reports(s3, caplog):
    report = run(True, JOBS, EXECUTIONS, [], {})  # no terminate / stop stubbed: a call would fail
    assert report["stopped"] == [] and {r["id"] for r in report["orphans"]} >= {"j-dead", "j-finished"}
    assert "DRY RUN: would stop orphan batch_job j-dead" in caplog.text


def test_finished_deployment_is_left_alone(s3):
    """A deployment every device finished stays ACTIVE as its group's current one: not cancelled."""
    report = run(False, [], [], DEPLOYMENTS, {"robot-1": "SUCCEEDED"})
    assert report["found"] == [] and report["stopped"] == []


def test_prepare_run_stops_another_idle_run_of_its_dag_but_not_its_own(s3):
    """Inside prepare_run (max_active_runs=1) a job of another sim_to_real run is an orphan while that run still
    says running but has no task at work (its dag.test process was killed); the new run's own job is never
    touched."""
    me = make_run_key("sim_to_real", "manual__2026-11-05T00:00:00+00:00")
    register_run(s3, BUCKET, dag_id="sim_to_real", run_id="manual__2026-11-05T00:00:00+00:00", run_key=me)
    zombie = make_run_key("sim_to_real", "manual__2026-11-06T00:00:00+00:00")
    register_run(s3, BUCKET, dag_id="sim_to_real", run_id="manual__2026-11-06T00:00:00+00:00", run_key=zombie)
    STATES[("sim_to_real", "manual__2026-11-06T00:00:00+00:00")] = "running"
    current = Current("sim_to_real", "manual__2026-11-05T00:00:00+00:00", me, single_active_run=True)
    report = run(False, [_job("j-me", me, "RUNNING"), _job("j-zombie", zombie, "RUNNING")], [], [], {},
                 terminated=["j-zombie"], current=current)
    assert {r["id"]: r["verdict"] for r in report["found"]} == {"j-me": "own", "j-zombie": "orphan"}
    assert "max_active_runs=1" in report["stopped"][0]["why"]


def test_prepare_run_leaves_a_working_or_backfill_run_of_its_dag_alone(s3):
    """Another running run of the same DAG with a task running/deferred/queued/... is alive (e.g. a run the
    scheduler started next to this one); a backfill run has its own max_active_runs: never an orphan."""
    me = make_run_key("sim_to_real", "manual__2026-11-05T00:00:00+00:00")
    busy = make_run_key("sim_to_real", "manual__2026-11-10T00:00:00+00:00")
    backfill = make_run_key("sim_to_real", "backfill__2026-11-11T02:00:00+00:00")
    register_run(s3, BUCKET, dag_id="sim_to_real", run_id="manual__2026-11-10T00:00:00+00:00", run_key=busy)
    register_run(s3, BUCKET, dag_id="sim_to_real", run_id="backfill__2026-11-11T02:00:00+00:00", run_key=backfill,
                 run_type="backfill")
    STATES[("sim_to_real", "manual__2026-11-10T00:00:00+00:00")] = "running"
    STATES[("sim_to_real", "backfill__2026-11-11T02:00:00+00:00")] = "running"
    runs = FakeRuns(busy=["manual__2026-11-10T00:00:00+00:00"])
    current = Current("sim_to_real", "manual__2026-11-05T00:00:00+00:00", me, single_active_run=True)
    report = run(False, [_job("j-busy", busy, "RUNNING"), _job("j-backfill", backfill, "RUNNING")], [], [], {},
                 current=current, runs=runs)
    assert {r["id"]: r["verdict"] for r in report["found"]} == {"j-busy": "watched", "j-backfill": "watched"}
    assert report["stopped"] == []
    assert ("busy", "sim_to_real", "backfill__2026-11-11T02:00:00+00:00") not in runs.asked
    # A record without run_type (written before it was recorded): the run id's backfill__ prefix says it.
    found = Found("batch_job", "j", "n", backfill, "RUNNING", "q")
    record = {"dag_id": "sim_to_real", "run_id": "backfill__2026-11-11T02:00:00+00:00", "deployment": deployment_id()}
    assert verdict(found, record, FakeRuns(), current, deployment=deployment_id())[0] == "watched"


def test_a_run_whose_dag_test_process_died_is_an_orphan_though_its_training_still_says_deferred(s3):
    """A dag.test killed during training leaves its run "running" and its training "deferred" in that Airflow home
    for ever. Its run record names the process that ran it; once that process is gone, the run is dead and its job
    is stopped, by the 30-minute sweeper as by the next run. Before, the busy (deferred) task kept it "watched"."""
    import socket
    import subprocess
    import sys

    import psutil

    from sim2real.orchestration.run_records import current_process, process_gone

    run_id = "manual__2026-11-12T00:00:00+00:00"
    key = make_run_key("sim_to_real", run_id)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        owner = {"host": socket.gethostname(), "pid": proc.pid, "started": psutil.Process(proc.pid).create_time()}
        register_run(s3, BUCKET, dag_id="sim_to_real", run_id=run_id, run_key=key, process=owner)
        assert read_run_record(s3, BUCKET, key)["process"] == owner
        STATES[("sim_to_real", run_id)] = "running"
        runs = FakeRuns(busy=[run_id])  # its training task still says deferred
        alive = run(False, [_job("j-alive", key, "RUNNING")], [], [], {}, runs=runs)
        assert {r["id"]: r["verdict"] for r in alive["found"]} == {"j-alive": "watched"}
    finally:
        proc.kill()
        proc.wait()
    report = run(False, [_job("j-killed", key, "RUNNING")], [], [], {}, terminated=["j-killed"], runs=runs)
    assert [r["id"] for r in report["stopped"]] == ["j-killed"]
    assert f"pid {proc.pid}" in report["stopped"][0]["why"] and "is gone" in report["stopped"][0]["why"]
    # The rule's edges: this very process runs; a pid reused by a later process, or another host, is not this run's.
    assert process_gone(current_process()) is False
    assert process_gone({**current_process(), "started": current_process()["started"] - 3600}) is True
    assert process_gone({**current_process(), "host": "another-host"}) is None
    assert process_gone(None) is None


def test_a_dead_processs_run_that_had_deployed_keeps_its_release():
    """A dag.test killed after its deploy task succeeded: the Greengrass deployment is the group's current
    release (robots may still be applying it), not an orphan to cancel; a deployment it had not finished is one."""
    from sim2real.orchestration.run_records import current_process

    run_id = "manual__2026-11-13T00:00:00+00:00"
    key = make_run_key("sim_to_real", run_id)
    STATES[("sim_to_real", run_id)] = "running"
    gone = {**current_process(), "started": current_process()["started"] - 3600}  # this pid, another start: gone
    record = {"dag_id": "sim_to_real", "run_id": run_id, "deployment": deployment_id(), "process": gone}
    found = Found("greengrass_deployment", "d-1", "n", key, "ACTIVE", "arn:aws:iot:us-east-1:1:thinggroup/robots")
    assert verdict(found, record, FakeRuns(deployed=[run_id]), deployment=deployment_id())[0] == "released"
    assert verdict(found, record, FakeRuns(), deployment=deployment_id())[0] == "orphan"


def test_a_deadline_skips_the_rest_with_a_warning(s3, caplog):
    """Under a deadline (prepare_run's), the services and stops left when it passed are skipped, not waited for."""
    c = clients()
    ticks = iter([0.0, 1.0, 2.0, 50.0, 50.0, 50.0, 50.0])  # start, batch, pipeline, then past the 45 s
    with Stubber(c["batch"]) as b, Stubber(c["sagemaker"]) as sm, Stubber(c["greengrass"].conn):  # not called
        stub_batch(b, [_job("j-dead", DEAD, "RUNNING")])  # no terminate_job stubbed: a stop would fail
        stub_pipeline(sm, [])
        report = sweep(ENV, clients=c, s3_hook=S3Hook(), dry_run=False, runs=FakeRuns(), deadline_s=45,
                       clock=lambda: next(ticks))
        b.assert_no_pending_responses()
    assert report["skipped"] == ["greengrass_deployment", "stop batch_job j-dead"]
    assert report["stopped"] == [] and report["errors"] == []
    assert "sweep deadline passed: greengrass_deployment not listed" in caplog.text
    assert "sweep deadline passed: orphan batch_job j-dead" in caplog.text


def test_ssm_commands_under_a_deadline_end_before_it():
    """squeue / scancel wait executionTimeout plus a grace for their result: under a deadline both shrink so
    the wait ends before it; without one they keep 30 s / 60 s and 60 s."""
    from sim2real.orchestration.sweeper import Deadline

    assert Deadline(None).command(30) == (30, 60.0)
    ticks = iter([0.0, 20.0])  # 25 s left of 45
    execution, grace = Deadline(45, lambda: next(ticks)).command(60)
    assert execution == 20 and execution + grace <= 25


def test_pipeline_executions_older_than_max_age_are_not_paged(s3):
    """Newest first: paging stops at the first execution older than max_age (the DAG's dagrun_timeout)."""
    import datetime as dt

    now = dt.datetime.now(dt.timezone.utc)
    c = clients()
    with Stubber(c["batch"]) as b, Stubber(c["sagemaker"]) as sm, Stubber(c["greengrass"].conn) as gg:
        stub_batch(b, [])
        stub_pipeline(sm, [("e-dead", DEAD, "Executing", now - dt.timedelta(hours=5)),
                           ("e-older", FINISHED, "Executing", now - dt.timedelta(days=4))],
                      stopped=["e-dead"], next_token="page-2")  # page 2 is never asked for
        stub_greengrass(gg, [], {})
        report = sweep(ENV, clients=c, s3_hook=S3Hook(), dry_run=False, runs=FakeRuns(),
                       max_age=dt.timedelta(days=3))
        sm.assert_no_pending_responses()
    assert [r["name"] for r in report["found"]] == [DEAD]


def test_a_service_that_cannot_be_listed_is_an_error_the_others_are_still_swept(s3):
    c = clients()
    with Stubber(c["batch"]) as b, Stubber(c["sagemaker"]) as sm, Stubber(c["greengrass"].conn) as gg:
        b.add_client_error("list_jobs", "ClientException", "job queue sim2real-gpu does not exist")
        stub_pipeline(sm, EXECUTIONS[:1], stopped=["e-dead"])
        stub_greengrass(gg, [], {})
        report = sweep(ENV, clients=c, s3_hook=S3Hook(), dry_run=False,
                       runs=FakeRuns())
    assert len(report["stopped"]) == 1 and "could not list batch_job" in report["errors"][0]


def test_slurm_jobs_are_listed_and_cancelled_through_ssm(s3):
    c = clients()
    ws = c["workstation"]
    ec2 = Stubber(ws.ec2)
    ssm = Stubber(ws.conn)
    ec2.add_response("describe_instances", {"Reservations": [{"Instances": [
        {"InstanceId": "i-0123456789abcdef0", "State": {"Name": "running", "Code": 16}}]}]}, {"Filters": ANY})
    ssm.add_response("describe_instance_information", {"InstanceInformationList": [
        {"InstanceId": "i-0123456789abcdef0", "PingStatus": "Online"}]},
        {"Filters": [{"Key": "InstanceIds", "Values": ["i-0123456789abcdef0"]}]})
    for command_id, stdout, lines in (("11111111-1111-1111-1111-111111111111",
                                       f"41 RUNNING sim2real-train-{DEAD}\n42 PENDING someone-elses-job\n",
                                       slurm_list_commands()),
                                      ("22222222-2222-2222-2222-222222222222", "", ["scancel 41"])):
        ssm.add_response("send_command", {"Command": {"CommandId": command_id}}, {
            "DocumentName": "AWS-RunShellScript", "InstanceIds": ["i-0123456789abcdef0"],
            "Parameters": {"commands": lines, "executionTimeout": ["30" if command_id.startswith("1") else "60"]},
            "Comment": ANY})
        ssm.add_response("get_command_invocation", {"CommandId": command_id, "InstanceId": "i-0123456789abcdef0",
                                                    "Status": "Success", "ResponseCode": 0,
                                                    "StandardOutputContent": stdout, "StandardErrorContent": ""},
                         {"CommandId": command_id, "InstanceId": "i-0123456789abcdef0"})
    env = {**ENV, "hyperpod": {"cluster_name": "sim2real-hyperpod", "submit_host_tag_key": "sim2real:role",
                               "submit_host_tag_value": "hyperpod-head"}}
    with Stubber(c["batch"]) as b, Stubber(c["sagemaker"]) as sm, Stubber(c["greengrass"].conn) as gg, ec2, ssm:
        stub_batch(b, [])
        stub_pipeline(sm, [])
        stub_greengrass(gg, [], {})
        report = sweep(env, clients=c, s3_hook=S3Hook(), dry_run=False,
                       runs=FakeRuns())
        ssm.assert_no_pending_responses()
    assert [(r["kind"], r["id"], r["action"]) for r in report["stopped"]] == [("slurm_job", "41", "scancel")]
    assert report["errors"] == []


def test_squeue_parsing_and_verdict_without_record():
    jobs = parse_squeue(f"7 RUNNING sim2real-train-{DEAD}\n8 RUNNING sim2real-train-NOT_A_KEY\nbad\n", "c")
    assert [(j.id, j.run_key) for j in jobs] == [("7", DEAD)]
    found = Found("batch_job", "j", "n", DEAD, "RUNNING", "q")
    assert verdict(found, None, FakeRuns(), deployment="x")[0] == "unregistered"
    STATES[("d", "r")] = "running"
    assert verdict(found, {"dag_id": "d", "run_id": "r", "deployment": "x"}, FakeRuns(), deployment="x")[0] == "watched"


def test_a_hyperpod_sweeps_job_array_is_found_once_by_its_run_key():
    # squeue lists a running array task as <id>_<i> and the pending ones grouped (<id>_[2-3%2]): one entry, the
    # array's id (scancel <id> stops every task of it).
    out = (f"41_0 RUNNING sim2real-train-{DEAD}-sweep\n41_1 RUNNING sim2real-train-{DEAD}-sweep\n"
           f"41_[2-3%2] PENDING sim2real-train-{DEAD}-sweep\n9 RUNNING sim2real-train-{DEAD}\n")
    jobs = parse_squeue(out, "c")
    assert [(j.id, j.run_key, j.status) for j in jobs] == [("41", DEAD, "RUNNING"), ("9", DEAD, "RUNNING")]


def test_sweep_before_run_records_the_run_and_never_fails_it(s3, context, caplog):
    """prepare_run's check: the run record is written first; services that cannot be listed (here moto has no
    Greengrass v2 and no such job queue) are warnings in XCom orphan_sweep, not a failed run."""
    from sim2real.orchestration.sweeper import sweep_before_run

    key = make_run_key("sim_to_real", "manual__2026-11-07T00:00:00+00:00")
    plan = {"bucket": BUCKET, "run_key": key}
    report = sweep_before_run(context["ti"], plan, dag_id="sim_to_real", run_id="manual__2026-11-07T00:00:00+00:00",
                              env=ENV, max_active_runs=1, run_type="manual")
    assert read_run_record(s3, BUCKET, key) == {"dag_id": "sim_to_real", "run_id": "manual__2026-11-07T00:00:00+00:00",
                                                "run_key": key, "run_type": "manual", "deployment": deployment_id()}
    assert report is not None and report["errors"] and report["stopped"] == []
    assert context["ti"].xcom["orphan_sweep"]["errors"] == report["errors"]
    assert "orphan sweep: error: could not list" in caplog.text
    # A bucket that cannot be written: no record, so no sweep (nothing could be told apart later); still no error.
    assert sweep_before_run(context["ti"], {"bucket": "no-such-bucket-here", "run_key": key}, dag_id="sim_to_real",
                            run_id="r", env=ENV, max_active_runs=1) is None
    assert "could not write the run record" in caplog.text


def test_a_dead_runs_canary_deployment_is_found_under_its_run_key(s3):
    """``sim2real-<key>-canary`` is the run's deployment to its canary group: found for that run key (a dead run's is
    then stopped like its fleet deployment), its rollback ``sim2real-<key>-canary-rollback`` never."""
    hook = GreengrassV2Hook(region_name=REGION)
    with Stubber(hook.conn) as gg:
        gg.add_response("list_deployments", {"deployments": [
            {"targetArn": GROUP_ARN, "deploymentId": "d-canary", "deploymentName": f"sim2real-{FAILED}-canary",
             "deploymentStatus": "ACTIVE", "isLatestForTarget": True},
            {"targetArn": GROUP_ARN, "deploymentId": "d-back", "deploymentName": f"sim2real-{FAILED}-canary-rollback",
             "deploymentStatus": "ACTIVE", "isLatestForTarget": True}]}, {"historyFilter": "LATEST_ONLY"})
        gg.add_response("list_core_devices", {"coreDevices": [{"coreDeviceThingName": "robot-1"}]},
                        {"thingGroupArn": GROUP_ARN})
        gg.add_response("list_effective_deployments", {"effectiveDeployments": [
            {"deploymentId": "d-canary", "deploymentName": f"sim2real-{FAILED}-canary", "targetArn": GROUP_ARN,
             "coreDeviceExecutionStatus": "IN_PROGRESS", "creationTimestamp": 1.0, "modifiedTimestamp": 1.0}]},
            {"coreDeviceThingName": "robot-1"})
        # a canary's field verdict is read (GetDeployment tags): one without the tag is cancelled as before
        gg.add_response("get_deployment", {"deploymentId": "d-canary", "targetArn": GROUP_ARN},
                        {"deploymentId": "d-canary"})
        found = find_greengrass_deployments(hook)
        gg.assert_no_pending_responses()
    assert [(f.kind, f.id, f.run_key) for f in found] == [("greengrass_deployment", "d-canary", FAILED)]
