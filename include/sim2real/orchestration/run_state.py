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

**A run marked failed while no task was running** (between two tasks, or while the scheduler lagged): Airflow
3.3.1's ``set_dag_run_state_to_failed`` fails only the *running* task instances and skips every other unfinished
one, so such a run has no failed task at all and would end success with no evaluation. ``run_outcome`` therefore
also fails for a skip nothing in the DAG explains (:func:`unexplained_skips`): a task instance that was skipped
without having run (``duration`` 0 or none: ``TaskInstance.set_state`` sets start = end), whose trigger rule would
have run it given its upstream tasks' states (the rules of Airflow's ``TriggerRuleDep``), and that no branch or
short-circuit upstream of it left out (their ``skipmixin_key`` XCom: ``followed`` / ``skipped``). A branch's
legitimate skip, a skip that follows from a skipped or failed upstream task, and a task that ran and skipped
itself (``AirflowSkipException``: it has a duration) are explained. Teardowns are never counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

log = logging.getLogger(__name__)

#: Task states that make a run failed (Airflow ``State.failed_states``).
FAILED_STATES = ("failed", "upstream_failed")
#: XCom key under which a branch / short-circuit task records what it followed or skipped
#: (``airflow.providers.standard.utils.skipmixin.XCOM_SKIPMIXIN_KEY``).
SKIPMIXIN_KEY = "skipmixin_key"


def rule_skips(trigger_rule: str, upstream: Iterable[str | None]) -> bool:
    """Whether Airflow's trigger rule (``TriggerRuleDep``, Airflow 3.3.1) would skip a task (or not run it: an
    upstream failure) given its direct upstream task instances' final states. Unknown rules answer True (a skip
    nothing here can judge is taken as explained)."""
    states = [str(getattr(s, "value", s)) if s is not None else "none" for s in upstream]
    success = states.count("success")
    failed = sum(states.count(s) for s in FAILED_STATES)
    skipped = states.count("skipped")
    rule = str(getattr(trigger_rule, "value", trigger_rule))
    if rule == "all_success":
        return success < len(states)
    if rule in ("one_success", "none_failed_min_one_success"):
        return success == 0 or failed > 0
    if rule == "all_done_min_one_success":
        return skipped > 0 or success == 0
    if rule == "none_failed":
        return failed > 0
    if rule == "none_skipped":
        return skipped > 0 or failed > 0
    if rule in ("all_done", "always"):
        return False
    if rule == "one_done":
        return failed == 0 and success == 0
    return True  # all_failed, one_failed, all_skipped, all_done_setup_success, ...: not judged


def _left_out_by(upstream_task_id: str, task_id: str, decision: Mapping[str, Any] | None) -> bool:
    if not isinstance(decision, Mapping):
        return False
    if "followed" in decision:
        followed = [str(f) for f in decision.get("followed") or []]
        return not any(task_id == f or task_id.startswith(f + ".") for f in followed)
    skipped = [str(f) for f in decision.get("skipped") or []]
    return any(task_id == f or task_id.startswith(f + ".") for f in skipped)


def _mapped(task: Any) -> bool:
    if getattr(task, "is_mapped", False) or type(task).__name__ == "MappedOperator":
        return True
    closest = getattr(task, "get_closest_mapped_task_group", None)
    return callable(closest) and closest() is not None


