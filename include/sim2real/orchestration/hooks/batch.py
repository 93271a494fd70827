"""AWS Batch helpers for the training job: job-definition pinning, reattach, per-node logs,
progress lines and the RUNNABLE diagnosis.

Extends the provider's ``BatchClientHook`` (thick hook over ``boto3.client("batch")``).
Sources: AWS Batch API reference (``RegisterJobDefinition``, ``DescribeJobDefinitions``,
``ListJobs`` with the ``JOB_NAME`` filter, ``DescribeJobs`` — for multi-node parallel jobs the
node jobs are ``<jobId>#<nodeIndex>``, ``DescribeJobQueues``, ``DescribeComputeEnvironments``,
``TerminateJob``) and CloudWatch Logs (``GetLogEvents``).
"""

from __future__ import annotations

import copy
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook
from airflow.providers.amazon.aws.hooks.logs import AwsLogsHook
from airflow.providers.common.compat.sdk import AirflowException

from sim2real.orchestration.budget import BudgetVerdict, batch_job_run_seconds, budget_verdict
from sim2real.orchestration.budget import job_cost_record as cost_record
from sim2real.contract import progress
from sim2real.orchestration.config import RUN_KEY_TAG

WAITERS_DIR = Path(__file__).resolve().parents[1] / "waiters"
#: Tag put on job-definition revisions registered for an image (value: ``sha256:<hex>``).
IMAGE_DIGEST_TAG = "sim2real:image-digest"
DEFAULT_LOG_GROUP = "/aws/batch/job"

#: Trainer progress line (:mod:`sim2real.contract.progress`), e.g.
#: ``[sim2real] iteration=12/40 timesteps=12288 mean_reward=-20.1 elapsed_s=15.2 eta_s=35.0``.
PROGRESS_RE = progress.PROGRESS_RE


def image_digest_of(image_uri: str) -> str | None:
    """``sha256:<hex>`` from ``<repo>@sha256:<hex>``; None for a tag reference."""
    if "@" in (image_uri or ""):
        return image_uri.rsplit("@", 1)[1]
    return None


def job_definition_images(job_definition: dict[str, Any]) -> list[str]:
    """Every container image of a ``DescribeJobDefinitions`` entry (node ranges or container)."""
    images = []
    for node_range in (job_definition.get("nodeProperties") or {}).get("nodeRangeProperties") or []:
        images.append((node_range.get("container") or {}).get("image"))
    if job_definition.get("containerProperties"):
        images.append(job_definition["containerProperties"].get("image"))
    return images


def register_args_with_image(job_definition: dict[str, Any], image_uri: str) -> dict[str, Any]:
    """
    ``RegisterJobDefinition`` kwargs that copy ``job_definition`` with every image set to ``image_uri``.

    Copies type, parameters, nodeProperties / containerProperties, retryStrategy, timeout,
    platformCapabilities, propagateTags, schedulingPriority and tags, and adds the tag
    :data:`IMAGE_DIGEST_TAG`.

    :raises AirflowException: when the description carries neither ``nodeProperties`` nor
        ``containerProperties`` (nothing to pin).
    """
    jd = copy.deepcopy(job_definition)
    args: dict[str, Any] = {"jobDefinitionName": jd["jobDefinitionName"], "type": jd["type"]}
    if jd.get("nodeProperties"):
        node_props = jd["nodeProperties"]
        for node_range in node_props.get("nodeRangeProperties") or []:
            node_range.setdefault("container", {})["image"] = image_uri
        args["nodeProperties"] = node_props
    elif jd.get("containerProperties"):
        jd["containerProperties"]["image"] = image_uri
        args["containerProperties"] = jd["containerProperties"]
    else:
        raise AirflowException(
            f"Batch job definition {jd.get('jobDefinitionArn')} has no nodeProperties/containerProperties "
            "in its DescribeJobDefinitions response: cannot register a revision pinned to the image"
        )
    for key in (
        "parameters",
        "retryStrategy",
        "timeout",
        "platformCapabilities",
        "propagateTags",
        "schedulingPriority",
    ):
        if jd.get(key) not in (None, {}, []):
            args[key] = jd[key]
    tags = dict(jd.get("tags") or {})
    digest = image_digest_of(image_uri)
    if digest:
        tags[IMAGE_DIGEST_TAG] = digest
    if tags:
        args["tags"] = tags
    return args


def runnable_elapsed(job: dict[str, Any], now: float, first_seen_runnable: float | None) -> float:
    """
    Seconds the job has waited to be placed, or 0.0 when it is not RUNNABLE.

    For a job that has never started an attempt, counted from ``createdAt`` (survives a
    triggerer restart); otherwise from when this waiter first saw it RUNNABLE. The larger
    of the two applies.
    """
    if job.get("status") != "RUNNABLE":
        return 0.0
    elapsed = now - first_seen_runnable if first_seen_runnable is not None else 0.0
    created = job.get("createdAt")
    if not job.get("attempts") and isinstance(created, (int, float)) and created > 0:
        elapsed = max(elapsed, now - created / 1000.0)
    return max(elapsed, 0.0)


