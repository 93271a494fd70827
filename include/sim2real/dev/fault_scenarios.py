"""The fault replay's scenario table: one :class:`Scenario` per injected fault, and how the scenarios share runs.

Each scenario names its fault (the sandbox's fault switches, quota limits, an environment patch, a setup before
the run or a change when a task starts), the run conf and reviewer decision, and the check its run must pass
(:mod:`sim2real.dev.fault_checks`). :data:`SCENARIOS` is the table :mod:`sim2real.dev.faults` replays;
:func:`runs_of` groups the scenarios into DAG runs (``Scenario.shares_run``, checked by
:func:`_check_shared_runs` at import).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim2real.contract import task_ids as ids
from sim2real.dev.fault_checks import (TRAIN, Check, Outcome, _c, all_of, custom, fails_with, faults_consumed,
                                       not_run, nothing_running, nothing_started, submits, succeeds, teardowns_ran)

#: Stop the release after the quality gate (scenarios whose fault is upstream of the fine-tune).
NO_RELEASE = {"run_vla_finetune": False, "deploy_to_edge": False}


@dataclass
class Scenario:
    name: str
    fault: str          # what is injected, in words
    failure_mode: str   # the kind of failure, in a few words (the report's "failure mode" column)
    expected: str       # the outcome the run must have, in words
    check: Check
    faults: dict[str, Any] = field(default_factory=dict)
    conf: dict[str, Any] = field(default_factory=dict)
    decision: str = "Approved"
    quota_limits: dict[str, float] = field(default_factory=dict)
    #: ``(sandbox, env_config) -> state``, before the run (what a dead earlier run left behind, ...).
    setup: Callable[[Any, dict[str, Any]], Any] | None = None
    #: task id -> ``(sandbox, env_config)``, called when that task starts running (a change between stages).
    on_task_start: dict[str, Callable[[Any, dict[str, Any]], None]] = field(default_factory=dict)
    #: ``(sandbox, env_config, setup state) -> dict``, after the run: what the checks read as ``Outcome.probe``.
    probe: Callable[[Any, dict[str, Any], Any], dict[str, Any]] | None = None
    #: merged into the environment config for this run only (a wrong name, a mis-sized instance type)
    env_patch: dict[str, Any] = field(default_factory=dict)
    #: the checks every scenario gets include "the teardowns ran" (off where no teardown can: prepare_run
    #: refused the run, or the artifacts bucket itself is what is wrong)
    teardowns: bool = True
    #: Airflow refuses to create the run (ParamValidationError): no run, only the scenario's own check
    refused: bool = False
    #: name of an earlier scenario whose DAG run this one shares: both faults are injected into that one run and
    #: each scenario's checks read its outcome (only for faults in independent stages of runs that both succeed)
    shares_run: str | None = None


def _ended_at_the_budget(o: Outcome) -> tuple[bool, Any]:
    """The train task's error says the job stayed RUNNABLE for well under 117 s, what the wait reported when the
    sandbox backdated createdAt only after the RUNNABLE event: the wait then counted the 60 s budget from the event's
    later createdAt and described a whole budget after it (57 s + 60 s). Counted from createdAt (57 s back), the
    budget runs out about 3 s after the job becomes RUNNABLE; the bound, 105 s, leaves 45 s for the deferral and the
    trigger's first describe on a loaded machine."""
    found = re.search(r"stayed RUNNABLE for (\d+) s", o.error(TRAIN))
    return (found is not None and int(found.group(1)) <= 105, found.group(0) if found else o.error(TRAIN)[:300])


def _job_terminated(o: Outcome) -> tuple[bool, Any]:
    return (bool(o.jobs) and all(j["status"] == "FAILED" and "budget" in (j.get("reason") or "") for j in o.jobs),
            [(j["status"], j.get("reason")) for j in o.jobs])


def _reject_package(sandbox, env_config) -> None:
    """The reviewer changes their mind after the approval wait returned: the newest package goes Rejected."""
    sm = sandbox.client("sagemaker", internal=True)
    group = env_config["sagemaker"]["model_package_group"]
    newest = sm.list_model_packages(ModelPackageGroupName=group, SortBy="CreationTime",
                                    SortOrder="Descending")["ModelPackageSummaryList"][0]
    sm.update_model_package(ModelPackageArn=newest["ModelPackageArn"], ModelApprovalStatus="Rejected",
                            ApprovalDescription="revoked by the fault replay's reviewer before the deploy")


