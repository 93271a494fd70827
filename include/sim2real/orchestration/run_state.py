"""The run's final state: a run with a failed stage, or marked failed, never ends as success.

How Airflow 3 decides a DAG run's state (``airflow.models.dagrun.DagRun.update_state`` →
``_tis_for_dagrun_state``): only the *effective leaves* count — tasks whose downstream tasks are all
teardowns without ``on_failure_fail_dagrun``; a teardown counts only with ``on_failure_fail_dagrun=True``.
When a run is marked failed from the UI or the REST API (``set_dag_run_state_to_failed``), running tasks are
set to failed, every other unfinished task to skipped, **teardowns are left to run**, and the run's state is
not written while a teardown is pending: the scheduler then computes it from the leaves. A run whose report
is a teardown would therefore end *success* when the report succeeded and the leaves were skipped.

So each DAG ends with one more teardown, ``run_outcome`` (``on_failure_fail_dagrun=True``, downstream of the
report): it reads the state of every task of the run through the Task Execution API (task breadcrumbs: the
supported way for a task in Airflow 3, no database access) and fails, naming each failed task, when any task
failed or was upstream-failed. It is the run's only effective leaf besides other failing teardowns, so the
run's state is exactly its verdict.

One kind of failed task does not fail the run: a sweep candidate that ``pick_best`` picked around. A failed
mapped task instance is no leaf (``pick_best`` is downstream of every candidate, with trigger rule
``all_done_min_one_success``), so Airflow's own rule above never counts it; ``run_outcome`` leaves out the candidates'
task instances that ``pick_best`` recorded as failed (its result's ``failed``;
:func:`sim2real.orchestration.stages.sweep.forgiven_task_keys`) and names them in its result. A sweep that could
not pick (too few survivors) fails at ``pick_best``, and the run with it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

log = logging.getLogger(__name__)

#: Task states that make a run failed (Airflow ``State.failed_states``).
FAILED_STATES = ("failed", "upstream_failed")


def _state(crumb: Mapping[str, Any]) -> str | None:
    state = crumb.get("state")
    return getattr(state, "value", state)


def failed_tasks(breadcrumbs: Iterable[Mapping[str, Any]], *, exclude: Iterable[str] = ()) -> dict[str, str]:
    """``{task_id: state}`` of every task in :data:`FAILED_STATES` (mapped tasks as ``task_id[i]``).

    :param breadcrumbs: ``RuntimeTaskInstance.get_task_breadcrumbs`` rows (``task_id``, ``map_index``, ``state``).
    :param exclude: task ids (the checking task itself) or mapped task instances (``task_id[i]``) left out.
    """
    skip = set(exclude)
    out: dict[str, str] = {}
    for crumb in breadcrumbs:
        task_id, state = crumb.get("task_id"), _state(crumb)
        if task_id in skip or state not in FAILED_STATES:
            continue
        index = crumb.get("map_index")
        key = f"{task_id}[{index}]" if index is not None and index >= 0 else task_id
        if key not in skip:
            out[key] = state
    return out


def outcome_message(dag_id: str, run_id: str, failed: Mapping[str, str]) -> str:
    """The ``run_outcome`` failure: each failed task first (the cause), then the upstream-failed ones."""
    causes = sorted(t for t, s in failed.items() if s == "failed")
    followers = sorted(t for t, s in failed.items() if s != "failed")
    return ("failed: " + (", ".join(causes) if causes else "none itself")
            + (f"; not run because of them (upstream_failed): {', '.join(followers)}" if followers else "")
            + f" (run {dag_id} / {run_id}; each failed task's log has its reason, a task marked failed from "
              "the UI or the API included)")


def check_run_outcome(dag_id: str, run_id: str, *, own_task_id: str, breadcrumbs: Iterable[Mapping[str, Any]] | None = None,
                      forgiven: Iterable[str] = ()) -> dict[str, Any]:
    """The ``run_outcome`` task: fail when any task of the run failed or was upstream-failed.

    :param breadcrumbs: the run's finished tasks; default: read through the Task Execution API
        (``RuntimeTaskInstance.get_task_breadcrumbs``), which only works inside a running task.
    :param forgiven: mapped task instances (``task_id[i]``) that do not fail the run: a sweep's failed candidates
        that ``pick_best`` picked around.
    :return: ``{"state": "success", "tasks": n}`` when nothing else failed, with ``"forgiven": {key: state}`` when
        some forgiven task instances failed.
    :raises airflow.sdk.exceptions.AirflowFailException: (not retried) some task failed; the message lists them.
    """
    from airflow.sdk.exceptions import AirflowFailException

    if breadcrumbs is None:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        breadcrumbs = RuntimeTaskInstance.get_task_breadcrumbs(dag_id=dag_id, run_id=run_id)
    crumbs = list(breadcrumbs)
    forgiven = set(forgiven)
    failed = failed_tasks(crumbs, exclude=(own_task_id,))
    excused = {k: v for k, v in failed.items() if k in forgiven}
    failed = {k: v for k, v in failed.items() if k not in forgiven}
    if failed:
        raise AirflowFailException(outcome_message(dag_id, run_id, failed))
    if excused:
        log.info("run %s / %s: failed sweep candidates the pick went around (not counted): %s", dag_id, run_id,
                 ", ".join(f"{k} {v}" for k, v in sorted(excused.items())))
    log.info("run %s / %s: none of its %d finished tasks failed", dag_id, run_id, len(crumbs))
    return {"state": "success", "tasks": len(crumbs), **({"forgiven": excused} if excused else {})}
