"""The run as a whole: the composition of every stage, and the run's own tasks outside the stage groups.

The composition: :func:`build_params` (the trigger form: every stage's ``params()``), :func:`check_params` (the
cross-field rules), :func:`plan_run` (the plan: every stage's ``plan(ctx)``) and :func:`apply_tracking` (the MLflow
runs' variables into the plan). The tasks: ``prepare_run`` (the plan), ``check_resources``, the
``training_backend`` branch, and the two closing teardowns ``write_lineage`` (the run report, given the rounds'
lineage entry) and ``run_outcome``. This module is the top of the stages: it imports the other stage modules, none
imports it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk import get_current_context

from sim2real.contract import env_vars
from sim2real.contract import task_ids as ids
from sim2real.contract.run_key import make_run_key, run_prefix
from sim2real.contract.tasks import ISAACLAB_TASKS, MUJOCO_TASKS
from sim2real.orchestration.budget import check_budget, estimate_run_cost
from sim2real.orchestration.candidates import candidate_params, expand_sweep, sweep_errors
from sim2real.orchestration.config import RUN_KEY_TAG
from sim2real.orchestration.params import (
    FORM_SECTIONS,
    ParamRuleError,
    RETRAIN_FIELD,
    SECTION_BUDGET,
    _range,
    check_conf_keys,
    declare_dialect,
    gate_reach_errors,
    param_problem,
    range_text,
    unknown_key_errors,
)
from sim2real.orchestration.run_state import check_run_outcome
from sim2real.orchestration.stages import (build, checkpoint, deploy, evaluate, gate, hyperpod, hyperpod_eks, rounds, sweep,
                                          train, vla, vla_field)
from sim2real.orchestration.stages._base import PlanContext, PlanSection, flat_xcoms
from sim2real.orchestration.stages.hyperpod import hyperpod_plan
from sim2real.orchestration.stages.rounds import lineage_entry
from sim2real.orchestration.stages.sweep import forgiven_task_keys
from sim2real.orchestration.tracking import close_dag_run, stage_env

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
EC2 `DescribeInstanceTypes`, IAM `GetRole`, SageMaker `DescribeModelPackageGroup` / `DescribeCluster`, Secrets
Manager `DescribeSecret` (a GR00T version's Hugging Face token), IoT `DescribeThingGroup`, Greengrass
`ListCoreDevices` and S3 `HeadObject` / `GetObject` of the field dataset manifest the fine-tune includes — for the
stages this run uses. Waits for nothing: before
the build and any GPU, it refuses the run listing every problem at once (invalid or unreachable bucket,
disabled queue or compute environment, missing job definition, a job definition whose per-node GPUs / vCPUs /
memory exceed the instance type, missing pipeline role or model package group, a GR00T base model prefix with no
object directly under it, a missing or deleted Hugging Face token secret, a thing group without core
devices, a missing HyperPod cluster or group, a field dataset version with no valid manifest or `latest` with none
published), each with the resource and what to change. Hands on what it checked and the field dataset version
(`vla.field_dataset` gives the pipeline this one, never resolving `latest` again).
"""

