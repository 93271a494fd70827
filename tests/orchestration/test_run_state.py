"""A run's final state is true: a failed stage, a run marked failed, or a report that cannot be written
never ends as success; the lineage's task durations are schema-valid for cleared tasks.

The run state is Airflow's own computation (``DagRun._tis_for_dagrun_state``: the effective leaves, with
teardowns counted only when ``on_failure_fail_dagrun``) over the real, serialized ``sim_to_real`` and
``sim_to_real_release`` DAGs.
"""

from __future__ import annotations

from collections import namedtuple
from types import SimpleNamespace

import pytest

from sim2real.contract import task_ids as ids
from sim2real.orchestration.run_state import check_run_outcome, failed_tasks

from tests.paths import DAGS
TI = namedtuple("TI", "task_id state")


def _serialized(name: str, dag_id: str):
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    bag = DagBag(dag_folder=str(DAGS / name))
    assert bag.import_errors == {}
    return DagSerialization.from_dict(DagSerialization.to_dict(bag.dags[dag_id]))


@pytest.fixture(scope="module")
def main_dag():
    return _serialized("sim_to_real.py", "sim_to_real")


@pytest.fixture(scope="module")
def release_dag():
    return _serialized("sim_to_real_release.py", "sim_to_real_release")


def run_state(dag, states: dict[str, str]) -> str:
    """What ``DagRun.update_state`` decides once every task is finished (its leaf rule, verbatim)."""
    from airflow.models.dagrun import DagRun

    tis = [TI(t, states[t]) for t in dag.task_ids]
    leaves = DagRun._tis_for_dagrun_state(None, dag=dag, tis=tis)  # uses no instance state
    if any(ti.state in ("failed", "upstream_failed") for ti in leaves):
        return "failed"
    assert all(ti.state in ("success", "skipped") for ti in leaves), [(t.task_id, t.state) for t in leaves]
    return "success"


def mark_failed(dag, states: dict[str, str | None]) -> dict[str, str | None]:
    """What marking the run failed from the UI / REST API does to its tasks (Airflow 3.3
    ``mark_tasks._set_dag_run_terminal_state``): running → failed, unfinished → skipped, teardowns untouched
    (and the run's state is not written while a teardown is pending)."""
    out = dict(states)
    for task_id, state in states.items():
        if dag.get_task(task_id).is_teardown:
            continue
        if state in ("running", "deferred", "up_for_reschedule"):
            out[task_id] = "failed"
        elif state not in ("success", "failed", "skipped", "upstream_failed", "removed"):
            out[task_id] = "skipped"
    return out


def finish_teardowns(dag, states: dict[str, str | None], outcome_task: str | None) -> dict[str, str]:
    """The scheduler then runs the teardowns: the report succeeds; run_outcome reads the others' states."""
    out = dict(states)
    for task_id in dag.task_ids:
        if dag.get_task(task_id).is_teardown and out.get(task_id) is None and task_id != outcome_task:
            out[task_id] = "success" if task_id in (ids.WRITE_LINEAGE, "write_release_record") else "skipped"
    if outcome_task in dag.task_ids:
        crumbs = [{"task_id": t, "map_index": -1, "state": s} for t, s in out.items() if t != outcome_task]
        try:
            check_run_outcome(dag.dag_id, "r", own_task_id=outcome_task, breadcrumbs=crumbs)
            out[outcome_task] = "success"
        except Exception:  # noqa: BLE001 - AirflowFailException: the task fails
            out[outcome_task] = "failed"
    return out  # type: ignore[return-value]


def test_run_marked_failed_while_training_ends_failed(main_dag):
    states = {t: None for t in main_dag.task_ids}
    states.update({"prepare_run": "success", "training_backend": "success", ids.BUILD_IMAGE: "success",
                   ids.BATCH_CHECK_CAPACITY: "success", ids.BATCH_TRAIN_POLICY: "deferred"})
    for task_id in main_dag.task_ids:
        if task_id in ids.HYPERPOD:
            states[task_id] = "skipped"
    after = finish_teardowns(main_dag, mark_failed(main_dag, states), ids.RUN_OUTCOME)
    assert after[ids.BATCH_TRAIN_POLICY] == "failed" and after[ids.WRITE_LINEAGE] == "success"
    assert after[ids.RUN_OUTCOME] == "failed"
    assert run_state(main_dag, after) == "failed"


