"""The stages of ``sim_to_real``, one module each, and :func:`plan_run`, which composes their plans.

A stage module owns, for its part of the run:

* ``params()``: its fields of the trigger form (``airflow.sdk.Param``), composed by
  :func:`sim2real.orchestration.params.build_params`;
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
from sim2real.orchestration.stages import build, checkpoint, deploy, evaluate, gate, hyperpod, rounds, run, sweep, train, vla
from sim2real.orchestration.stages._base import PlanContext, PlanSection, refs
from sim2real.orchestration.stages.deploy import deployment_components, deployment_timeout_seconds, iot_job_configuration
from sim2real.orchestration.stages.evaluate import check_report, eval_commands
from sim2real.orchestration.stages.gate import QualityGateFailed, quality_gate
from sim2real.orchestration.stages.hyperpod import hyperpod_plan

__all__ = [
    "STAGES", "PLANNED", "PlanContext", "PlanSection", "refs", "plan_run", "form_params", "lineage_sources",
    "check_report", "eval_commands", "quality_gate", "QualityGateFailed", "deployment_components",
    "deployment_timeout_seconds", "iot_job_configuration", "hyperpod_plan",
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
        the form's defaults (:func:`sim2real.orchestration.params.apply_run_defaults`).
    :return: the plan (plain JSON): the run-wide keys of :class:`.run.RunPlan` (``run_key``, ``run_uri``
        ``s3://<bucket>/runs/<run_key>/``, ``budget``, ``params``, ...) and one section per stage
        (``dataclasses.asdict`` of its plan dataclass, under its ``SECTION``), ``tracking``
        (:class:`.run.TrackingPlan`, off until ``prepare_run`` starts it).
    :raises sim2real.orchestration.params.ParamRuleError: when a cross-field rule is broken (before any spend).
    :raises sim2real.orchestration.budget.BudgetExceeded: when the estimated cost is above ``max_budget_usd``.
    """
    from sim2real.orchestration.budget import check_budget, estimate_run_cost
    from sim2real.orchestration.params import apply_run_defaults, check_params

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
    from sim2real.orchestration.params import FORM_SECTIONS

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
