"""Multi-node GPU training on AWS Batch: pinned image, reattach on retry, RUNNABLE budget,
cost limit, per-node logs and classified failures."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.links.batch import BatchJobDetailsLink
from airflow.providers.amazon.aws.links.logs import CloudWatchEventsLink
from airflow.providers.amazon.aws.operators.batch import BatchOperator
from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from sim2real.contract.run_key import is_valid_run_key
from sim2real.orchestration.budget import cost_limit_explanation, optional_usd
from sim2real.orchestration.config import RUN_KEY_TAG
from sim2real.orchestration.failures import FailureClass, classify_failure
from sim2real.orchestration.hooks.batch import (
    DEFAULT_LOG_GROUP,
    BatchTrainingHook,
    exit_code_of,
    image_digest_of,
    job_cost_record,
    validated_num_nodes,
)
from sim2real.orchestration.links.batch import NODE_LOG_LINKS
from sim2real.orchestration.stop_rule import operator_should_stop, starts_afresh
from sim2real.orchestration.triggers.base import defer_wait
from sim2real.orchestration.triggers.batch import BatchTrainingJobTrigger
from sim2real.orchestration.waits.batch import batch_job_step
from sim2real.orchestration.waits.core import event_outcome, settle_now

if TYPE_CHECKING:
    from airflow.sdk import Context


class BatchTrainingOperator(BatchOperator):
    """
    Run the training job on AWS Batch (subclass of the provider's ``BatchOperator``).

    On top of ``BatchOperator`` (whose submit path, hook and links are reused):

    * registers a revision of ``job_definition`` with every node range's (or the container's)
      image replaced by ``image_uri`` and tagged ``sim2real:image-digest``; the latest ACTIVE
      revision is reused when its images already equal ``image_uri``;
    * on a retry, reattaches to this run's job (``ListJobs`` filter ``JOB_NAME=job_name``, not FAILED, tag
      ``sim2real:run-key`` = ``run_key``) instead of submitting a second one — logs "reattached"; the first try
      after a person cleared the task starts afresh instead
      (:func:`sim2real.orchestration.stop_rule.starts_afresh`): it terminates the earlier try's job if that
      still runs (reason ``sim2real: superseded ...``) and submits a new one;
    * submits with ``nodeOverrides={"numNodes": num_nodes, "nodePropertyOverrides": [{"targetNodes": "0:",
      "containerOverrides": {"environment": [...]}}]}`` (container job definitions: ``containerOverrides``)
      and tags ``{"sim2real:run-key": run_key}``; the environment gets ``RUN_KEY`` and ``IMAGE_DIGEST``
      unless given;
    * waits deferred (:class:`~sim2real.orchestration.triggers.batch.BatchTrainingJobTrigger`, step function
      :func:`~sim2real.orchestration.waits.batch.batch_job_step`; a job already over is settled without
      deferring) and fails when the job stays RUNNABLE longer than ``runnable_timeout_seconds``, terminating it;
    * at each poll while RUNNING, logs the elapsed cost (nodes x ``usd_per_node_hour`` x time since
      ``startedAt``) next to the progress line and, when both ``cost_limit_usd`` and
      ``usd_per_node_hour`` are set, terminates the job (reason ``sim2real: cost limit ... reached``) and
      fails the task, not retried, when the cost at the next poll would be above ``cost_limit_usd``
      (:func:`sim2real.orchestration.budget.budget_verdict`); the figures of the stopped job are pushed as XCom
      ``job_cost`` (:func:`~sim2real.orchestration.hooks.batch.job_cost_record`) for the run's actual cost;
    * ``on_kill`` (in the worker) / the trigger's ``on_kill`` (deferred) terminate the job.

    :param image_uri: ``<registry>/<repo>@sha256:<hex>`` to run (templated).
    :param num_nodes: number of nodes (templated; string digits accepted).
    :param run_key: the run key (``sim2real.contract.run_key``), also the default ``job_name`` (templated).
    :param environment: env vars for every node, name -> value (values cast to str) (templated).
    :param runnable_timeout_seconds: seconds a job may stay RUNNABLE (default 3600); None = no budget (templated).
    :param cost_limit_usd: USD the job may spend (``sim2real.orchestration.budget.training_cost_limit``); None = no
        cost check (templated; number or numeric string).
    :param usd_per_node_hour: on-demand USD per node-hour of the compute environment's instance type
        (``sim2real.orchestration.budget.training_usd_per_node_hour``); None = no cost check and no ``cost_usd`` (templated).
    :param log_group: CloudWatch log group of the job's streams (default ``/aws/batch/job``).
    :param job_name: Batch job name; default ``run_key``.
    :param job_definition: job definition name (no revision) to pin (``BatchOperator``).
    :param job_queue: job queue (``BatchOperator``).
    :param poll_interval: seconds between polls of the deferred wait (default 30).
    :param submit_only: register, reattach or submit, then return ``{"job_id", "job_name", "reattached",
        "job_definition_arn"}`` without waiting (a sweep submits every candidate's job before any wait; the wait
        is a second task with ``attach_job_id``).
    :param attach_job_id: wait for this job (submitted earlier in the run by a ``submit_only`` task) instead of
        registering, looking up or submitting one; the job is never resubmitted (templated).
    :param kwargs: every other ``BatchOperator`` argument (``max_retries`` = poll attempts, ...).
    :return: ``{"job_id", "job_name", "job_definition_arn", "status": "SUCCEEDED", "attempts": int
        (number of job attempts), "log_streams": [{"node_index", "job_id", "log_group",
        "log_stream_name", "region", "exit_code"}, ... one per node], "num_nodes": int, "reattached": bool,
        "job_definition_reused": bool, "started_at", "stopped_at" (the job's startedAt/stoppedAt, epoch
        seconds, None when absent), "cost_usd" (nodes x usd_per_node_hour x run time, USD; None without
        a price)}``. Log-stream lookup errors give an empty list, never a failure.
    :raises AirflowFailException: job FAILED with a fail-fast class (CAPACITY, OUT_OF_MEMORY,
        USER_CODE) or stuck RUNNABLE past the budget; message has the job, status, statusReason,
        exit code and ``failure class <CLASS>``. Also when stopped at the cost limit: message has the
        run time, cost, limit, nodes, price and what to change.
    :raises AirflowException: job FAILED with a retry class (SPOT_RECLAIM, NCCL_RENDEZVOUS, UNKNOWN):
        Airflow retries and the retry submits a new job that resumes from the last checkpoint.
    :raises ValueError: bad input (num_nodes < 1, invalid run_key, non-mapping environment, negative or
        non-numeric cost_limit_usd / usd_per_node_hour).
    """

    aws_hook_class = BatchTrainingHook  # type: ignore[assignment]
    template_fields: Sequence[str] = tuple(
        sorted(
            set(BatchOperator.template_fields)
            | {
                "image_uri",
                "num_nodes",
                "run_key",
                "environment",
                "runnable_timeout_seconds",
                "cost_limit_usd",
                "usd_per_node_hour",
                "attach_job_id",
            }
        )
    )
    template_fields_renderers = {**BatchOperator.template_fields_renderers, "environment": "json"}
    operator_extra_links = (*BatchOperator.operator_extra_links, *NODE_LOG_LINKS)

    def __init__(
        self,
        *,
        image_uri: str,
        num_nodes: int | str,
        run_key: str,
        environment: dict[str, str] | None = None,
        runnable_timeout_seconds: float | None = 3600,
        cost_limit_usd: float | str | None = None,
        usd_per_node_hour: float | str | None = None,
        log_group: str = DEFAULT_LOG_GROUP,
        job_name: str | None = None,
        poll_interval: int = 30,
        submit_only: bool = False,
        attach_job_id: str | None = None,
        **kwargs,
    ) -> None:
        # The wait is always deferred (BatchTrainingJobTrigger); there is no blocking mode to choose.
        super().__init__(job_name=job_name or run_key, deferrable=True, poll_interval=poll_interval, **kwargs)
        self.image_uri = image_uri
        self.num_nodes = num_nodes
        self.run_key = run_key
        self.environment = environment
        self.runnable_timeout_seconds = runnable_timeout_seconds
        self.cost_limit_usd = cost_limit_usd
        self.usd_per_node_hour = usd_per_node_hour
        self.log_group = log_group
        self.submit_only = submit_only
        self.attach_job_id = attach_job_id
        self.job_definition_arn: str | None = None
        self.job_definition_reused = False
        self.reattached = False

    hook: BatchTrainingHook  # type: ignore[assignment]

    # -- inputs -------------------------------------------------------------------------------
    def _validated_num_nodes(self) -> int:
        return validated_num_nodes(self.num_nodes)

    def _validate_cost_args(self) -> None:
        """Rendered ``cost_limit_usd`` / ``usd_per_node_hour`` as floats (or None); ValueError naming the field."""
        self.cost_limit_usd = optional_usd("cost_limit_usd", self.cost_limit_usd)
        self.usd_per_node_hour = optional_usd("usd_per_node_hour", self.usd_per_node_hour)
        if self.cost_limit_usd is not None and self.usd_per_node_hour is None:
            self.log.warning(
                "cost_limit_usd %.2f is set but usd_per_node_hour is not: the job's cost is not checked",
                self.cost_limit_usd,
            )

    def _environment_list(self) -> list[dict[str, str]]:
        env = self.environment or {}
        if not isinstance(env, dict):
            raise ValueError(f"environment must be a mapping of name -> value, got {type(env).__name__}")
        merged = {str(k): str(v) for k, v in env.items()}
        merged.setdefault("RUN_KEY", self.run_key)
        digest = image_digest_of(self.image_uri)
        if digest:
            merged.setdefault("IMAGE_DIGEST", digest)
        return [{"name": k, "value": v} for k, v in merged.items()]

    # -- execute ------------------------------------------------------------------------------
    def execute(self, context: Context) -> dict[str, Any]:  # type: ignore[override]
        num_nodes = self._validated_num_nodes()
        if not is_valid_run_key(str(self.run_key)):
            raise ValueError(f"run_key {self.run_key!r} is not a valid run key (see sim2real.contract.run_key)")
        self._validate_cost_args()
        self.log.info(cost_limit_explanation(self.cost_limit_usd, self.usd_per_node_hour, num_nodes))
        if not image_digest_of(self.image_uri):
            self.log.warning("image_uri %s is not pinned to a digest (<repo>@sha256:...)", self.image_uri)

        if self.attach_job_id:  # the job a submit-only task of this run started: wait for it, never resubmit
            self.job_id = str(self.attach_job_id)
            self.reattached = True
            self.log.info("AWS Batch job %s (%s): waiting for the job submitted earlier in this run",
                          self.job_id, self.job_name)
            BatchJobDetailsLink.persist(context=context, operator=self, region_name=self.hook.conn_region_name,
                                        aws_partition=self.hook.conn_partition, job_id=self.job_id)
            job = self._persist_links(context)
            self._reserve_node_links(context)
            return self._settle(context, job)

        job_def, self.job_definition_reused = self.hook.ensure_job_definition(self.job_definition, self.image_uri)
        self.job_definition_arn = job_def["jobDefinitionArn"]

        existing = self.hook.find_run_job(self.job_queue, self.job_name, self.run_key)
        if existing and starts_afresh(context.get("ti"), self.retries):
            self._supersede(existing, context)
            existing = None
        if existing:
            self.job_id = existing["jobId"]
            self.reattached = True
            self.log.info(
                "AWS Batch job %s (%s) reattached: status %s; not submitting a new job",
                self.job_id,
                self.job_name,
                existing.get("status"),
            )
            BatchJobDetailsLink.persist(
                context=context,
                operator=self,
                region_name=self.hook.conn_region_name,
                aws_partition=self.hook.conn_partition,
                job_id=self.job_id,
            )
        else:
            env = self._environment_list()
            self.job_definition = self.job_definition_arn
            if job_def.get("type") == "multinode":
                self.node_overrides = {
                    "numNodes": num_nodes,
                    "nodePropertyOverrides": [{"targetNodes": "0:", "containerOverrides": {"environment": env}}],
                }
            else:
                if num_nodes != 1:
                    raise ValueError(
                        f"job definition {self.job_definition_arn} is a container (single-node) definition: "
                        "num_nodes must be 1"
                    )
                self.container_overrides = {**(self.container_overrides or {}), "environment": env}
            self.tags = {**(self.tags or {}), RUN_KEY_TAG: self.run_key}
            self.submit_job(context)

        if self.submit_only:
            self.log.info("AWS Batch job %s (%s) submitted; its wait is another task's", self.job_id, self.job_name)
            self._persist_links(context)
            self._reserve_node_links(context)  # the links of a job that ends later: "no link yet", not a missing XCom
            return {"job_id": self.job_id, "job_name": self.job_name, "reattached": self.reattached,
                    "job_definition_arn": self.job_definition_arn}
        job = self._persist_links(context)
        self._reserve_node_links(context)
        return self._settle(context, job)

    def _supersede(self, job: dict[str, Any], context: Context) -> None:
        """A fresh start (a cleared task's new try) does not reattach: the earlier try's job is terminated when it
        has not ended, and a new job is submitted."""
        try_number = getattr(context.get("ti"), "try_number", "?")
        if job.get("status") in ("SUCCEEDED", self.hook.FAILURE_STATE):
            self.log.info("AWS Batch job %s of an earlier try ended %s; try %s starts afresh (the task was cleared) "
                          "and submits a new job", job["jobId"], job.get("status"), try_number)
            return
        self.log.warning("AWS Batch job %s of an earlier try is %s; try %s starts afresh (the task was cleared): "
                         "terminating it and submitting a new job", job["jobId"], job.get("status"), try_number)
        self.hook.terminate_job(job["jobId"], f"sim2real: superseded by try {try_number} of the cleared task")

    def _reserve_node_links(self, context: Context) -> None:
        """Push an empty value for every link key persisted only once the job ended (each node's
        log stream, the provider's CloudWatch link), so the UI and the task runner, which renders
        links when the task defers, find "no link yet" instead of logging a missing XCom as an error.
        ``_success`` overwrites the keys of the links the job has."""
        if not self.do_xcom_push:
            return
        for link in (CloudWatchEventsLink(), *NODE_LOG_LINKS):
            try:
                context["ti"].xcom_push(key=link.key, value=None)
            except Exception as err:  # noqa: BLE001 - links never change the outcome
                self.log.debug("could not reserve link %s: %s", link.key, err)

    def _step_params(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "runnable_timeout_seconds": self.runnable_timeout_seconds,
                "cost_limit_usd": self.cost_limit_usd, "usd_per_node_hour": self.usd_per_node_hour,
                "num_nodes": self._validated_num_nodes()}

    def _settle(self, context: Context, job: dict[str, Any]) -> dict[str, Any]:
        """Settle a job already over (the wait's step function on its description), else defer."""
        step = settle_now(batch_job_step, {"jobs": [job]}, self._step_params())
        if step is not None and step.action is None:  # a step with an action is left to the trigger
            self.log.info("AWS Batch job %s already %s: not deferring", self.job_id, job.get("status"))
            if step.outcome == "success":
                return self._success(context, job)
            raise self._failed(context, job)
        defer_wait(self, BatchTrainingJobTrigger, method_name="execute_complete", timeout=self.execution_timeout,
                   waiter_delay=self.poll_interval, waiter_max_attempts=self.max_retries, job_id=self.job_id,
                   runnable_timeout_seconds=self.runnable_timeout_seconds, log_group=self.log_group,
                   cost_limit_usd=self.cost_limit_usd, usd_per_node_hour=self.usd_per_node_hour,
                   num_nodes=self._validated_num_nodes())

    def _push_job_cost(self, context: Context | None, record: dict[str, Any] | None) -> None:
        """XCom ``job_cost`` of a job that failed the task (the task has no return value to carry it)."""
        if not (record and context and self.do_xcom_push):
            return
        try:
            context["ti"].xcom_push(key="job_cost", value=record)
        except Exception as err:  # noqa: BLE001 - the record never changes the outcome
            self.log.warning("Could not push the job's cost figures: %s", err)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:  # type: ignore[override]
        """Resume after :class:`~sim2real.orchestration.triggers.batch.BatchTrainingJobTrigger`: the result
        of a SUCCEEDED job, else the failure (``reason`` ``cost_limit`` / ``runnable_timeout``: not retried)."""
        status, message = event_outcome(event, f"AWS Batch job {self.job_id}")
        self.job_id = event.get("job_id") or self.job_id
        if status == "success":
            job = self.hook.get_job_description(self.job_id)
            if job.get("status") != self.hook.SUCCESS_STATE:
                raise self._failed(context, job)
            return self._success(context, job)
        if event.get("reason") == "cost_limit":
            self._push_job_cost(context, event.get("job_cost"))
            raise AirflowFailException(message or f"AWS Batch job {self.job_id} stopped at its cost limit")
        if event.get("reason") == "runnable_timeout":
            self._push_never_started_cost(context)
            raise AirflowFailException(f"{message} {classify_failure(None, job_status='RUNNABLE').describe()}")
        if status == "failure" and event.get("job_status") == self.hook.FAILURE_STATE:
            raise self._failed(context, self.hook.get_job_description(self.job_id))
        raise AirflowException(f"Waiting for AWS Batch job {self.job_id} failed ({status}): {message}")

    # -- outcome ------------------------------------------------------------------------------
    def _log_streams(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        try:
            return self.hook.node_log_streams(job, self.log_group)
        except Exception as err:  # noqa: BLE001 - a log lookup never changes the outcome
            self.log.warning("Could not read the log streams of AWS Batch job %s: %s", self.job_id, err)
            return []

    def _success(self, context: Context, job: dict[str, Any]) -> dict[str, Any]:
        streams = self._log_streams(job)
        for entry in streams:
            if entry["node_index"] < len(NODE_LOG_LINKS) and entry.get("log_stream_name"):
                try:
                    NODE_LOG_LINKS[entry["node_index"]].persist_node(
                        context,
                        self,
                        region_name=self.hook.conn_region_name,
                        aws_partition=self.hook.conn_partition,
                        awslogs_group=entry["log_group"],
                        awslogs_stream_name=entry["log_stream_name"],
                        awslogs_region=entry["region"],
                    )
                except Exception as err:  # noqa: BLE001
                    self.log.warning("Could not persist the log link of node %s: %s", entry["node_index"], err)
        try:
            self._persist_cloudwatch_link(context)
        except Exception as err:  # noqa: BLE001
            self.log.warning("Could not persist the CloudWatch link: %s", err)
        num_nodes = (job.get("nodeProperties") or {}).get("numNodes") or len(streams) or 1
        self.log.info("AWS Batch job %s SUCCEEDED (%s node(s))", self.job_id, num_nodes)
        return {
            "job_id": self.job_id,
            "job_name": job.get("jobName", self.job_name),
            "job_definition_arn": job.get("jobDefinition") or self.job_definition_arn,
            "status": job.get("status"),
            "attempts": len(job.get("attempts") or []),
            "log_streams": streams,
            "num_nodes": int(num_nodes),
            "reattached": self.reattached,
            "job_definition_reused": self.job_definition_reused,
            **self._cost_fields(job, int(num_nodes)),
        }

    def _cost_fields(self, job: dict[str, Any], num_nodes: int) -> dict[str, Any]:
        try:
            price = optional_usd("usd_per_node_hour", self.usd_per_node_hour)
        except ValueError:
            price = None
        record = job_cost_record(job, time.time(), price, num_nodes)
        if record["cost_usd"] is not None:
            self.log.info(
                "AWS Batch job %s cost $%.2f (%s node(s) x $%.4g/h x %.0f s)",
                self.job_id, record["cost_usd"], record["num_nodes"], price, record["run_seconds"],
            )
        return {k: record[k] for k in ("started_at", "stopped_at", "cost_usd")}

    #: The ``DescribeJobs`` fields of a failed job that its ``job_cost`` XCom keeps (what the actual cost reads:
    #: :func:`sim2real.orchestration.budget.batch_job_run_seconds`; epoch milliseconds).
    FAILED_JOB_COST_FIELDS = ("jobId", "jobName", "status", "statusReason", "startedAt", "stoppedAt", "attempts",
                              "nodeProperties")

    def _push_never_started_cost(self, context: Context | None) -> None:
        """XCom ``job_cost`` of a job terminated while RUNNABLE (its budget): no instance ran it, so its cost is
        $0, not unknown (:func:`sim2real.orchestration.cost_actual.actual_run_cost`: no ``startedAt``, no attempts)."""
        try:
            job = self.hook.get_job_description(self.job_id)
        except Exception as err:  # noqa: BLE001 - the trigger saw it RUNNABLE and terminated it
            self.log.warning("Could not describe AWS Batch job %s for its cost figures: %s", self.job_id, err)
            job = {"jobId": self.job_id, "status": "RUNNABLE"}
        if job.get("startedAt") or any(a.get("startedAt") for a in job.get("attempts") or []):
            record = {k: job[k] for k in self.FAILED_JOB_COST_FIELDS if k in job}  # it ran after all: its times
        else:
            record = {k: job[k] for k in ("jobId", "jobName", "status", "statusReason") if k in job}
            record["attempts"] = []
        record["nodeProperties"] = {"numNodes": int((job.get("nodeProperties") or {}).get("numNodes")
                                                    or self._validated_num_nodes())}
        record["job_id"] = job.get("jobId") or self.job_id
        self._push_job_cost(context, record)

    def _failed(self, context: Context, job: dict[str, Any]) -> AirflowException:
        """:meth:`_failure`, after pushing the job's ``job_cost`` (its ``DescribeJobs`` times): a failed job has no
        return value, and the run's actual cost (a sweep that picks among its survivors goes on to succeed) still
        counts what the job ran."""
        record = {k: job[k] for k in self.FAILED_JOB_COST_FIELDS if k in job}
        record.setdefault("attempts", [])  # a job that never started: 0 s, not unknown
        record["nodeProperties"] = {"numNodes": int((job.get("nodeProperties") or {}).get("numNodes")
                                                    or self._validated_num_nodes())}
        record["job_id"] = job.get("jobId") or self.job_id
        self._push_job_cost(context, record)
        return self._failure(job)

    def _failure(self, job: dict[str, Any]) -> AirflowException:
        """Build (not raise) the exception for a job that did not succeed, with its failure class."""
        status = job.get("status")
        reason = job.get("statusReason")
        exit_code = exit_code_of(job)
        log_tail: list[str] = []
        streams = self._log_streams(job) if job.get("nodeProperties") or job.get("container") else []
        if exit_code is None:
            exit_code = next((e["exit_code"] for e in streams if e.get("exit_code") not in (None, 0)), None)
        # read the tail of the first node that exited non-zero, else of the first node with a stream
        streams = sorted(streams, key=lambda e: e.get("exit_code") in (None, 0))
        for entry in streams:
            if not entry.get("log_stream_name"):
                continue
            try:
                log_tail = self.hook.log_tail(entry["log_group"], entry["log_stream_name"], limit=50)
            except Exception as err:  # noqa: BLE001
                self.log.warning("Could not read log stream %s: %s", entry["log_stream_name"], err)
                continue
            if log_tail:
                break
        classification = classify_failure(
            reason, exit_code, log_tail, job_status=status if status != "FAILED" else None
        )
        message = (
            f"AWS Batch job {self.job_id} ({job.get('jobName')}) ended {status}: statusReason={reason!r}, "
            f"exit code={exit_code}; {classification.describe()}"
        )
        if log_tail:
            message += "\nlog tail:\n" + "\n".join(log_tail[-15:])
        self.log.error(message)
        if classification.retryable and classification.failure_class != FailureClass.CAPACITY:
            return AirflowException(message)
        return AirflowFailException(message)

    def on_kill(self) -> None:
        """Terminate the job this task started or reattached to while the task runs in the worker (the
        deferred wait: the trigger's ``on_kill``)."""
        if self.job_id and operator_should_stop(self, f"AWS Batch job {self.job_id}"):
            self.hook.terminate_job(self.job_id, "Airflow task killed by the user")
            self.log.info("AWS Batch job %s terminated (task killed)", self.job_id)