TRAINING_BACKEND_DOC = """\
**Training backend.** Calls no AWS API: follows the form's `training_backend` — `batch` goes on with
`preflight.check_capacity` and the AWS Batch job (a run with a `sweep`: `preflight.check_sweep_capacity` and the
`sweep` group), `hyperpod` with the `hyperpod` group (a sweep: its Slurm job array and the `sweep` group), `hyperpod_eks` with
`hyperpod_eks.check_capacity` (a sweep: each candidate's own PyTorchJob in the `sweep` group; the other paths
are skipped). Waits for nothing. Hands on
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
DOC = PREPARE_RUN_DOC


@dataclass(frozen=True)
class RunPlan(PlanSection):
    """The run-wide part of the plan (top-level keys, no section of its own)."""

    SECTION = ""
    run_key: str
    backend: str  #: ``batch``, ``hyperpod`` or ``hyperpod_eks``
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

    return {
        "max_budget_usd": Param(500.0, type="number", title="Max budget (USD)",
                                section=SECTION_BUDGET, **_range(minimum=0)),
    }


def plan(ctx: PlanContext, *, applied: dict[str, Any]) -> RunPlan:
    return RunPlan(run_key=ctx.run_key, backend=ctx.params.get("training_backend", "batch"), bucket=ctx.bucket,
                   run_prefix=ctx.run_prefix, run_uri=ctx.run_uri, region=ctx.env["region"],
                   tags={RUN_KEY_TAG: ctx.run_key}, budget=dict(ctx.budget), params=dict(ctx.params),
                   run_defaults_applied=applied)


#: The stages with a plan section, in the plan's key order.
PLANNED = (sweep, gate, build, train, hyperpod, hyperpod_eks, checkpoint, evaluate, vla, deploy, rounds)
#: The trigger form's field order (stable within a form section): the training fields first, the run's own
#: fields (:func:`params`) last.
_FORM_ORDER = (train, rounds, build, hyperpod, hyperpod_eks, sweep, evaluate, gate, vla, deploy)


def plan_run(*, dag_id: str, run_id: str, params: Mapping[str, Any], env: Mapping[str, Any],
             run_type: Any = None) -> dict[str, Any]:
    """Validate the run and compute every name and URI the stages use.

    :param params: the run's params (already valid field by field).
    :param env: the environment config (``sim2real.orchestration.config.load_environment()``).
    :param run_type: ``dag_run.run_type``; for ``"scheduled"`` runs the config's ``run_defaults`` replace
        the form's defaults (:func:`apply_run_defaults`).
    :return: the plan (plain JSON): the run-wide keys of :class:`RunPlan` (``run_key``, ``run_uri``
        ``s3://<bucket>/runs/<run_key>/``, ``budget``, ``params``, ...) and one section per stage
        (``dataclasses.asdict`` of its plan dataclass, under its ``SECTION``), ``tracking``
        (:class:`TrackingPlan`, off until ``prepare_run`` starts it).
    :raises sim2real.orchestration.params.ParamRuleError: when a cross-field rule is broken (before any spend).
    :raises sim2real.orchestration.budget.BudgetExceeded: when the estimated cost is above ``max_budget_usd``.
    """
    params, applied = apply_run_defaults(params, env, run_type=run_type)
    check_params(params, env)
    budget = estimate_run_cost(params, env)
    check_budget(budget)
    run_key = make_run_key(dag_id, run_id)
    bucket = env["artifacts_bucket"]
    prefix = run_prefix(run_key)
    ctx = PlanContext(run_key=run_key, bucket=bucket, run_prefix=prefix, run_uri=f"s3://{bucket}/{prefix}",
                      params=dict(params), env=env, budget=budget)
    out = plan(ctx, applied=applied).to_json()
    # planned off: prepare_run starts it (MLflow calls) and replaces the section
    out[TrackingPlan.SECTION] = TrackingPlan.off("not started (prepare_run starts it)").to_json()
    for stage in PLANNED:
        section = stage.plan(ctx)
        out[section.SECTION] = section.to_json()
    return out


def form_params() -> dict[str, Any]:
    """Every stage's trigger-form fields, grouped by form section (in the form's section order)."""
    merged: dict[str, Any] = {}
    for fields in [*(stage.params() for stage in _FORM_ORDER), params()]:
        for name, spec in fields.items():
            if name in merged:
                raise ValueError(f"form field {name!r} is declared by two stages")
            merged[name] = spec
    order = {section: i for i, section in enumerate(FORM_SECTIONS)}
    return dict(sorted(merged.items(), key=lambda item: order[item[1].schema.get("section")]))


def build_params() -> dict[str, Any]:
    """Return the DAG's ``params`` mapping (``airflow.sdk.Param`` objects): every stage's fields
    (:func:`form_params`, each stage module's ``params()``), in form-section order.

    Imported by the DAG file at parse time: it builds objects only, no I/O.
    """
    params = form_params()
    for spec in params.values():  # the form shows no bounds (see _range): the description states them
        allowed = range_text(spec.schema)
        if allowed:
            spec.description = f"{spec.description} {allowed}" if spec.description else allowed
    return declare_dialect(params)


def check_params(params: Mapping[str, Any], env: Mapping[str, Any] | None = None) -> None:
    """Apply the cross-field rules to a run's params.

    :param params: the run's params (after Airflow's per-field validation).
    :param env: the environment config (``sim2real.orchestration.config``), for rules that depend on it.
    :raises ParamRuleError: listing every broken rule, each with the reason and the fix.
    """
    env = env or {}
    errors: list[str] = []
    backend = params.get("training_backend", "batch")
    task = params.get("task", "")
    hyperpod_cfg = env.get("hyperpod") or {}
    if backend == "hyperpod":
        if not (params.get("hyperpod_cluster_name") or hyperpod_cfg.get("cluster_name")):
            errors.append("training_backend 'hyperpod' needs a cluster: set hyperpod_cluster_name in the form "
                          "or hyperpod.cluster_name in the environment config")
        if not (hyperpod_cfg.get("submit_host_tag_key") and hyperpod_cfg.get("submit_host_tag_value")):
            errors.append("training_backend 'hyperpod' needs the head/login node that submits the Slurm job: set "
                          "hyperpod.submit_host_tag_key and hyperpod.submit_host_tag_value (its EC2 tag; the "
                          "instance runs the SSM agent and the Slurm client) in the environment config")
    if task in ISAACLAB_TASKS and env.get("sandbox"):
        errors.append(f"task {task!r} needs the Isaac Lab GPU image; the local sandbox runs only "
                      f"MuJoCo tasks {list(MUJOCO_TASKS)}")
    if params.get("num_nodes", 1) > 1 and task in MUJOCO_TASKS:
        errors.append(f"num_nodes > 1 is a GPU (NCCL) path; MuJoCo task {task!r} trains on one CPU node "
                      "with vectorised environments: set num_nodes to 1 or pick an Isaac Lab task")
    if params.get("deploy_to_edge") and not params.get("run_vla_finetune"):
        errors.append("deploy_to_edge needs run_vla_finetune (the deployed model is the approved fine-tuned "
                      "model package)")
    errors.extend(hyperpod_eks.rule_errors(params, env))
    errors.extend(gate_reach_errors(params))
    errors.extend(_sweep_rule_errors(params, backend))
    budget = params.get("train_time_budget_seconds", 0)
    timeout_s = float(params.get("training_timeout_hours", 0)) * 3600
    if budget and budget >= timeout_s:
        errors.append(f"train_time_budget_seconds ({budget}) must be below training_timeout_hours "
                      f"({timeout_s:.0f} s) so the trainer can write its final checkpoint before the stage "
                      "times out")
    errors.extend(rounds.rule_errors(params))
    errors.extend(deploy.rule_errors(params, env))
    errors.extend(vla.rule_errors(params, env))
    if errors:
        raise ParamRuleError(errors)


def _sweep_rule_errors(params: Mapping[str, Any], backend: str) -> list[str]:
    """The ``sweep`` field's rules (:func:`sim2real.orchestration.candidates.sweep_errors`: allowed keys, each value
    against its field's schema, the candidate limit, no duplicates). Each candidate's own time budget must also
    stay below ``training_timeout_hours``. Every backend runs sweeps (AWS Batch: a job per candidate; HyperPod: a
    Slurm job array; HyperPod EKS: a PyTorchJob per candidate); on HyperPod the candidates share one array's ``#SBATCH --time``
    (``training_timeout_hours``), which is why that bound holds for every candidate alike."""
    sweep = params.get("sweep")
    if sweep in (None, [], {}):
        return []
    errors = sweep_errors(sweep, params, build_params())
    if errors:
        return errors
    count = len(expand_sweep(sweep))
    minimum = int(params.get("sweep_min_candidates") or 1)
    if minimum > count:
        errors.append(f"sweep_min_candidates {minimum} is above the sweep's {count} candidates: at most {count} "
                      "can succeed (set it to the number of candidates for every one to be needed)")
    timeout_s = float(params.get("training_timeout_hours", 0)) * 3600
    for i, override in enumerate(expand_sweep(sweep)):
        budget = candidate_params(params, override).get("train_time_budget_seconds", 0)
        if budget and budget >= timeout_s and "train_time_budget_seconds" in override:
            errors.append(f"sweep candidate {i}: train_time_budget_seconds ({budget}) must be below "
                          f"training_timeout_hours ({timeout_s:.0f} s)")
    return errors


#: Run types nobody chose the form's values for (Airflow's ``DagRunType`` values): they take ``run_defaults``.
UNATTENDED_RUN_TYPES = ("scheduled", "asset_triggered")


def apply_run_defaults(params: Mapping[str, Any], env: Mapping[str, Any], *, run_type: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The params a run uses: for a run nobody filled the form in for (**scheduled**, or **asset_triggered** by a new
    field dataset version), the environment config's ``run_defaults`` over the form's.

    The form's defaults are sandbox-sized (a one-minute toy training); a nightly run on a real account
    needs production values (task, ``num_nodes``, ``max_iterations``, ``train_time_budget_seconds: 0``, …).
    Those come from the optional ``run_defaults`` object of the environment config and apply to
    those runs only (``dag_run.run_type`` ``"scheduled"`` or ``"asset_triggered"``, :data:`UNATTENDED_RUN_TYPES`); a
    manual run keeps the form's values.
    Each value is checked against its field's JSON schema, as the trigger form would.

    :param params: the run's params (Airflow-validated).
    :param env: the environment config.
    :param run_type: ``dag_run.run_type`` (a ``DagRunType`` or its string value).
    :return: ``(params to use, the run_defaults that were applied)``.
    :raises ParamRuleError: ``run_defaults`` is not an object, names an unknown field, or has a value its
        field refuses (every problem listed).
    """
    kind = str(getattr(run_type, "value", run_type) or "")
    if kind not in UNATTENDED_RUN_TYPES:
        return dict(params), {}
    defaults = env.get("run_defaults") or {}
    if not isinstance(defaults, Mapping):
        raise ParamRuleError([f"environment config run_defaults must be an object, got {type(defaults).__name__}"])
    specs = build_params()
    applied: dict[str, Any] = {}
    errors: list[str] = unknown_key_errors(defaults, specs, where="environment config run_defaults")
    for key, value in defaults.items():
        if key not in specs:
            continue
        problem = param_problem(f"environment config run_defaults.{key}", value, specs[key])
        if problem:
            errors.append(problem)
            continue
        applied[key] = specs[key].resolve(value)
    if errors:
        raise ParamRuleError(errors)
    return {**params, **applied}, applied