EMPTY_GROUP = "sim2real-robots-empty"


def _empty_thing_group(sandbox, env_config) -> None:
    iot = sandbox.client("iot", internal=True)
    if EMPTY_GROUP not in [g["groupName"] for g in iot.list_thing_groups()["thingGroups"]]:
        iot.create_thing_group(thingGroupName=EMPTY_GROUP)


#: A run that a dead process left behind: its record says sim_to_real / this run id, which is not in the DB
#: (deleted in the UI); its Batch job is held RUNNABLE until terminated.
ORPHAN_RUN_ID = "manual__2026-01-01T00:00:00+00:00"


def _orphan_job(sandbox, env_config) -> dict[str, Any]:
    from sim2real.orchestration.config import RUN_KEY_TAG
    from sim2real.contract.run_key import make_run_key
    from sim2real.orchestration.run_records import deployment_id, run_record_key

    key = make_run_key("sim_to_real", ORPHAN_RUN_ID)
    name = f"sim2real-train-{key}"
    sandbox.client("s3", internal=True).put_object(
        Bucket=env_config["artifacts_bucket"], Key=run_record_key(key),
        # written as prepare_run writes it, by this Airflow deployment (a record of another one is never stopped)
        Body=json.dumps({"dag_id": "sim_to_real", "run_id": ORPHAN_RUN_ID, "run_key": key, "run_type": "manual",
                         "deployment": deployment_id()}).encode())
    sandbox.faults["batch_hold_job_names"] = [name]
    batch = sandbox.client("batch", internal=True)
    job_id = batch.submit_job(jobName=name, jobQueue=env_config["batch"]["job_queue"],
                              jobDefinition=env_config["batch"]["job_definition"],
                              tags={RUN_KEY_TAG: key})["jobId"]
    return {"job_id": job_id, "run_key": key}


def _orphan_probe(sandbox, env_config, state) -> dict[str, Any]:
    job = sandbox.client("batch", internal=True).describe_jobs(jobs=[state["job_id"]])["jobs"][0]
    return {"status": job["status"], "reason": job.get("statusReason", "")}


THROTTLE = {"SubmitJob": 2, "DescribeJobs": 3, "ListJobs": 1, "SendCommand": 2, "GetCommandInvocation": 2,
            "DescribeInstances": 1, "GetServiceQuota": 1, "DescribeRepositories": 1}
SERVER_ERROR = {"DescribeJobs": 2, "SubmitJob": 1, "GetCommandInvocation": 2, "DescribeComputeEnvironments": 1,
                "DescribeInstanceTypes": 1}

#: The digest of the stale image :func:`_stale_tag` pushed.
STALE: dict[str, str] = {}


def _stale_tag(sandbox, env_config) -> None:
    """An image pushed under the old branch tag src-main (the old build skip trained on it), and a new version of
    the build's source archive."""
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                           "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": 7,
                                      "digest": "sha256:" + "5" * 64},
                           "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": 9,
                                       "digest": "sha256:" + "6" * 64}]}, separators=(",", ":"))
    ecr = sandbox.client("ecr", internal=True)
    repo = sandbox.config["image_build"]["ecr_repository"]
    try:
        ecr.put_image(repositoryName=repo, imageManifest=manifest, imageTag="src-main")
    except ecr.exceptions.ImageAlreadyExistsException:
        pass
    STALE["digest"] = ecr.describe_images(repositoryName=repo, imageIds=[{"imageTag": "src-main"}])[
        "imageDetails"][0]["imageDigest"]
    # a new version of the source archive (a new commit): its image key has no record yet, so it is built
    s3 = sandbox.client("s3", internal=True)
    key = sandbox.config["artifacts_bucket"], "source/sim2real.zip"
    body = s3.get_object(Bucket=key[0], Key=key[1])["Body"].read()
    s3.put_object(Bucket=key[0], Key=key[1], Body=body + b"\n")


