"""DAG integrity: every DAG file imports cleanly, fast, with no AWS call or Variable lookup at parse time;
every task has a timeout and retries; deferrable operators defer; bad params are refused before a run."""

from __future__ import annotations

import datetime as dt
import socket

import pytest

from sim2real.contract import task_ids as ids

from tests.paths import DAGS


@pytest.fixture(scope="module")
def dagbag():
    """Parse dags/ the way the dag-processor does, with every network call and Variable lookup forbidden."""
    import botocore.client
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk import Variable

    calls = []

    def forbidden(*args, **kwargs):
        calls.append(args[:2])
        raise AssertionError("network / AWS / Variable access at DAG parse time")

    mp = pytest.MonkeyPatch()
    mp.setattr(botocore.client.BaseClient, "_make_api_call", forbidden)
    mp.setattr(socket.socket, "connect", forbidden)
    mp.setattr(Variable, "get", forbidden)
    try:
        bag = DagBag(dag_folder=str(DAGS))
    finally:
        mp.undo()
    bag.forbidden_calls = calls
    return bag


@pytest.fixture(scope="module")
def serialized_dag(dagbag):
    """The DAG as the scheduler and API server see it (serialized round trip)."""
    from airflow.serialization.serialized_objects import DagSerialization

    return DagSerialization.from_dict(DagSerialization.to_dict(dagbag.dags["sim_to_real"]))


def test_dag_serializes_with_its_extra_links(serialized_dag):
    task = serialized_dag.get_task(ids.BATCH_TRAIN_POLICY)
    assert task.operator_extra_links, "extra links lost in serialization (plugin not registered?)"


def test_dag_files_import_without_errors_or_io(dagbag):
    assert dagbag.import_errors == {}
    assert dagbag.forbidden_calls == []
    assert "sim_to_real" in dagbag.dag_ids


def test_every_task_has_a_timeout_and_retries(dagbag):
    for dag in dagbag.dags.values():
        for task in dag.tasks:
            assert isinstance(task.execution_timeout, dt.timedelta), f"{dag.dag_id}.{task.task_id} has no timeout"
            assert task.retries is not None, f"{dag.dag_id}.{task.task_id} has no retries setting"


def test_long_waits_are_deferrable(dagbag):
    dag = dagbag.dags["sim_to_real"]
    for task_id in (ids.BUILD_IMAGE, ids.BATCH_TRAIN_POLICY, ids.WAIT_FOR_CHECKPOINT,
                    ids.HYPERPOD_WAIT_FOR_NODES, ids.HYPERPOD_TRAIN_POLICY, ids.HYPERPOD_SCALE_DOWN,
                    ids.RUN_EVALUATION, ids.FINETUNE_GROOT, ids.WAIT_FOR_APPROVAL,
                    ids.DEPLOY_TO_ROBOTS):
        assert dag.get_task(task_id).deferrable is True, task_id