def test_failed_stage_with_report_written_ends_failed(main_dag):
    states = {t: "success" for t in main_dag.task_ids}
    states.update({t: "skipped" for t in main_dag.task_ids if t in ids.HYPERPOD})
    states[ids.WAIT_FOR_APPROVAL] = "failed"
    for task_id in (ids.DEPLOY_ENABLED, ids.DEPLOYMENT_COMPONENTS, ids.DEPLOY_TO_ROBOTS):
        states[task_id] = "upstream_failed"
    states[ids.RUN_OUTCOME] = None
    after = finish_teardowns(main_dag, states, ids.RUN_OUTCOME)
    assert run_state(main_dag, after) == "failed"


def test_report_that_cannot_be_written_fails_the_run(main_dag, release_dag):
    for dag, report in ((main_dag, ids.WRITE_LINEAGE), (release_dag, "write_release_record")):
        states = {t: "success" for t in dag.task_ids}
        states.update({t: "skipped" for t in dag.task_ids if t in ids.HYPERPOD})
        states[report] = "failed"
        assert dag.get_task(report).is_teardown and dag.get_task(report).on_failure_fail_dagrun
        states[ids.RUN_OUTCOME] = None
        assert run_state(dag, finish_teardowns(dag, states, ids.RUN_OUTCOME)) == "failed", dag.dag_id


def test_a_clean_run_still_succeeds(main_dag, release_dag):
    for dag in (main_dag, release_dag):
        states = {t: "success" for t in dag.task_ids}
        states.update({t: "skipped" for t in dag.task_ids if t in ids.HYPERPOD})
        states[ids.RUN_OUTCOME] = None
        after = finish_teardowns(dag, states, ids.RUN_OUTCOME)
        assert after[ids.RUN_OUTCOME] == "success" and run_state(dag, after) == "success"


def test_run_outcome_is_the_last_teardown(main_dag, release_dag):
    for dag, report in ((main_dag, ids.WRITE_LINEAGE), (release_dag, "write_release_record")):
        outcome = dag.get_task(ids.RUN_OUTCOME)
        assert outcome.is_teardown and outcome.on_failure_fail_dagrun and outcome.retries == 0
        assert report in outcome.upstream_task_ids and not outcome.downstream_task_ids
    assert ids.HYPERPOD_SCALE_DOWN in main_dag.get_task(ids.RUN_OUTCOME).upstream_task_ids


def test_failed_tasks_and_message():
    crumbs = [{"task_id": "a", "map_index": -1, "state": "success"},
              {"task_id": "b", "map_index": -1, "state": "failed"},
              {"task_id": "c", "map_index": 2, "state": "upstream_failed"},
              {"task_id": ids.RUN_OUTCOME, "map_index": -1, "state": "failed"}]
    assert failed_tasks(crumbs, exclude=[ids.RUN_OUTCOME]) == {"b": "failed", "c[2]": "upstream_failed"}
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match=r"failed: b; not run because of them \(upstream_failed\): c\[2\]"):
        check_run_outcome("d", "r", own_task_id=ids.RUN_OUTCOME, breadcrumbs=crumbs)
    assert check_run_outcome("d", "r", own_task_id="x", breadcrumbs=crumbs[:1]) == {"state": "success", "tasks": 1}


@pytest.mark.parametrize("raw, expected", [(12.5, 12.5), (0, 0.0), (-61.77, None), (None, None), ("x", None)])
def test_task_duration_of_a_cleared_task_is_null(raw, expected):
    from sim2real.orchestration.report import task_duration_s

    assert task_duration_s(raw) == expected


def test_lineage_of_a_cleared_task_matches_the_schema(monkeypatch):
    """The breadcrumb of a cleared and rerun task (duration -61.77) gives a schema-valid lineage."""
    import sys

    from sim2real.orchestration import report
    from sim2real.orchestration.lineage import build_lineage, lineage_errors

    fake = SimpleNamespace(RuntimeTaskInstance=SimpleNamespace(get_task_breadcrumbs=lambda dag_id, run_id: [
        {"task_id": ids.BATCH_TRAIN_POLICY, "map_index": -1, "state": "success", "duration": -61.77},
        {"task_id": ids.PREPARE_RUN, "map_index": -1, "state": "success", "duration": 1.2}]))
    monkeypatch.setitem(sys.modules, "airflow.sdk.execution_time.task_runner", fake)
    states = report.collect_task_states("sim_to_real", "r")
    assert states[ids.BATCH_TRAIN_POLICY] == {"state": "success", "duration_s": None}
    lineage = build_lineage(run_key="k-00000000", dag_id="sim_to_real", run_id="r", params={}, task_states=states)
    assert lineage_errors(lineage) == []