def _built_not_stale(o: Outcome) -> tuple[bool, Any]:
    digest = ((o.tasks.get(ids.BUILD_IMAGE) or {}).get("xcom") or {}).get("image_digest")
    return (bool(digest) and digest != STALE.get("digest") and o.requests.get("StartBuild", 0) == 1,
            {"digest": digest, "stale": STALE.get("digest"), "StartBuild": o.requests.get("StartBuild", 0)})



# -- wait events (EventBridge -> SQS -> the triggers) ---------------------------------------------------------
BATCH_EVENT = "Batch Job State Change"
#: A Batch job of another DAG run in the same job queue (the rule lets it through; no wait of this run owns it).
FOREIGN_JOB_ID = "0f0e0d0c-another-runs-job"


def _since(sandbox, env_config) -> float:
    return time.time()


def _event_counts(sandbox, env_config, since: float) -> dict[str, Any]:
    """What the sandbox's event bus did since ``since``: events dropped / duplicated / published per detail-type."""
    found = [e for e in sandbox.events.find("events") if e.time >= since]
    return {"dropped": Counter(e.data.get("detail_type") for e in found if e.kind == "dropped"),
            "duplicated": Counter(e.data.get("detail_type") for e in found if e.kind == "duplicated"),
            "published": Counter(e.data.get("detail_type") for e in found if e.kind == "published")}


def _dropped_probe(sandbox, env_config, since) -> dict[str, Any]:
    return _event_counts(sandbox, env_config, since)


def _train_ended_without_batch_events(o: Outcome) -> tuple[bool, Any]:
    dropped, published = o.probe["dropped"].get(BATCH_EVENT, 0), o.probe["published"].get(BATCH_EVENT, 0)
    return (o.state_of(TRAIN) == "success" and dropped > 0 and published == 0,
            {"train": o.state_of(TRAIN), "Batch events dropped": dropped, "Batch events published": published})


def _duplicates_one_outcome(o: Outcome) -> tuple[bool, Any]:
    duplicated = sum(o.probe["duplicated"].values())
    tries = {t: o.tries(t) for t in (ids.BUILD_IMAGE, TRAIN, ids.RUN_EVALUATION)}
    return (duplicated > 0 and all(n == 1 for n in tries.values()),
            {"duplicated": dict(o.probe["duplicated"]), "tries": tries})


def _foreign_batch_event(sandbox, env_config) -> None:
    """Another run's job in this job queue FAILS while this run's training job is waited on."""
    queue_arn = f"arn:aws:batch:{sandbox.region}:{sandbox.account_id}:job-queue/{env_config['batch']['job_queue']}"
    job_arn = f"arn:aws:batch:{sandbox.region}:{sandbox.account_id}:job/{FOREIGN_JOB_ID}"
    detail = {"jobArn": job_arn, "jobName": "sim2real-train-another-run", "jobId": FOREIGN_JOB_ID,
              "jobQueue": queue_arn, "status": "FAILED", "statusReason": "another run's job failed",
              "attempts": [], "createdAt": int(time.time() * 1000), "jobDefinition": env_config["batch"]["job_definition"]}
    # straight to EventBridge: the events_drop fault of the shared run must not take this one
    sandbox.client("events", internal=True).put_events(Entries=[{
        "Source": "aws.batch", "DetailType": BATCH_EVENT, "Resources": [job_arn], "Detail": json.dumps(detail)}])
    sandbox.events.emit("events", "foreign", f"{BATCH_EVENT} for {FOREIGN_JOB_ID} (another run) -> EventBridge",
                        detail_type=BATCH_EVENT, key=FOREIGN_JOB_ID)


def _foreign_probe(sandbox, env_config, since) -> dict[str, Any]:
    return {"sent": len([e for e in sandbox.events.find("events", "foreign") if e.time >= since])}


def _foreign_ignored(o: Outcome) -> tuple[bool, Any]:
    return (o.probe["sent"] == 1 and o.state_of(TRAIN) == "success" and not o.error(TRAIN),
            {"foreign events sent": o.probe["sent"], "train": o.state_of(TRAIN)})


