"""End to end: the real ``sim_to_real_release`` DAG on a real Airflow (SQLite, ``dag.test()``) against the sandbox.

One subprocess (Airflow reads its config at import) starts the sandbox, provisions it, registers model
packages in the provisioned model package group (CreateModelPackage; approved with UpdateModelPackage)
and runs the release DAG twice:

- ``latest``: no ARN → the latest Approved version (v2: v1 is Approved but older, v3 is still
  PendingManualApproval) is deployed to the emulated robots together with an RL checkpoint manifest
  whose sha256 is verified again; release.json validates against its schema;
- ``pending``: the ARN of v3 (PendingManualApproval) → refused before any CreateDeployment, and the
  record still says so;
- ``device_fails``: a rollback to v1 by ARN with no manifest (the package alone, as the form documents: the
  policy of the run that registered v1, from its lineage record) that one robot cannot apply → the deployment is
  cancelled, the run fails naming which robot runs which release, and the record (written by the teardown) has
  each robot's status and reason;
- the canary (robot 1, group ``sim2real-robots-canary``) with a real policy (``make demo``'s: 100 PPO iterations on
  Reacher-v5, seed 3; 97 % of its simulated episodes succeed): the emulated robots run it in the field, 20
  episodes each (:mod:`sim2real.dev.sandbox.field_robot`). ``canary_promoted``: in the mild world (20 of 20 here) the
  field rate's lower bound clears 0.5 → promoted, then the fleet; ``canary_gap``: in the severe world (weak
  actuators, delayed actions, noisy sensors: 9 of 20 here) it does not → the canary group goes back to the promoted
  release, the fleet is not touched; ``canary_offline``: robot 1 reports nothing for the 1-minute window → not
  promoted, rolled back, the robot named.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from tests.fresh_process import drive_fresh
from tests.paths import REPO_ROOT

pytestmark = pytest.mark.e2e


def _register(sm, s3, group: str, bucket: str, version_tag: str, status: str, run_key: str | None = None) -> str:
    key = f"models/release-test/{version_tag}/model.tar.gz"
    s3.put_object(Bucket=bucket, Key=key, Body=f"model {version_tag}".encode())
    arn = sm.create_model_package(
        ModelPackageGroupName=group,
        ModelPackageDescription=f"GR00T fine-tune {version_tag} (approved outside a run)",
        InferenceSpecification={"Containers": [{"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/groot:1",
                                                "ModelDataUrl": f"s3://{bucket}/{key}"}],
                                "SupportedContentTypes": ["application/json"],
                                "SupportedResponseMIMETypes": ["application/json"]},
        ModelApprovalStatus="PendingManualApproval",
        **({"CustomerMetadataProperties": {"sim2real:run-key": run_key}} if run_key else {}),
    )["ModelPackageArn"]
    if status != "PendingManualApproval":
        sm.update_model_package(ModelPackageArn=arn, ModelApprovalStatus=status,
                                ApprovalDescription=f"{status} in SageMaker Studio")
    return arn


def drive(home: str, out: str) -> None:
    """Subprocess body: sandbox, packages, two release runs; writes the facts the tests check to ``out``."""
    os.environ.setdefault("SIM2REAL_POLL_SECONDS", "1")
    os.environ.setdefault("SIM2REAL_RETRY_DELAY_SECONDS", "1")
    from sim2real.dev.demo import (asset_events, dag_test, prepare_airflow_home, read_notifications,
                                   subscribe_notifications, task_table)
    from sim2real.contract.run_key import make_run_key
    from sim2real.dev.sandbox import Sandbox

    result: dict = {}
    with Sandbox(repo_root=REPO_ROOT, step_seconds=0.05) as sandbox:
        env = sandbox.provision(hyperpod=False)
        prepare_airflow_home(Path(home), sandbox.airflow_env())
        inbox = subscribe_notifications(sandbox, env)
        bucket, group = env["artifacts_bucket"], env["sagemaker"]["model_package_group"]
        sm, s3 = sandbox.client("sagemaker", internal=True), sandbox.client("s3", internal=True)
        # v1 was registered by the sim_to_real run "older-run" (CustomerMetadataProperties), v2 and v3 by hand.
        arns = {tag: _register(sm, s3, group, bucket, tag, status, run_key="older-run" if tag == "v1" else None)
                for tag, status in (("v1", "Approved"), ("v2", "Approved"), ("v3", "PendingManualApproval"))}
        checkpoint = b"toy policy checkpoint bytes"
        s3.put_object(Bucket=bucket, Key="runs/older-run/checkpoints/agent_000010.pt", Body=checkpoint)
        manifest = {"schema_version": 1, "run_key": "older-run", "task": "Reacher-v5", "iteration": 10,
                    "checkpoint_uri": f"s3://{bucket}/runs/older-run/checkpoints/agent_000010.pt",
                    "sha256": hashlib.sha256(checkpoint).hexdigest()}
        s3.put_object(Bucket=bucket, Key="runs/older-run/checkpoints/manifest.json", Body=json.dumps(manifest))
        # ... and that run's lineage record names the checkpoint it evaluated (what a finished run leaves).
        s3.put_object(Bucket=bucket, Key="runs/older-run/lineage.json",
                      Body=json.dumps({"run_key": "older-run", "stages": {"checkpoint": manifest}}))
        result.update(arns=arns, checkpoint_sha256=manifest["sha256"], bucket=bucket)

        from airflow.dag_processing.dagbag import DagBag

        bag = DagBag(dag_folder=str(REPO_ROOT / "dags" / "sim_to_real_release.py"))
        assert not bag.import_errors, bag.import_errors
        dag = bag.dags["sim_to_real_release"]
        canary_manifest = train_policy(s3, bucket, Path(home).parent / "policy")
        canary = {"model_package_arn": arns["v2"], "policy_checkpoint_manifest_uri": canary_manifest,
                  "canary_thing_group_name": "sim2real-robots-canary", "canary_min_episodes": 20,
                  "canary_window_minutes": 1, "field_min_success_rate": 0.5}
        cases = {
            "latest": {"policy_checkpoint_manifest_uri": f"s3://{bucket}/runs/older-run/checkpoints/manifest.json"},
            "pending": {"model_package_arn": arns["v3"]},
            # An empty form field is null in the conf (and dag.test would otherwise keep the previous run's value).
            "device_fails": {"model_package_arn": arns["v1"], "policy_checkpoint_manifest_uri": None},
            "canary_promoted": canary, "canary_gap": canary, "canary_offline": canary,
        }
        from sim2real.dev.sandbox.device import FieldWork, PolicyDeviceCheck
        from sim2real.dev.sandbox.field_robot import NAMED_GAPS

        for name, conf in cases.items():
            if name == "device_fails":  # the package alone (as the form documents); robot 2 cannot apply it
                sandbox.greengrass.device_check = serving_device_check(arns["v1"])
            if name.startswith("canary"):  # the real policy, served and run in the field by the emulated robots
                gap = NAMED_GAPS["severe" if name == "canary_gap" else "mild"]
                sandbox.greengrass.device_check = PolicyDeviceCheck(
                    sandbox, Path(home).parent / "devices", FieldWork("Reacher-v5", 20, bucket, gap))
                sandbox.faults["field_offline"] = ["sim2real-robot-1"] if name == "canary_offline" else []
                # beside the promoted canary's episodes: an object that is not one, and a copy of one
                sandbox.faults["field_bad_reports"] = name == "canary_promoted"
            before = sandbox.requests.count("CreateDeployment")
            dag_run = dag_test(dag, run_conf=conf)
            run_key = make_run_key(dag_run.dag_id, dag_run.run_id)
            try:
                record = json.loads(s3.get_object(Bucket=bucket, Key=f"runs/{run_key}/release.json")["Body"].read())
                markdown = s3.get_object(Bucket=bucket, Key=f"runs/{run_key}/release.md")["Body"].read().decode()
            except Exception as err:  # noqa: BLE001 - reported to the test
                record, markdown = {"error": str(err)}, ""
            gg = sandbox.client("greengrassv2", internal=True)
            deployments = gg.list_deployments(
                historyFilter="ALL").get("deployments", [])
            result[name] = {
                "state": str(getattr(dag_run.state, "value", dag_run.state)),
                "tasks": {t: s for t, s, _ in task_table(dag_run)},
                "create_deployment_calls": sandbox.requests.count("CreateDeployment") - before,
                "record": record, "markdown": markdown, "run_key": run_key,
                "notifications": read_notifications(sandbox, inbox), "asset_events": asset_events(dag_run),
                "deployments": [{k: d.get(k) for k in ("deploymentId", "deploymentName", "deploymentStatus")}
                                for d in deployments],
                # what each robot runs now: the deployment its components were installed from (ListInstalledComponents)
                "installed_from": {
                    thing: sorted({c.get("lastInstallationSource") for c in gg.list_installed_components(
                        coreDeviceThingName=thing)["installedComponents"]})
                    for thing in ("sim2real-robot-1", "sim2real-robot-2")},
            }
        result["sweeper"] = sweep_orphans_of_a_dead_run(sandbox, env)
    Path(out).write_text(json.dumps(result, indent=2, default=str))


def train_policy(s3, bucket: str, folder: Path, iterations: int = 100) -> str:
    """Train ``make demo``'s Reacher-v5 policy (``iterations`` PPO iterations, default 100; seed 3) as the run
    "canary-run" would have (32 environments), upload its checkpoint and manifest; return the manifest's URI."""
    import subprocess
    import sys

    # NUM_ENVS 32: the form's default, which make demo trains with (the trainer's own default, 8, gave a weaker policy
    # whose field rate in the mild world was 18 of 20 on one machine and 6 of 20 on another)
    env = {**os.environ, "TASK": "Reacher-v5", "MAX_ITERATIONS": str(iterations), "NUM_ENVS": "32", "SEED": "3",
           "OUTPUT_URI": str(folder)}
    env.pop("AWS_ENDPOINT_URL", None)
    subprocess.run([sys.executable, "-m", "sim2real.workloads.train"], env=env, check=True, capture_output=True,
                   timeout=600)
    manifest = json.loads((folder / "manifest.json").read_text())
    name = manifest["checkpoint_uri"].rsplit("/", 1)[-1]
    body = (folder / name).read_bytes()
    key = f"runs/canary-run/checkpoints/{name}"
    s3.put_object(Bucket=bucket, Key=key, Body=body)
    manifest.update(checkpoint_uri=f"s3://{bucket}/{key}", sha256=hashlib.sha256(body).hexdigest(),
                    run_key="canary-run")
    s3.put_object(Bucket=bucket, Key="runs/canary-run/checkpoints/manifest.json", Body=json.dumps(manifest))
    return f"s3://{bucket}/runs/canary-run/checkpoints/manifest.json"


