"""Orphan sweeper: find what a run started on AWS after the run stopped watching it, and stop it.

A run that is deleted in the UI, or whose process died (``dag.test`` killed, a worker lost) and that was
started again, leaves what it started running with nothing watching: a multi-node Batch job, a Slurm job on
the HyperPod cluster, a SageMaker pipeline execution, a Greengrass deployment still rolling out. Each of
them carries the run key (:mod:`sim2real.run_key`) the way its stage named or tagged it:

=========================  =======================================================  =========================
what                       how it carries the run key                               how it is stopped
=========================  =======================================================  =========================
Batch job                  tag ``sim2real:run-key`` (name ``sim2real-train-<key>``)  ``TerminateJob``
Slurm job (HyperPod)       job name ``sim2real-train-<key>`` (``squeue``)            ``scancel`` (SSM)
pipeline execution         ``PipelineExecutionDisplayName`` = the key               ``StopPipelineExecution``
Greengrass deployment      ``deploymentName`` = ``sim2real-<key>``                  ``CancelDeployment``
=========================  =======================================================  =========================

The run key is a one-way digest of (dag id, run id), so each run records who it is at its start:
``prepare_run`` / ``prepare_release`` write ``runs/<run_key>/run.json`` (``{"dag_id", "run_id", "run_key"}``,
:func:`register_run`) in the artifacts bucket. For each thing found, the sweeper reads that record and asks
Airflow for the DAG run's state through the Task Execution API (``RuntimeTaskInstance.get_dr_count``: the
supported way for a task in Airflow 3, which has no database access from tasks). It is an **orphan** when
its DAG run no longer exists (deleted) or is not queued/running (failed, success); inside ``prepare_run``
also when it belongs to another run of the same DAG, whose ``max_active_runs=1`` means that run cannot
still be active while this one runs (its process died). Without a record (a run from another environment
sharing the account, or from before records were written) it is reported, never stopped.

A Greengrass deployment is only an orphan while some core device has not finished it (QUEUED/IN_PROGRESS):
a finished deployment stays ``ACTIVE`` as its group's current one, and cancelling it would keep new robots
of the group from getting the model.

Sources: AWS Batch API Reference (ListJobs ``jobQueue``/``jobStatus``, DescribeJobs ``tags``, TerminateJob);
Amazon SageMaker API Reference (ListPipelineExecutions ``PipelineExecutionStatus`` ∈ Executing | Stopping |
Stopped | Failed | Succeeded, StopPipelineExecution ``ClientRequestToken``); AWS IoT Greengrass V2 API
Reference (ListDeployments, ListCoreDevices, ListEffectiveDeployments, CancelDeployment); Slurm ``squeue``
and ``scancel`` man pages.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from sim2real.config import RUN_KEY_TAG
from sim2real.run_key import is_valid_run_key, run_prefix

log = logging.getLogger(__name__)

#: Batch job statuses of a job that may still start or run (ListJobs ``jobStatus``).
BATCH_ACTIVE = ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING")
#: Slurm states of a job that is not finished (squeue ``-t``).
SLURM_ACTIVE = "PENDING,CONFIGURING,RUNNING,COMPLETING,SUSPENDED,REQUEUED"
#: Pipeline execution statuses worth stopping.
PIPELINE_ACTIVE = ("Executing",)
#: DAG run states whose run still watches what it started.
ACTIVE_DAG_RUN_STATES = ("queued", "running")
#: Name prefixes the stages give (Batch and Slurm ``sim2real-train-<key>``, Greengrass ``sim2real-<key>``).
TRAIN_PREFIX = "sim2real-train-"
DEPLOYMENT_PREFIX = "sim2real-"
#: The run record's object name under ``runs/<run_key>/``.
RUN_RECORD = "run.json"

KINDS = ("batch_job", "slurm_job", "pipeline_execution", "greengrass_deployment")


@dataclass
class Found:
    """One thing a run started: ``kind`` (:data:`KINDS`), its id, name, run key, status, and where it is."""

    kind: str
    id: str
    name: str
    run_key: str
    status: str
    where: str
    extra: dict[str, Any] = field(default_factory=dict)

    def label(self) -> str:
        return f"{self.kind} {self.id} ({self.name}, {self.status}) in {self.where}"


def run_record_key(run_key: str) -> str:
    """``runs/<run_key>/run.json``: who the run key belongs to."""
    return f"{run_prefix(run_key)}{RUN_RECORD}"


def register_run(s3_hook: Any, bucket: str, *, dag_id: str, run_id: str, run_key: str) -> str:
    """Write the run record ``s3://<bucket>/runs/<run_key>/run.json`` (``{"dag_id", "run_id", "run_key"}``).

    :return: the record's ``s3://`` URI.
    :raises botocore.exceptions.ClientError: the bucket cannot be written.
    """
    key = run_record_key(run_key)
    s3_hook.load_string(json.dumps({"dag_id": dag_id, "run_id": run_id, "run_key": run_key}, sort_keys=True),
                        key=key, bucket_name=bucket, replace=True)
    return f"s3://{bucket}/{key}"


def read_run_record(s3_hook: Any, bucket: str, run_key: str) -> dict[str, Any] | None:
    """The run record of ``run_key``, or ``None`` when there is none.

    Looked up with ListObjectsV2 under the record's own key (the MWAA role may list ``runs/*`` only; a
    HeadObject of a missing key would then answer 403, not 404).
    """
    key = run_record_key(run_key)
    if key not in (s3_hook.list_keys(bucket_name=bucket, prefix=key) or []):
        return None
    record = json.loads(s3_hook.read_key(key, bucket_name=bucket))
    return record if record.get("dag_id") and record.get("run_id") else None


def _key_from_name(name: str, prefix: str) -> str | None:
    key = name[len(prefix):] if name and name.startswith(prefix) else None
    return key if key and is_valid_run_key(key) else None


# -- finding ------------------------------------------------------------------------------------------
def find_batch_jobs(batch: Any, job_queue: str) -> list[Found]:
    """Active Batch jobs of ``job_queue`` carrying a run key (tag ``sim2real:run-key``, else the job name)."""
    summaries: list[dict[str, Any]] = []
    for status in BATCH_ACTIVE:
        kwargs: dict[str, Any] = {"jobQueue": job_queue, "jobStatus": status}
        while True:
            page = batch.list_jobs(**kwargs)
            summaries += page.get("jobSummaryList", [])
            if not page.get("nextToken"):
                break
            kwargs["nextToken"] = page["nextToken"]
    candidates = [s for s in summaries if str(s.get("jobName", "")).startswith(TRAIN_PREFIX)]
    found: list[Found] = []
    for start in range(0, len(candidates), 100):  # DescribeJobs takes at most 100 ids
        ids = [s["jobId"] for s in candidates[start:start + 100]]
        for job in batch.describe_jobs(jobs=ids).get("jobs", []):
            key = (job.get("tags") or {}).get(RUN_KEY_TAG) or _key_from_name(job.get("jobName", ""), TRAIN_PREFIX)
            if key and job.get("status") in BATCH_ACTIVE:
                found.append(Found("batch_job", job["jobId"], job.get("jobName", ""), key, job["status"],
                                   f"Batch job queue {job_queue}"))
    return found


def slurm_list_commands() -> list[str]:
    """Lines listing the unfinished Slurm jobs as ``<id> <state> <name>`` (``squeue``)."""
    return [f'squeue -h -t {SLURM_ACTIVE} -o "%i %T %j"']


def parse_squeue(stdout: str, cluster_name: str) -> list[Found]:
    """The sim2real jobs of ``squeue -h -o "%i %T %j"`` output."""
    found = []
    for line in stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) != 3:
            continue
        job_id, state, name = parts
        key = _key_from_name(name.strip(), TRAIN_PREFIX)
        if key:
            found.append(Found("slurm_job", job_id, name.strip(), key, state, f"HyperPod cluster {cluster_name}"))
    return found


def find_slurm_jobs(workstation_hook: Any, hyperpod: Mapping[str, Any]) -> tuple[list[Found], str | None]:
    """Unfinished sim2real Slurm jobs on the HyperPod cluster (``squeue`` on its head node through SSM).

    :return: ``(jobs, submit host instance id)``; ``([], None)`` when the head node is not running.
    """
    instance = workstation_hook.find_instance_by_tag(hyperpod["submit_host_tag_key"], hyperpod["submit_host_tag_value"])
    if instance["State"]["Name"] != "running":
        log.info("HyperPod head node %s is %s: no Slurm job can be running", instance["InstanceId"],
                 instance["State"]["Name"])
        return [], None
    # A head node whose agent is not Online would hold the command Pending until its deadline: ask once.
    workstation_hook.wait_for_agent_online(instance["InstanceId"], timeout_seconds=0, delay=0)
    result = workstation_hook.run_shell_script(instance["InstanceId"], slurm_list_commands(),
                                               execution_timeout_seconds=30, poll_seconds=1.0,
                                               comment="sim2real sweeper: squeue")
    if result["status"] != "Success":
        raise RuntimeError(f"squeue on HyperPod head node {instance['InstanceId']} ended {result['status']}: "
                           f"{(result['stderr'] or result['stdout'])[-500:]}")
    jobs = parse_squeue(result["stdout"], hyperpod["cluster_name"])
    for job in jobs:
        job.extra["instance_id"] = instance["InstanceId"]
    return jobs, instance["InstanceId"]


def find_pipeline_executions(sagemaker: Any, pipeline_name: str) -> list[Found]:
    """Executing runs of the pipeline whose display name is a run key (ListPipelineExecutions)."""
    from botocore.exceptions import ClientError

    found = []
    kwargs: dict[str, Any] = {"PipelineName": pipeline_name, "SortBy": "CreationTime", "SortOrder": "Descending"}
    while True:
        try:
            page = sagemaker.list_pipeline_executions(**kwargs)
        except ClientError as err:  # the first run creates the pipeline: none yet, no execution
            if err.response.get("Error", {}).get("Code") in ("ResourceNotFound", "ValidationException") \
                    and "does not exist" in str(err):
                log.info("SageMaker pipeline %s does not exist yet: no execution", pipeline_name)
                return found
            raise
        for item in page.get("PipelineExecutionSummaries", []):
            key = item.get("PipelineExecutionDisplayName") or ""
            if item.get("PipelineExecutionStatus") in PIPELINE_ACTIVE and is_valid_run_key(key):
                found.append(Found("pipeline_execution", item["PipelineExecutionArn"], key, key,
                                   item["PipelineExecutionStatus"], f"SageMaker pipeline {pipeline_name}"))
        if not page.get("NextToken"):
            return found
        kwargs["NextToken"] = page["NextToken"]


def find_greengrass_deployments(greengrass_hook: Any) -> list[Found]:
    """ACTIVE deployments named ``sim2real-<run_key>`` that some core device has not finished."""
    conn = greengrass_hook.conn
    found = []
    kwargs: dict[str, Any] = {"historyFilter": "LATEST_ONLY"}
    while True:
        page = conn.list_deployments(**kwargs)
        for dep in page.get("deployments", []):
            key = _key_from_name(dep.get("deploymentName", ""), DEPLOYMENT_PREFIX)
            if not key or dep.get("deploymentStatus") != "ACTIVE":
                continue
            target = dep.get("targetArn", "")
            things = greengrass_hook.list_core_device_names(target) if ":thinggroup/" in target else \
                [target.rsplit("/", 1)[-1]]
            reports = greengrass_hook.device_reports(dep["deploymentId"], things)
            unfinished = sorted(t for t, r in reports.items() if r["outcome"] == "retry")
            if unfinished:
                found.append(Found("greengrass_deployment", dep["deploymentId"], dep["deploymentName"], key,
                                   "ACTIVE", f"target {target}", {"unfinished_devices": unfinished}))
        if not page.get("nextToken"):
            return found
        kwargs["nextToken"] = page["nextToken"]


# -- deciding -----------------------------------------------------------------------------------------
def dag_run_state(dag_id: str, run_id: str) -> str | None:
    """``"active"`` (queued or running), ``"finished"`` or ``None`` (no such DAG run: deleted), asked through
    the Task Execution API (only inside a running task)."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    if RuntimeTaskInstance.get_dr_count(dag_id=dag_id, run_ids=[run_id]) == 0:
        return None
    active = RuntimeTaskInstance.get_dr_count(dag_id=dag_id, run_ids=[run_id], states=list(ACTIVE_DAG_RUN_STATES))
    return "active" if active else "finished"


