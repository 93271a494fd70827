"""Orphan sweeper: find what a run started on AWS after the run stopped watching it, and stop it.

A run that is deleted in the UI, or whose process died (``dag.test`` killed, a worker lost) and that was
started again, leaves what it started running with nothing watching: a multi-node Batch job, a Slurm job on
the HyperPod cluster, a SageMaker pipeline execution, a Greengrass deployment still rolling out. Each of
them carries the run key (:mod:`sim2real.contract.run_key`) the way its stage named or tagged it:

=========================  =======================================================  =========================
what                       how it carries the run key                               how it is stopped
=========================  =======================================================  =========================
Batch job                  tag ``sim2real:run-key`` (name ``sim2real-train-<key>``)  ``TerminateJob``
Slurm job (HyperPod)       job name ``sim2real-train-<key>`` (``squeue``)            ``scancel`` (SSM)
PyTorchJob (HyperPod EKS)  label ``sim2real.io/run-key`` (name ``s2r-<key>``)       delete (Kubernetes API)
pipeline execution         ``PipelineExecutionDisplayName`` = the key               ``StopPipelineExecution``
Greengrass deployment      ``deploymentName`` = ``sim2real-<key>``                  ``CancelDeployment``
=========================  =======================================================  =========================

The run key is a one-way digest of (dag id, run id), so each run records who it is at its start: ``prepare_run`` /
``prepare_release`` write ``runs/<run_key>/run.json`` (``{"dag_id", "run_id", "run_key", "run_type",
"deployment"}``, :func:`sim2real.orchestration.run_records.register_run`) in the artifacts bucket. ``deployment``
names the Airflow deployment that ran it (:func:`sim2real.orchestration.run_records.deployment_id`: the Airflow
option ``[sim2real] deployment_id``, which infra/ sets on MWAA to ``mwaa:<environment name>``; without it
``local:<user>@<host>``, e.g. under ``dag.test``). For each thing found, the sweeper reads that record and asks
Airflow about the DAG run through the Task Execution API (``RuntimeTaskInstance.get_dr_count`` /
``get_dagrun_state`` / ``get_task_states`` / ``get_ti_count``: the supported way for a task in Airflow 3, which has
no database access from tasks). The verdicts:

* ``own``: started by the sweeping run itself; never stopped.
* ``unregistered``: no run record (a run from before records were written, or of another environment
  sharing the account); reported, never stopped.
* ``foreign``: the record names another Airflow deployment (a developer's ``dag.test`` against the same
  environment config, or MWAA seen from such a ``dag.test``): this Airflow cannot know that run; reported,
  never stopped.
* ``orphan``: its DAG run no longer exists (deleted), or is over (failed, success), or its process died (below).
  A Greengrass deployment
  only when its run ended without its deploy task succeeding (see below). Inside ``prepare_run`` (the DAG's
  ``max_active_runs=1``) also a thing of another, still "running" run of the same DAG that has no task
  running, deferred, queued, up for retry, scheduled or awaiting input (its process died); never one of a backfill run
  (a backfill has its own ``max_active_runs``).
* ``released``: a Greengrass deployment of a run that succeeded, or whose deploy task succeeded: it is the
  group's current release, left alone even while a new or offline robot has not finished it (QUEUED).
* ``watched``: its DAG run still watches it.

**A run whose process died.** A run executed in one process (``dag.test``: ``make demo``, a developer's run; the
task runs in-process, ``InProcessSupervisorComms``) leaves its DAG run "running" and its training task "deferred"
for ever in that Airflow home when the process is killed: no scheduler ever fails it. Its run record then names
that process (``process``: ``{"host", "pid", "started"}``,
:func:`sim2real.orchestration.run_records.current_process`, written only for in-process runs). The rule: a run that
still says queued/running, whose record names a process on this host that no longer exists (no such pid, or a pid
reused by a process started at another time), is dead: ``orphan``. A record from another host, or without
``process`` (runs of a scheduler: their workers are watched by the scheduler, which fails a task whose worker
stopped heartbeating), is judged as before.

The things are listed by :mod:`sim2real.orchestration.orphans`. A Greengrass deployment is only looked at while
some core device has not finished it (QUEUED/IN_PROGRESS): a finished deployment stays ``ACTIVE`` as its group's
current one. Except a canary (``sim2real-<key>-canary``) still its group's latest whose field verdict was never
reached (tag ``sim2real:field-verdict`` ``pending``): an orphan one is not cancelled but rolled back
(:func:`roll_back_canary`: tagged ``rejected``, its group's last good release deployed again), since a cancel
does not undo the robots that finished it; the sweep's ``stopped`` row says what was done.

:func:`sweep_before_run` (``prepare_run``) sweeps under its own deadline (:data:`PREPARE_RUN_DEADLINE_S`),
checked before each listing and each stop: what is left when it passes is skipped with a warning, so the sweep
cannot run into the task's ``execution_timeout``. There it also stops listing pipeline executions at the first
one older than the DAG's ``dagrun_timeout`` (its run is over whatever its state; the 30-minute sweeper still
lists them all).

Sources: AWS Batch API Reference (ListJobs ``jobQueue``/``jobStatus``, DescribeJobs ``tags``, TerminateJob);
Amazon SageMaker API Reference (ListPipelineExecutions ``PipelineExecutionStatus`` ∈ Executing | Stopping |
Stopped | Failed | Succeeded, StopPipelineExecution ``ClientRequestToken``); AWS IoT Greengrass V2 API
Reference (ListDeployments, ListCoreDevices, ListEffectiveDeployments, CancelDeployment, GetDeployment, TagResource,
CreateDeployment); Slurm ``squeue``
and ``scancel`` man pages.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from sim2real.contract import task_ids as ids
from sim2real.contract.hyperpod_eks import team_namespace
from sim2real.orchestration import slurm
from sim2real.orchestration.dag_defaults import DEFAULT_ARGS
from sim2real.orchestration.orphans import (SQUEUE_TIMEOUT_S, Found, find_batch_jobs, find_eks_jobs,
                                            find_greengrass_deployments, find_pipeline_executions, find_slurm_jobs)
from sim2real.orchestration.run_records import (RUN_RECORD, current_process, deployment_id, in_process_run,
                                                process_gone, read_run_record, register_run)

log = logging.getLogger(__name__)

#: DAG run states whose run still watches what it started.
ACTIVE_DAG_RUN_STATES = ("queued", "running")
#: Task instance states of a run that is still working (``get_ti_count``): such a run is not taken for dead.
#: (``awaiting_input``: a task waiting for a person's answer, e.g. the canary review, Airflow 3.1+ HITL.)
BUSY_TI_STATES = ("running", "deferred", "queued", "up_for_retry", "scheduled", "up_for_reschedule", "restarting",
                  "awaiting_input")
#: The Greengrass deploy task of ``sim_to_real`` (in task group ``deploy``) and of ``sim_to_real_release``.
DEPLOY_TASK_IDS = (ids.DEPLOY_TO_ROBOTS, ids.local(ids.DEPLOY_TO_ROBOTS))
#: ``prepare_run``'s budget for its sweep (seconds of its 5-minute ``execution_timeout``).
PREPARE_RUN_DEADLINE_S = 45.0
#: Seconds ``scancel`` is given at most (SSM ``executionTimeout``).
SCANCEL_TIMEOUT_S = 60
#: The least time worth starting an SSM command with (under a deadline).
MIN_COMMAND_S = 5


# -- deciding -----------------------------------------------------------------------------------------
class TaskApiRuns:
    """What the sweeper asks Airflow about a DAG run, through the Task Execution API (only inside a running
    task). Tests give an object with the same three methods."""

    def state(self, dag_id: str, run_id: str) -> str | None:
        """The DAG run's state (``queued``, ``running``, ``success``, ``failed``), ``None``: no such run (deleted)."""
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        if RuntimeTaskInstance.get_dr_count(dag_id=dag_id, run_ids=[run_id]) == 0:
            return None
        state = RuntimeTaskInstance.get_dagrun_state(dag_id=dag_id, run_id=run_id)
        return str(getattr(state, "value", state))

    def deploy_succeeded(self, dag_id: str, run_id: str) -> bool:
        """Whether the run's Greengrass deploy task (:data:`DEPLOY_TASK_IDS`) ended in ``success``."""
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        states = RuntimeTaskInstance.get_task_states(dag_id=dag_id, run_ids=[run_id],
                                                     task_ids=list(DEPLOY_TASK_IDS)) or {}
        return any(str(getattr(v, "value", v)) == "success" for v in (states.get(run_id) or {}).values())

    def busy(self, dag_id: str, run_id: str) -> bool:
        """Whether some task of the run is in one of :data:`BUSY_TI_STATES`."""
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        return RuntimeTaskInstance.get_ti_count(dag_id=dag_id, run_ids=[run_id], states=list(BUSY_TI_STATES)) > 0