def serving_device_check(refused_package_arn: str):
    """An emulated robot that, like the sandbox's ``PolicyDeviceCheck``, needs an RL policy in the configuration merge
    to serve (without exporting it: the test's checkpoint is toy bytes); robot 2 cannot apply a release of
    ``refused_package_arn`` (any other release, the group's earlier one included, it applies)."""
    from sim2real.dev.sandbox.device import _merge_config

    def check(deployment: dict, thing: str) -> tuple[bool, str]:
        config = _merge_config(deployment)
        if not config.get("ModelS3Uri") or not config.get("ModelSha256"):
            return False, "configuration merge has no ModelS3Uri/ModelSha256: nothing to serve"
        if thing.endswith("-2") and config.get("ModelPackageArn") == refused_package_arn:
            return False, "com.sim2real.PolicySetup failed: model download refused"
        return True, f"serves {config['ModelS3Uri']}"

    return check


def sweep_orphans_of_a_dead_run(sandbox, env) -> dict:
    """The maintenance DAG ``sim_to_real_sweeper`` (dry, then for real) in the same Airflow and sandbox: a run that
    was deleted left a Batch job (held RUNNABLE) and a Greengrass deployment still IN_PROGRESS on the robots."""
    from airflow.dag_processing.dagbag import DagBag

    from sim2real.dev.demo import dag_test
    from sim2real.orchestration.config import RUN_KEY_TAG
    from sim2real.contract.run_key import make_run_key
    from sim2real.orchestration.run_records import deployment_id, run_record_key

    dead_run_id = "manual__2026-01-01T00:00:00+00:00"
    dead = make_run_key("sim_to_real", dead_run_id)
    sandbox.client("s3", internal=True).put_object(
        Bucket=env["artifacts_bucket"], Key=run_record_key(dead),
        Body=json.dumps({"dag_id": "sim_to_real", "run_id": dead_run_id, "run_key": dead, "run_type": "manual",
                         "deployment": deployment_id()}).encode())  # this Airflow's (a record of another is foreign)
    sandbox.faults.update({"greengrass_stuck": True, "batch_hold_job_names": [f"sim2real-train-{dead}"]})
    batch, gg = sandbox.client("batch", internal=True), sandbox.client("greengrassv2", internal=True)
    job_id = batch.submit_job(jobName=f"sim2real-train-{dead}", jobQueue=env["batch"]["job_queue"],
                              jobDefinition=env["batch"]["job_definition"], tags={RUN_KEY_TAG: dead})["jobId"]
    group_arn = sandbox.client("iot", internal=True).describe_thing_group(
        thingGroupName=env["greengrass"]["thing_group_name"])["thingGroupArn"]
    deployment_id = gg.create_deployment(
        targetArn=group_arn, deploymentName=f"sim2real-{dead}",
        components={name: {"componentVersion": v} for name, v in env["greengrass"]["components"].items()},
    )["deploymentId"]
    bag = DagBag(dag_folder=str(REPO_ROOT / "dags" / "sim_to_real_sweeper.py"))
    assert not bag.import_errors, bag.import_errors
    dag = bag.dags["sim_to_real_sweeper"]
    out = {"job_id": job_id, "deployment_id": deployment_id, "run_key": dead}
    for name, dry in (("dry", True), ("real", False)):
        dag_run = dag_test(dag, run_conf={"dry_run": dry})
        job = batch.describe_jobs(jobs=[job_id])["jobs"][0]
        # TerminateJob is asynchronous (AWS Batch API Reference, TerminateJob: the job moves to FAILED afterwards;
        # the sandbox's job thread does it a few ms later): after the real sweep, read until it settled (30 s at most)
        settle_until = time.monotonic() + (0 if dry else 30)
        while job["status"] not in ("SUCCEEDED", "FAILED") and time.monotonic() < settle_until:
            time.sleep(0.2)
            job = batch.describe_jobs(jobs=[job_id])["jobs"][0]
        out[name] = {"state": str(getattr(dag_run.state, "value", dag_run.state)),
                     "job_status": job["status"], "job_reason": job.get("statusReason", ""),
                     "deployment_status": gg.get_deployment(deploymentId=deployment_id)["deploymentStatus"]}
    sandbox.faults.pop("greengrass_stuck", None)
    return out


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> dict:
    summary, log = drive_fresh("tests.e2e.test_release_dag", tmp_path_factory.mktemp("release"), "release",
                               timeout=900)
    return {**summary, "log": log}