@dataclass
class Current:
    """The run doing the sweep (``prepare_run``): its own things are never stopped; with
    ``single_active_run`` (the DAG's ``max_active_runs == 1``) another run of the same DAG is not active."""

    dag_id: str
    run_id: str
    run_key: str
    single_active_run: bool = True


def verdict(found: Found, record: Mapping[str, Any] | None, state: str | None,
            current: Current | None = None) -> tuple[str, str]:
    """``("orphan" | "watched" | "unregistered" | "own", why)`` for one thing found."""
    if current and found.run_key == current.run_key:
        return "own", "started by this run"
    if record is None:
        return "unregistered", f"no run record runs/{found.run_key}/{RUN_RECORD}: not stopped"
    who = f"DAG run {record['dag_id']} / {record['run_id']}"
    if state is None:
        return "orphan", f"{who} no longer exists (deleted)"
    if state != "active":
        return "orphan", f"{who} is finished"
    if current and current.single_active_run and record["dag_id"] == current.dag_id:
        return "orphan", (f"{who} still says running but is another run of {current.dag_id} (max_active_runs=1: "
                          f"it cannot be active while {current.run_id} runs; its process died)")
    return "watched", f"{who} is active"


# -- stopping -----------------------------------------------------------------------------------------
def stop(found: Found, clients: Mapping[str, Any], why: str) -> str:
    """Stop one orphan; returns what was done (raises the AWS error when the stop call fails)."""
    reason = f"sim2real sweeper: orphan of run key {found.run_key}: {why}"[:250]
    if found.kind == "batch_job":
        clients["batch"].terminate_job(jobId=found.id, reason=reason)
        return "TerminateJob"
    if found.kind == "pipeline_execution":
        clients["sagemaker"].stop_pipeline_execution(PipelineExecutionArn=found.id,
                                                     ClientRequestToken=str(uuid.uuid4()))
        return "StopPipelineExecution"
    if found.kind == "greengrass_deployment":
        clients["greengrass"].conn.cancel_deployment(deploymentId=found.id)
        return "CancelDeployment"
    if found.kind == "slurm_job":
        from sim2real import slurm

        result = clients["workstation"].run_shell_script(found.extra["instance_id"], slurm.cancel_commands(found.id),
                                                         execution_timeout_seconds=60, poll_seconds=1.0,
                                                         comment=f"sim2real sweeper: scancel {found.id}")
        if result["status"] != "Success":
            raise RuntimeError(f"scancel {found.id} ended {result['status']}: {result['stderr'][-300:]}")
        return "scancel"
    raise ValueError(f"unknown kind {found.kind!r}")