def format_compute_environments(compute_environments: list[dict[str, Any]]) -> str:
    """Each compute environment's state, status, status reason and vCPUs (DescribeComputeEnvironments
    items), ``; ``-separated ("" for none): the diagnosis of a job stuck RUNNABLE."""
    return "; ".join(
        f"compute environment {ce.get('computeEnvironmentName')}: state={ce.get('state')} "
        f"status={ce.get('status')} statusReason={ce.get('statusReason') or '-'} "
        f"desiredvCpus={(ce.get('computeResources') or {}).get('desiredvCpus')} "
        f"maxvCpus={(ce.get('computeResources') or {}).get('maxvCpus')}"
        for ce in compute_environments
    )


def format_runnable_timeout(job: dict[str, Any], elapsed: float, budget: float, terminated: bool) -> str:
    """The failure message for a job stuck RUNNABLE past ``budget`` seconds: its status reason and what
    to check (the compute environments' diagnosis, :func:`format_compute_environments`, is added by the
    trigger that describes them)."""
    return (
        f"AWS Batch job {job.get('jobId')} ({job.get('jobName')}) stayed RUNNABLE for {elapsed:.0f} s, past the "
        f"budget of {budget:.0f} s; statusReason: {job.get('statusReason') or 'none given'}; "
        + ("the job was terminated." if terminated else "terminating the job FAILED, terminate it by hand.")
        + " Check the EC2 vCPU quota, the compute environment's instance types, subnets and maxvCpus."
    )


def validated_num_nodes(value: Any) -> int:
    """A templated ``num_nodes`` argument (nodes of a Batch multi-node job) as an int.

    :raises ValueError: ``value`` is not an integer >= 1 (the message names it).
    """
    try:
        num_nodes = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"num_nodes must be an integer >= 1, got {value!r}") from None
    if num_nodes < 1:
        raise ValueError(f"num_nodes must be an integer >= 1, got {num_nodes}")
    return num_nodes


def job_num_nodes(job: dict[str, Any], default: int = 1) -> int:
    """Nodes of a ``DescribeJobs`` entry (``nodeProperties.numNodes``), else ``default`` (container jobs: 1)."""
    return int((job.get("nodeProperties") or {}).get("numNodes") or default)


def job_cost_verdict(
    job: dict[str, Any],
    now: float,
    *,
    cost_limit_usd: float | None,
    usd_per_node_hour: float | None,
    poll_interval_s: float,
    default_nodes: int = 1,
) -> BudgetVerdict | None:
    """The running job's cost against its limit (:func:`sim2real.orchestration.budget.budget_verdict`).

    Run time from ``startedAt`` (and earlier attempts), nodes from ``nodeProperties.numNodes``.

    :param job: a ``DescribeJobs`` entry.
    :param now: epoch seconds.
    :param cost_limit_usd: USD the job may spend; None = no check.
    :param usd_per_node_hour: on-demand USD per node-hour; None = no check.
    :param poll_interval_s: seconds until the next poll.
    :param default_nodes: nodes when the description has no ``nodeProperties``.
    :return: the verdict, or None (no check, or the job has not started).
    """
    if cost_limit_usd is None or usd_per_node_hour is None:
        return None
    seconds = batch_job_run_seconds(job, now)
    if seconds is None:
        return None
    return budget_verdict(
        elapsed_s=seconds,
        instances=job_num_nodes(job, default_nodes),
        usd_per_hour=usd_per_node_hour,
        limit_usd=cost_limit_usd,
        poll_interval_s=poll_interval_s,
    )


def cost_limit_reason(verdict: BudgetVerdict) -> str:
    """The ``TerminateJob`` reason for a job stopped at its cost limit."""
    return (
        f"sim2real: cost limit ${verdict.limit_usd:.2f} reached (${verdict.cost_usd:.2f} after "
        f"{verdict.elapsed_s / 3600:.2f} h on {verdict.instances} node(s))"
    )


