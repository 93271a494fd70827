"""The stages of ``sim_to_real``, one module each; :mod:`.run` composes them (form, rules, plan).

A stage module owns, for its part of the run:

* ``params()``: its fields of the trigger form (``airflow.sdk.Param``), composed by
  :func:`.run.build_params`;
* a plan section: a frozen dataclass (``SECTION`` = its key in the plan) and ``plan(ctx)``, which computes it
  from the :class:`~sim2real.orchestration.stages._base.PlanContext` (names and URIs only, no AWS call);
* ``add_tasks(plan, ...)``: adds its task group to the DAG being defined and returns the tasks later stages
  depend on (task ids: :mod:`sim2real.contract.task_ids`);
* ``DOC``: the Markdown shown as the group's and its tasks' documentation in the Airflow UI.

Which task's return value fills each lineage key is the lineage's table (:data:`sim2real.orchestration.lineage.SOURCES`).

Modules: :mod:`.run` (the composition; prepare_run, check_resources, training_backend, write_lineage, run_outcome),
:mod:`.build`, :mod:`.train` (AWS Batch: preflight + train), :mod:`.hyperpod`, :mod:`.sweep` (several
candidates, mapped), :mod:`.checkpoint`,
:mod:`.evaluate`, :mod:`.gate`, :mod:`.rounds` (retraining rounds), :mod:`.vla`, :mod:`.deploy`.
"""

from __future__ import annotations

from sim2real.orchestration.stages import (build, checkpoint, deploy, evaluate, gate, hyperpod, hyperpod_eks, rounds, run,
                                          sweep, train, vla)
from sim2real.orchestration.stages._base import PlanContext, PlanSection, refs
from sim2real.orchestration.stages.deploy import deployment_components, deployment_timeout_seconds, iot_job_configuration
from sim2real.orchestration.stages.evaluate import check_report, eval_commands
from sim2real.orchestration.stages.gate import QualityGateFailed, quality_gate
from sim2real.orchestration.stages.hyperpod import hyperpod_plan

__all__ = [
    "STAGES", "PlanContext", "PlanSection", "refs", "check_report", "eval_commands", "quality_gate",
    "QualityGateFailed", "deployment_components", "deployment_timeout_seconds", "iot_job_configuration",
    "hyperpod_plan",
]

#: Every stage module, in the order the run goes through them.
STAGES = (run, build, train, hyperpod, hyperpod_eks, sweep, checkpoint, evaluate, gate, rounds, vla, deploy)
