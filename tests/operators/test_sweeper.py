"""Orphan sweeper (sim2real.sweeper): finds what dead runs left running and stops it; a dry run only reports.

Batch, SageMaker, Greengrass v2 and SSM are answered by botocore's Stubber (every request and response is
checked against the real service models); the run records live in moto S3; the DAG run states are given.
"""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import ANY, Stubber

from airflow.providers.amazon.aws.hooks.s3 import S3Hook
from sim2real.hooks.greengrass import GreengrassV2Hook
from sim2real.hooks.workstation import WorkstationHook
from sim2real.run_key import make_run_key
from sim2real.sweeper import Current, Found, parse_squeue, register_run, slurm_list_commands, sweep, verdict

REGION = "us-east-1"
BUCKET = "sim2real-artifacts-123456789012"
QUEUE = "sim2real-gpu"
PIPELINE = "sim2real-groot-finetune"
GROUP_ARN = "arn:aws:iot:us-east-1:123456789012:thinggroup/sim2real-robots"
DEAD = make_run_key("sim_to_real", "manual__2026-11-01T00:00:00+00:00")      # deleted in the UI
FINISHED = make_run_key("sim_to_real", "manual__2026-11-02T00:00:00+00:00")  # failed long ago
LIVE = make_run_key("sim_to_real_release", "manual__2026-11-03T00:00:00+00:00")
STRANGER = make_run_key("sim_to_real", "manual__2026-11-04T00:00:00+00:00")  # no run record
ENV = {"artifacts_bucket": BUCKET, "batch": {"job_queue": QUEUE}, "sagemaker": {"pipeline_name": PIPELINE},
       "greengrass": {"thing_group_name": "sim2real-robots"}}
STATES = {("sim_to_real", "manual__2026-11-01T00:00:00+00:00"): None,
          ("sim_to_real", "manual__2026-11-02T00:00:00+00:00"): "finished",
          ("sim_to_real_release", "manual__2026-11-03T00:00:00+00:00"): "active"}


@pytest.fixture
def s3(moto_endpoint):
    client = boto3.client("s3", region_name=REGION, endpoint_url=moto_endpoint)
    if BUCKET not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=BUCKET)
    hook = S3Hook()
    for key, (dag_id, run_id) in {DEAD: ("sim_to_real", "manual__2026-11-01T00:00:00+00:00"),
                                  FINISHED: ("sim_to_real", "manual__2026-11-02T00:00:00+00:00"),
                                  LIVE: ("sim_to_real_release", "manual__2026-11-03T00:00:00+00:00")}.items():
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


def stub_pipeline(stub, executions, stopped=()):
    stub.add_response("list_pipeline_executions", {"PipelineExecutionSummaries": [
        {"PipelineExecutionArn": f"arn:aws:sagemaker:us-east-1:123456789012:pipeline/{PIPELINE}/execution/{eid}",
         "PipelineExecutionStatus": status, "PipelineExecutionDisplayName": key}
        for eid, key, status in executions]},
        {"PipelineName": PIPELINE, "SortBy": "CreationTime", "SortOrder": "Descending"})
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


def run(dry_run, jobs, executions, deployments, devices, terminated=(), stopped=(), cancelled=(), current=None):
    c = clients()
    with Stubber(c["batch"]) as b, Stubber(c["sagemaker"]) as sm, Stubber(c["greengrass"].conn) as gg:
        stub_batch(b, jobs, terminated)
        stub_pipeline(sm, executions, stopped)
        stub_greengrass(gg, deployments, devices, cancelled)
        report = sweep(ENV, clients=c, s3_hook=S3Hook(), dry_run=dry_run, current=current,
                       state_of=lambda dag_id, run_id: STATES[(dag_id, run_id)])
        for stub in (b, sm, gg):
            stub.assert_no_pending_responses()  # every stop call made, and no other
    return report


JOBS = [_job("j-dead", DEAD, "RUNNING"), _job("j-live", LIVE, "RUNNABLE"), _job("j-stranger", STRANGER, "RUNNING"),
        _job("j-finished", FINISHED, "STARTING", tag=False)]
EXECUTIONS = [("e-dead", DEAD, "Executing"), ("e-live", LIVE, "Executing"), ("e-old", FINISHED, "Succeeded")]
DEPLOYMENTS = [("d-finished", FINISHED)]


def test_orphans_of_deleted_and_finished_runs_are_stopped(s3, caplog):
    caplog.set_level("INFO", logger="sim2real.sweeper")
    report = run(False, JOBS, EXECUTIONS, DEPLOYMENTS, {"robot-1": "SUCCEEDED", "robot-2": "IN_PROGRESS"},
                 terminated=["j-dead", "j-finished"], stopped=["e-dead"], cancelled=["d-finished"])
    stopped = {(r["kind"], r["id"]): r["action"] for r in report["stopped"]}
    assert stopped == {("batch_job", "j-dead"): "TerminateJob", ("batch_job", "j-finished"): "TerminateJob",
                       ("pipeline_execution", f"arn:aws:sagemaker:us-east-1:123456789012:pipeline/{PIPELINE}"
                                              "/execution/e-dead"): "StopPipelineExecution",
                       ("greengrass_deployment", "d-finished"): "CancelDeployment"}
    verdicts = {r["id"]: r["verdict"] for r in report["found"]}
    assert verdicts["j-live"] == "watched" and verdicts["j-stranger"] == "unregistered"
    assert report["errors"] == []
    assert "no longer exists (deleted)" in caplog.text and "Stopped orphan batch_job j-dead" in caplog.text


