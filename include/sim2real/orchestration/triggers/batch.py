"""Trigger waiting for a Batch training job, with a RUNNABLE budget, a cost limit, progress logging and kill."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.providers.amazon.aws.hooks.logs import AwsLogsHook
from sim2real.orchestration.triggers.base import AwsHookWaiterTrigger
from airflow.providers.amazon.aws.utils.waiter_with_logging import RETRIABLE_ERROR_CODES
from airflow.triggers.base import TriggerEvent
from botocore.exceptions import WaiterError

from sim2real.orchestration.hooks.batch import (
    DEFAULT_LOG_GROUP,
    PROGRESS_RE,
    BatchTrainingHook,
    cost_limit_reason,
    format_cost_limit,
    format_runnable_timeout,
    job_cost_record,
    job_cost_verdict,
    runnable_elapsed,
)


class BatchTrainingJobTrigger(AwsHookWaiterTrigger):
    """
    Poll a Batch job (custom waiter ``training_job_complete`` on ``DescribeJobs``, one attempt per poll).

    Per poll: SUCCEEDED -> event ``{"status": "success", "job_id"}``; FAILED -> ``{"status": "failure",
    "job_id", "job_status": "FAILED", "message"}``; RUNNABLE for longer than
    ``runnable_timeout_seconds`` -> describes the job queue's compute environments, terminates the
    job (``TerminateJob``) and yields ``{"status": "failure", "job_id", "job_status": "RUNNABLE",
    "reason": "runnable_timeout", "message"}`` (message: statusReason, each compute environment's
    state / status / statusReason / desiredvCpus); RUNNING -> logs the latest ``[sim2real] iteration=``
    line of the main node's log stream (``GetLogEvents``, errors ignored) with the elapsed cost and,
    when ``cost_limit_usd`` and ``usd_per_node_hour`` are set, checks the cost: when the cost at the
    next poll (run time from ``startedAt`` + ``waiter_delay``, x nodes x price) would be above the
    limit, terminates the job (``TerminateJob``, reason ``sim2real: cost limit ... reached``) and
    yields ``{"status": "failure", "job_id", "job_status": "RUNNING", "reason": "cost_limit",
    "message", "job_cost": {...}}`` (``job_cost``: :func:`~sim2real.orchestration.hooks.batch.job_cost_record`).
    Throttling and 5xx are retried without counting an attempt; other API errors and max attempts
    -> ``{"status": "error"}``.

    ``on_kill`` (Airflow 3.3+ ``BaseTrigger.on_kill``: user marks the deferred task failed/success or
    clears it) terminates the job when ``terminate_on_kill``.

    :param job_id: the Batch job id.
    :param runnable_timeout_seconds: budget for RUNNABLE (seconds); None = no budget.
    :param log_group: CloudWatch log group of the job's streams (for progress lines).
    :param cost_limit_usd: USD the job may spend; None = no cost check.
    :param usd_per_node_hour: on-demand USD per node-hour; None = no cost check.
    :param num_nodes: nodes when ``DescribeJobs`` has no ``nodeProperties`` (container jobs: 1).
    :param progress: read progress lines while RUNNING.
    :param terminate_on_kill: terminate the job on a user kill.
    :param waiter_delay: seconds between polls.
    :param waiter_max_attempts: polls before giving up.
    :param aws_conn_id: Airflow AWS connection.
    :param region_name: AWS region.
    :param verify: SSL verification.
    :param botocore_config: botocore client configuration dict.
    """

    aws_hook_class = BatchTrainingHook

    def __init__(
        self,
        job_id: str,
        runnable_timeout_seconds: float | None = 3600,
        log_group: str = DEFAULT_LOG_GROUP,
        progress: bool = True,
        terminate_on_kill: bool = True,
        waiter_delay: int = 30,
        waiter_max_attempts: int = 4200,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict | None = None,
        cost_limit_usd: float | None = None,
        usd_per_node_hour: float | None = None,
        num_nodes: int = 1,
    ) -> None:
        super().__init__(
            serialized_fields={
                "job_id": job_id,
                "runnable_timeout_seconds": runnable_timeout_seconds,
                "log_group": log_group,
                "progress": progress,
                "terminate_on_kill": terminate_on_kill,
                "cost_limit_usd": cost_limit_usd,
                "usd_per_node_hour": usd_per_node_hour,
                "num_nodes": num_nodes,
            },
            waiter_name="training_job_complete",
            waiter_args={"jobs": [job_id]},
            failure_message=f"AWS Batch job {job_id} failed",
            status_message=f"AWS Batch job {job_id} status",
            status_queries=["jobs[0].status", "jobs[0].statusReason"],
            return_key="job_id",
            return_value=job_id,
            waiter_delay=waiter_delay,
            waiter_max_attempts=waiter_max_attempts,
            aws_conn_id=aws_conn_id,
            region_name=region_name,
            verify=verify,
            botocore_config=botocore_config,
        )
        self.job_id = job_id
        self.runnable_timeout_seconds = runnable_timeout_seconds
        self.log_group = log_group
        self.progress = progress
        self.terminate_on_kill = terminate_on_kill
        self.cost_limit_usd = cost_limit_usd
        self.usd_per_node_hour = usd_per_node_hour
        self.num_nodes = num_nodes
        self._progress_stream: str | None = None

    def _event(self, status: str, **fields: Any) -> TriggerEvent:
        return TriggerEvent({"status": status, "job_id": self.job_id, **fields})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self.hook()
        async with await hook.get_async_conn() as client:
            waiter = hook.get_waiter(self.waiter_name, deferrable=True, client=client)
            first_runnable: float | None = None
            attempt = 0
            while attempt < self.attempts:
                if attempt:
                    await asyncio.sleep(self.waiter_delay)
                try:
                    await waiter.wait(jobs=[self.job_id], WaiterConfig={"MaxAttempts": 1})
                except WaiterError as error:
                    response = error.last_response or {}
                    code = (response.get("Error") or {}).get("Code")
                    if code:
                        if code in RETRIABLE_ERROR_CODES:
                            self.log.info("Batch DescribeJobs retriable error %s; retrying", code)
                            await asyncio.sleep(self.waiter_delay)
                            continue
                        yield self._event("error", message=f"AWS Batch job {self.job_id}: DescribeJobs failed: {error}")
                        return
                    jobs = response.get("jobs") or []
                    if not jobs:
                        yield self._event("error", message=f"AWS Batch job {self.job_id} not found (DescribeJobs)")
                        return
                    job = jobs[0]
                    status = job.get("status")
                    if "terminal failure" in str(error):
                        yield self._event(
                            "failure",
                            job_status=status,
                            message=f"AWS Batch job {self.job_id} is {status}: {job.get('statusReason')}",
                        )
                        return
                    self.log.info("AWS Batch job %s status %s %s", self.job_id, status, job.get("statusReason") or "")
                    if status == "RUNNABLE":
                        if first_runnable is None:
                            first_runnable = time.time()
                        elapsed = runnable_elapsed(job, time.time(), first_runnable)
                        if self.runnable_timeout_seconds is not None and elapsed >= float(
                            self.runnable_timeout_seconds
                        ):
                            message = await self._runnable_timeout(client, job, elapsed)
                            yield self._event(
                                "failure", job_status="RUNNABLE", reason="runnable_timeout", message=message
                            )
                            return
                    else:
                        first_runnable = None
                    if status == "RUNNING":
                        now = time.time()
                        verdict = job_cost_verdict(
                            job,
                            now,
                            cost_limit_usd=self.cost_limit_usd,
                            usd_per_node_hour=self.usd_per_node_hour,
                            poll_interval_s=self.waiter_delay,
                            default_nodes=self.num_nodes,
                        )
                        if self.progress:
                            await self._log_progress(client, job, verdict.describe() if verdict else None)
                        elif verdict is not None:
                            self.log.info("AWS Batch job %s: %s", self.job_id, verdict.describe())
                        if verdict is not None and verdict.over_budget:
                            message = await self._cost_limit(client, job, verdict)
                            yield self._event(
                                "failure",
                                job_status="RUNNING",
                                reason="cost_limit",
                                message=message,
                                job_cost=job_cost_record(
                                    job, now, self.usd_per_node_hour, self.num_nodes, stopped_by_budget=True
                                ),
                            )
                            return
                else:
                    yield self._event("success")
                    return
                attempt += 1
            yield self._event(
                "error", message=f"AWS Batch job {self.job_id}: waiter max attempts ({self.attempts}) reached"
            )

    async def _runnable_timeout(self, client, job: dict[str, Any], elapsed: float) -> str:
        ces: list[dict[str, Any]] = []
        try:
            queues = (await client.describe_job_queues(jobQueues=[job["jobQueue"]])).get("jobQueues") or []
            names = [o["computeEnvironment"] for q in queues for o in q.get("computeEnvironmentOrder") or []]
            if names:
                ces = (await client.describe_compute_environments(computeEnvironments=names)).get(
                    "computeEnvironments"
                ) or []
        except Exception as err:  # noqa: BLE001 - the diagnosis is best effort
            self.log.warning("Could not describe the compute environments of job %s: %s", self.job_id, err)
        terminated = True
        try:
            await client.terminate_job(
                jobId=self.job_id,
                reason=f"RUNNABLE for {elapsed:.0f} s, past the budget of {self.runnable_timeout_seconds} s",
            )
        except Exception as err:  # noqa: BLE001
            terminated = False
            self.log.error("TerminateJob %s failed: %s", self.job_id, err)
        message = format_runnable_timeout(job, elapsed, float(self.runnable_timeout_seconds), ces, terminated)
        self.log.error(message)
        return message

    async def _cost_limit(self, client, job: dict[str, Any], verdict) -> str:
        terminated = True
        try:
            await client.terminate_job(jobId=self.job_id, reason=cost_limit_reason(verdict))
        except Exception as err:  # noqa: BLE001
            terminated = False
            self.log.error("TerminateJob %s failed: %s", self.job_id, err)
        message = format_cost_limit(job, verdict, terminated)
        self.log.error(message)
        return message

    async def _log_progress(self, client, job: dict[str, Any], cost: str | None = None) -> None:
        line = None
        try:
            if self._progress_stream is None:
                main = (job.get("nodeProperties") or {}).get("mainNode")
                source = job
                if main is not None:
                    children = (await client.describe_jobs(jobs=[f"{self.job_id}#{main}"])).get("jobs") or []
                    source = children[0] if children else job
                self._progress_stream = (source.get("container") or {}).get("logStreamName")
            if self._progress_stream:
                line = await self._latest_progress()
        except Exception as err:  # noqa: BLE001 - progress is informational only
            self.log.debug("No progress line for job %s: %s", self.job_id, err)
        if line or cost:
            self.log.info("AWS Batch job %s progress: %s", self.job_id, "; ".join(p for p in (line, cost) if p))

    async def _latest_progress(self) -> str | None:
        """The last ``[sim2real] iteration=`` line of the main node's stream (``GetLogEvents``), or None."""
        logs_hook = AwsLogsHook(**self._hook_parameters)
        async with await logs_hook.get_async_conn() as logs:
            events = (
                await logs.get_log_events(
                    logGroupName=self.log_group, logStreamName=self._progress_stream, limit=20, startFromHead=False
                )
            ).get("events") or []
        for event in reversed(events):
            match = PROGRESS_RE.search(event.get("message", ""))
            if match:
                return match.group(0)
        return None

    async def on_kill(self) -> None:
        """Terminate the job (``TerminateJob``) when the user kills the deferred task (Airflow 3.3+)."""
        if not (self.job_id and self.terminate_on_kill):
            return
        self.log.info("Task killed by the user: terminating AWS Batch job %s", self.job_id)
        async with await self.hook().get_async_conn() as client:
            await client.terminate_job(jobId=self.job_id, reason="Airflow task killed by the user")
        self.log.info("AWS Batch job %s terminated", self.job_id)