class _ConsumerLog(logging.Handler):
    """Keeps the wait-event consumer's warnings (the queue unreachable) of one run."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _watch_consumer(sandbox, env_config) -> _ConsumerLog:
    handler = _ConsumerLog()
    logging.getLogger("sim2real.orchestration.events.consumer").addHandler(handler)
    return handler


def _queue_unreachable(sandbox, env_config) -> None:
    """The wait-event queue refuses the next two receives (AccessDenied, which botocore does not retry): the
    evaluation wait's consumer gives up on it and the wait polls."""
    sandbox.faults.setdefault("access_denied", {})["ReceiveMessage"] = 2


def _consumer_probe(sandbox, env_config, handler: _ConsumerLog) -> dict[str, Any]:
    logging.getLogger("sim2real.orchestration.events.consumer").removeHandler(handler)
    return {"warnings": list(handler.lines)}


def _fell_back_and_logged(o: Outcome) -> tuple[bool, Any]:
    warned = [w for w in o.probe["warnings"] if "unreachable" in w and "fall back to polling" in w]
    return (o.injected.get("ReceiveMessage", 0) == 2 and bool(warned) and o.state_of(ids.RUN_EVALUATION) == "success",
            {"ReceiveMessage refused": o.injected.get("ReceiveMessage", 0), "warnings": o.probe["warnings"][:2],
             "run_evaluation": o.state_of(ids.RUN_EVALUATION)})



def _cancelled_and_rolled_back(o: Outcome) -> tuple[bool, Any]:
    """The release's deployment CANCELED; then either the group's rollback (the one other deployment: ACTIVE, robot 1,
    which ran the release, SUCCEEDED it, the failure says "Rolled back automatically"; robot 2's fault fails every
    deployment, and it rolls back itself) or, with no earlier release, none (the failure says "No automatic
    rollback")."""
    message = o.error(ids.DEPLOY_TO_ROBOTS)
    if not o.deployments or o.deployments[0]["status"] != "CANCELED" or len(o.deployments) > 2:
        return False, o.deployments
    if len(o.deployments) == 1:
        return "No automatic rollback" in message, (o.deployments, message[-300:])
    rollback = o.deployments[1]
    return (rollback["status"] == "ACTIVE" and rollback["devices"].get("sim2real-robot-1") == "SUCCEEDED"
            and "Rolled back automatically" in message,
            (o.deployments, message[-300:]))