def test_stages_match_the_design(dagbag):
    dag = dagbag.dags["sim_to_real"]
    present = set(dag.task_ids)
    for expected in (ids.PREPARE_RUN, ids.BUILD_IMAGE, ids.BATCH_CHECK_CAPACITY, ids.BATCH_TRAIN_POLICY,
                     ids.WAIT_FOR_CHECKPOINT, ids.RUN_EVALUATION, ids.READ_EVAL_REPORT,
                     ids.STOP_WORKSTATION, ids.QUALITY_GATE, ids.UPSERT_PIPELINE, ids.FINETUNE_GROOT,
                     ids.WAIT_FOR_APPROVAL, ids.DEPLOY_TO_ROBOTS, ids.WRITE_LINEAGE, ids.TRAINING_BACKEND,
                     ids.HYPERPOD_CHECK_CAPACITY, ids.HYPERPOD_SCALE_UP, ids.HYPERPOD_WAIT_FOR_NODES, ids.HYPERPOD_TRAIN_POLICY,
                     ids.HYPERPOD_SCALE_DOWN):
        assert expected in present, expected
    # The workstation is stopped whatever the evaluation did; training waits for the capacity check.
    assert dag.get_task(ids.STOP_WORKSTATION).trigger_rule == "all_done"
    assert ids.RUN_EVALUATION in dag.get_task(ids.STOP_WORKSTATION).upstream_task_ids
    assert ids.BATCH_CHECK_CAPACITY in dag.get_task(ids.BATCH_TRAIN_POLICY).upstream_task_ids
    # One branch picks the backend before any capacity check; each path checks capacity before spending.
    assert dag.get_task("training_backend").upstream_task_ids == {"prepare_run", ids.CHECK_RESOURCES}
    # Every named resource is checked before the build and before either backend (no spend before it).
    assert dag.get_task(ids.CHECK_RESOURCES).upstream_task_ids == {"prepare_run"}
    assert ids.CHECK_RESOURCES in dag.get_task(ids.BUILD_IMAGE).upstream_task_ids
    # The fine-tune includes the field dataset version check_resources checked (its XCom), not one resolved later.
    assert ids.CHECK_RESOURCES in dag.get_task(ids.FIELD_DATASET).upstream_task_ids
    assert dag.get_task("training_backend").downstream_task_ids == {"preflight.check_capacity",
                                                                   ids.HYPERPOD_CHECK_CAPACITY,
                                                                   ids.HYPERPOD_EKS_CHECK_CAPACITY,
                                                                   ids.SWEEP_CHECK_CAPACITY}
    # HyperPod on EKS: the team queue's capacity is checked before the job is created (one job: through the
    # submission branch; a sweep: before each candidate's own job).
    assert ids.HYPERPOD_EKS_CHECK_CAPACITY in dag.get_task(ids.HYPERPOD_EKS_SUBMISSION).upstream_task_ids
    assert dag.get_task(ids.HYPERPOD_EKS_SUBMISSION).downstream_task_ids == {ids.HYPERPOD_EKS_TRAIN_POLICY}
    assert ids.HYPERPOD_EKS_SUBMISSION in dag.get_task(ids.HYPERPOD_EKS_TRAIN_POLICY).upstream_task_ids
    assert ids.HYPERPOD_EKS_CHECK_CAPACITY in dag.get_task(ids.SWEEP_TRAIN_ON_EKS).upstream_task_ids
    assert {ids.SWEEP_TRAIN_POLICY, ids.SWEEP_TRAIN_ON_SLURM, ids.SWEEP_TRAIN_ON_EKS} <= \
        dag.get_task(ids.SWEEP_WAIT_FOR_CHECKPOINT).upstream_task_ids
    # A sweep checks the capacity of its parallel jobs before any of its candidates is submitted.
    assert ids.SWEEP_CHECK_CAPACITY in dag.get_task(ids.SWEEP_CANDIDATES).upstream_task_ids
    assert ids.SWEEP_CANDIDATES in dag.get_task(ids.SWEEP_WAIT_FOR_SLOT).upstream_task_ids
    assert ids.HYPERPOD_CHECK_CAPACITY in dag.get_task(ids.HYPERPOD_SCALE_UP).upstream_task_ids
    assert ids.HYPERPOD_SCALE_UP in dag.get_task(ids.HYPERPOD_WAIT_FOR_NODES).upstream_task_ids
    # After the nodes: one Slurm job, or a sweep's job array (its candidates each wait on their array task).
    assert dag.get_task(ids.HYPERPOD_SUBMISSION).upstream_task_ids >= {ids.HYPERPOD_WAIT_FOR_NODES}
    assert dag.get_task(ids.HYPERPOD_SUBMISSION).downstream_task_ids == {ids.HYPERPOD_TRAIN_POLICY,
                                                                         ids.HYPERPOD_SWEEP_SCRIPT}
    assert ids.HYPERPOD_SWEEP_SCRIPT in dag.get_task(ids.HYPERPOD_SUBMIT_SWEEP).upstream_task_ids
    # sweep_candidates serves both backends (and is no task between the HyperPod scale-up and its teardown: it would
    # be skipped with the scale-up in a Batch sweep).
    candidates = dag.get_task(ids.SWEEP_CANDIDATES)
    assert candidates.trigger_rule == "none_failed" and ids.HYPERPOD_SCALE_UP not in {
        t.task_id for t in candidates.get_flat_relatives(upstream=True)}
    # Per candidate, the Batch tasks follow the Batch capacity check, the Slurm wait the array's submission.
    assert ids.SWEEP_CHECK_CAPACITY in dag.get_task(ids.SWEEP_WAIT_FOR_SLOT).upstream_task_ids
    assert ids.HYPERPOD_SUBMIT_SWEEP in dag.get_task(ids.SWEEP_TRAIN_ON_SLURM).upstream_task_ids
    assert {ids.SWEEP_TRAIN_POLICY, ids.SWEEP_TRAIN_ON_SLURM} <= dag.get_task(ids.SWEEP_WAIT_FOR_CHECKPOINT).upstream_task_ids
    # HyperPod: the scale-down is the scale-up's teardown (runs whatever the Slurm job did). The setup only
    # sends UpdateCluster (the wait is a task of its own): nodes that fail to come up still get scaled down.
    scale_up, scale_down = dag.get_task(ids.HYPERPOD_SCALE_UP), dag.get_task(ids.HYPERPOD_SCALE_DOWN)
    assert scale_up.is_setup and scale_down.is_teardown
    assert scale_up.wait_for_completion is False and dag.get_task(ids.HYPERPOD_WAIT_FOR_NODES).wait_for_completion
    assert scale_down.on_failure_fail_dagrun is True  # nodes left running must fail the run
    assert {"hyperpod.scale_up", ids.HYPERPOD_TRAIN_POLICY} <= scale_down.upstream_task_ids
    # A HyperPod sweep keeps the nodes until every candidate's array task has ended.
    assert {ids.HYPERPOD_SUBMIT_SWEEP, ids.SWEEP_TRAIN_ON_SLURM} <= scale_down.upstream_task_ids
    # The checkpoint sensor runs after whichever backend trained (the other one is skipped).
    join = dag.get_task(ids.TRAINING_JOB)
    assert join.upstream_task_ids == {"train.train_policy", ids.HYPERPOD_TRAIN_POLICY, ids.HYPERPOD_EKS_TRAIN_POLICY,
                                     ids.SWEEP_PICK_BEST}
    assert join.trigger_rule == "none_failed_min_one_success"
    assert ids.TRAINING_JOB in dag.get_task(ids.WAIT_FOR_CHECKPOINT).upstream_task_ids
    # The report runs whatever failed upstream, without masking the failure in the run state.
    assert dag.get_task(ids.WRITE_LINEAGE).is_teardown and dag.get_task(ids.PREPARE_RUN).is_setup
    assert dag.max_active_runs == 1 and dag.catchup is False
    # The release stages depend on the quality gate; the gate on the evaluation.
    assert "quality_gate" in dag.get_task(ids.VLA_ENABLED).upstream_task_ids
    assert ids.READ_EVAL_REPORT in dag.get_task("quality_gate").upstream_task_ids