def test_latest_approved_version_is_deployed_and_recorded(release):
    from sim2real.orchestration.release import release_errors

    case = release["latest"]
    assert case["state"] == "success", case["tasks"]
    assert set(case["tasks"].values()) == {"success"}, case["tasks"]
    record = case["record"]
    assert release_errors(record) == [], record
    # v2: the newest Approved version (v3 is newer but still PendingManualApproval, v1 is older).
    assert record["model_package"]["model_package_arn"] == release["arns"]["v2"]
    assert record["model_package"]["version"] == 2 and record["model_package"]["selected_by"] == "latest_approved"
    assert record["outcome"] == "deployed" and case["create_deployment_calls"] == 1
    deployment = record["deployment"]
    assert deployment["devices"] and set(deployment["devices"].values()) == {"SUCCEEDED"}
    assert deployment["deployment_name"] == f"sim2real-{case['run_key']}"
    # The configuration merge the robots got names the package and the re-verified RL policy.
    merge = json.loads(record["components"]["com.sim2real.PolicySetup"]["configurationUpdate"]["merge"])
    assert merge["ModelPackageArn"] == release["arns"]["v2"]
    assert merge["ModelSha256"] == release["checkpoint_sha256"] == record["policy"]["sha256"]
    assert record["policy"]["verified_sha256"] is True
    assert record["tasks"]["deploy"]["state"] == "success" and record["durations"]["deploy_s"] > 0
    assert deployment["deployment_id"] in case["markdown"]
    # SNS: the deployed notification (and no failure); the deployment is an asset event.
    assert [n["event"] for n in case["notifications"]] == ["deployed"]
    assert deployment["deployment_id"] in case["notifications"][0]["message"]
    [event] = case["asset_events"]
    assert event["asset"] == "sim2real_deployed_model_package" and event["task_id"] == "deploy_to_robots"
    assert event["extra"]["model_package_arn"] == release["arns"]["v2"]
    assert event["extra"]["deployment_id"] == deployment["deployment_id"]
    assert event["extra"]["run_key"] == case["run_key"]