def test_dry_run_only_reports(s3, caplog):
    report = run(True, JOBS, EXECUTIONS, [], {})  # no terminate / stop stubbed: a call would fail
    assert report["stopped"] == [] and {r["id"] for r in report["orphans"]} >= {"j-dead", "j-finished"}
    assert "DRY RUN: would stop orphan batch_job j-dead" in caplog.text


def test_finished_deployment_is_left_alone(s3):
    """A deployment every device finished stays ACTIVE as its group's current one: not cancelled."""
    report = run(False, [], [], DEPLOYMENTS, {"robot-1": "SUCCEEDED"})
    assert report["found"] == [] and report["stopped"] == []


def test_prepare_run_stops_another_run_of_its_dag_but_not_its_own(s3):
    """Inside prepare_run (max_active_runs=1) a job of another sim_to_real run is an orphan even while that
    run still says running (its dag.test process was killed); the new run's own job is never touched."""
    me = make_run_key("sim_to_real", "manual__2026-11-05T00:00:00+00:00")
    register_run(s3, BUCKET, dag_id="sim_to_real", run_id="manual__2026-11-05T00:00:00+00:00", run_key=me)
    zombie = make_run_key("sim_to_real", "manual__2026-11-06T00:00:00+00:00")
    register_run(s3, BUCKET, dag_id="sim_to_real", run_id="manual__2026-11-06T00:00:00+00:00", run_key=zombie)
    STATES[("sim_to_real", "manual__2026-11-06T00:00:00+00:00")] = "active"
    current = Current("sim_to_real", "manual__2026-11-05T00:00:00+00:00", me, single_active_run=True)
    report = run(False, [_job("j-me", me, "RUNNING"), _job("j-zombie", zombie, "RUNNING")], [], [], {},
                 terminated=["j-zombie"], current=current)
    assert {r["id"]: r["verdict"] for r in report["found"]} == {"j-me": "own", "j-zombie": "orphan"}
    assert "max_active_runs=1" in report["stopped"][0]["why"]


def test_a_service_that_cannot_be_listed_is_an_error_the_others_are_still_swept(s3):
    c = clients()
    with Stubber(c["batch"]) as b, Stubber(c["sagemaker"]) as sm, Stubber(c["greengrass"].conn) as gg:
        b.add_client_error("list_jobs", "ClientException", "job queue sim2real-gpu does not exist")
        stub_pipeline(sm, EXECUTIONS[:1], stopped=["e-dead"])
        stub_greengrass(gg, [], {})
        report = sweep(ENV, clients=c, s3_hook=S3Hook(), dry_run=False,
                       state_of=lambda dag_id, run_id: STATES[(dag_id, run_id)])
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
    import sim2real.hooks.workstation as workstation

    with Stubber(c["batch"]) as b, Stubber(c["sagemaker"]) as sm, Stubber(c["greengrass"].conn) as gg, ec2, ssm, \
            pytest.MonkeyPatch.context() as mp:
        mp.setattr(workstation.time, "sleep", lambda s: None)
        stub_batch(b, [])
        stub_pipeline(sm, [])
        stub_greengrass(gg, [], {})
        report = sweep(env, clients=c, s3_hook=S3Hook(), dry_run=False,
                       state_of=lambda dag_id, run_id: STATES[(dag_id, run_id)])
        ssm.assert_no_pending_responses()
    assert [(r["kind"], r["id"], r["action"]) for r in report["stopped"]] == [("slurm_job", "41", "scancel")]
    assert report["errors"] == []


def test_squeue_parsing_and_verdict_without_record():
    jobs = parse_squeue(f"7 RUNNING sim2real-train-{DEAD}\n8 RUNNING sim2real-train-NOT_A_KEY\nbad\n", "c")
    assert [(j.id, j.run_key) for j in jobs] == [("7", DEAD)]
    found = Found("batch_job", "j", "n", DEAD, "RUNNING", "q")
    assert verdict(found, None, None)[0] == "unregistered"
    assert verdict(found, {"dag_id": "d", "run_id": "r"}, "active")[0] == "watched"


def test_sweep_before_run_records_the_run_and_never_fails_it(s3, context, caplog):
    """prepare_run's check: the run record is written first; services that cannot be listed (here moto has no
    Greengrass v2 and no such job queue) are warnings in XCom orphan_sweep, not a failed run."""
    from sim2real.sweeper import read_run_record, sweep_before_run

    key = make_run_key("sim_to_real", "manual__2026-11-07T00:00:00+00:00")
    plan = {"bucket": BUCKET, "run_key": key}
    report = sweep_before_run(context["ti"], plan, dag_id="sim_to_real", run_id="manual__2026-11-07T00:00:00+00:00",
                              env=ENV, max_active_runs=1)
    assert read_run_record(s3, BUCKET, key) == {"dag_id": "sim_to_real", "run_id": "manual__2026-11-07T00:00:00+00:00",
                                                "run_key": key}
    assert report is not None and report["errors"] and report["stopped"] == []
    assert context["ti"].xcom["orphan_sweep"]["errors"] == report["errors"]
    assert "orphan sweep: error: could not list" in caplog.text
    # A bucket that cannot be written: no record, so no sweep (nothing could be told apart later); still no error.
    assert sweep_before_run(context["ti"], {"bucket": "no-such-bucket-here", "run_key": key}, dag_id="sim_to_real",
                            run_id="r", env=ENV, max_active_runs=1) is None
    assert "could not write the run record" in caplog.text