def find_all(env: Mapping[str, Any], clients: Mapping[str, Any]) -> tuple[list[Found], list[str]]:
    """Everything of :data:`KINDS` in the environment config's queue, cluster, pipeline and deployments.

    :return: ``(found, errors)``: a service that cannot be listed is an error line, the others are still listed.
    """
    finders: list[tuple[str, Callable[[], list[Found]]]] = [
        ("batch_job", lambda: find_batch_jobs(clients["batch"], env["batch"]["job_queue"])),
        ("pipeline_execution", lambda: find_pipeline_executions(clients["sagemaker"], env["sagemaker"]["pipeline_name"])),
        ("greengrass_deployment", lambda: find_greengrass_deployments(clients["greengrass"])),
    ]
    if env.get("hyperpod"):
        finders.append(("slurm_job", lambda: find_slurm_jobs(clients["workstation"], env["hyperpod"])[0]))
    found: list[Found] = []
    errors: list[str] = []
    for kind, finder in finders:
        try:
            found += finder()
        except Exception as err:  # noqa: BLE001 - one service down must not hide the others' orphans
            log.exception("could not list %s", kind)
            errors.append(f"could not list {kind}: {type(err).__name__}: {err}")
    return found, errors


def sweep(env: Mapping[str, Any], *, clients: Mapping[str, Any], s3_hook: Any, dry_run: bool,
          current: Current | None = None,
          state_of: Callable[[str, str], str | None] = dag_run_state) -> dict[str, Any]:
    """Find every thing a run started (:func:`find_all`), decide (:func:`verdict`) and stop each orphan.

    :param clients: ``{"batch", "sagemaker"}`` boto3 clients, ``{"greengrass"}`` a
        :class:`~sim2real.hooks.greengrass.GreengrassV2Hook`, ``{"workstation"}`` a
        :class:`~sim2real.hooks.workstation.WorkstationHook` (SSM / EC2, for the HyperPod head node).
    :param s3_hook: reads the run records in ``env["artifacts_bucket"]``.
    :param dry_run: only report (nothing is stopped).
    :param current: the sweeping run, when a run sweeps before it starts anything.
    :param state_of: ``(dag_id, run_id) -> "active" | "finished" | None`` (default: the Task Execution API).
    :return: ``{"dry_run", "found": [...], "orphans": [...], "stopped": [...], "errors": [...]}``; each entry is a
        :class:`Found` as a dict plus ``verdict``, ``why`` (and ``action`` for a stopped one).
    """
    found, errors = find_all(env, clients)
    records: dict[str, Any] = {}
    states: dict[tuple[str, str], str | None] = {}
    rows: list[dict[str, Any]] = []
    for item in found:
        if item.run_key not in records:
            try:
                records[item.run_key] = read_run_record(s3_hook, env["artifacts_bucket"], item.run_key)
            except Exception as err:  # noqa: BLE001
                errors.append(f"could not read the run record of {item.run_key}: {err}")
                records[item.run_key] = None
        record = records[item.run_key]
        state = None
        if record is not None and not (current and item.run_key == current.run_key):
            pair = (record["dag_id"], record["run_id"])
            if pair not in states:
                states[pair] = state_of(*pair)
            state = states[pair]
        decision, why = verdict(item, record, state, current)
        rows.append({**asdict(item), "verdict": decision, "why": why})
    orphans = [r for r in rows if r["verdict"] == "orphan"]
    stopped: list[dict[str, Any]] = []
    by_id = {(f.kind, f.id): f for f in found}
    for row in orphans:
        item = by_id[(row["kind"], row["id"])]
        if dry_run:
            log.warning("DRY RUN: would stop orphan %s: %s", item.label(), row["why"])
            continue
        try:
            action = stop(item, clients, row["why"])
        except Exception as err:  # noqa: BLE001 - the others are still stopped
            log.exception("could not stop %s", item.label())
            errors.append(f"could not stop {item.label()}: {type(err).__name__}: {err}")
            continue
        log.warning("Stopped orphan %s (%s): %s", item.label(), action, row["why"])
        stopped.append({**row, "action": action})
    for row in rows:
        if row["verdict"] != "orphan":
            log.info("%s %s (%s): %s", row["kind"], row["id"], row["verdict"], row["why"])
    log.info("sweep: %d found, %d orphans, %d stopped%s, %d errors", len(rows), len(orphans), len(stopped),
             " (dry run)" if dry_run else "", len(errors))
    return {"dry_run": bool(dry_run), "found": rows, "orphans": orphans, "stopped": stopped, "errors": errors}