def test_pending_package_is_refused_before_any_deployment(release):
    from sim2real.orchestration.release import release_errors

    case = release["pending"]
    assert case["state"] == "failed"
    assert case["tasks"]["prepare_release"] == "success"
    assert case["tasks"]["resolve_model_package"] == "failed"
    assert case["tasks"]["deploy_to_robots"] in ("upstream_failed", "skipped")
    assert case["create_deployment_calls"] == 0
    assert not [d for d in case["deployments"] if d["deploymentName"] == f"sim2real-{case['run_key']}"]
    # The teardown still wrote a valid record of the refusal.
    record = case["record"]
    assert release_errors(record) == [], record
    assert record["outcome"] == "not_deployed" and record["model_package"] is None and record["deployment"] is None
    assert record["requested"]["model_package_arn"] == release["arns"]["v3"]
    assert record["tasks"]["resolve"]["state"] == "failed"
    assert [n["event"] for n in case["notifications"]] == ["run_failed"] and not case["asset_events"]
    # The refusal names the ARN, its status and how to approve it.
    arn = release["arns"]["v3"]
    assert f"Model package {arn} is PendingManualApproval" in release["log"]
    assert f"--model-package-arn {arn} --model-approval-status Approved" in release["log"]


def test_failed_deployment_is_recorded_by_the_teardown(release):
    from sim2real.orchestration.release import release_errors

    case = release["device_fails"]
    assert case["state"] == "failed"
    assert case["tasks"]["deploy_to_robots"] == "failed" and case["tasks"]["write_release_record"] == "success"
    # a device failure is a verdict: not retried; the second deployment is the automatic rollback
    assert case["create_deployment_calls"] == 2
    record = case["record"]
    assert release_errors(record) == [], record
    assert record["outcome"] == "deployment_failed"
    assert record["model_package"]["model_package_arn"] == release["arns"]["v1"]
    assert record["model_package"]["selected_by"] == "arn"
    deployment = record["deployment"]
    assert deployment["deployment_name"] == f"sim2real-{case['run_key']}"
    assert deployment["deployment_status"] == "CANCELED"
    # The package alone ships the policy of the run that registered it (its lineage), verified again: robot 1 serves
    # it; robot 2 fails on its own fault, not on "nothing to serve".
    merge = json.loads(record["components"]["com.sim2real.PolicySetup"]["configurationUpdate"]["merge"])
    assert merge["ModelSha256"] == release["checkpoint_sha256"] == record["policy"]["sha256"]
    assert record["policy"]["manifest_uri"].endswith("/runs/older-run/checkpoints/manifest.json")
    assert record["requested"]["policy_checkpoint_manifest_uri"] is None
    assert f"policy of model package {release['arns']['v1']}: run older-run's checkpoint" in release["log"]
    assert deployment["devices"] == {"sim2real-robot-1": "SUCCEEDED", "sim2real-robot-2": "FAILED"}
    assert "model download refused" in deployment["device_reasons"]["sim2real-robot-2"]
    assert "nothing to serve" not in release["log"]
    # The failure says which robot runs which release: robot 1 keeps this one, the fleet is mixed.
    this = f"sim2real-{case['run_key']}"
    assert ("sim2real-robot-1: SUCCEEDED (serves s3://" in release["log"]
            and f"agent_000010.pt) — runs this release {this}" in release["log"])
    assert f"The fleet is MIXED: sim2real-robot-1 run {this}, sim2real-robot-2 do not" in release["log"]
    # ... so the group gets its last good release again (the "latest" case's deployment), and both robots run it.
    earlier = next(d for d in case["deployments"] if d["deploymentName"] == f"sim2real-{release['latest']['run_key']}")
    rollback = deployment["rollback"]
    assert rollback["deployment_name"] == f"{this}-rollback"
    assert rollback["previous_deployment_id"] == earlier["deploymentId"]
    assert rollback["previous_deployment_name"] == earlier["deploymentName"]
    assert rollback["devices"] == {"sim2real-robot-1": "SUCCEEDED", "sim2real-robot-2": "SUCCEEDED"}
    assert case["installed_from"] == {"sim2real-robot-1": [rollback["deployment_id"]],
                                      "sim2real-robot-2": [rollback["deployment_id"]]}
    assert (f"Rolled back automatically: deployment {rollback['deployment_id']} ({this}-rollback) put the components "
            f"of {earlier['deploymentName']} (deployment {earlier['deploymentId']}) back on the robots that ran this release "
            "(sim2real-robot-1: SUCCEEDED (serves s3://") in release["log"]
    assert f"Rolled back automatically to `{earlier['deploymentName']}`" in case["markdown"]
    assert [n["event"] for n in case["notifications"]] == ["run_failed"] and not case["asset_events"]


