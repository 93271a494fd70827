"""What the runs started on AWS, as the orphan sweeper lists it: one :class:`Found` per thing carrying a run key.

Each finder lists one kind (:data:`KINDS`) of what the stages start and keeps the things that are still active and
carry a run key the way their stage named or tagged it: the Batch jobs of the job queue (tag ``sim2real:run-key``,
else the name ``sim2real-train-<key>``), the Slurm jobs on the HyperPod cluster (``squeue`` on its head node through
SSM; a sweep's job array once), the SageMaker pipeline executions (display name = the key) and the Greengrass
deployments (``sim2real-<key>``) that some core device has not finished, or canaries whose field verdict is pending.
What becomes of them: :mod:`sim2real.orchestration.sweeper`.

Sources: AWS Batch API Reference (ListJobs ``jobQueue``/``jobStatus``, DescribeJobs ``tags``); Amazon SageMaker API
Reference (ListPipelineExecutions ``PipelineExecutionStatus``); AWS IoT Greengrass V2 API Reference
(ListDeployments, ListCoreDevices, ListEffectiveDeployments, GetDeployment ``tags``); Slurm ``squeue`` man page.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim2real.contract.run_key import is_valid_run_key
from sim2real.orchestration.config import RUN_KEY_TAG

log = logging.getLogger(__name__)

#: Batch job statuses of a job that may still start or run (ListJobs ``jobStatus``).
BATCH_ACTIVE = ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING")
#: Slurm states of a job that is not finished (squeue ``-t``).
SLURM_ACTIVE = "PENDING,CONFIGURING,RUNNING,COMPLETING,SUSPENDED,REQUEUED"
#: Pipeline execution statuses worth stopping.
PIPELINE_ACTIVE = ("Executing",)
#: Seconds ``squeue`` is given at most (SSM ``executionTimeout``).
SQUEUE_TIMEOUT_S = 30
#: Name prefixes the stages give (Batch and Slurm ``sim2real-train-<key>``, Greengrass ``sim2real-<key>``).
TRAIN_PREFIX = "sim2real-train-"
#: A HyperPod sweep's job array is named ``sim2real-train-<key>-sweep`` (:mod:`sim2real.orchestration.stages.hyperpod`).
SWEEP_ARRAY_SUFFIX = "-sweep"
DEPLOYMENT_PREFIX = "sim2real-"

KINDS = ("batch_job", "slurm_job", "eks_job", "pipeline_execution", "greengrass_deployment")


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


def _key_from_name(name: str, prefix: str) -> str | None:
    key = name[len(prefix):] if name and name.startswith(prefix) else None
    return key if key and is_valid_run_key(key) else None


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
    found, arrays = [], set()
    for line in stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) != 3:
            continue
        job_id, state, name = parts
        name = name.strip()
        # A sweep's job array (``sim2real-train-<key>-sweep``): squeue lists its tasks as ``<id>_<index>`` (pending
        # ones grouped, ``<id>_[1-3%2]``); ``scancel <id>`` stops every task of it, so the array is found once.
        array = name.endswith(SWEEP_ARRAY_SUFFIX) and "_" in job_id
        key = _key_from_name(name[:-len(SWEEP_ARRAY_SUFFIX)] if name.endswith(SWEEP_ARRAY_SUFFIX) else name,
                             TRAIN_PREFIX)
        if not key:
            continue
        if array:
            job_id = job_id.split("_", 1)[0]
            if job_id in arrays:
                continue
            arrays.add(job_id)
        found.append(Found("slurm_job", job_id, name, key, state, f"HyperPod cluster {cluster_name}"))
    return found


def find_slurm_jobs(workstation_hook: Any, hyperpod: Mapping[str, Any], timeout_s: int = SQUEUE_TIMEOUT_S,
                    grace_s: float = 60) -> tuple[list[Found], str | None]:
    """Unfinished sim2real Slurm jobs on the HyperPod cluster (``squeue`` on its head node through SSM).

    :param timeout_s: the command's SSM ``executionTimeout`` (seconds).
    :param grace_s: how long after it the wait for its result goes on (seconds).
    :return: ``(jobs, submit host instance id)``; ``([], None)`` when the head node is not running.
    """
    instance = workstation_hook.find_instance_by_tag(hyperpod["submit_host_tag_key"], hyperpod["submit_host_tag_value"])
    if instance["State"]["Name"] != "running":
        log.info("HyperPod head node %s is %s: no Slurm job can be running", instance["InstanceId"],
                 instance["State"]["Name"])
        return [], None
    # A head node whose agent is not Online would hold the command Pending until its deadline: ask once.
    workstation_hook.wait_for_agent_online(instance["InstanceId"], timeout_seconds=0, delay=0)
    from sim2real.orchestration.waits.ssm import run_short_command

    result = run_short_command(workstation_hook.conn, instance["InstanceId"], slurm_list_commands(),
                               execution_timeout_seconds=int(timeout_s), poll_seconds=1.0,
                               comment="sim2real sweeper: squeue", grace_seconds=grace_s)
    if result["status"] != "Success":
        raise RuntimeError(f"squeue on HyperPod head node {instance['InstanceId']} ended {result['status']}: "
                           f"{(result['stderr'] or result['stdout'])[-500:]}")
    jobs = parse_squeue(result["stdout"], hyperpod["cluster_name"])
    for job in jobs:
        job.extra["instance_id"] = instance["InstanceId"]
    return jobs, instance["InstanceId"]


def find_eks_jobs(api: Any, cluster_name: str, namespace: str) -> list[Found]:
    """The sim2real ``PyTorchJob``s on the HyperPod EKS cluster that have not ended, in the team's ``namespace`` (the
    Airflow group's RBAC is namespaced; label ``app.kubernetes.io/managed-by=sim2real``, the run key from label
    ``sim2real.io/run-key``). ``api``: the cluster's ``kubernetes.client.ApiClient``
    (:meth:`~sim2real.orchestration.hooks.hyperpod_eks.HyperPodEksHook.api_client`). ``Found.id`` is
    ``<namespace>/<name>``."""
    from sim2real.orchestration.hooks import hyperpod_eks as eks
    from sim2real.orchestration.waits.hyperpod_eks import job_state

    found = []
    for job in eks.list_jobs(api, f"{eks.MANAGED_LABEL}={eks.MANAGED_BY}", namespace):
        meta = job.get("metadata") or {}
        key = (meta.get("labels") or {}).get(eks.RUN_KEY_LABEL, "")
        state, _ = job_state(job, None)
        if state in ("Succeeded", "Failed") or not is_valid_run_key(key):
            continue
        found.append(Found("eks_job", f"{meta.get('namespace')}/{meta.get('name')}", meta.get("name", ""), key, state,
                           f"HyperPod EKS cluster {cluster_name}",
                           {"namespace": meta.get("namespace"), "cluster_name": cluster_name}))
    return found


def find_pipeline_executions(sagemaker: Any, pipeline_name: str, created_after: dt.datetime | None = None
                             ) -> list[Found]:
    """Executing runs of the pipeline whose display name is a run key (ListPipelineExecutions, newest first).

    :param created_after: stop paging at the first execution that started before this (aware) time; ``None``:
        every page.
    """
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
            started = item.get("StartTime")
            if created_after is not None and isinstance(started, dt.datetime) and started < created_after:
                log.info("pipeline executions older than %s not listed", created_after.isoformat())
                return found
            key = item.get("PipelineExecutionDisplayName") or ""
            if item.get("PipelineExecutionStatus") in PIPELINE_ACTIVE and is_valid_run_key(key):
                found.append(Found("pipeline_execution", item["PipelineExecutionArn"], key, key,
                                   item["PipelineExecutionStatus"], f"SageMaker pipeline {pipeline_name}"))
        if not page.get("NextToken"):
            return found
        kwargs["NextToken"] = page["NextToken"]


def find_greengrass_deployments(greengrass_hook: Any) -> list[Found]:
    """ACTIVE deployments named ``sim2real-<run_key>`` or, to a canary group, ``sim2real-<run_key>-canary`` (not
    their rollbacks) that some core device has not finished; and a canary deployment, finished or not, that is
    still its group's latest and whose field verdict was never reached (GetDeployment ``tags``: ``sim2real:field-verdict``
    ``pending``): its run's verdict would have promoted or rolled it back. Such a canary is found with
    ``extra["field_verdict"] = "pending"`` and ``extra["target_arn"]`` (the sweeper rolls its group back rather than
    cancelling it: a cancel does not undo a robot that finished it)."""
    from sim2real.orchestration.hooks.greengrass import (  # loaded with the hook
        CANARY_SUFFIX, ROLLBACK_SUFFIX, VERDICT_PENDING, field_verdict,
    )

    conn = greengrass_hook.conn
    found = []
    kwargs: dict[str, Any] = {"historyFilter": "LATEST_ONLY"}
    while True:
        page = conn.list_deployments(**kwargs)
        for dep in page.get("deployments", []):
            name = dep.get("deploymentName", "")
            key = _key_from_name(name.removesuffix(CANARY_SUFFIX), DEPLOYMENT_PREFIX)
            # an automatic rollback (``sim2real-<key>-rollback``) puts back a release the robots already ran: it
            # is the group's good release, never an orphan, also when a robot that joined later still applies it
            if not key or name.endswith(ROLLBACK_SUFFIX) or dep.get("deploymentStatus") != "ACTIVE":
                continue
            target = dep.get("targetArn", "")
            things = greengrass_hook.list_core_device_names(target) if ":thinggroup/" in target else \
                [target.rsplit("/", 1)[-1]]
            reports = greengrass_hook.device_reports(dep["deploymentId"], things)
            unfinished = sorted(t for t, r in reports.items() if r["outcome"] == "retry")
            extra: dict[str, Any] = {"unfinished_devices": unfinished}
            if name.endswith(CANARY_SUFFIX) and \
                    field_verdict(conn.get_deployment(deploymentId=dep["deploymentId"])) == VERDICT_PENDING:
                extra.update(field_verdict=VERDICT_PENDING, target_arn=target)
            if unfinished or extra.get("field_verdict"):
                found.append(Found("greengrass_deployment", dep["deploymentId"], dep["deploymentName"], key,
                                   "ACTIVE", f"target {target}", extra))
        if not page.get("nextToken"):
            return found
        kwargs["nextToken"] = page["nextToken"]