def unexplained_skips(dag: Any, breadcrumbs: Iterable[Mapping[str, Any]],
                      decision_of: Callable[[str], Mapping[str, Any] | None], *, exclude: Iterable[str] = ()
                      ) -> list[str]:
    """The task ids skipped without a cause in the DAG: skipped without having run, while their trigger rule
    (:func:`rule_skips`) would have run them and no branch / short-circuit upstream of them left them out.

    :param dag: the DAG (``task_dict``, each task's ``upstream_task_ids``, ``trigger_rule``, ``is_teardown``).
    :param breadcrumbs: the run's finished task instances (``task_id``, ``map_index``, ``state``, ``duration``).
    :param decision_of: a branch or short-circuit task's ``skipmixin_key`` XCom (``{"followed": [...]}`` /
        ``{"skipped": [...]}``), or None; asked only for such tasks that succeeded upstream of a suspect skip.
    :param exclude: task ids not judged (the checking task itself).
    """
    crumbs = list(breadcrumbs)
    states: dict[str, list[str | None]] = {}
    for crumb in crumbs:
        states.setdefault(str(crumb.get("task_id")), []).append(_state(crumb))
    skip = set(exclude)
    suspects: list[str] = []
    for crumb in crumbs:
        task_id = str(crumb.get("task_id"))
        if task_id in skip or task_id in suspects or _state(crumb) != "skipped":
            continue
        if (crumb.get("duration") or 0) > 0:
            continue  # it ran and skipped itself
        task = dag.task_dict.get(task_id)
        if task is None or getattr(task, "is_teardown", False):
            continue
        upstream_ids = sorted(task.upstream_task_ids)
        upstream_states = [s for u in upstream_ids for s in states.get(u, [None])]
        if rule_skips(task.trigger_rule, upstream_states):
            continue
        if _mapped(task) and any(s != "success" for s in upstream_states):
            continue  # a mapped task (or one in a mapped group) with nothing to expand over is skipped
        deciders = [u for u in upstream_ids if callable(getattr(dag.task_dict.get(u), "skip_all_except", None))
                    and "success" in states.get(u, [])]
        if any(_left_out_by(u, task_id, decision_of(u)) for u in deciders):
            continue
        suspects.append(task_id)
    return suspects


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


def skips_message(dag_id: str, run_id: str, skipped: Iterable[str]) -> str:
    """The ``run_outcome`` failure for skips nothing in the DAG explains (a run marked failed between tasks)."""
    return (f"skipped without a cause in the DAG: {', '.join(sorted(skipped))} (run {dag_id} / {run_id}): the run "
            "was marked failed (or these tasks marked skipped) before they ran; a run that left out a stage it "
            "needed does not end success")


def check_run_outcome(dag_id: str, run_id: str, *, own_task_id: str, breadcrumbs: Iterable[Mapping[str, Any]] | None = None,
                      forgiven: Iterable[str] = (), dag: Any = None,
                      decision_of: Callable[[str], Mapping[str, Any] | None] | None = None) -> dict[str, Any]:
    """The ``run_outcome`` task: fail when any task of the run failed or was upstream-failed, or was skipped with
    no cause in the DAG (:func:`unexplained_skips`: the run was marked failed while no task was running).

    :param breadcrumbs: the run's finished tasks; default: read through the Task Execution API
        (``RuntimeTaskInstance.get_task_breadcrumbs``), which only works inside a running task.
    :param forgiven: mapped task instances (``task_id[i]``) that do not fail the run: a sweep's failed candidates
        that ``pick_best`` picked around.
    :param dag: the DAG, for the skip check; default: the running task's (``get_current_context()["ti"].task.dag``);
        None outside a task: no skip check.
    :param decision_of: ``task_id -> skipmixin_key XCom`` of branch tasks; default: pulled by the running task.
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
    if dag is None or decision_of is None:
        context_dag, context_decision = _from_context()
        dag = context_dag if dag is None else dag
        decision_of = context_decision if decision_of is None else decision_of
    if dag is not None:
        unexplained = unexplained_skips(dag, crumbs, decision_of or (lambda _task_id: None), exclude=(own_task_id,))
        if unexplained:
            raise AirflowFailException(skips_message(dag_id, run_id, unexplained))
    if excused:
        log.info("run %s / %s: failed sweep candidates the pick went around (not counted): %s", dag_id, run_id,
                 ", ".join(f"{k} {v}" for k, v in sorted(excused.items())))
    log.info("run %s / %s: none of its %d finished tasks failed", dag_id, run_id, len(crumbs))
    return {"state": "success", "tasks": len(crumbs), **({"forgiven": excused} if excused else {})}


def _from_context() -> tuple[Any, Callable[[str], Mapping[str, Any] | None] | None]:
    """The running task's DAG and a ``skipmixin_key`` XCom reader, or ``(None, None)`` outside a task."""
    try:
        from airflow.sdk import get_current_context

        ti = get_current_context()["ti"]
        dag = ti.task.dag
    except Exception:  # noqa: BLE001 - no context (a unit test): no skip check
        return None, None

    def decision_of(task_id: str) -> Mapping[str, Any] | None:
        try:
            value = ti.xcom_pull(task_ids=task_id, key=SKIPMIXIN_KEY)
        except Exception as err:  # noqa: BLE001 - unknown decision: the skip counts as explained
            log.warning("could not read %s of %s: %s", SKIPMIXIN_KEY, task_id, err)
            return {"followed": []}
        return value if isinstance(value, Mapping) else None

    return dag, decision_of