SCENARIOS: list[Scenario] = [
    Scenario(
        "batch_runnable", "Batch job held RUNNABLE (no capacity); budget runnable_timeout_minutes=1, the job reports "
        "createdAt 57 s in the past", "capacity",
        "train fails within the budget with the Batch statusReason and the compute environment state; job terminated",
        all_of(fails_with(TRAIN, "stayed RUNNABLE", "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY", "compute environment",
                          "the job was terminated"),
               custom("job terminated (FAILED, budget reason)", _job_terminated),
               custom("terminated when the budget ran out, counted from createdAt (not a budget later)",
                      _ended_at_the_budget),
               custom("no retry", lambda o: (o.tries(TRAIN) == 1, o.tries(TRAIN))),
               submits(1), not_run(ids.WAIT_FOR_CHECKPOINT, ids.RUN_EVALUATION)),
        faults={"batch_stuck_runnable": True, "batch_runnable_since_seconds": 57},
        conf={"runnable_timeout_minutes": 1, **NO_RELEASE},
    ),
    Scenario(
        "batch_node_fails", "the multi-node job FAILS: node 0's essential container exits 1", "job failure",
        "train fails with the job's statusReason, exit code and failure class (user code: no retry)",
        all_of(fails_with(TRAIN, "ended FAILED", "Essential container in task exited", "exit code=1",
                          "failure class"),
               submits(1), not_run(ids.WAIT_FOR_CHECKPOINT, ids.RUN_EVALUATION)),
        faults={"batch_fail_node": True}, conf=NO_RELEASE,
    ),
    Scenario(
        "worker_lost_after_submit", "the first try of train dies right after SubmitJob (its next DescribeJobs fails "
        "with a non-retryable ClientException); Airflow retries the task", "lost worker",
        "the retry reattaches to the same job (ListJobs by name + run-key tag): exactly one job, run succeeds",
        all_of(succeeds, submits(1),
               custom("train retried once", lambda o: (o.tries(TRAIN) == 2, o.tries(TRAIN))),
               custom("first try failed on DescribeJobs", lambda o: ("batch_lost_after_submit" in o.error(TRAIN),
                                                                     o.error(TRAIN)[:300])),
               custom("the retry looked the job up (ListJobs) instead of submitting",
                      lambda o: (o.requests.get("ListJobs", 0) >= 2, dict(o.requests)))),
        faults={"batch_lost_after_submit": 1}, conf=NO_RELEASE,
    ),
    Scenario(
        "throttling_and_5xx", f"{sum(THROTTLE.values())} ThrottlingException and {sum(SERVER_ERROR.values())} HTTP 503 "
        "answers spread over Batch, SSM, EC2, Service Quotas and ECR calls", "throttling",
        "every error retried by botocore (adaptive mode); the whole loop succeeds with no task retry and one job",
        all_of(succeeds, faults_consumed, submits(1),
               custom("no task retried", lambda o: (all(v["try_number"] <= 1 for v in o.tasks.values()),
                                                    {t: v["try_number"] for t, v in o.tasks.items() if v["try_number"] > 1}))),
        faults={"throttle": THROTTLE, "server_error": SERVER_ERROR},
    ),
    Scenario(
        "ssm_timeout", "the evaluation command times out on the workstation (SSM TimedOut)", "timeout",
        "run_evaluation fails naming TimedOut and the execution timeout; the workstation is stopped",
        all_of(fails_with(ids.RUN_EVALUATION, "TimedOut"),
               not_run(ids.READ_EVAL_REPORT, ids.QUALITY_GATE)),
        faults={"ssm_timeout": True}, conf=NO_RELEASE,
    ),
    Scenario(
        "pipeline_completed_with_failures", "the GR00T pipeline ends CompletedWithFailures (step GR00TFinetune)",
        "job failure", "finetune_groot fails with the status and the failing step; no approval wait, no deployment",
        all_of(fails_with(ids.FINETUNE_GROOT, "CompletedWithFailures", "GR00TFinetune"),
               not_run(ids.WAIT_FOR_APPROVAL, ids.DEPLOY_TO_ROBOTS)),
        faults={"pipeline_status": "CompletedWithFailures"},
    ),
    Scenario(
        "model_package_rejected", "the reviewer rejects the run's model package in the Model Registry", "approval",
        "wait_for_approval fails with Rejected and the reviewer's reason; nothing is deployed; lineage written",
        all_of(fails_with(ids.WAIT_FOR_APPROVAL, "Rejected", "rejected by the fault replay's reviewer"),
               not_run(ids.DEPLOY_TO_ROBOTS),
               custom("lineage has no deployment, has the checkpoint",
                      lambda o: (bool(o.lineage) and o.lineage["chain"].get("deployment_id") is None
                                 and bool(o.lineage["chain"].get("checkpoint_sha256")),
                                 (o.lineage or {}).get("chain")))),
        faults={"reject_model_package": True}, decision="Rejected",
    ),
    Scenario(
        "greengrass_device_fails", "one robot (sim2real-robot-2) fails the deployment (component BROKEN)", "partial deployment",
        "deploy_to_robots fails naming the device; the deployment is cancelled, the device rolls back itself, and "
        "robot 1, which ran the release, goes back with the group to the group's earlier release when it has one "
        "(an earlier scenario of the same sandbox deployed one)",
        all_of(fails_with(ids.DEPLOY_TO_ROBOTS, "sim2real-robot-2", "FAILED"),
               custom("deployment CANCELED; a rollback to the earlier release, if any, reached robot 1",
                      _cancelled_and_rolled_back)),
        faults={"greengrass_device_fail": "sim2real-robot-2"},
    ),
    Scenario(
        "quota_below_need", "EC2 quota 'Running On-Demand G and VT instances' (L-DB2E81BA) is 8 vCPU; the job "
        "needs 48", "quota",
        "check_capacity refuses with the quota name, code, limit, usage and the request command; no SubmitJob",
        all_of(fails_with(ids.BATCH_CHECK_CAPACITY, "L-DB2E81BA", "Running On-Demand G and VT instances",
                          "request-service-quota-increase"),
               submits(0), custom("no job definition registered",
                                  lambda o: (o.requests.get("RegisterJobDefinition", 0) == 0,
                                             o.requests.get("RegisterJobDefinition", 0))),
               not_run(TRAIN)),
        quota_limits={"L-DB2E81BA": 8.0}, conf=NO_RELEASE,
    ),
    Scenario(
        "checkpoint_bad_sha256", "after training, manifest.json is rewritten with a wrong sha256", "checkpoint integrity",
        "wait_for_checkpoint fails with the sha256 mismatch; nothing is evaluated",
        all_of(fails_with(ids.WAIT_FOR_CHECKPOINT, "sha256 mismatch"),
               custom("no retry (fail fast)", lambda o: (o.tries(ids.WAIT_FOR_CHECKPOINT) == 1,
                                                         o.tries(ids.WAIT_FOR_CHECKPOINT))),
               submits(1), not_run(ids.RUN_EVALUATION)),
        faults={"checkpoint_bad_sha256": True}, conf=NO_RELEASE,
    ),
    Scenario(
        "package_rejected_before_deploy", "the model package is approved, then rejected by the reviewer after "
        "the approval wait returned and before the deploy stage", "approval",
        "deploy_to_robots refuses it (status read again before CreateDeployment): no deployment, run failed, "
        "lineage says Rejected",
        all_of(fails_with(ids.DEPLOY_TO_ROBOTS, "is Rejected", "no Greengrass deployment was created"),
               custom("no deployment created", lambda o: (not o.deployments and o.requests.get("CreateDeployment", 0) == 0,
                                                          o.deployments)),
               custom("lineage records Rejected at deploy time",
                      lambda o: (bool(o.lineage) and o.lineage["chain"].get("model_approval_status") == "Rejected"
                                 and o.lineage["chain"].get("model_approval_checked_at") == "deploy",
                                 (o.lineage or {}).get("chain")))),
        on_task_start={ids.DEPLOY_TO_ROBOTS: _reject_package},
    ),
    Scenario(
        "greengrass_device_stuck", "one robot (sim2real-robot-2) stays IN_PROGRESS; deployment_timeout_minutes=1",
        "deployment timeout", "deploy_to_robots fails after the one bound, naming the unfinished robot; one deployment, "
        "cancelled; no retry",
        all_of(fails_with(ids.DEPLOY_TO_ROBOTS, "timed out", "within the deployment timeout of 60 s",
                          "unfinished devices: sim2real-robot-2: IN_PROGRESS"),
               custom("no retry", lambda o: (o.tries(ids.DEPLOY_TO_ROBOTS) == 1, o.tries(ids.DEPLOY_TO_ROBOTS))),
               custom("exactly one deployment, CANCELED",
                      lambda o: (len(o.deployments) == 1 and o.deployments[0]["status"] == "CANCELED", o.deployments))),
        faults={"greengrass_stuck": "sim2real-robot-2"}, conf={"deployment_timeout_minutes": 1},
    ),
    Scenario(
        "thing_group_without_devices", f"the run deploys to thing group {EMPTY_GROUP}, which has no core devices",
        "preflight", "check_resources refuses the run naming the group, before the build, any training or deployment",
        all_of(fails_with(ids.CHECK_RESOURCES, f"IoT thing group '{EMPTY_GROUP}' has no Greengrass core device"),
               nothing_started, not_run(ids.BUILD_IMAGE, TRAIN, ids.DEPLOY_TO_ROBOTS),
               custom("no deployment created", lambda o: (o.requests.get("CreateDeployment", 0) == 0 and not o.deployments,
                                                          o.deployments))),
        setup=_empty_thing_group, conf={"thing_group_name": EMPTY_GROUP},
    ),
    Scenario(
        "orphan_of_a_deleted_run", "a Batch job of an earlier run whose DAG run no longer exists (deleted; its "
        "process died) is still RUNNABLE when a new run starts", "orphaned job",
        "prepare_run's sweep terminates it (reason names the sweeper and the run); the new run succeeds",
        all_of(succeeds,
               custom("orphan terminated by the sweep", lambda o: (
                   o.probe.get("status") == "FAILED" and "sim2real sweeper" in o.probe.get("reason", "")
                   and "no longer exists" in o.probe.get("reason", ""), o.probe))),
        setup=_orphan_job, probe=_orphan_probe, conf=NO_RELEASE,
    ),
    Scenario(
        "conf_unknown_keys", "run conf with typos: {num_node: 4, eval_epsiodes: 7} (REST API / CLI)", "bad input",
        "prepare_run refuses the run naming each unknown key with the closest field; nothing is started",
        all_of(fails_with(ids.PREPARE_RUN, "'num_node' is not a field", "did you mean 'num_nodes'",
                          "'eval_epsiodes' is not a field", "did you mean 'eval_episodes'"),
               custom("no retry", lambda o: (o.tries(ids.PREPARE_RUN) == 1, o.tries(ids.PREPARE_RUN))),
               nothing_started, not_run(ids.CHECK_RESOURCES, ids.BUILD_IMAGE, TRAIN)),
        conf={"num_node": 4, "eval_epsiodes": 7, **NO_RELEASE}, teardowns=False,
    ),
    Scenario(
        "conf_out_of_range", "run conf with eval_episodes = -5 (the form used to clamp it to 1)", "bad input",
        "Airflow refuses to create the run, with the reason; no run exists",
        lambda o: [_c("run creation refused", o.state == "refused", o.state),
                   _c("the reason names the field and the bound",
                      "eval_episodes: -5 is less than the minimum of 1" in o.error("dag.test"), o.error("dag.test"))],
        conf={"eval_episodes": -5, **NO_RELEASE}, refused=True,
    ),
    Scenario(
        "invalid_bucket_name", "environment config artifacts_bucket 'Sim2Real-Artifacts' (upper case)",
        "preflight", "check_resources refuses the run with the S3 naming rule broken; no build, no training",
        all_of(fails_with(ids.CHECK_RESOURCES, "'Sim2Real-Artifacts' is not a valid S3 bucket name",
                          "upper-case letters"),
               nothing_started, not_run(ids.BUILD_IMAGE, TRAIN)),
        env_patch={"artifacts_bucket": "Sim2Real-Artifacts"}, conf=NO_RELEASE, teardowns=False,
    ),
    Scenario(
        "missing_release_resources", "the model package group and the pipeline role of the config do not exist",
        "preflight", "check_resources lists both problems at once, before the build and the GPU fine-tune",
        all_of(fails_with(ids.CHECK_RESOURCES, "2 problem(s)",
                          "model package group 'sim2real-missing-models' does not exist",
                          "role/sim2real-missing-role' does not exist"),
               nothing_started, not_run(ids.BUILD_IMAGE, TRAIN, ids.FINETUNE_GROOT)),
        env_patch={"sagemaker": {"model_package_group": "sim2real-missing-models",
                                 "pipeline_role_arn": "arn:aws:iam::123456789012:role/sim2real-missing-role"}},
    ),
    Scenario(
        "instance_type_too_small", "batch.instance_type g6.xlarge (1 GPU, 4 vCPU) for the 4-GPU, 48-vCPU job "
        "definition", "capacity preflight", "check_resources refuses with the GPU and vCPU shortfall per node; no job is submitted",
        all_of(fails_with(ids.CHECK_RESOURCES, "asks for GPU 4 per node", "g6.xlarge has 1", "RUNNABLE"),
               submits(0), nothing_started, not_run(TRAIN)),
        # max_budget_usd 0: the price table has no g6.xlarge (the budget check would refuse the run first)
        env_patch={"batch": {"instance_type": "g6.xlarge"}}, conf={**NO_RELEASE, "max_budget_usd": 0},
    ),
    Scenario(
        "build_over_at_once", "the image build is over before the task's first read (CodeBuild finishes inside "
        "StartBuild); ECR holds a stale image under the old branch tag src-main", "stale image",
        "build_image finishes in its first try without deferring (no trigger race) and the run trains on the "
        "image it built, not the stale tag",
        all_of(succeeds,
               custom("build_image succeeded in one try", lambda o: (
                   o.state_of(ids.BUILD_IMAGE) == "success" and o.tries(ids.BUILD_IMAGE) == 1,
                   (o.state_of(ids.BUILD_IMAGE), o.tries(ids.BUILD_IMAGE)))),
               custom("built (one StartBuild), digest is not the stale tag's", _built_not_stale)),
        faults={"codebuild_instant": True}, conf=NO_RELEASE, setup=_stale_tag,
        # the build stage's fault, beside the train stage's retry: one successful run checks both
        shares_run="worker_lost_after_submit",
    ),
    Scenario(
        "event_dropped", "every Batch Job State Change event is dropped before EventBridge (reconcile describe "
        "every 5 s)", "lost event",
        "the training wait ends on its reconcile describe; the run succeeds",
        all_of(succeeds, custom("train ended with no Batch event delivered", _train_ended_without_batch_events)),
        faults={"events_drop": [BATCH_EVENT]}, conf=NO_RELEASE, setup=_since, probe=_dropped_probe,
        env_patch={"events": {"reconcile_interval_seconds": 5}},
    ),
    Scenario(
        "event_duplicated", "every state-change event that is not dropped (all but Batch's) reaches the queue "
        "twice (same event id)",
        "duplicate event", "one outcome per wait: each waiting task ends once, in one try; the run succeeds",
        all_of(succeeds, custom("duplicates delivered, every wait ended once", _duplicates_one_outcome)),
        faults={"events_duplicate": True}, conf=NO_RELEASE, setup=_since, probe=_dropped_probe,
        shares_run="event_dropped",
    ),
    Scenario(
        "event_for_another_run", "a Batch Job State Change event FAILED for another run's job in the same queue, "
        "while training waits", "foreign event", "ignored: the training wait ends on its own job; the run succeeds",
        all_of(succeeds, custom("the foreign FAILED event changed nothing", _foreign_ignored)),
        conf=NO_RELEASE, setup=_since, probe=_foreign_probe,
        on_task_start={TRAIN: _foreign_batch_event}, shares_run="event_dropped",
    ),
    Scenario(
        "event_queue_unavailable", "the wait-event queue refuses ReceiveMessage (AccessDenied) while the "
        "evaluation waits", "queue unavailable",
        "the evaluation wait falls back to polling (logged) and ends as it would; the run succeeds",
        all_of(succeeds, custom("fell back to polling, logged", _fell_back_and_logged)),
        conf=NO_RELEASE, setup=_watch_consumer, probe=_consumer_probe,
        on_task_start={ids.RUN_EVALUATION: _queue_unreachable}, shares_run="event_dropped",
    ),
]
for _s in SCENARIOS:  # every scenario also checks the invariants
    if not _s.refused:
        _s.check = all_of(_s.check, nothing_running, *([teardowns_ran] if _s.teardowns else []))
    _s.check.__name__ = _s.name