def apply_tracking(plan: dict[str, Any], tracking: Mapping[str, Any], env: Mapping[str, Any]) -> dict[str, Any]:
    """Put the child runs' variables into ``plan`` (in place; returned): ``batch.environment``, the HyperPod section
    (re-planned with them, so the Slurm script exports them), the HyperPod EKS job's ``environment`` (its
    ``PyTorchJob`` containers' env), ``evaluation.environment``, each sweep candidate's
    ``environment`` and ``eval_environment`` (its own runs, ``candidate_runs``) and the fine-tune's
    ``MlflowRunId`` pipeline parameter and ``vla.mlflow``; ``plan["tracking"]`` = ``tracking`` (a
    :class:`TrackingPlan`). With tracking off only the latter.

    :raises TypeError: ``tracking`` has keys that are not :class:`TrackingPlan` fields.
    """
    plan[TrackingPlan.SECTION] = TrackingPlan(**tracking).to_json()
    training = stage_env(tracking, "rl_training")
    if training:
        plan["batch"]["environment"] = {**plan["batch"]["environment"], **training}
        plan["hyperpod"] = hyperpod_plan(plan["run_key"], plan["params"], env, plan["batch"]["environment"],
                                         plan.get("budget"))
        if plan.get(hyperpod_eks.HyperPodEksPlan.SECTION):
            eks = plan[hyperpod_eks.HyperPodEksPlan.SECTION]
            eks["environment"] = {**eks["environment"], **training}
    plan["evaluation"]["environment"] = stage_env(tracking, "evaluation")
    for cand in (plan.get("sweep") or {}).get("candidates") or []:
        own = {**tracking, "runs": (tracking.get("candidate_runs") or {}).get(cand["candidate"]) or {}}
        cand["environment"] = {**cand["environment"], **stage_env(own, "rl_training")}
        cand["eval_environment"] = stage_env(own, "evaluation")
    finetune = stage_env(tracking, "vla_finetune")
    if finetune and (plan.get("vla") or {}).get("enabled"):
        plan["vla"]["parameters"] = {**plan["vla"]["parameters"], "MlflowRunId": finetune[env_vars.MLFLOW_RUN_ID]}
        plan["vla"]["mlflow"] = {"tracking_uri": tracking["tracking_uri"],
                                 "experiment_name": tracking["experiment_name"]}
    return plan


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
        from sim2real.orchestration.stages.rounds import seed_checkpoint
        from sim2real.orchestration.sweeper import sweep_before_run
        from sim2real.orchestration.tracking import close_tracking, start_tracking

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
        field_dataset_check=vla_field.preflight_check,  # hands on the version vla.field_dataset gives the pipeline
        retries=1,
        execution_timeout=dt.timedelta(minutes=5),
        doc_md=CHECK_RESOURCES_DOC,
    )

    @task.branch(task_id=ids.TRAINING_BACKEND, retries=0, execution_timeout=dt.timedelta(minutes=1),
                 doc_md=TRAINING_BACKEND_DOC)
    def training_backend(plan: dict) -> str:
        """AWS Batch (preflight.check_capacity; a sweep: preflight.check_sweep_capacity), SageMaker HyperPod
        (hyperpod.check_capacity) or HyperPod on EKS (hyperpod_eks.check_capacity)."""
        if plan["backend"] == "hyperpod":
            return ids.HYPERPOD_CHECK_CAPACITY
        if plan["backend"] == hyperpod_eks.BACKEND:
            return ids.HYPERPOD_EKS_CHECK_CAPACITY
        return ids.SWEEP_CHECK_CAPACITY if (plan.get("sweep") or {}).get("enabled") else ids.BATCH_CHECK_CAPACITY

    backend = training_backend(plan["plan"])
    return plan, resources, backend