def format_cost_limit(job: dict[str, Any], verdict: BudgetVerdict, terminated: bool) -> str:
    """The failure message for a job stopped at its cost limit: the numbers and what to change."""
    return (
        f"AWS Batch job {job.get('jobId')} ({job.get('jobName')}) stopped at the training cost limit: it ran "
        f"{verdict.elapsed_s:.0f} s ({verdict.elapsed_s / 3600:.2f} h) on {verdict.instances} node(s) at "
        f"${verdict.usd_per_hour:.4g} per node-hour = ${verdict.cost_usd:.2f}; at the next poll "
        f"(+{verdict.poll_interval_s:.0f} s) it would cost ${verdict.next_poll_cost_usd:.2f}, above the limit "
        f"${verdict.limit_usd:.2f} (max_budget_usd minus the estimate of the other stages). "
        + ("The job was terminated." if terminated else "Terminating the job FAILED: terminate it by hand.")
        + " Raise max_budget_usd, or lower num_nodes or train_time_budget_seconds (the trainer then stops "
        "and checkpoints within the budget)."
    )


def job_cost_record(
    job: dict[str, Any],
    now: float,
    usd_per_node_hour: float | None,
    default_nodes: int = 1,
    stopped_by_budget: bool = False,
) -> dict[str, Any]:
    """What the job ran and cost, for the task's result and the ``job_cost`` XCom.

    :return: ``{"job_id", "num_nodes", "started_at", "stopped_at" (epoch seconds; ``now`` for a job
        stopped at the cost limit, whose ``stoppedAt`` is not set yet; None when unknown),
        "run_seconds", "usd_per_node_hour", "cost_usd" (None without a price or a start),
        "stopped_by_budget"}``.
    """
    started = job.get("startedAt")
    stopped = job.get("stoppedAt")
    stopped_at = stopped / 1000.0 if stopped else (float(now) if stopped_by_budget else None)
    seconds = batch_job_run_seconds({**job, "stoppedAt": stopped_at * 1000} if stopped_at else job, now)
    return cost_record(job_id=job.get("jobId"), num_nodes=job_num_nodes(job, default_nodes),
                       started_at=started / 1000.0 if started else None, stopped_at=stopped_at,
                       run_seconds=seconds, usd_per_node_hour=usd_per_node_hour, stopped_by_budget=stopped_by_budget)


def exit_code_of(job: dict[str, Any]) -> int | None:
    """Container exit code of a job description (``container.exitCode`` or the last attempt's)."""
    code = (job.get("container") or {}).get("exitCode")
    if code is None:
        for attempt in reversed(job.get("attempts") or []):
            code = (attempt.get("container") or {}).get("exitCode")
            if code is not None:
                break
    return code


def _stream_of(job: dict[str, Any]) -> str | None:
    stream = (job.get("container") or {}).get("logStreamName")
    if not stream:
        for attempt in reversed(job.get("attempts") or []):
            stream = (attempt.get("container") or {}).get("logStreamName")
            if stream:
                break
    return stream


def _log_group_of(job: dict[str, Any], default: str) -> str:
    conf = (job.get("container") or {}).get("logConfiguration") or {}
    if not conf:
        ranges = (job.get("nodeProperties") or {}).get("nodeRangeProperties") or []
        conf = ((ranges[0].get("container") or {}).get("logConfiguration") or {}) if ranges else {}
    return (conf.get("options") or {}).get("awslogs-group", default)


