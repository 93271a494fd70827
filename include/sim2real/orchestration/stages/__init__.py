"""The stages of ``sim_to_real``, one module each, and :func:`plan_run`, which composes their plans.

A stage module owns, for its part of the run:

* ``params()``: its fields of the trigger form (``airflow.sdk.Param``), composed by
  :func:`build_params`;
* a plan section: a frozen dataclass (``SECTION`` = its key in the plan) and ``plan(ctx)``, which computes it
  from the :class:`~sim2real.orchestration.stages._base.PlanContext` (names and URIs only, no AWS call);
* ``add_tasks(plan, ...)``: adds its task group to the DAG being defined and returns the tasks later stages
  depend on (task ids: :mod:`sim2real.contract.task_ids`);
* ``LINEAGE_SOURCES``: lineage key → the task whose return value fills it (read by the run report);
* ``DOC``: the Markdown shown as the group's and its tasks' documentation in the Airflow UI.

Modules: :mod:`.run` (prepare_run, check_resources, training_backend, write_lineage, run_outcome),
:mod:`.build`, :mod:`.train` (AWS Batch: preflight + train), :mod:`.hyperpod`, :mod:`.sweep` (several
candidates, mapped), :mod:`.checkpoint`,
:mod:`.evaluate`, :mod:`.gate`, :mod:`.rounds` (retraining rounds), :mod:`.vla`, :mod:`.deploy`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim2real.contract.run_key import make_run_key, run_prefix
from sim2real.contract.tasks import ISAACLAB_TASKS, MUJOCO_TASKS
from sim2real.orchestration.budget import check_budget, estimate_run_cost
from sim2real.orchestration.candidates import candidate_params, expand_sweep, sweep_errors
from sim2real.orchestration.params import (
    FORM_SECTIONS,
    ParamRuleError,
    declare_dialect,
    gate_reach_errors,
    param_problem,
    range_text,
    unknown_key_errors,
)
from sim2real.orchestration.stages import build, checkpoint, deploy, evaluate, gate, hyperpod, rounds, run, sweep, train, vla
from sim2real.orchestration.stages._base import PlanContext, PlanSection, refs
from sim2real.orchestration.stages.deploy import deployment_components, deployment_timeout_seconds, iot_job_configuration
from sim2real.orchestration.stages.evaluate import check_report, eval_commands
from sim2real.orchestration.stages.gate import QualityGateFailed, quality_gate
from sim2real.orchestration.stages.hyperpod import hyperpod_plan

__all__ = [
    "STAGES", "PLANNED", "PlanContext", "PlanSection", "refs", "plan_run", "form_params", "lineage_sources",
    "check_report", "eval_commands", "quality_gate", "QualityGateFailed", "deployment_components",
    "deployment_timeout_seconds", "iot_job_configuration", "hyperpod_plan", "build_params", "check_params",
    "apply_run_defaults",
]

#: Every stage module, in the order the run goes through them.
STAGES = (run, build, train, hyperpod, sweep, checkpoint, evaluate, gate, rounds, vla, deploy)
#: The stages with a plan section, in the plan's key order.
PLANNED = (sweep, gate, build, train, hyperpod, checkpoint, evaluate, vla, deploy, rounds)
#: The trigger form's field order (stable within a form section): the training fields first.
_FORM_ORDER = (train, rounds, build, hyperpod, sweep, evaluate, gate, vla, deploy, run)


def plan_run(*, dag_id: str, run_id: str, params: Mapping[str, Any], env: Mapping[str, Any],
             run_type: Any = None) -> dict[str, Any]:
    """Validate the run and compute every name and URI the stages use.

    :param params: the run's params (already valid field by field).
    :param env: the environment config (``sim2real.orchestration.config.load_environment()``).
    :param run_type: ``dag_run.run_type``; for ``"scheduled"`` runs the config's ``run_defaults`` replace
        the form's defaults (:func:`apply_run_defaults`).
    :return: the plan (plain JSON): the run-wide keys of :class:`.run.RunPlan` (``run_key``, ``run_uri``
        ``s3://<bucket>/runs/<run_key>/``, ``budget``, ``params``, ...) and one section per stage
        (``dataclasses.asdict`` of its plan dataclass, under its ``SECTION``), ``tracking``
        (:class:`.run.TrackingPlan`, off until ``prepare_run`` starts it).
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
    plan = run.plan(ctx, applied=applied).to_json()
    # planned off: prepare_run starts it (MLflow calls) and replaces the section
    plan[run.TrackingPlan.SECTION] = run.TrackingPlan.off("not started (prepare_run starts it)").to_json()
    for stage in PLANNED:
        section = stage.plan(ctx)
        plan[section.SECTION] = section.to_json()
    return plan


def form_params() -> dict[str, Any]:
    """Every stage's trigger-form fields, grouped by form section (in the form's section order)."""
    merged: dict[str, Any] = {}
    for stage in _FORM_ORDER:
        for name, spec in stage.params().items():
            if name in merged:
                raise ValueError(f"form field {name!r} is declared by two stages")
            merged[name] = spec
    order = {section: i for i, section in enumerate(FORM_SECTIONS)}
    return dict(sorted(merged.items(), key=lambda item: order[item[1].schema.get("section")]))


def lineage_sources() -> dict[str, str]:
    """Lineage key → task id whose return value fills it, for a Batch run (HyperPod: :data:`.hyperpod.LINEAGE_SOURCES`
    replaces the training entries)."""
    sources: dict[str, str] = {}
    for stage in STAGES:
        if stage is not hyperpod:
            sources.update(stage.LINEAGE_SOURCES)
    return sources


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
    errors.extend(gate_reach_errors(params))
    errors.extend(_sweep_rule_errors(params, backend))
    budget = params.get("train_time_budget_seconds", 0)
    timeout_s = float(params.get("training_timeout_hours", 0)) * 3600
    if budget and budget >= timeout_s:
        errors.append(f"train_time_budget_seconds ({budget}) must be below training_timeout_hours "
                      f"({timeout_s:.0f} s) so the trainer can write its final checkpoint before the stage "
                      "times out")
    errors.extend(rounds.rule_errors(params))
    if errors:
        raise ParamRuleError(errors)


def _sweep_rule_errors(params: Mapping[str, Any], backend: str) -> list[str]:
    """The ``sweep`` field's rules (:func:`sim2real.orchestration.candidates.sweep_errors`: allowed keys, each value
    against its field's schema, the candidate limit, no duplicates). Each candidate's own time budget must also
    stay below ``training_timeout_hours``. Both backends run sweeps (AWS Batch: a job per candidate; HyperPod: a
    Slurm job array); on HyperPod the candidates share one array's ``#SBATCH --time``
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


def apply_run_defaults(params: Mapping[str, Any], env: Mapping[str, Any], *, run_type: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The params a run uses: for a **scheduled** run, the environment config's ``run_defaults`` over the form's.

    The form's defaults are sandbox-sized (a one-minute toy training); a nightly run on a real account
    needs production values (task, ``num_nodes``, ``max_iterations``, ``train_time_budget_seconds: 0``, …).
    Those come from the optional ``run_defaults`` object of the environment config and apply to
    scheduled runs only (``dag_run.run_type == "scheduled"``); a manual run keeps the form's values.
    Each value is checked against its field's JSON schema, as the trigger form would.

    :param params: the run's params (Airflow-validated).
    :param env: the environment config.
    :param run_type: ``dag_run.run_type`` (a ``DagRunType`` or its string value).
    :return: ``(params to use, the run_defaults that were applied)``.
    :raises ParamRuleError: ``run_defaults`` is not an object, names an unknown field, or has a value its
        field refuses (every problem listed).
    """
    kind = str(getattr(run_type, "value", run_type) or "")
    if kind != "scheduled":
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