def aws_clients(aws_conn_id: str | None = "aws_default", botocore_config: Mapping[str, Any] | None = None
                ) -> dict[str, Any]:
    """The clients :func:`sweep` uses, from the Airflow AWS connection."""
    from botocore.config import Config

    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    from sim2real.hooks.greengrass import GreengrassV2Hook
    from sim2real.hooks.workstation import WorkstationHook

    config = Config(**dict(botocore_config or {}))
    return {
        "batch": AwsBaseHook(aws_conn_id=aws_conn_id, client_type="batch", config=config).conn,
        "sagemaker": AwsBaseHook(aws_conn_id=aws_conn_id, client_type="sagemaker", config=config).conn,
        "greengrass": GreengrassV2Hook(aws_conn_id=aws_conn_id, config=config),
        "workstation": WorkstationHook(aws_conn_id=aws_conn_id, config=config),
    }


def summary_lines(report: Mapping[str, Any]) -> Iterable[str]:
    """One line per orphan (stopped or, in a dry run, to stop) and per error."""
    stopped = {(r["kind"], r["id"]) for r in report["stopped"]}
    for row in report["orphans"]:
        done = "stopped" if (row["kind"], row["id"]) in stopped else ("would stop" if report["dry_run"] else "NOT stopped")
        yield f"{done}: {row['kind']} {row['id']} ({row['name']}, {row['status']}) in {row['where']}: {row['why']}"
    for error in report["errors"]:
        yield f"error: {error}"