def test_each_map_index_of_a_mapped_task_keeps_its_own_state(monkeypatch):
    """A sweep whose c0 failed and c1 succeeded: the lineage's tasks say so per candidate (``task_id[i]``), the
    run note's stage table takes the worst, and tasks that are not mapped keep their plain task id."""
    import sys

    from sim2real.orchestration import report
    from sim2real.orchestration.lineage import build_lineage, lineage_errors
    from sim2real.orchestration.run_note import stage_rows

    fake = SimpleNamespace(RuntimeTaskInstance=SimpleNamespace(get_task_breadcrumbs=lambda dag_id, run_id: [
        {"task_id": ids.SWEEP_TRAIN_POLICY, "map_index": 0, "state": "failed", "duration": 30.0},
        {"task_id": ids.SWEEP_TRAIN_POLICY, "map_index": 1, "state": "success", "duration": 40.0},
        {"task_id": ids.SWEEP_PICK_BEST, "map_index": -1, "state": "upstream_failed", "duration": None},
        {"task_id": ids.PREPARE_RUN, "map_index": -1, "state": "success", "duration": 1.0}]))
    monkeypatch.setitem(sys.modules, "airflow.sdk.execution_time.task_runner", fake)
    states = report.collect_task_states("sim_to_real", "r")
    assert states == {f"{ids.SWEEP_TRAIN_POLICY}[0]": {"state": "failed", "duration_s": 30.0},
                      f"{ids.SWEEP_TRAIN_POLICY}[1]": {"state": "success", "duration_s": 40.0},
                      ids.SWEEP_PICK_BEST: {"state": "upstream_failed", "duration_s": None},
                      ids.PREPARE_RUN: {"state": "success", "duration_s": 1.0}}
    lineage = build_lineage(run_key="k-00000000", dag_id="sim_to_real", run_id="r", params={}, task_states=states)
    assert lineage_errors(lineage) == []
    assert ("training (sweep)", "failed", 70.0) in stage_rows(lineage["tasks"])


def test_failed_sweep_candidates_the_pick_went_around_do_not_fail_the_run():
    """pick_best picked among the survivors: the failed candidate's mapped task instances are not counted (they
    are no leaves: Airflow's own rule never counts them either), every other failure still is."""
    from airflow.sdk.exceptions import AirflowFailException

    from sim2real.orchestration.stages.sweep import forgiven_task_keys

    crumbs = [{"task_id": ids.SWEEP_TRAIN_POLICY, "map_index": 1, "state": "failed"},
              {"task_id": ids.SWEEP_READ_EVAL_REPORT, "map_index": 1, "state": "upstream_failed"},
              {"task_id": ids.SWEEP_TRAIN_POLICY, "map_index": 0, "state": "success"},
              {"task_id": ids.SWEEP_PICK_BEST, "map_index": -1, "state": "success"}]
    forgiven = forgiven_task_keys({"failed": [1]})
    out = check_run_outcome("d", "r", own_task_id=ids.RUN_OUTCOME, breadcrumbs=crumbs, forgiven=forgiven)
    assert out == {"state": "success", "tasks": 4, "forgiven": {f"{ids.SWEEP_TRAIN_POLICY}[1]": "failed",
                                                               f"{ids.SWEEP_READ_EVAL_REPORT}[1]": "upstream_failed"}}
    with pytest.raises(AirflowFailException, match=rf"failed: {ids.SWEEP_TRAIN_POLICY}\[1\]"):  # no pick: counted
        check_run_outcome("d", "r", own_task_id=ids.RUN_OUTCOME, breadcrumbs=crumbs)
    other = [*crumbs, {"task_id": ids.QUALITY_GATE, "map_index": -1, "state": "failed"}]
    with pytest.raises(AirflowFailException, match=rf"failed: {ids.QUALITY_GATE}"):
        check_run_outcome("d", "r", own_task_id=ids.RUN_OUTCOME, breadcrumbs=other, forgiven=forgiven)


# -- a run marked failed while no task was running -----------------------------------------------------------
#: Skipped on a default Batch run, never started (``make demo``'s table): the HyperPod and sweep branches.
SKIPPED_ON_A_DEFAULT_RUN = (
    "hyperpod.check_capacity", "preflight.check_sweep_capacity", "hyperpod.scale_up", "hyperpod.train_policy",
    "hyperpod.wait_for_nodes", "hyperpod.submission", "hyperpod.sweep_script", "hyperpod.submit_sweep",
    "sweep.eval_command", "sweep.read_eval_report", "sweep.run_evaluation", "sweep.submit_training",
    "sweep.train_policy", "sweep.train_on_slurm", "sweep.wait_for_checkpoint", "sweep.wait_for_slot", "pick_best",
    "hyperpod_scale_down", "next_round")