def test_sweeper_reports_when_dry_and_stops_the_orphans_of_a_deleted_run(release):
    """sim_to_real_sweeper under dag.test: the run's state comes from the Task Execution API (the deleted run is
    not found), the dry run only reports, the real one terminates the job and cancels the deployment; the
    finished release runs' deployments are left alone."""
    sweep = release["sweeper"]
    assert sweep["dry"] == {"state": "success", "job_status": "RUNNABLE", "job_reason": sweep["dry"]["job_reason"],
                            "deployment_status": "ACTIVE"}
    assert f"DRY RUN: would stop orphan batch_job {sweep['job_id']}" in release["log"]
    assert f"DRY RUN: would stop orphan greengrass_deployment {sweep['deployment_id']}" in release["log"]
    real = sweep["real"]
    assert real["state"] == "success" and real["job_status"] == "FAILED"
    assert "sim2real sweeper" in real["job_reason"] and "no longer exists (deleted)" in real["job_reason"]
    assert real["deployment_status"] == "CANCELED"
    assert f"Stopped orphan batch_job {sweep['job_id']}" in release["log"]
    assert release["log"].count("Stopped orphan ") == 2  # nothing of the finished release runs


def _canary(release, name):
    case = release[name]
    return case, case["record"], case["record"].get("field") or {}