class _Cached:
    """One question per DAG run and method, whatever the number of things of that run."""

    def __init__(self, runs: Any) -> None:
        self._runs, self._memo = runs, {}

    def __getattr__(self, name: str) -> Callable[[str, str], Any]:
        method = getattr(self._runs, name)

        def ask(dag_id: str, run_id: str) -> Any:
            if (name, dag_id, run_id) not in self._memo:
                self._memo[(name, dag_id, run_id)] = method(dag_id, run_id)
            return self._memo[(name, dag_id, run_id)]
        return ask


@dataclass
class Current:
    """The run doing the sweep (``prepare_run``): its own things are never stopped; with
    ``single_active_run`` (the DAG's ``max_active_runs == 1``) another run of the same DAG that has no task
    working is taken for dead (see :func:`verdict`)."""

    dag_id: str
    run_id: str
    run_key: str
    single_active_run: bool = True


def verdict(found: Found, record: Mapping[str, Any] | None, runs: Any, current: Current | None = None, *,
            deployment: str) -> tuple[str, str]:
    """Decide about one thing found.

    :param record: its run record (:func:`read_run_record`), ``None`` when there is none.
    :param runs: :class:`TaskApiRuns` (or an object with its ``state`` / ``deploy_succeeded`` / ``busy``).
    :param current: the sweeping run, inside ``prepare_run``.
    :param deployment: this Airflow deployment (:func:`deployment_id`); a record of another one is ``foreign``.
    :return: ``(verdict, why)``, verdict one of ``own``, ``unregistered``, ``foreign``, ``orphan``, ``released``,
        ``watched`` (module docstring); only ``orphan`` is stopped.
    """
    if current and found.run_key == current.run_key:
        return "own", "started by this run"
    if record is None:
        return "unregistered", f"no run record runs/{found.run_key}/{RUN_RECORD}: not stopped"
    who = f"DAG run {record['dag_id']} / {record['run_id']}"
    if record.get("deployment") != deployment:
        return "foreign", (f"{who} was recorded by Airflow deployment {record.get('deployment') or '(not named)'}, "
                           f"this is {deployment}: not stopped")
    dag_id, run_id = record["dag_id"], record["run_id"]
    state = runs.state(dag_id, run_id)
    if state is None:
        return "orphan", f"{who} no longer exists (deleted)"
    process = record.get("process")
    if state in ACTIVE_DAG_RUN_STATES and process_gone(process):
        if found.kind == "greengrass_deployment" and runs.deploy_succeeded(dag_id, run_id):
            return "released", (f"{who} deployed it before the process that ran it died: the group's current "
                                "release, left alone")
        return "orphan", (f"{who} still says {state}, but the process that ran it (pid {process.get('pid')} on "
                          f"{process.get('host')}, a dag.test) is gone: nothing watches it any more")
    if state not in ACTIVE_DAG_RUN_STATES:
        if found.kind == "greengrass_deployment":
            if state == "success" or runs.deploy_succeeded(dag_id, run_id):
                return "released", f"{who} ({state}) deployed it: the group's current release, left alone"
            return "orphan", f"{who} is {state} and its deploy task did not succeed"
        return "orphan", f"{who} is {state}"
    if current and current.single_active_run and dag_id == current.dag_id:
        run_type = record.get("run_type") or ("backfill" if str(run_id).startswith("backfill__") else None)
        if run_type == "backfill":
            return "watched", f"{who} is a backfill run (its own max_active_runs) and {state}"
        if runs.busy(dag_id, run_id):
            return "watched", f"{who} is {state} with tasks at work (another run of {current.dag_id})"
        return "orphan", (f"{who} still says {state} but no task of it is running, deferred, queued, up for retry "
                          f"or scheduled while {current.run_id} runs (max_active_runs=1: its process died)")
    return "watched", f"{who} is {state}"