@pytest.mark.parametrize("conf, message", [
    ({"num_nodes": 0}, "num_nodes"),
    ({"num_nodes": 100}, "num_nodes"),
    ({"task": "CartPole-v1"}, "task"),
    ({"min_success_rate": 1.5}, "min_success_rate"),
    ({"eval_episodes": "twenty"}, "eval_episodes"),
    ({"training_backend": "slurm"}, "training_backend"),
    ({"eval_episodes": -5}, "eval_episodes: -5 is less than the minimum of 1"),
    ({"training_timeout_hours": 0}, "training_timeout_hours: 0 is less than or equal to the minimum of 0"),
])
def test_bad_params_are_refused_before_a_run_exists(serialized_dag, conf, message):
    """The same check the API server runs on a trigger (SerializedDAG.create_dagrun → params.validate)."""
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match=message):
        serialized_dag.params.deep_merge(conf).validate()


def test_the_trigger_form_gets_no_bounds_to_clamp_to(serialized_dag):
    """The form's number widget clamps a typed value to the schema's top-level minimum/maximum (-5 episodes
    became 1): the bounds sit in allOf, where Airflow's validation still refuses the value (test above)."""
    from sim2real.orchestration.params import param_bounds

    bounded = {k: p for k, p in serialized_dag.params.items() if param_bounds(p.schema)}
    assert {"num_nodes", "eval_episodes", "min_success_rate", "max_budget_usd"} <= set(bounded)
    for key, spec in bounded.items():
        assert not {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} & set(spec.schema), key
        assert "Allowed: " in (spec.description or ""), key


