"""SageMaker HyperPod: run a Slurm training job through the cluster's head node (the scale: :mod:`.hyperpod`).

Sources: AWS Systems Manager API Reference — SendCommand (``AWS-RunShellScript``), GetCommandInvocation; Slurm's
``sbatch``, ``squeue``, ``sacct``, ``scontrol``, ``scancel`` (see :mod:`sim2real.orchestration.slurm`).
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException
from airflow.sdk.exceptions import TaskDeferred

from sim2real.orchestration import slurm
from sim2real.orchestration.budget import optional_usd
from sim2real.orchestration.hooks.workstation import WorkstationHook
from sim2real.orchestration.links.sagemaker import HyperPodClusterLink
from sim2real.orchestration.run_state import FAILED_STATES
from sim2real.orchestration.stop_rule import operator_should_stop, starts_afresh
from sim2real.orchestration.triggers.base import defer_wait
from sim2real.orchestration.triggers.hyperpod import HyperPodSlurmJobTrigger
from sim2real.orchestration.waits.core import event_outcome, settle_now
from sim2real.orchestration.waits.hyperpod import DEFAULT_MAX_FAILED_QUERIES, slurm_job_step, status_query_response
from sim2real.orchestration.waits.ssm import run_short_command

if TYPE_CHECKING:
    from airflow.sdk import Context


#: XCom keys pushed before waiting (a retry or the UI can find the job and its submit host).
XCOM_SLURM_JOB_ID = "slurm_job_id"
XCOM_SUBMIT_HOST = "submit_host_instance_id"
#: XCom key of a job that ended in a failure state: ``{"job_id", "state", "exit_code"}`` (the task has no return
#: value then; ``pick_best`` names them in a failed sweep candidate's reason).
XCOM_SLURM_JOB_END = "slurm_job_end"
#: Slurm end states that say the infrastructure failed (a retry submits again); the others are the
#: job's own outcome (not retried).
SLURM_RETRYABLE_STATES = frozenset({"NODE_FAIL", "PREEMPTED", "BOOT_FAIL"})
#: Seconds one status query (SendCommand + GetCommandInvocation polls) is counted as, besides the poll interval.
STATUS_QUERY_SECONDS = 5
#: The short SSM commands this operator waits for in the worker (sbatch, a status query, a log's tail, scancel):
#: each command's ``executionTimeout`` and the wait's grace after it, so that a stalled SSM agent holds a worker
#: slot at most a minute (the command is then cancelled and the try fails: a retry reattaches to a submitted job).
SHORT_COMMAND_SECONDS, SHORT_COMMAND_GRACE_SECONDS = 45, 15


class HyperPodSlurmJobOperator(AwsBaseOperator[WorkstationHook]):
    """Submit a Slurm batch job on a HyperPod cluster through SSM on its head node and wait for it.

    Steps: DescribeInstances by tag (the head/login node with the Slurm client: exactly one
    non-terminated instance, which must be running with its SSM agent Online); SendCommand
    ``AWS-RunShellScript`` with ``submit_commands`` (:func:`sim2real.orchestration.slurm.submit_commands`: write the
    batch script, then ``sbatch --parsable`` unless ``squeue -n <job_name>`` already lists a pending or
    running job of this run, or ``sacct --name <job_name>`` one that COMPLETED, which a retried try waits
    for or reports instead of submitting twice; the first try after a person cleared the task starts afresh
    instead (:func:`sim2real.orchestration.stop_rule.starts_afresh`, :data:`sim2real.orchestration.slurm.START_ENV`):
    it cancels the run's pending or running job (``scancel``) and submits a new one); the Slurm job
    id is parsed from the output; then poll the job's state with ``sacct -X -n -P -o State,ExitCode``
    (else ``scontrol show job -o``) through SSM, deferred
    (:class:`~sim2real.orchestration.triggers.hyperpod.HyperPodSlurmJobTrigger`) until COMPLETED or a failure state
    (FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, BOOT_FAIL, DEADLINE).
    ``on_kill`` (in the worker) and the trigger's ``on_kill`` (deferred) run ``scancel <job id>``.

    Cost limit (as for the Batch training job): at each poll while the job runs, its elapsed cost is
    ``num_nodes`` x ``usd_per_node_hour`` x the time since the job's Slurm ``Start`` (``sacct``; else
    since the job was first seen RUNNING: time PENDING is not counted, see :func:`sim2real.orchestration.slurm.run_window`).
    When ``cost_limit_usd``, ``usd_per_node_hour`` and ``num_nodes`` are set and the cost at the next poll
    (``poll_interval`` + the last status query's duration + 1 s of Slurm time resolution) would be above
    ``cost_limit_usd`` (:func:`sim2real.orchestration.budget.budget_verdict`), the job is cancelled
    (``scancel``) and the task fails, not retried; the job's figures are pushed as XCom ``job_cost``
    (:func:`sim2real.orchestration.slurm.job_cost_record`) for the run's actual cost. The HyperPod nodes are billed
    from the scale-up to the scale-down; the Slurm run time is the part this task controls.

    :param cluster_name: HyperPod cluster name (messages and the cluster link).
    :param submit_host_tag_key: EC2 tag key of the head/login node.
    :param submit_host_tag_value: EC2 tag value of the head/login node.
    :param job_name: the Slurm ``--job-name`` (from the run key).
    :param submit_commands: shell lines that print ``sim2real-slurm-job-id=<id> reattached=<0|1>``.
    :param log_path: the job's ``--output`` pattern (``%j`` = job id), named in failure messages.
    :param container_image: image URI exported to the job as ``SIM2REAL_CONTAINER_IMAGE`` (the batch
        script uses it with pyxis when its ``USE_CONTAINER_IMAGE`` is 1); ``None``/empty: not exported.
    :param poll_interval: seconds between job-state polls (default 30).
    :param max_attempts: polls before failing (default: as many as fit in 90 % of the task's
        ``execution_timeout``, 12 h when unset, counting ``poll_interval`` plus
        :data:`STATUS_QUERY_SECONDS` per poll), so the wait ends, and the job is cancelled, before Airflow
        would time the deferred task out without a ``scancel``.
    :param agent_online_timeout_seconds: how long the worker waits for the submit host's SSM agent to be Online
        (seconds, default 60: a head node's agent that is away longer fails the try, and its retry looks again).
    :param num_nodes: nodes the job is billed for (the instance group's target count, templated); None =
        no cost figure and no cost check.
    :param cost_limit_usd: USD the job may spend (``sim2real.orchestration.budget.training_cost_limit``); None = no cost
        check (templated; number or numeric string).
    :param usd_per_node_hour: on-demand USD per node-hour of the GPU group's instance type
        (``sim2real.orchestration.budget.training_usd_per_node_hour``); None = no cost check and no ``cost_usd`` (templated).
    :param max_failed_queries: consecutive status queries that fail (the SSM command not Success, or the
        job unknown to both sacct and scontrol) before the task fails, retried (default
        :data:`~sim2real.orchestration.waits.hyperpod.DEFAULT_MAX_FAILED_QUERIES`).
    :param submit_only: submit (or reattach) and return at once, without waiting: a sweep's job array, whose
        tasks each candidate waits for (default False); a cleared try reattaches too, and submits only the
        indexes without an active or COMPLETED task (:func:`sim2real.orchestration.slurm.array_submit_commands`).
        Returns ``{"cluster_name", "job_id", "job_name",
        "log_path", "submit_host_instance_id", "reattached", "tasks"}`` (``tasks``: array index → task id from
        the ``sim2real-slurm-array-task=`` lines, :func:`sim2real.orchestration.slurm.parse_array_tasks`; empty for
        a single job).
    :param attach_job_id: wait for this job (a sweep's job array, templated) instead of submitting:
        ``submit_commands`` is not sent; with ``array_index`` the job waited for is array task
        ``<attach_job_id>_<array_index>`` (:func:`sim2real.orchestration.slurm.array_task_id`; ``sacct -j``,
        ``scancel`` of that task only). A retry reattaches to the same task: it never submits.
    :param array_index: the array task's index (templated; mapped: the candidate's index).
    :param array_task_ids: array index → task id (``{"<i>": "<array>_<i>"}``, templated: ``submit_sweep``'s
        ``tasks``); with ``array_index``, the task waited for is this map's entry (a resubmitted candidate's task
        is in a later array than ``attach_job_id``); an index it lacks falls back to ``<attach_job_id>_<i>``.
    :param sweep_max_failed: a sweep's candidates that may fail while it still picks (``candidates -
        sweep_min_candidates``, templated; None: no check). When this task fails (its array task ended in a failure
        state, stopped at its cost limit, timed out), the candidates with a failed or upstream_failed task among
        ``sweep_task_ids`` are counted (``get_task_states``, as the Batch lane sensor does; this one counts as
        failed); more than ``sweep_max_failed``: the sweep cannot reach its minimum, and every array of
        ``array_task_ids`` is cancelled (``scancel <array>``: its pending and running tasks) through the same SSM
        path, so no candidate the run can no longer use keeps the GPU group.
    :param sweep_task_ids: the mapped tasks of one candidate whose failure counts (default: this task only).
    :return: ``{"cluster_name", "job_id", "job_name", "state": "COMPLETED", "exit_code", "log_path",
        "submit_host_instance_id", "reattached": bool, "num_nodes", "started_at", "stopped_at" (the job's
        Slurm Start/End, epoch seconds, None when unknown), "run_seconds", "usd_per_node_hour",
        "cost_usd" (USD, None without a price, a node count or a start)}``. XCom keys ``slurm_job_id`` and
        ``submit_host_instance_id`` are pushed before the wait.
    :raises ValueError: bad arguments (e.g. a non-numeric ``cost_limit_usd``, ``num_nodes`` < 1); no or
        several instances carry the tag.
    :raises AirflowFailException: (not retried) the job ended FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY
        or DEADLINE, or was still running after ``max_attempts`` polls (then it is cancelled); the message names the
        cluster, job id, state, exit code, log path and the log's end.
        Also when stopped at the cost limit: the message has the run time, cost, limit, nodes, price and
        what to change.
    :raises AirflowException: (retried) submission failed, the job ended NODE_FAIL / PREEMPTED /
        BOOT_FAIL, or the state could not be read.
    """

    #: Always True: the wait runs in the triggerer (there is no blocking mode); read by the DAG checks.
    deferrable = True

    aws_hook_class = WorkstationHook
    operator_extra_links = (HyperPodClusterLink(),)
    template_fields: Sequence[str] = aws_template_fields(
        "cluster_name", "submit_host_tag_key", "submit_host_tag_value", "job_name", "submit_commands",
        "log_path", "container_image", "num_nodes", "cost_limit_usd", "usd_per_node_hour", "attach_job_id",
        "array_index", "array_task_ids", "sweep_max_failed",
    )
    template_fields_renderers = {"submit_commands": "json"}

    def __init__(
        self,
        *,
        cluster_name: str,
        submit_host_tag_key: str,
        submit_host_tag_value: str,
        job_name: str,
        submit_commands: list[str],
        log_path: str = "",
        container_image: str | None = None,
        poll_interval: int = 30,
        max_attempts: int | None = None,
        agent_online_timeout_seconds: int = 60,
        num_nodes: int | str | None = None,
        cost_limit_usd: float | str | None = None,
        usd_per_node_hour: float | str | None = None,
        max_failed_queries: int = DEFAULT_MAX_FAILED_QUERIES,
        submit_only: bool = False,
        attach_job_id: str | None = None,
        array_index: int | str | None = None,
        array_task_ids: dict[str, str] | None = None,
        sweep_max_failed: int | str | None = None,
        sweep_task_ids: Sequence[str] | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if submit_only and attach_job_id is not None:
            raise ValueError("submit_only and attach_job_id exclude each other: submit, or wait for a submitted job")
        self.submit_only = submit_only
        self.attach_job_id = attach_job_id
        self.array_index = array_index
        self.array_task_ids = array_task_ids
        self.sweep_max_failed = sweep_max_failed
        self.sweep_task_ids = list(sweep_task_ids) if sweep_task_ids else None
        self.num_nodes = num_nodes
        self.cost_limit_usd = cost_limit_usd
        self.usd_per_node_hour = usd_per_node_hour
        self.cluster_name = cluster_name
        self.submit_host_tag_key = submit_host_tag_key
        self.submit_host_tag_value = submit_host_tag_value
        self.job_name = job_name
        self.submit_commands = submit_commands
        self.log_path = log_path
        self.container_image = container_image
        self.poll_interval = poll_interval
        self.max_attempts = max_attempts
        self.agent_online_timeout_seconds = agent_online_timeout_seconds
        if int(max_failed_queries) < 1:
            raise ValueError(f"max_failed_queries must be >= 1, got {max_failed_queries!r}")
        self.max_failed_queries = int(max_failed_queries)
        self._job_id: str | None = None
        self._instance_id: str | None = None

    def _validate_cost_args(self) -> None:
        """Rendered ``num_nodes`` / ``cost_limit_usd`` / ``usd_per_node_hour`` as numbers (or None)."""
        self.cost_limit_usd = optional_usd("cost_limit_usd", self.cost_limit_usd)
        self.usd_per_node_hour = optional_usd("usd_per_node_hour", self.usd_per_node_hour)
        nodes = self.num_nodes
        if nodes is None or (isinstance(nodes, str) and nodes.strip() in ("", "None", "null")):
            self.num_nodes = None
        else:
            try:
                self.num_nodes = int(nodes)
            except (TypeError, ValueError):
                raise ValueError(f"num_nodes must be an integer >= 1 (plan hyperpod.target_count), got {nodes!r}") \
                    from None
            if self.num_nodes < 1:
                raise ValueError(f"num_nodes must be >= 1 (plan hyperpod.target_count), got {nodes!r}")
        if self.cost_limit_usd is not None and (self.usd_per_node_hour is None or self.num_nodes is None):
            self.log.warning("cost_limit_usd %.2f is set but usd_per_node_hour or num_nodes is not: the Slurm "
                             "job's cost is not checked", self.cost_limit_usd)

    def _attempts(self) -> int:
        if self.max_attempts:
            return int(self.max_attempts)
        limit = self.execution_timeout.total_seconds() if self.execution_timeout else 12 * 3600
        return max(1, int(0.9 * limit) // (max(1, int(self.poll_interval)) + STATUS_QUERY_SECONDS))

    def _submit_host(self) -> str:
        if not (self.submit_host_tag_key and self.submit_host_tag_value):
            raise ValueError("submit_host_tag_key and submit_host_tag_value are required: the EC2 tag of the "
                             "cluster's head/login node (environment config hyperpod.submit_host_tag_key/value)")
        instance = self.hook.find_instance_by_tag(self.submit_host_tag_key, self.submit_host_tag_value)
        instance_id, state = instance["InstanceId"], instance["State"]["Name"]
        if state != "running":
            raise AirflowException(
                f"The Slurm submit host {instance_id} ({self.submit_host_tag_key}={self.submit_host_tag_value}) of "
                f"HyperPod cluster {self.cluster_name} is {state}; it must be running with its SSM agent Online."
            )
        self.hook.wait_for_agent_online(instance_id, timeout_seconds=self.agent_online_timeout_seconds)
        return instance_id

    def _attached_job_id(self) -> str:
        """The job (or array task) ``attach_job_id`` / ``array_index`` name."""
        job = str(self.attach_job_id or "").strip()
        if not job or job in ("None", "null"):
            raise ValueError(f"attach_job_id is empty: the job to wait for was not handed on ({self.attach_job_id!r})")
        if self.array_index is None or str(self.array_index).strip() in ("", "None", "null"):
            return slurm._job_id(job)
        index = int(self.array_index)
        task = (self.array_task_ids or {}).get(str(index)) if isinstance(self.array_task_ids, dict) else None
        if task:
            if not str(task).endswith(f"_{index}"):
                raise ValueError(f"array_task_ids[{index}] is {task!r}, not a task of array index {index}")
            return slurm.array_task_id(str(task).rpartition("_")[0], index)
        return slurm.array_task_id(job, index)

    def execute(self, context: Context) -> dict[str, Any]:
        if self.attach_job_id is None and (not self.submit_commands or isinstance(self.submit_commands, str)):
            raise ValueError("submit_commands must be a non-empty list of shell lines (plan hyperpod.submit_commands)")
        self._validate_cost_args()
        attached = self._attached_job_id() if self.attach_job_id is not None else None
        instance_id = self._submit_host()
        self._instance_id = instance_id
        context["ti"].xcom_push(key=XCOM_SUBMIT_HOST, value=instance_id)
        if attached is not None:
            with self._sweep_check(context):
                return self._wait(context, attached, reattached=True, instance_id=instance_id)
        commands = list(self.submit_commands)
        if self.container_image:
            commands.insert(0, f"export SIM2REAL_CONTAINER_IMAGE={shlex.quote(str(self.container_image))}")
        # A sweep's array is not started afresh: a cleared submit_sweep resubmits only its missing candidates.
        afresh = not self.submit_only and starts_afresh(context.get("ti"), self.retries)
        stdout = self._submit(instance_id, commands, "afresh" if afresh else None)
        superseded = slurm.parse_superseded(stdout) if afresh else []
        if superseded:
            self._supersede(superseded, context)
            stdout = self._submit(instance_id, commands, "new")
        job_id, reattached = slurm.parse_submit_output(stdout)
        if afresh and reattached:
            self.log.warning("Try %s starts afresh (the task was cleared) but the submit lines reattached to Slurm job "
                             "%s: they do not read %s (rendered before it existed)",
                             getattr(context.get("ti"), "try_number", "?"), job_id, slurm.START_ENV)
        if self.submit_only:
            tasks = slurm.parse_array_tasks(stdout)
            context["ti"].xcom_push(key=XCOM_SLURM_JOB_ID, value=job_id)
            kept = sorted((i for i, t in tasks.items() if not t.startswith(f"{job_id}_")), key=int)
            self.log.info("%s Slurm job %s (%s) on HyperPod cluster %s via %s: not waiting (submit_only)%s",
                          "Reattached to" if reattached else "Submitted", job_id, self.job_name, self.cluster_name,
                          instance_id, f"; array indexes {', '.join(kept)} keep their earlier task "
                          f"({', '.join(tasks[i] for i in kept)})" if kept and not reattached else "")
            return {"cluster_name": self.cluster_name, "job_id": job_id, "job_name": self.job_name,
                    "log_path": self.log_path, "submit_host_instance_id": instance_id, "reattached": reattached,
                    "tasks": tasks}
        return self._wait(context, job_id, reattached=reattached, instance_id=instance_id)

    def _submit(self, instance_id: str, commands: list[str], start: str | None) -> str:
        """Send the submit lines (with :data:`sim2real.orchestration.slurm.START_ENV` ``start`` exported when
        given) through SSM; their standard output.

        :raises AirflowException: the command did not end Success.
        """
        if start:
            commands = [f"export {slurm.START_ENV}={start}", *commands]
        result = run_short_command(
            self.hook.conn, instance_id, commands, execution_timeout_seconds=SHORT_COMMAND_SECONDS,
            grace_seconds=SHORT_COMMAND_GRACE_SECONDS, poll_seconds=min(2.0, float(self.poll_interval)),
            comment=f"sbatch {self.job_name}",
        )
        if result["status"] != "Success":
            raise AirflowException(
                f"Submitting Slurm job {self.job_name} on HyperPod cluster {self.cluster_name} through SSM on "
                f"{instance_id} ended {result['status']} (exit code {result['response_code']}): "
                f"{(result['stderr'] or result['stdout'])[-1500:]}"
            )
        return result["stdout"]

    def _supersede(self, job_ids: list[str], context: Context) -> None:
        """A fresh start (a cleared task's new try) does not reattach: the run's pending or running jobs of earlier
        tries are cancelled (``scancel``, as :meth:`on_kill`) before a new job is submitted.

        :raises AirflowException: a cancel could not be sent (no second job is submitted beside the first).
        """
        try_number = getattr(context.get("ti"), "try_number", "?")
        for job_id in job_ids:
            self.log.warning("Slurm job %s (%s) of an earlier try is still active on %s; try %s starts afresh (the "
                             "task was cleared): cancelling it (scancel) and submitting a new job", job_id,
                             self.job_name, self.cluster_name, try_number)
            note = self._cancel(job_id)
            if note:
                raise AirflowException(f"Slurm job {job_id} ({self.job_name}) of an earlier try on HyperPod cluster "
                                       f"{self.cluster_name} could not be cancelled{note}: no new job submitted")

    def _wait(self, context: Context, job_id: str, *, reattached: bool, instance_id: str) -> dict[str, Any]:
        """Wait (deferred) for ``job_id`` to end; settled at once when it already has."""
        self._job_id = job_id
        context["ti"].xcom_push(key=XCOM_SLURM_JOB_ID, value=job_id)
        region, partition = self.hook.conn_region_name, self.hook.conn_partition
        HyperPodClusterLink.persist(context=context, operator=self, region_name=region, aws_partition=partition,
                                    cluster_name=self.cluster_name)
        self.log.info("%s Slurm job %s (%s) on HyperPod cluster %s via %s; log %s",
                      "Reattached to" if reattached else "Submitted", job_id, self.job_name, self.cluster_name,
                      instance_id, slurm.log_path_for(self.log_path, job_id, self.job_name))
        base = {"cluster_name": self.cluster_name, "job_id": job_id, "job_name": self.job_name,
                "log_path": slurm.log_path_for(self.log_path, job_id, self.job_name),
                "submit_host_instance_id": instance_id, "reattached": reattached}
        # A job that already ended (a reattached COMPLETED one, one refused at once) is settled here.
        ended = self._ended(context, base)
        if ended is not None:
            return ended
        defer_wait(self, HyperPodSlurmJobTrigger, method_name="execute_complete", waiter_delay=self.poll_interval,
                   waiter_max_attempts=self._attempts(), margin_seconds=600,  # status queries take time too
                   cluster_name=self.cluster_name, instance_id=instance_id, job_id=job_id, reattached=reattached,
                   max_failed_queries=self.max_failed_queries, job_name=self.job_name, num_nodes=self.num_nodes,
                   cost_limit_usd=self.cost_limit_usd, usd_per_node_hour=self.usd_per_node_hour)

    def _ended(self, context: Context, base: dict[str, Any]) -> dict[str, Any] | None:
        """One Slurm status query: the result of a job that already COMPLETED (raises for one that ended in a
        failure state), None while it is pending or running (or its state is unknown yet)."""
        result = run_short_command(self.hook.conn, base["submit_host_instance_id"],
                                   slurm.status_commands(base["job_id"]),
                                   execution_timeout_seconds=SHORT_COMMAND_SECONDS,
                                   grace_seconds=SHORT_COMMAND_GRACE_SECONDS, poll_seconds=1.0)
        step = settle_now(slurm_job_step, status_query_response(result), self._step_params(base))
        if step is None or step.action is not None or step.payload.get("reason"):
            return None  # running, pending, unknown: the trigger waits (and acts) from here
        state, exit_code = step.payload["state"], step.payload["exit_code"]
        self.log.info("Slurm job %s already ended %s: not deferring", base["job_id"], state)
        if step.outcome == "success":
            return self._result(base, state, exit_code, step.payload["job_cost"])
        self._push_job_cost(context, step.payload["job_cost"])
        self._push_job_end(context, base["job_id"], state, exit_code)
        raise self._job_failed(base, state, exit_code)

    def _step_params(self, base: dict[str, Any]) -> dict[str, Any]:
        """The Slurm wait's step parameters (as the trigger serializes them)."""
        return {"cluster_name": self.cluster_name, "instance_id": base["submit_host_instance_id"],
                "job_id": base["job_id"], "job_name": self.job_name, "reattached": base["reattached"],
                "max_failed_queries": self.max_failed_queries, "num_nodes": self.num_nodes,
                "cost_limit_usd": self.cost_limit_usd, "usd_per_node_hour": self.usd_per_node_hour}

    def _record(self, job_id: str, window: tuple[float | None, float | None, float | None],
                stopped_by_budget: bool = False) -> dict[str, Any]:
        started_at, stopped_at, elapsed = window
        return slurm.job_cost_record(job_id=job_id, cluster_name=self.cluster_name, started_at=started_at,
                                     stopped_at=stopped_at, elapsed_s=elapsed, num_nodes=self.num_nodes,
                                     usd_per_node_hour=self.usd_per_node_hour, stopped_by_budget=stopped_by_budget)

    def _result(self, base: dict[str, Any], state: str, exit_code: str, record: dict[str, Any] | None) -> dict[str, Any]:
        """The task's result: ``base``, the end state and the job's run window and cost."""
        record = record or {}
        if record.get("cost_usd") is not None:
            self.log.info("Slurm job %s cost $%.2f (%s node(s) x $%.4g/h x %.0f s)", base.get("job_id"),
                          record["cost_usd"], record["num_nodes"], record["usd_per_node_hour"], record["run_seconds"])
        fields = ("num_nodes", "started_at", "stopped_at", "run_seconds", "usd_per_node_hour", "cost_usd")
        return {**base, "state": state, "exit_code": exit_code,
                **{k: record.get(k) for k in fields}, "num_nodes": record.get("num_nodes", self.num_nodes)}

    def _push_job_cost(self, context: Context | None, record: dict[str, Any] | None) -> None:
        """XCom ``job_cost`` of a job that failed the task (the task has no return value to carry it)."""
        if not record or context is None or record.get("started_at") is None:
            return
        try:
            context["ti"].xcom_push(key="job_cost", value=record)
        except Exception as err:  # noqa: BLE001 - the failure message matters more
            self.log.warning("Could not push the Slurm job's cost figures: %s", err)

    def _log_tail(self, instance_id: str, log_path: str) -> str:
        try:
            result = run_short_command(self.hook.conn, instance_id, slurm.log_tail_commands(log_path),
                                       execution_timeout_seconds=SHORT_COMMAND_SECONDS,
                                       grace_seconds=SHORT_COMMAND_GRACE_SECONDS, poll_seconds=1.0)
            return result["stdout"] if result["status"] == "Success" else ""
        except Exception as error:  # the failure message matters more than the log's end
            self.log.warning("Could not read the end of %s: %s", log_path, error)
            return ""

    def _job_failed(self, base: dict[str, Any], state: str, exit_code: str) -> Exception:
        tail = self._log_tail(base["submit_host_instance_id"], base["log_path"])
        array, _, task = str(base["job_id"]).partition("_")
        what = f"array task {task} of job array {array}, " if task else ""
        message = (
            f"Slurm job {base['job_id']} ({what}{base['job_name']}) on HyperPod cluster {base['cluster_name']} ended "
            f"{state}, exit code {exit_code or 'unknown'} (exit:signal). Log: {base['log_path']} on the head "
            f"node {base['submit_host_instance_id']}"
            + (f"\n--- end of the job log ---\n{tail[-2000:]}" if tail else "")
        )
        return AirflowException(message) if state in SLURM_RETRYABLE_STATES else AirflowFailException(message)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after the trigger: the job's end state (everything from the event and the task's fields)."""
        with self._sweep_check(context):
            return self._complete(context, event)

    def _complete(self, context: Context, event: dict[str, Any] | None) -> dict[str, Any]:
        status, event_message = event_outcome(event, f"Slurm job {self._job_id} on {self.cluster_name}")
        job_id = event.get("job_id")
        base = {"cluster_name": self.cluster_name, "job_id": job_id, "job_name": self.job_name,
                "log_path": slurm.log_path_for(self.log_path, job_id, self.job_name),
                "submit_host_instance_id": event.get("instance_id"), "reattached": bool(event.get("reattached"))}
        self._job_id, self._instance_id = base.get("job_id"), base.get("submit_host_instance_id")
        state, exit_code = event.get("state", "UNKNOWN"), event.get("exit_code", "")
        if status == "success":
            self.log.info("Slurm job %s on %s %s (exit code %s)", base.get("job_id"), self.cluster_name, state, exit_code)
            return self._result(base, state, exit_code, event.get("job_cost"))
        self._push_job_cost(context, event.get("job_cost"))
        if job_id and state not in ("", "UNKNOWN"):
            self._push_job_end(context, job_id, state, exit_code)
        if event.get("reason") == "cost_limit":
            raise AirflowFailException(event.get("message") or f"Slurm job {job_id} stopped at its cost limit")
        if status == "failure" and not event.get("reason"):
            raise self._job_failed(base, state, exit_code)
        message = (f"Slurm job {base.get('job_id')} on HyperPod cluster {self.cluster_name}: {event_message} "
                   f"(last state {state}); log: {base.get('log_path')}")
        if status == "timeout":
            # The wait window is spent: a retry would only wait for (or pay for) the same job again.
            raise AirflowFailException(f"{message}; it was cancelled (scancel).{self._cancel()}")
        raise AirflowException(message)

    def _push_job_end(self, context: Context | None, job_id: str, state: str, exit_code: str) -> None:
        """XCom :data:`XCOM_SLURM_JOB_END` of a job that failed the task."""
        if context is None:
            return
        try:
            context["ti"].xcom_push(key=XCOM_SLURM_JOB_END,
                                    value={"job_id": job_id, "state": state, "exit_code": exit_code})
        except Exception as err:  # noqa: BLE001 - the failure message matters more
            self.log.warning("Could not push the Slurm job's end state: %s", err)

    @contextlib.contextmanager
    def _sweep_check(self, context: Context) -> Iterator[None]:
        """Around a sweep candidate's wait: when it fails (not when it defers), :meth:`_stop_lost_sweep`."""
        try:
            yield
        except TaskDeferred:
            raise
        except Exception:
            if self.sweep_max_failed not in (None, "", "None"):
                try:
                    self._stop_lost_sweep(context)
                except Exception as err:  # noqa: BLE001 - the candidate's own failure matters more
                    self.log.warning("Could not check whether the sweep can still reach its minimum: %s", err)
            raise

    def _stop_lost_sweep(self, context: Context) -> list[str]:
        """Cancel the sweep's job arrays when more candidates failed than ``sweep_max_failed`` (this one counted).

        :return: the ``scancel`` ids sent (empty: the sweep can still reach its minimum, or nothing to cancel).
        """
        ti = context["ti"]
        task_ids = self.sweep_task_ids or [self.task_id]
        answer = ti.get_task_states(dag_id=ti.dag_id, task_ids=list(task_ids), run_ids=[ti.run_id]) or {}
        failed = {int(self.array_index)}
        for key, state in (answer.get(ti.run_id) or {}).items():
            task_id, _, index = key.rpartition("_")
            if task_id in task_ids and index.isdigit() and getattr(state, "value", state) in FAILED_STATES:
                failed.add(int(index))
        limit = max(int(self.sweep_max_failed), 0)
        if len(failed) <= limit:
            self.log.info("Sweep: %d candidate(s) failed (%s), at most %d may: the other array tasks go on",
                          len(failed), ", ".join(f"c{i}" for i in sorted(failed)), limit)
            return []
        tasks = self.array_task_ids if isinstance(self.array_task_ids, dict) else {}
        arrays = sorted({str(t).rpartition("_")[0] for t in tasks.values()} | {str(self.attach_job_id or "")} - {""},
                        key=int)
        instance = self._instance_id or context["ti"].xcom_pull(task_ids=self.task_id, key=XCOM_SUBMIT_HOST,
                                                                map_indexes=ti.map_index)
        if not (arrays and instance):
            return []
        self.log.warning(
            "Sweep: %d candidate(s) failed (%s), more than the %d the sweep may lose (sweep_min_candidates): it "
            "cannot reach its minimum, so the remaining (pending and running) tasks of job array(s) %s on %s are "
            "cancelled (scancel)", len(failed), ", ".join(f"c{i}" for i in sorted(failed)), limit,
            ", ".join(arrays), self.cluster_name)
        result = run_short_command(self.hook.conn, instance,
                                   [f"scancel {' '.join(slurm._job_id(a) for a in arrays)}"],
                                   execution_timeout_seconds=SHORT_COMMAND_SECONDS,
                                   grace_seconds=SHORT_COMMAND_GRACE_SECONDS, poll_seconds=1.0,
                                   comment=f"scancel sweep {self.job_name}")
        if result["status"] != "Success":
            self.log.warning("scancel %s ended %s: %s", " ".join(arrays), result["status"],
                             (result.get("stderr") or result.get("stdout") or "")[-500:])
        return arrays

    def _cancel(self, job_id: str | None = None) -> str:
        """``scancel`` ``job_id`` (default: this task's job) through SSM on the submit host; a note when it could
        not be sent or did not succeed (the SSM command did not end Success: slurmctld down, ...), empty when it
        did."""
        job_id = job_id or self._job_id
        if not (job_id and self._instance_id):
            return ""
        try:
            result = run_short_command(self.hook.conn, self._instance_id, slurm.cancel_commands(job_id),
                                       execution_timeout_seconds=SHORT_COMMAND_SECONDS,
                                       grace_seconds=SHORT_COMMAND_GRACE_SECONDS, poll_seconds=1.0,
                                       comment=f"scancel {job_id}")
        except Exception as error:  # the failure message matters more than the cancel
            return f" (scancel failed: {error})"
        if result.get("status") != "Success":
            return (f" (scancel ended {result.get('status')}, exit code {result.get('response_code')}: "
                    f"{(result.get('stderr') or result.get('stdout') or '')[-500:].strip()})")
        return ""

    def on_kill(self) -> None:
        """``scancel`` the job this task submitted (or reattached to)."""
        if self._job_id and self._instance_id and operator_should_stop(self, f"Slurm job {self._job_id}"):
            self.log.info("Cancelling Slurm job %s on %s (scancel via SSM on %s)", self._job_id, self.cluster_name,
                          self._instance_id)
            note = self._cancel()
            if note:
                self.log.warning("%s", note.strip())