# -- stopping -----------------------------------------------------------------------------------------
def stop(found: Found, clients: Mapping[str, Any], why: str, timeout_s: int = SCANCEL_TIMEOUT_S,
         grace_s: float = 60) -> str:
    """Stop one orphan; returns what was done (raises the AWS error when the stop call fails).

    :param timeout_s: ``scancel``'s SSM ``executionTimeout`` (seconds; other kinds are one API call).
    :param grace_s: how long after it the wait for ``scancel``'s result goes on (seconds).
    """
    reason = f"sim2real sweeper: orphan of run key {found.run_key}: {why}"[:250]
    if found.kind == "batch_job":
        clients["batch"].terminate_job(jobId=found.id, reason=reason)
        return "TerminateJob"
    if found.kind == "pipeline_execution":
        clients["sagemaker"].stop_pipeline_execution(PipelineExecutionArn=found.id,
                                                     ClientRequestToken=str(uuid.uuid4()))
        return "StopPipelineExecution"
    if found.kind == "greengrass_deployment" and found.extra.get("field_verdict"):  # a canary never judged
        return roll_back_canary(found, clients["greengrass"])
    if found.kind == "greengrass_deployment":
        clients["greengrass"].conn.cancel_deployment(deploymentId=found.id)
        return "CancelDeployment"
    if found.kind == "eks_job":  # delete the PyTorchJob (its pods go with it)
        from sim2real.orchestration.hooks.hyperpod_eks import delete_job

        delete_job(clients["eks_api"](found.extra["cluster_name"]), found.extra["namespace"], found.name)
        return "DeletePyTorchJob"
    if found.kind == "slurm_job":
        from sim2real.orchestration.waits.ssm import run_short_command

        result = run_short_command(clients["workstation"].conn, found.extra["instance_id"],
                                   slurm.cancel_commands(found.id), execution_timeout_seconds=int(timeout_s),
                                   poll_seconds=1.0, comment=f"sim2real sweeper: scancel {found.id}",
                                   grace_seconds=grace_s)
        if result["status"] != "Success":
            raise RuntimeError(f"scancel {found.id} ended {result['status']}: {result['stderr'][-300:]}")
        return "scancel"
    raise ValueError(f"unknown kind {found.kind!r}")