def sweep_before_run(ti: Any, plan: Mapping[str, Any], *, dag_id: str, run_id: str, env: Mapping[str, Any],
                     max_active_runs: int | None, aws_conn_id: str | None = "aws_default") -> dict[str, Any] | None:
    """``prepare_run``'s check: record this run (:func:`register_run`), then stop the orphans of earlier runs.

    Never fails the run for the sweep itself (a run that cannot be swept can still succeed): a problem is
    logged as a warning and kept in the report (XCom ``orphan_sweep`` of the calling task).

    :param ti: the calling task instance (for XCom ``orphan_sweep``; ``None``: not pushed).
    :param max_active_runs: the DAG's; with 1, another run of the same DAG is not active (see :class:`Current`).
    :return: the :func:`sweep` report, or ``None`` when the run record could not be written (then nothing is
        swept: without its own record the run could not be told apart later).
    """
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    from sim2real.dag_defaults import DEFAULT_ARGS

    s3 = S3Hook(aws_conn_id=aws_conn_id)
    try:
        uri = register_run(s3, plan["bucket"], dag_id=dag_id, run_id=run_id, run_key=plan["run_key"])
        log.info("run record written to %s", uri)
    except Exception as err:  # noqa: BLE001
        log.warning("could not write the run record runs/%s/%s (%s): no orphan sweep", plan["run_key"], RUN_RECORD, err)
        return None
    current = Current(dag_id=dag_id, run_id=run_id, run_key=plan["run_key"],
                      single_active_run=max_active_runs == 1)
    try:
        report = sweep(env, clients=aws_clients(aws_conn_id, DEFAULT_ARGS["botocore_config"]), s3_hook=s3,
                       dry_run=False, current=current)
    except Exception as err:  # noqa: BLE001
        log.warning("orphan sweep failed: %s: %s", type(err).__name__, err)
        return None
    for line in summary_lines(report):
        log.warning("orphan sweep: %s", line)
    if ti is not None:
        ti.xcom_push(key="orphan_sweep", value={k: report[k] for k in ("orphans", "stopped", "errors")})
    return report