def test_a_canary_that_the_field_promotes_goes_on_to_the_fleet(release):
    from sim2real.orchestration.release import release_errors

    case, record, field = _canary(release, "canary_promoted")
    assert case["state"] == "success", case["tasks"]
    assert release_errors(record) == [], release_errors(record)
    assert field["decision"] == "promote" and field["robots"].keys() == {"sim2real-robot-1"}, field
    assert field["field"]["episodes"] >= 20 and field["field"]["ci95"][0] >= 0.5 and field["simulation"] is None
    # the malformed object and the copy were refused and counted; the genuine episodes all counted
    assert (field["refused"]["malformed"], field["refused"]["duplicated"]) == (1, 1), field["refused"]
    assert "Refused field episode objects: duplicated 1, malformed 1." in case["markdown"]
    assert case["create_deployment_calls"] == 2  # the canary group, then the fleet group
    assert record["outcome"] == "deployed" and "## Field" in case["markdown"] and "**promote**" in case["markdown"]


def test_a_real_gap_rolls_the_canary_back_to_the_promoted_release_and_spares_the_fleet(release):
    from sim2real.orchestration.release import release_errors

    promoted = release["canary_promoted"]["record"]["field"]["deployment_id"]
    case, record, field = _canary(release, "canary_gap")
    assert case["state"] == "failed" and case["tasks"]["canary_verdict"] == "failed", case["tasks"]
    assert case["tasks"]["deploy_to_robots"] == "upstream_failed", case["tasks"]
    assert release_errors(record) == [], release_errors(record)
    assert field["decision"] == "roll_back" and field["field"]["ci95"][0] < 0.5, field
    # the canary group's rollback deployment: robot 1 runs the promoted release's components again
    assert case["create_deployment_calls"] == 2  # the canary, then its rollback; never the fleet
    rollback = [d for d in case["deployments"] if d["deploymentName"].endswith("-canary-rollback")]
    assert rollback and case["installed_from"]["sim2real-robot-1"] == [rollback[0]["deploymentId"]], case
    assert promoted != field["deployment_id"]
    assert "field success rate" in release["log"] and "threshold 0.500" in release["log"]


def test_a_canary_robot_silent_for_the_window_is_named_and_not_promoted(release):
    case, record, field = _canary(release, "canary_offline")
    assert case["state"] == "failed" and case["tasks"]["deploy_to_robots"] == "upstream_failed", case["tasks"]
    assert field["decision"] == "roll_back" and field["silent"] == ["sim2real-robot-1"], field
    assert "sim2real-robot-1 reported no episode" in field["message"]