def test_unknown_conf_keys_pass_airflow_and_are_refused_by_the_first_task(serialized_dag):
    """Airflow 3.3.1 validates each param's value but adds unknown conf keys as schema-less params (no error at
    run creation): prepare_run refuses them first, with the closest field names."""
    from sim2real.orchestration.params import ParamRuleError, check_conf_keys

    conf = {"num_node": 4, "eval_epsiodes": 7}
    serialized_dag.params.deep_merge(conf).validate()  # accepted by Airflow
    with pytest.raises(ParamRuleError) as err:
        check_conf_keys(conf, serialized_dag.params)
    assert "'num_node' is not a field of the trigger form (did you mean 'num_nodes'" in str(err.value)
    assert "'eval_epsiodes' is not a field of the trigger form (did you mean 'eval_episodes'" in str(err.value)
    check_conf_keys({"num_nodes": 2}, serialized_dag.params)


def test_the_release_dag_refuses_an_unknown_conf_key_before_planning(dagbag, monkeypatch):
    """A typo'd ``thing_group_nme`` would otherwise deploy to the default thing group: prepare_release fails
    (no retry) naming the key and the field it resembles, before the release is planned."""
    import types

    import sim2real.orchestration.release
    from airflow.providers.common.compat.sdk import AirflowFailException

    planned = []
    monkeypatch.setattr(sim2real.orchestration.release, "plan_release", lambda **kwargs: planned.append(kwargs))
    dag = dagbag.dags["sim_to_real_release"]
    dag_run = types.SimpleNamespace(conf={"thing_group_nme": "robots-canary"}, dag_id=dag.dag_id,
                                    run_id="manual__2026-12-01T00:00:00+00:00")
    with pytest.raises(AirflowFailException) as err:
        dag.get_task("prepare_release").python_callable(params={}, dag_run=dag_run, dag=dag)
    assert "'thing_group_nme' is not a field of the trigger form (did you mean 'thing_group_name'" in str(err.value)
    assert planned == []


def test_default_params_are_valid(serialized_dag):
    resolved = serialized_dag.params.deep_merge({}).validate()
    assert resolved["num_nodes"] == 1 and resolved["training_backend"] == "batch"


def test_hyperpod_backend_is_offered(serialized_dag):
    resolved = serialized_dag.params.deep_merge({"training_backend": "hyperpod"}).validate()
    assert resolved["training_backend"] == "hyperpod"


def test_aws_clients_retry_throttling_with_adaptive_backoff(dagbag):
    from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
    from airflow.providers.amazon.aws.sensors.base_aws import AwsBaseSensor

    dag = dagbag.dags["sim_to_real"]
    aws_tasks = [t for t in dag.tasks if isinstance(t, (AwsBaseOperator, AwsBaseSensor))]
    assert len(aws_tasks) >= 9
    for task in aws_tasks:
        assert task.botocore_config == {"retries": {"mode": "adaptive", "max_attempts": 10}}, task.task_id