def roll_back_canary(found: Found, hook: Any) -> str:
    """Roll back the canary group of a dead run's canary whose field verdict was never reached (``found.extra``:
    ``field_verdict`` ``pending``, ``target_arn``), as the canary verdict would have: tag it ``rejected``
    (TagResource), then CreateDeployment of the group's last good release
    (:func:`~sim2real.orchestration.hooks.greengrass.start_rollback`, which never goes back to a canary that was
    not promoted). A cancel would not undo the robots that finished it.

    :param hook: a :class:`~sim2real.orchestration.hooks.greengrass.GreengrassV2Hook`.
    :return: what was done: ``TagResource + CreateDeployment <rollback id> (<name>): back to <previous name>
        (<previous id>)``.
    :raises RuntimeError: there is no release to go back to, or the rollback could not be created (its reason).
    """
    from sim2real.orchestration.hooks.greengrass import VERDICT_REJECTED, start_rollback  # loaded with the hook

    target = found.extra["target_arn"]
    hook.tag_field_verdict(found.id, target, VERDICT_REJECTED)
    responses = {thing: hook.effective_deployments(thing) for thing in hook.list_core_device_names(target)}
    rollback = start_rollback(hook, found.id, found.name, target, responses)
    if "error" in rollback:
        raise RuntimeError(f"canary {found.id} ({found.name}) tagged {VERDICT_REJECTED}, not rolled back: "
                           f"{rollback['error']}")
    return (f"TagResource + CreateDeployment {rollback['deployment_id']} ({rollback['deployment_name']}): back to "
            f"{rollback['previous_deployment_name']} ({rollback['previous_deployment_id']})")