class BatchTrainingHook(BatchClientHook):
    """
    ``BatchClientHook`` plus the training-job helpers; custom waiters from
    ``sim2real/orchestration/waiters/batch_ext.json`` (``training_job_complete``: ``DescribeJobs`` ``jobs[].status``;
    SUCCEEDED success, FAILED failure, SUBMITTED..RUNNING retry).

    Additional arguments (such as ``aws_conn_id``, ``max_retries``) are passed to ``BatchClientHook``.
    """

    @cached_property
    def waiter_path(self) -> Path:
        return WAITERS_DIR / "batch_ext.json"

    # -- job definition -------------------------------------------------------------------
    def latest_active_job_definition(self, name: str) -> dict[str, Any]:
        """Latest ACTIVE revision of ``name`` (``DescribeJobDefinitions``); a ``name:rev`` or ARN is described as is.

        :raises AirflowException: when there is none.
        """
        if ":" in name:
            found = self.conn.describe_job_definitions(jobDefinitions=[name])["jobDefinitions"]
        else:
            found = []
            for page in self.conn.get_paginator("describe_job_definitions").paginate(
                jobDefinitionName=name, status="ACTIVE"
            ):
                found.extend(page["jobDefinitions"])
        found = [jd for jd in found if jd.get("status", "ACTIVE") == "ACTIVE"]
        if not found:
            raise AirflowException(f"Batch job definition {name!r} has no ACTIVE revision")
        return max(found, key=lambda jd: jd["revision"])

    def ensure_job_definition(self, name: str, image_uri: str) -> tuple[dict[str, Any], bool]:
        """
        A revision of ``name`` whose every container image is ``image_uri``.

        Reuses the latest ACTIVE revision when its images already equal ``image_uri``; otherwise
        registers a copy with the images replaced and the tag ``sim2real:image-digest``.

        :return: ``(job definition description, reused)``; the description has ``jobDefinitionArn``.
        """
        base = self.latest_active_job_definition(name)
        images = job_definition_images(base)
        if images and all(image == image_uri for image in images):
            self.log.info("Reusing job definition %s (image %s)", base["jobDefinitionArn"], image_uri)
            return base, True
        args = register_args_with_image(base, image_uri)
        response = self.conn.register_job_definition(**args)
        self.log.info(
            "Registered job definition %s revision %s for image %s",
            response["jobDefinitionName"],
            response["revision"],
            image_uri,
        )
        registered = {**args, "jobDefinitionArn": response["jobDefinitionArn"], "revision": response["revision"]}
        return registered, False

    # -- reattach ---------------------------------------------------------------------------
    def find_run_job(self, job_queue: str, job_name: str, run_key: str | None = None) -> dict[str, Any] | None:
        """
        This run's existing job: ``ListJobs(jobQueue, filters=[JOB_NAME=job_name])`` (with a filter
        every status is listed), excluding FAILED ones and, when ``run_key`` is given, jobs whose
        ``sim2real:run-key`` tag differs. Newest first.

        :return: the ``DescribeJobs`` entry of the job to reattach to, or None.
        """
        summaries: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"jobQueue": job_queue, "filters": [{"name": "JOB_NAME", "values": [job_name]}]}
        while True:
            page = self.conn.list_jobs(**kwargs)
            summaries.extend(page.get("jobSummaryList") or [])
            if not page.get("nextToken"):
                break
            kwargs["nextToken"] = page["nextToken"]
        candidates = [s for s in summaries if s.get("jobName") == job_name and s.get("status") != self.FAILURE_STATE]
        for summary in sorted(candidates, key=lambda s: s.get("createdAt") or 0, reverse=True):
            job = self.get_job_description(summary["jobId"])
            tag = (job.get("tags") or {}).get(RUN_KEY_TAG)
            if run_key is None or tag in (None, run_key):
                return job
        return None

    # -- logs -------------------------------------------------------------------------------
    def node_log_streams(self, job: dict[str, Any], default_group: str = DEFAULT_LOG_GROUP) -> list[dict[str, Any]]:
        """
        One entry per node: ``{"node_index", "job_id", "log_group", "log_stream_name", "region", "exit_code"}``.

        Multi-node jobs: ``DescribeJobs`` of ``<jobId>#<i>`` for every node; a node that is not
        described falls back to the parent's stream for node 0 (or None). Single-node jobs: one entry.
        """
        region = self.conn_region_name
        num_nodes = (job.get("nodeProperties") or {}).get("numNodes") or (job.get("nodeDetails") or {}).get("numNodes")
        if not job.get("nodeProperties"):
            return [
                {
                    "node_index": 0,
                    "job_id": job["jobId"],
                    "log_group": _log_group_of(job, default_group),
                    "log_stream_name": _stream_of(job),
                    "region": region,
                    "exit_code": exit_code_of(job),
                }
            ]
        num_nodes = int(num_nodes or 1)
        ids = [f"{job['jobId']}#{i}" for i in range(num_nodes)]
        children: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), 100):
            for child in self.conn.describe_jobs(jobs=ids[start : start + 100]).get("jobs") or []:
                children[child["jobId"]] = child
        entries = []
        for i, child_id in enumerate(ids):
            child = children.get(child_id)
            stream = _stream_of(child) if child else (_stream_of(job) if i == 0 else None)
            group = _log_group_of(child, default_group) if child else _log_group_of(job, default_group)
            entries.append(
                {
                    "node_index": i,
                    "job_id": child_id,
                    "log_group": group,
                    "log_stream_name": stream,
                    "region": region,
                    "exit_code": exit_code_of(child) if child else None,
                }
            )
        return entries

    @cached_property
    def logs_client(self):
        return AwsLogsHook(
            aws_conn_id=self.aws_conn_id, region_name=self.region_name, verify=self.verify, config=self.config
        ).conn

    def log_tail(self, log_group: str, log_stream_name: str, limit: int = 50) -> list[str]:
        """Last ``limit`` messages of a stream (``GetLogEvents`` ``startFromHead=False``), oldest first."""
        events = (
            self.logs_client.get_log_events(
                logGroupName=log_group, logStreamName=log_stream_name, limit=limit, startFromHead=False
            ).get("events")
            or []
        )
        return [e.get("message", "") for e in events]

    @staticmethod
    def latest_progress(lines: list[str]) -> str | None:
        """The last ``[sim2real] iteration=...`` line of ``lines``, or None."""
        for line in reversed(lines):
            found = progress.find_progress(line)
            if found:
                return found
        return None
