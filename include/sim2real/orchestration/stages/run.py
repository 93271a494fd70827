"""The run's own tasks outside the stage groups: ``prepare_run`` (the plan), ``check_resources``,
the ``training_backend`` branch, and the two closing teardowns ``write_lineage`` and ``run_outcome``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk import get_current_context

from sim2real.contract import task_ids as ids
from sim2real.orchestration.stages._base import PlanContext, PlanSection

PREPARE_RUN_DOC = """\
**Prepare the run.** Reads the environment config (Airflow Variable `sim2real_environment`, written by
infra/), writes the run record `runs/<run_key>/run.json` and stops what earlier, dead runs left running
(the orphan sweep: Batch, Slurm, pipeline executions, Greengrass deployments; see `sim_to_real_sweeper`).
Waits for nothing. Checks the rules that span several form fields (for example `num_nodes > 1` on a
CPU MuJoCo task, deploying without the fine-tune, a training time budget longer than the stage timeout),
listing every broken rule at once, then estimates the run's GPU cost (on-demand price table × instance-hours)
and refuses to start above `max_budget_usd` (with `max_rounds` > 1: every round's training counted) — all before
any spend. A retraining round (`retrain_round`, set by the round before) copies the checkpoint it resumes from into
its own `checkpoints/` (S3 `CopyObject`, sha256 verified) before MLflow tracking starts; MLflow runs it started are
ended FAILED when it fails after that. A scheduled (nightly) run takes the
environment config's `run_defaults` over the form's sandbox-sized defaults; a manual run keeps the form's values.
Hands on the run key, the cost estimate and every name and URI of the run (`runs/<run_key>/` in the
artifacts bucket, also as the "S3 run folder" extra link).
"""

CHECK_RESOURCES_DOC = """\
**Resource preflight.** Calls only read APIs: S3 `ListObjectsV2`, CodeBuild `BatchGetProjects`, ECR
`DescribeRepositories`, Batch `DescribeJobQueues` / `DescribeComputeEnvironments` / `DescribeJobDefinitions`,
EC2 `DescribeInstanceTypes`, IAM `GetRole`, SageMaker `DescribeModelPackageGroup` / `DescribeCluster`, IoT
`DescribeThingGroup` and Greengrass `ListCoreDevices` — for the stages this run uses. Waits for nothing: before
the build and any GPU, it refuses the run listing every problem at once (invalid or unreachable bucket,
disabled queue or compute environment, missing job definition, a job definition whose per-node GPUs / vCPUs /
memory exceed the instance type, missing pipeline role or model package group, a thing group without core
devices, a missing HyperPod cluster or group), each with the resource and what to change. Hands on what it checked.
"""

TRAINING_BACKEND_DOC = """\
**Training backend.** Calls no AWS API: follows the form's `training_backend` — `batch` goes on with
`preflight.check_capacity` and the AWS Batch job (a run with a `sweep`: `preflight.check_sweep_capacity` and the
`sweep` group), `hyperpod` with the `hyperpod` group (a sweep: its Slurm job array and the `sweep` group; the
other paths are skipped). Waits for nothing. Hands on
the task id of the path taken.
"""

WRITE_LINEAGE_DOC = """\
**Write the lineage (the run's teardown).** Calls S3 `PutObject`. Runs whatever failed upstream (once
`prepare_run` succeeded, also when the run is marked failed) and waits for nothing; a lineage that cannot be
written fails the run. Hands on `runs/<run_key>/lineage.json` (checked against
`sim2real/contract/schemas/lineage.schema.json`) and `lineage.md`: image digest → Batch job → checkpoint sha256 →
success rate → pipeline execution → model package → deployment. Sets the run's note (the UI's Note panel):
the success rate and its 95% interval against the gate threshold, a warning for a gate at 0 or fewer than 20
episodes, estimated vs actual cost, the stage table and links (on MWAA through `InvokeRestApi`; a note that
cannot be set is logged, never failing the run). The "Training curve" / "Evaluation outcome" links open the
pictures (S3 console; in the sandbox the object on its S3). With retraining rounds (`max_rounds` > 1) the lineage,
the note and "Success rate per round" (`report/round_success.png`) give every round's success rate.
"""

RUN_OUTCOME_DOC = """\
**Run outcome (the last teardown).** Calls no AWS API: reads the state of every task of this run through
the Task Execution API. Waits for nothing; runs after the report whatever happened, also when the run was
marked failed from the UI or the API. Fails, naming each failed task, when any task failed or was
upstream-failed: the run's final state is this verdict (a report that succeeded never turns a failed run
into a success). Not counted: the task instances of sweep candidates that failed and that `pick_best` picked
around (`sweep_min_candidates`; `pick_best` lists them). Hands on the number of tasks it checked and those it
did not count.
"""

GROUP_ID = None
TASK_IDS = (ids.PREPARE_RUN, ids.CHECK_RESOURCES, ids.TRAINING_BACKEND, ids.WRITE_LINEAGE, ids.RUN_OUTCOME)
LINEAGE_SOURCES: dict[str, str] = {}  # the plan itself is the lineage's frame (run key, params, budget)
DOC = PREPARE_RUN_DOC


@dataclass(frozen=True)
class RunPlan(PlanSection):
    """The run-wide part of the plan (top-level keys, no section of its own)."""

    SECTION = ""
    run_key: str
    backend: str  #: ``batch`` or ``hyperpod``
    bucket: str
    run_prefix: str  #: ``runs/<run_key>/``
    run_uri: str  #: ``s3://<bucket>/runs/<run_key>/``
    region: str
    tags: dict[str, str]  #: put on every resource the run creates
    budget: dict[str, Any]  #: the cost estimate (:func:`sim2real.orchestration.budget.estimate_run_cost`)
    params: dict[str, Any]  #: the params the run uses
    run_defaults_applied: dict[str, Any]

    @classmethod
    def from_plan(cls, plan: Any) -> "RunPlan":
        return cls(**{name: plan[name] for name in cls.field_names()})


@dataclass(frozen=True)
class TrackingPlan(PlanSection):
    """The run's MLflow tracking (:mod:`sim2real.orchestration.tracking`): the parent run of the DAG run and one
    child run per stage. ``plan_run`` plans it off (it makes no call); ``prepare_run`` starts it
    (:func:`~sim2real.orchestration.tracking.start_tracking`) when the environment config has an ``mlflow``
    section and replaces this section with the result."""

    SECTION = "tracking"
    enabled: bool
    reason: str | None = None  #: why tracking is off (``enabled`` false)
    tracking_uri: str | None = None  #: ``http(s)://…`` or a SageMaker MLflow ARN
    experiment_name: str | None = None
    experiment_id: str | None = None
    parent_run_id: str | None = None  #: the DAG run's run
    runs: dict[str, str] = field(default_factory=dict)  #: stage (``sim2real.contract.tracking.STAGES``) → child run id
    #: a sweep: candidate ``c<i>`` → its own ``{"rl_training": run id, "evaluation": run id}``
    candidate_runs: dict[str, dict[str, str]] = field(default_factory=dict)
    ui_url: str | None = None  #: the MLflow UI (``None``: unknown)

    @classmethod
    def off(cls, reason: str) -> "TrackingPlan":
        return cls(enabled=False, reason=reason)


def params() -> dict[str, Any]:
    """The run-wide fields of the trigger form."""
    from airflow.sdk import Param

    from sim2real.orchestration.params import SECTION_BUDGET, _range

    return {
        "max_budget_usd": Param(500.0, type="number", title="Max budget (USD)",
                                section=SECTION_BUDGET, **_range(minimum=0)),
    }


def plan(ctx: PlanContext, *, applied: dict[str, Any]) -> RunPlan:
    from sim2real.orchestration.config import RUN_KEY_TAG

    return RunPlan(run_key=ctx.run_key, backend=ctx.params.get("training_backend", "batch"), bucket=ctx.bucket,
                   run_prefix=ctx.run_prefix, run_uri=ctx.run_uri, region=ctx.env["region"],
                   tags={RUN_KEY_TAG: ctx.run_key}, budget=dict(ctx.budget), params=dict(ctx.params),
                   run_defaults_applied=applied)


def first_note_text(run_key: str) -> str:
    """The note a run carries from its first task until its report replaces it (Markdown)."""
    return (f"**Run in progress** (run key `{run_key}`): the results (success rate against the gate, cost, stages) "
            "replace this note when the run ends.\n")


def _first_note(dag_id: str, dag_run: Any, plan: Mapping[str, Any]) -> None:
    """Give the run its note in its first task, through the REST API like every note write.

    Airflow 3.3.1 answers the UI's "Mark Dag Run as failed" on a run WITHOUT a note row with 409 and applies only
    half of it (the skips are committed in sessions of their own, then the request's own duplicate note insert
    fails): a run that has a note row from its first task updates that row instead. A retraining round's run is
    created with its round note already (``next_round``), which stays. Never fails the run (see
    :func:`sim2real.orchestration.run_note.set_run_note`).
    """
    from sim2real.orchestration.config import load_environment
    from sim2real.orchestration.run_note import set_run_note
    from sim2real.orchestration.params import RETRAIN_FIELD

    if (dag_run.conf or {}).get(RETRAIN_FIELD):
        return
    set_run_note(dag_id=dag_id, run_id=dag_run.run_id, note=first_note_text(plan["run_key"]),
                 env=load_environment())


def add_opening_tasks() -> tuple[Any, Any, Any]:
    """Add ``prepare_run``, ``check_resources`` and the ``training_backend`` branch; return them
    (``prepare_run``'s XComArg is the ``plan`` every stage reads)."""
    from airflow.sdk import task
    from airflow.sdk.exceptions import AirflowFailException

    from sim2real.orchestration.links.mlflow import MlflowRunLink
    from sim2real.orchestration.links.s3 import S3RunFolderLink
    from sim2real.orchestration.operators.preflight import ResourcePreflightOperator

    # 5 minutes: MLflow set-up (tracking.START_DEADLINE_S, 60 s) and the orphan sweep
    # (sweeper.PREPARE_RUN_DEADLINE_S, 45 s) have their own deadlines; a retraining round also copies and re-reads
    # its checkpoint (S3 CopyObject + a streamed GetObject to verify the sha256), which grows with its size.
    @task(task_id=ids.PREPARE_RUN, multiple_outputs=True, retries=0, execution_timeout=dt.timedelta(minutes=5),
          doc_md=PREPARE_RUN_DOC)
    def prepare_run(params=None, dag_run=None, dag=None) -> dict:
        """Validate params (cross-field rules), load the environment config, derive the run key and plan."""
        from sim2real.orchestration.config import load_environment
        from sim2real.orchestration.params import ParamRuleError, check_conf_keys
        from sim2real.orchestration.stages import plan_run
        from sim2real.orchestration.stages._base import flat_xcoms
        from sim2real.orchestration.stages.rounds import seed_checkpoint
        from sim2real.orchestration.sweeper import sweep_before_run
        from sim2real.orchestration.tracking import apply_tracking, close_tracking, start_tracking

        try:
            check_conf_keys(dag_run.conf, dag.params)  # a typo'd key would otherwise run on the default
            plan = plan_run(dag_id=dag.dag_id, run_id=dag_run.run_id, params=dict(params), env=load_environment(),
                            run_type=dag_run.run_type)  # scheduled runs: the config's run_defaults
            # A retraining round: the best checkpoint so far into this run's checkpoints/ (the trainer resumes
            # from it), verified before anything is started that would have to be stopped again.
            seeded = seed_checkpoint(plan)
        except (ParamRuleError, ValueError) as err:
            raise AirflowFailException(str(err)) from err
        if seeded:
            print(f"[sim2real] resuming from {seeded['source']} (iteration {seeded['iteration']}, sha256 "
                  f"{seeded['sha256']}), copied to {seeded['copied_to']}", flush=True)
        S3RunFolderLink.persist_for_plan(get_current_context(), plan)
        _first_note(dag.dag_id, dag_run, plan)
        # MLflow: the parent run and the stages' child runs; their ids go into the workloads' environments
        # (never fails the run: a server that cannot be reached leaves the run untracked, with the reason).
        env = load_environment()
        tracking = start_tracking(plan=plan, env=env, dag_id=dag.dag_id, run_id=dag_run.run_id)
        try:
            apply_tracking(plan, tracking, env)
            MlflowRunLink.persist(get_current_context()["ti"], plan[TrackingPlan.SECTION])
            # Record this run (runs/<run_key>/run.json) and stop what earlier, dead runs left running.
            # Its own deadline (PREPARE_RUN_DEADLINE_S of this task's 5 minutes); executions older than a run can
            # last are not listed.
            sweep_before_run(get_current_context()["ti"], plan, dag_id=dag.dag_id, run_id=dag_run.run_id,
                             env=load_environment(), max_active_runs=dag.max_active_runs, run_type=dag_run.run_type,
                             max_age=dag.dagrun_timeout)
        except BaseException:  # also the task's timeout: no later task closes what this one started
            close_tracking(tracking, succeeded=False)  # the parent FAILED, the stages' child runs KILLED
            raise
        return flat_xcoms(plan)

    plan = prepare_run()
    plan.operator.operator_extra_links = (S3RunFolderLink(), MlflowRunLink())  # runs/<run_key>/, MLflow run

    # Every named resource of the stages this run uses, and the job definition's shape: before the build.
    resources = ResourcePreflightOperator(
        task_id=ids.CHECK_RESOURCES,
        plan=plan["plan"],
        retries=1,
        execution_timeout=dt.timedelta(minutes=5),
        doc_md=CHECK_RESOURCES_DOC,
    )

    @task.branch(task_id=ids.TRAINING_BACKEND, retries=0, execution_timeout=dt.timedelta(minutes=1),
                 doc_md=TRAINING_BACKEND_DOC)
    def training_backend(plan: dict) -> str:
        """AWS Batch (preflight.check_capacity; a sweep: preflight.check_sweep_capacity) or SageMaker HyperPod
        (hyperpod.check_capacity)."""
        if plan["backend"] == "hyperpod":
            return ids.HYPERPOD_CHECK_CAPACITY
        return ids.SWEEP_CHECK_CAPACITY if (plan.get("sweep") or {}).get("enabled") else ids.BATCH_CHECK_CAPACITY

    backend = training_backend(plan["plan"])
    return plan, resources, backend


def add_closing_tasks(plan: Any, *, leaves: list[Any], teardowns: list[Any]) -> None:
    """Add the run's teardowns: ``write_lineage`` after ``leaves``, then ``run_outcome`` after it and
    ``teardowns`` (the run's only effective leaves)."""
    from airflow.sdk import task

    from sim2real.orchestration.links.mlflow import MlflowRunLink
    from sim2real.orchestration.links.s3 import (S3EvalOutcomeLink, S3RoundSuccessLink, S3RunFolderLink,
                                                 S3TrainingCurveLink)

    @task(task_id=ids.WRITE_LINEAGE, multiple_outputs=True, retries=1, execution_timeout=dt.timedelta(minutes=5),
          doc_md=WRITE_LINEAGE_DOC)
    def write_lineage(plan: dict, dag_run=None, ti=None) -> dict:
        """Write runs/<run_key>/lineage.json and lineage.md, whatever happened upstream."""
        from sim2real.orchestration.report import write_run_report

        S3RunFolderLink.persist_for_plan(get_current_context(), plan)
        MlflowRunLink.persist(ti, plan.get(TrackingPlan.SECTION))
        return write_run_report(plan=plan, params=plan["params"], dag_run=dag_run, ti=ti)

    # The report is the run's teardown: it runs whatever failed upstream (once prepare_run succeeded), also
    # when the run is marked failed (teardowns are left to run); a report that cannot be written fails the run.
    lineage = write_lineage(plan["plan"]).as_teardown(setups=plan, on_failure_fail_dagrun=True)
    lineage.operator.operator_extra_links = (S3RunFolderLink(), S3TrainingCurveLink(), S3EvalOutcomeLink(),
                                             S3RoundSuccessLink(), MlflowRunLink())
    leaves >> lineage

    @task(task_id=ids.RUN_OUTCOME, multiple_outputs=False, retries=0, execution_timeout=dt.timedelta(minutes=2),
          doc_md=RUN_OUTCOME_DOC)
    def run_outcome(dag_run=None, ti=None) -> dict:
        """Fail when any task of the run failed (the run's state is this verdict: sim2real.orchestration.run_state)."""
        from sim2real.orchestration.run_state import check_run_outcome
        from sim2real.orchestration.tracking import close_dag_run

        from sim2real.orchestration.stages.sweep import forgiven_task_keys

        try:
            picked = None
            try:  # a sweep's pick: the failed candidates it went around do not fail the run
                plan = (ti.xcom_pull(task_ids=ids.PREPARE_RUN) or {}).get("plan") or {}
                if (plan.get("sweep") or {}).get("enabled"):  # else skipped: its pull would log a 404
                    picked = ti.xcom_pull(task_ids=ids.SWEEP_PICK_BEST)
            except Exception:  # noqa: BLE001 - no pick (it failed): nothing is forgiven
                picked = None
            outcome = check_run_outcome(dag_run.dag_id, dag_run.run_id, own_task_id=ti.task_id,
                                        forgiven=forgiven_task_keys(picked if isinstance(picked, dict) else None))
        except Exception:
            close_dag_run(ti, dag_run.dag_id, dag_run.run_id, succeeded=False)  # MLflow parent run: FAILED
            raise
        close_dag_run(ti, dag_run.dag_id, dag_run.run_id, succeeded=True)
        return outcome

    # Last teardown, the run's only effective leaf with scale_down: the leaves before the report no longer
    # decide the run's state (sim2real.orchestration.run_state says why), this task does, from every task's state.
    [lineage, *teardowns] >> run_outcome().as_teardown(setups=plan, on_failure_fail_dagrun=True)