class Deadline:
    """A time budget (``None``: none) on a monotonic ``clock``; :meth:`left` is the seconds left (``inf`` without)."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._end = None if seconds is None else clock() + seconds

    def left(self) -> float:
        return float("inf") if self._end is None else self._end - self._clock()

    def command(self, timeout_s: int) -> tuple[int, float]:
        """``(executionTimeout, grace)`` of an SSM command that must end, wait included, before the deadline:
        ``(timeout_s, 60)`` without one, else both shrunk to the time left."""
        left = self.left()
        if left == float("inf"):
            return timeout_s, 60.0
        execution = int(max(1, min(timeout_s, left - MIN_COMMAND_S)))
        return execution, max(1.0, min(60.0, left - execution))

    def passed(self, need: float = 0.0) -> bool:
        """Whether less than ``need`` seconds (and at least none) are left."""
        left = self.left()
        return left <= 0 or left < need


def find_all(env: Mapping[str, Any], clients: Mapping[str, Any], *, deadline: Deadline | None = None,
             created_after: dt.datetime | None = None) -> tuple[list[Found], list[str], list[str]]:
    """Everything of :data:`sim2real.orchestration.orphans.KINDS` in the environment config's queue, cluster,
    pipeline and deployments.

    :param deadline: checked before each service; the services left when it passed are not listed.
    :param created_after: passed to :func:`find_pipeline_executions`.
    :return: ``(found, errors, skipped)``: a service that cannot be listed is an error line (the others are still
        listed); ``skipped`` are the kinds not listed because the deadline passed.
    """
    deadline = deadline or Deadline(None)
    finders: list[tuple[str, float, Callable[[], list[Found]]]] = [
        ("batch_job", 0, lambda: find_batch_jobs(clients["batch"], env["batch"]["job_queue"])),
        ("pipeline_execution", 0, lambda: find_pipeline_executions(clients["sagemaker"],
                                                                   env["sagemaker"]["pipeline_name"], created_after)),
        ("greengrass_deployment", 0, lambda: find_greengrass_deployments(clients["greengrass"])),
    ]
    eks_section = env.get("hyperpod_eks") or {}
    eks_cluster, eks_team = eks_section.get("cluster_name"), eks_section.get("team")
    if eks_cluster and eks_team and "eks_api" in clients:
        finders.append(("eks_job", 0, lambda: find_eks_jobs(clients["eks_api"](eks_cluster), eks_cluster,
                                                            team_namespace(eks_team))))
    if env.get("hyperpod"):
        finders.append(("slurm_job", MIN_COMMAND_S, lambda: find_slurm_jobs(
            clients["workstation"], env["hyperpod"], *deadline.command(SQUEUE_TIMEOUT_S))[0]))
    found: list[Found] = []
    errors: list[str] = []
    skipped: list[str] = []
    for kind, need, finder in finders:
        if deadline.passed(need):
            skipped.append(kind)
            continue
        try:
            found += finder()
        except Exception as err:  # noqa: BLE001 - one service down must not hide the others' orphans
            log.exception("could not list %s", kind)
            errors.append(f"could not list {kind}: {type(err).__name__}: {err}")
    if skipped:
        log.warning("sweep deadline passed: %s not listed", ", ".join(skipped))
    return found, errors, skipped


def sweep(env: Mapping[str, Any], *, clients: Mapping[str, Any], s3_hook: Any, dry_run: bool,
          current: Current | None = None, runs: Any = None, deployment: str | None = None,
          deadline_s: float | None = None, max_age: dt.timedelta | None = None,
          clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """Find every thing a run started (:func:`find_all`), decide (:func:`verdict`) and stop each orphan.

    :param clients: ``{"batch", "sagemaker"}`` boto3 clients, ``{"greengrass"}`` a
        :class:`~sim2real.orchestration.hooks.greengrass.GreengrassV2Hook`, ``{"workstation"}`` a
        :class:`~sim2real.orchestration.hooks.workstation.WorkstationHook` (SSM / EC2, for the HyperPod head node).
    :param s3_hook: reads the run records in ``env["artifacts_bucket"]``.
    :param dry_run: only report (nothing is stopped).
    :param current: the sweeping run, when a run sweeps before it starts anything.
    :param runs: what Airflow says about a DAG run (default :class:`TaskApiRuns`, the Task Execution API).
    :param deployment: this Airflow deployment (default :func:`deployment_id`).
    :param deadline_s: seconds the sweep may take (``None``: no limit), checked before each listing and each
        stop; what is left then is skipped with a warning (``skipped`` in the report).
    :param max_age: pipeline executions that started longer ago than this are not listed (``None``: all).
    :param clock: monotonic seconds (tests).
    :return: ``{"dry_run", "found": [...], "orphans": [...], "stopped": [...], "errors": [...], "skipped": [...]}``;
        each of found/orphans/stopped is a :class:`Found` as a dict plus ``verdict``, ``why`` (and ``action`` for a
        stopped one); ``skipped`` names the kinds not listed and the orphans not stopped for the deadline.
    """
    runs = _Cached(runs if runs is not None else TaskApiRuns())
    deployment = deployment or deployment_id()
    deadline = Deadline(deadline_s, clock)
    created_after = dt.datetime.now(dt.timezone.utc) - max_age if max_age is not None else None
    found, errors, skipped = find_all(env, clients, deadline=deadline, created_after=created_after)
    records: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for item in found:
        if item.run_key not in records:
            try:
                records[item.run_key] = read_run_record(s3_hook, env["artifacts_bucket"], item.run_key)
            except Exception as err:  # noqa: BLE001
                errors.append(f"could not read the run record of {item.run_key}: {err}")
                records[item.run_key] = None
        try:
            decision, why = verdict(item, records[item.run_key], runs, current, deployment=deployment)
        except Exception as err:  # noqa: BLE001 - not knowing is not stopping
            errors.append(f"could not decide about {item.label()}: {type(err).__name__}: {err}")
            decision, why = "unknown", f"could not ask Airflow about its run: {err}"
        rows.append({**asdict(item), "verdict": decision, "why": why})
    orphans = [r for r in rows if r["verdict"] == "orphan"]
    stopped: list[dict[str, Any]] = []
    by_id = {(f.kind, f.id): f for f in found}
    for row in orphans:
        item = by_id[(row["kind"], row["id"])]
        if dry_run:
            log.warning("DRY RUN: would stop orphan %s: %s", item.label(), row["why"])
            continue
        if deadline.passed(MIN_COMMAND_S if item.kind == "slurm_job" else 0):
            log.warning("sweep deadline passed: orphan %s not stopped", item.label())
            skipped.append(f"stop {item.kind} {item.id}")
            continue
        try:
            action = stop(item, clients, row["why"], *deadline.command(SCANCEL_TIMEOUT_S))
        except Exception as err:  # noqa: BLE001 - the others are still stopped
            log.exception("could not stop %s", item.label())
            errors.append(f"could not stop {item.label()}: {type(err).__name__}: {err}")
            continue
        log.warning("Stopped orphan %s (%s): %s", item.label(), action, row["why"])
        stopped.append({**row, "action": action})
    for row in rows:
        if row["verdict"] != "orphan":
            log.info("%s %s (%s): %s", row["kind"], row["id"], row["verdict"], row["why"])
    log.info("sweep: %d found, %d orphans, %d stopped%s, %d errors, %d skipped", len(rows), len(orphans),
             len(stopped), " (dry run)" if dry_run else "", len(errors), len(skipped))
    return {"dry_run": bool(dry_run), "found": rows, "orphans": orphans, "stopped": stopped, "errors": errors,
            "skipped": skipped}


def aws_clients(aws_conn_id: str | None = "aws_default", botocore_config: Mapping[str, Any] | None = None
                ) -> dict[str, Any]:
    """The clients :func:`sweep` uses, from the Airflow AWS connection."""
    from botocore.config import Config

    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    from sim2real.orchestration.hooks.greengrass import GreengrassV2Hook
    from sim2real.orchestration.hooks.hyperpod_eks import HyperPodEksHook
    from sim2real.orchestration.hooks.workstation import WorkstationHook

    config = Config(**dict(botocore_config or {}))
    return {
        "batch": AwsBaseHook(aws_conn_id=aws_conn_id, client_type="batch", config=config).conn,
        "sagemaker": AwsBaseHook(aws_conn_id=aws_conn_id, client_type="sagemaker", config=config).conn,
        "greengrass": GreengrassV2Hook(aws_conn_id=aws_conn_id, config=config),
        "workstation": WorkstationHook(aws_conn_id=aws_conn_id, config=config),
        # cluster name -> the HyperPod EKS cluster's Kubernetes client (built only when the config names one)
        "eks_api": lambda cluster: HyperPodEksHook(aws_conn_id=aws_conn_id, config=config).api_client(cluster),
    }


def summary_lines(report: Mapping[str, Any]) -> Iterable[str]:
    """One line per orphan (stopped, with what was done; or, in a dry run, to stop), per thing of another Airflow deployment
    (``foreign``: not stopped), per error and per step skipped for the deadline."""
    stopped = {(r["kind"], r["id"]): r.get("action") for r in report["stopped"]}
    for row in report["orphans"]:
        done = (f"stopped ({stopped[(row['kind'], row['id'])]})" if (row["kind"], row["id"]) in stopped
                else ("would stop" if report["dry_run"] else "NOT stopped"))
        yield f"{done}: {row['kind']} {row['id']} ({row['name']}, {row['status']}) in {row['where']}: {row['why']}"
    for row in report["found"]:
        if row["verdict"] == "foreign":
            yield f"foreign, not stopped: {row['kind']} {row['id']} ({row['name']}) in {row['where']}: {row['why']}"
    for error in report["errors"]:
        yield f"error: {error}"
    for what in report.get("skipped", []):
        yield f"skipped (deadline): {what}"


def sweep_before_run(ti: Any, plan: Mapping[str, Any], *, dag_id: str, run_id: str, env: Mapping[str, Any],
                     max_active_runs: int | None, aws_conn_id: str | None = "aws_default", run_type: Any = None,
                     max_age: dt.timedelta | None = None, deadline_s: float = PREPARE_RUN_DEADLINE_S
                     ) -> dict[str, Any] | None:
    """``prepare_run``'s check: record this run (:func:`register_run`), then stop the orphans of earlier runs.

    Never fails the run for the sweep itself (a run that cannot be swept can still succeed): a problem is
    logged as a warning and kept in the report (XCom ``orphan_sweep`` of the calling task). The sweep keeps to
    ``deadline_s`` (checked between listings and stops, so well inside the task's ``execution_timeout``, whose
    ``AirflowTaskTimeout`` no ``except Exception`` would catch).

    :param ti: the calling task instance (for XCom ``orphan_sweep``; ``None``: not pushed).
    :param max_active_runs: the DAG's; with 1, another run of the same DAG with no task at work is not active
        (see :func:`verdict`).
    :param run_type: this DAG run's ``run_type``, written to the run record.
    :param max_age: the DAG's ``dagrun_timeout``: older pipeline executions are not listed (``None``: all).
    :param deadline_s: seconds the sweep may take.
    :return: the :func:`sweep` report, or ``None`` when the run record could not be written (then nothing is
        swept: without its own record the run could not be told apart later).
    """
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    started = time.monotonic()
    s3 = S3Hook(aws_conn_id=aws_conn_id)
    deployment = deployment_id()
    try:
        uri = register_run(s3, plan["bucket"], dag_id=dag_id, run_id=run_id, run_key=plan["run_key"],
                           run_type=run_type, deployment=deployment,
                           process=current_process() if in_process_run() else None)
        log.info("run record written to %s (Airflow deployment %s)", uri, deployment)
    except Exception as err:  # noqa: BLE001
        log.warning("could not write the run record runs/%s/%s (%s): no orphan sweep", plan["run_key"], RUN_RECORD, err)
        return None
    current = Current(dag_id=dag_id, run_id=run_id, run_key=plan["run_key"],
                      single_active_run=max_active_runs == 1)
    try:
        report = sweep(env, clients=aws_clients(aws_conn_id, DEFAULT_ARGS["botocore_config"]), s3_hook=s3,
                       dry_run=False, current=current, deployment=deployment, max_age=max_age,
                       deadline_s=max(0.0, deadline_s - (time.monotonic() - started)))
    except Exception as err:  # noqa: BLE001
        log.warning("orphan sweep failed: %s: %s", type(err).__name__, err)
        return None
    for line in summary_lines(report):
        log.warning("orphan sweep: %s", line)
    if ti is not None:
        ti.xcom_push(key="orphan_sweep", value={k: report[k] for k in ("orphans", "stopped", "errors", "skipped")})
    return report
