"""Trigger waiting for a Batch training job, with a RUNNABLE budget, a cost limit, progress logging and kill."""

from __future__ import annotations

import json
from typing import Any

from airflow.providers.amazon.aws.hooks.logs import AwsLogsHook

from sim2real.orchestration.events import envelope
from sim2real.orchestration.events.shared import shared_describe
from sim2real.orchestration.hooks.batch import (
    DEFAULT_LOG_GROUP,
    PROGRESS_RE,
    BatchTrainingHook,
    format_compute_environments,
    runnable_elapsed,
)
from sim2real.orchestration.triggers.base import REQUIRED, StepWaitTrigger
from sim2real.orchestration.waits.batch import batch_job_step
from sim2real.orchestration.waits.core import Action, WaitState


async def _describe_jobs(client, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    """One ``DescribeJobs`` call for ``job_ids`` (at most 100), split into the response each id alone would get
    (``{"jobs": [that job]}``, or ``[]`` for an unknown id, as DescribeJobs answers)."""
    reply = await client.describe_jobs(jobs=job_ids)
    jobs = reply.get("jobs") or []
    rest = {k: v for k, v in reply.items() if k != "jobs"}
    return {job_id: {**rest, "jobs": [j for j in jobs if j.get("jobId") == job_id]} for job_id in job_ids}


class BatchTrainingJobTrigger(StepWaitTrigger):
    """
    Wait for a Batch job: :func:`~sim2real.orchestration.waits.batch.batch_job_step` decides each
    ``DescribeJobs`` response (waiter ``training_job_complete``, the RUNNABLE budget, the cost limit).

    One event, ``{"status": "success" | "failure" | "timeout", "message", "job_id", "job_status"}``;
    a job stopped at its RUNNABLE budget or cost limit has ``"reason": "runnable_timeout" |
    "cost_limit"`` (and ``job_cost``), after ``TerminateJob`` (``"action"`` says whether it worked).
    While RUNNING, the latest ``[sim2real] iteration=`` line of the main node's stream is logged.

    ``on_kill`` (Airflow 3.3+ ``BaseTrigger.on_kill``) terminates the job when ``terminate_on_kill`` and a person
    stopped the task (marked it failed/success, cleared it, deleted its run), never when the trigger moved to
    another triggerer (:meth:`StepWaitTrigger.on_kill`).

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

    fields = {"job_id": REQUIRED, "runnable_timeout_seconds": 3600, "log_group": DEFAULT_LOG_GROUP, "progress": True,
              "terminate_on_kill": True, "cost_limit_usd": None, "usd_per_node_hour": None, "num_nodes": 1}
    default_waiter_delay, default_waiter_max_attempts = 30, 4200

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._progress_stream: str | None = None

    step_function = staticmethod(batch_job_step)

    def event_keys(self) -> list[envelope.ResourceKey]:
        """``Batch Job State Change`` events of the job (their detail is the job as DescribeJobs returns it)."""
        return [envelope.batch_job(self.job_id)]

    def max_event_wait(self, state: WaitState, last_response: Any) -> float | None:
        """No state change announces a RUNNABLE budget running out or a cost limit being reached: while RUNNABLE
        with a budget, describe again when the budget ends; while RUNNING with a cost limit, every
        ``waiter_delay`` seconds (the step's cost check looks one poll interval ahead, as when polling)."""
        jobs = (last_response or {}).get("jobs") or []
        if not jobs:
            return None
        job = jobs[0]
        if job.get("status") == "RUNNABLE" and self.runnable_timeout_seconds is not None:
            elapsed = runnable_elapsed(job, state.now, state.memory.get("first_runnable"))
            return max(float(self.runnable_timeout_seconds) - elapsed, 1.0)
        if job.get("status") == "RUNNING" and self.cost_limit_usd is not None and self.usd_per_node_hour is not None:
            return float(self.waiter_delay)
        return None

    async def describe(self, client, state: WaitState) -> dict[str, Any]:
        """``DescribeJobs`` of the job; while it runs, logs its latest progress line (``GetLogEvents``).

        With events, the describe is shared (:mod:`sim2real.orchestration.events.shared`): the Batch waits of this
        triggerer that describe within half a second (at a reconcile tick, or starting together) make one
        ``DescribeJobs`` call for up to 100 jobs, and each gets its own job's part of the answer. Polling keeps a
        call per wait and poll."""
        if self.event_settings.enabled:
            key = ("DescribeJobs", self.aws_conn_id, self.region_name, repr(self.verify),
                   json.dumps(self.botocore_config, sort_keys=True, default=str))
            response = await shared_describe(key, _describe_jobs)(client, self.job_id)
        else:
            response = await client.describe_jobs(jobs=[self.job_id])
        jobs = response.get("jobs") or []
        if self.progress and jobs and jobs[0].get("status") == "RUNNING":
            await self._log_progress(client, jobs[0])
        return response

    async def perform(self, client, action: Action) -> str:
        """``terminate_job``: TerminateJob with the step's reason; with ``describe_queue``, first the queue's
        compute environments (DescribeJobQueues + DescribeComputeEnvironments) for the message."""
        if action.name != "terminate_job":
            raise ValueError(f"unknown action {action.name}")
        detail = ""
        if action.params.get("describe_queue"):
            detail = await self._compute_environments(client, action.params["describe_queue"])
        try:
            await client.terminate_job(jobId=action.params["job_id"], reason=action.params["reason"])
        except Exception as err:
            if not detail:
                raise
            # the driver reports the failed action with this error: keep the diagnosis in it
            raise RuntimeError(f"{err}. {detail}") from err
        self.log.error("AWS Batch job %s terminated: %s", self.job_id, action.params["reason"])
        return detail

    async def _compute_environments(self, client, queue: str) -> str:
        try:
            queues = (await client.describe_job_queues(jobQueues=[queue])).get("jobQueues") or []
            names = [o["computeEnvironment"] for q in queues for o in q.get("computeEnvironmentOrder") or []]
            ces = (await client.describe_compute_environments(computeEnvironments=names)).get(
                "computeEnvironments") or [] if names else []
        except Exception as err:  # noqa: BLE001 - the diagnosis is best effort
            self.log.warning("Could not describe the compute environments of job %s: %s", self.job_id, err)
            return "Compute environments not described."
        return format_compute_environments(ces) or "No compute environment in the queue."

    async def _log_progress(self, client, job: dict[str, Any]) -> None:
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
        if line:
            self.log.info("AWS Batch job %s progress: %s", self.job_id, line)

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

    async def stop_resource(self) -> None:
        """Terminate the job (``TerminateJob``): a person stopped the deferred task (base ``on_kill``)."""
        if not (self.job_id and self.terminate_on_kill):
            return
        self.log.info("Terminating AWS Batch job %s", self.job_id)
        async with await self.hook().get_async_conn() as client:
            await client.terminate_job(jobId=self.job_id, reason="Airflow task killed by the user")
        self.log.info("AWS Batch job %s terminated", self.job_id)