def add_closing_tasks(plan: Any, *, leaves: list[Any], teardowns: list[Any]) -> None:
    """Add the run's teardowns: ``write_lineage`` after ``leaves``, then ``run_outcome`` after it and
    ``teardowns`` (the run's only effective leaves)."""
    from airflow.sdk import task

    from sim2real.orchestration.links.mlflow import MlflowRunLink
    from sim2real.orchestration.links.s3 import FIGURE_LINKS, S3RunFolderLink

    @task(task_id=ids.WRITE_LINEAGE, multiple_outputs=True, retries=1, execution_timeout=dt.timedelta(minutes=5),
          doc_md=WRITE_LINEAGE_DOC)
    def write_lineage(plan: dict, dag_run=None, ti=None) -> dict:
        """Write runs/<run_key>/lineage.json and lineage.md, whatever happened upstream."""
        from sim2real.orchestration.report import write_run_report

        S3RunFolderLink.persist_for_plan(get_current_context(), plan)
        MlflowRunLink.persist(ti, plan.get(TrackingPlan.SECTION))
        return write_run_report(plan=plan, params=plan["params"], dag_run=dag_run, ti=ti, rounds_entry=lineage_entry)

    # The report is the run's teardown: it runs whatever failed upstream (once prepare_run succeeded), also
    # when the run is marked failed (teardowns are left to run); a report that cannot be written fails the run.
    lineage = write_lineage(plan["plan"]).as_teardown(setups=plan, on_failure_fail_dagrun=True)
    lineage.operator.operator_extra_links = (S3RunFolderLink(), *(link() for link in FIGURE_LINKS.values()),
                                             MlflowRunLink())
    leaves >> lineage

    @task(task_id=ids.RUN_OUTCOME, multiple_outputs=False, retries=0, execution_timeout=dt.timedelta(minutes=2),
          doc_md=RUN_OUTCOME_DOC)
    def run_outcome(dag_run=None, ti=None) -> dict:
        """Fail when any task of the run failed (the run's state is this verdict: sim2real.orchestration.run_state)."""
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

    # Last teardown, the run's only effective leaf with hyperpod_scale_down: the leaves before the report no longer
    # decide the run's state (sim2real.orchestration.run_state says why), this task does, from every task's state.
    [lineage, *teardowns] >> run_outcome().as_teardown(setups=plan, on_failure_fail_dagrun=True)