#: Ran and skipped themselves (AirflowSkipException) on a default run.
SKIPPED_ITSELF = ("sweep_candidates", "plan_next_round")
BRANCH_DECISIONS = {ids.TRAINING_BACKEND: {"followed": [ids.BATCH_CHECK_CAPACITY]}}


@pytest.fixture(scope="module")
def sdk_dag():
    """The DAG as the worker running run_outcome has it (its operators, branches included)."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS / "sim_to_real.py"))
    assert bag.import_errors == {}
    return bag.dags["sim_to_real"]


def default_run(dag) -> list[dict]:
    crumbs = []
    for task_id in dag.task_ids:
        if task_id == ids.RUN_OUTCOME:
            continue
        state, duration = ("skipped", 0.0) if task_id in SKIPPED_ON_A_DEFAULT_RUN else \
            ("skipped", 0.2) if task_id in SKIPPED_ITSELF else ("success", 1.0)
        crumbs.append({"task_id": task_id, "map_index": -1, "state": state, "duration": duration})
    return crumbs


def test_a_default_run_s_skips_are_explained(sdk_dag):
    from sim2real.orchestration.run_state import unexplained_skips

    crumbs = default_run(sdk_dag)
    assert unexplained_skips(sdk_dag, crumbs, BRANCH_DECISIONS.get, exclude=(ids.RUN_OUTCOME,)) == []
    outcome = check_run_outcome("sim_to_real", "r", own_task_id=ids.RUN_OUTCOME, breadcrumbs=crumbs, dag=sdk_dag,
                                decision_of=BRANCH_DECISIONS.get)
    assert outcome["state"] == "success"


def test_a_run_marked_failed_between_training_and_evaluation_ends_failed(sdk_dag):
    """Marked failed after training succeeded, before checkpoint.training_job started: Airflow skips every
    unfinished task and fails none (nothing was running). Before: "none of its finished tasks failed", success."""
    from airflow.sdk.exceptions import AirflowFailException

    order = list(sdk_dag.topological_sort())
    after = {t.task_id for t in order[[t.task_id for t in order].index(ids.TRAINING_JOB):]}
    crumbs = []
    for crumb in default_run(sdk_dag):
        task = sdk_dag.get_task(crumb["task_id"])
        if crumb["task_id"] in after and crumb["state"] == "success" and not task.is_teardown:
            crumb = {**crumb, "state": "skipped", "duration": 0.0}
        crumbs.append(crumb)
    with pytest.raises(AirflowFailException, match=r"skipped without a cause in the DAG: checkpoint.training_job"):
        check_run_outcome("sim_to_real", "r", own_task_id=ids.RUN_OUTCOME, breadcrumbs=crumbs, dag=sdk_dag,
                          decision_of=BRANCH_DECISIONS.get)


def test_a_branch_s_skip_is_not_a_person_s(sdk_dag):
    """The same skipped HyperPod task is explained by the branch that followed Batch, and flagged when no branch
    decision says so (the branch followed HyperPod, yet it was skipped before it ran)."""
    from sim2real.orchestration.run_state import unexplained_skips

    crumbs = default_run(sdk_dag)
    hyperpod = {ids.TRAINING_BACKEND: {"followed": [ids.HYPERPOD_CHECK_CAPACITY]}}
    flagged = unexplained_skips(sdk_dag, crumbs, hyperpod.get, exclude=(ids.RUN_OUTCOME,))
    assert ids.HYPERPOD_CHECK_CAPACITY in flagged and ids.BATCH_CHECK_CAPACITY not in flagged


@pytest.mark.parametrize("rule, upstream, skips", [
    ("all_success", ["success", "skipped"], True), ("all_success", ["success", "success"], False),
    ("none_failed_min_one_success", ["success", "skipped"], False),
    ("none_failed_min_one_success", ["skipped", "skipped"], True),
    ("all_done_min_one_success", ["success", "skipped"], True), ("none_failed", ["skipped"], False),
    ("all_done", ["failed"], False), ("one_success", ["skipped", "failed"], True), ("all_failed", ["success"], True),
])
def test_trigger_rules_as_airflow_decides_them(rule, upstream, skips):
    from sim2real.orchestration.run_state import rule_skips

    assert rule_skips(rule, upstream) is skips