SCENARIO_NAMES = [s.name for s in SCENARIOS]


def _check_shared_runs(scenarios: list[Scenario]) -> None:
    """A scenario may share the run of an earlier one that shares no other's, with the same reviewer decision, no
    refusal, and no fault, task hook or conf key set both ways (one would hide the other).

    :raises ValueError: naming the scenario and what clashes.
    """
    earlier: dict[str, Scenario] = {}
    for s in scenarios:
        lead = earlier.get(s.shares_run) if s.shares_run else None
        if s.shares_run and lead is None:
            raise ValueError(f"scenario {s.name}: shares_run {s.shares_run!r} is not an earlier scenario")
        if lead is not None:
            clash = sorted((set(s.faults) & set(lead.faults)) | (set(s.on_task_start) & set(lead.on_task_start))
                           | {k for k in set(s.conf) & set(lead.conf) if s.conf[k] != lead.conf[k]}
                           | set(s.quota_limits) & set(lead.quota_limits))
            if lead.shares_run or s.refused or lead.refused or s.decision != lead.decision or s.env_patch or clash:
                raise ValueError(f"scenario {s.name} cannot share the run of {lead.name}: "
                                 f"{clash or 'refused runs, env patches, chains or decisions differ'}")
        earlier[s.name] = s


_check_shared_runs(SCENARIOS)


def runs_of(names: list[str] | None = None) -> list[list[str]]:
    """The DAG runs that replaying ``names`` (default: every scenario) takes, each as the scenario names it checks.

    A scenario whose ``shares_run`` is among ``names`` joins that scenario's run; otherwise it runs alone.
    """
    selected = [s for s in SCENARIOS if names is None or s.name in names]
    chosen = {s.name for s in selected}
    runs: dict[str, list[str]] = {}
    for s in selected:
        runs.setdefault(s.shares_run if s.shares_run in chosen else s.name, []).append(s.name)
    return list(runs.values())
