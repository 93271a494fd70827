"""The ``sim_to_real_field_data`` DAG as parsed and serialized: its hourly schedule, its one task with the field
dataset asset as inlet and outlet, and its threshold param refused at trigger time when it is not an integer >= 1.
Its runs under dag.test(): tests/orchestration/operators/test_field_dataset_dag.py."""

from __future__ import annotations

import pytest

from tests.paths import DAGS


@pytest.fixture(scope="module")
def dag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS / "sim_to_real_field_data.py"))
    assert bag.import_errors == {}
    return bag.dags["sim_to_real_field_data"]


@pytest.fixture(scope="module")
def serialized(dag):
    from airflow.serialization.serialized_objects import DagSerialization

    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


def test_hourly_one_run_at_a_time_no_catchup(dag):
    from airflow.sdk import CronTriggerTimetable

    assert isinstance(dag.timetable, CronTriggerTimetable)
    assert dag.timetable.expression == "17 * * * *" and str(dag.timetable.timezone) == "UTC"
    assert dag.catchup is False and dag.max_active_runs == 1


def test_one_short_task_reads_and_announces_the_field_dataset_asset(dag, serialized):
    from sim2real.orchestration.assets import FIELD_DATASET_ASSET
    from sim2real.orchestration.operators.field_dataset import FieldDatasetPublishOperator

    (task,) = dag.tasks
    assert isinstance(task, FieldDatasetPublishOperator) and task.task_id == "publish_field_dataset"
    assert task.inlets == [FIELD_DATASET_ASSET] and task.outlets == [FIELD_DATASET_ASSET]
    assert not getattr(task, "deferrable", False) and task.execution_timeout.total_seconds() <= 30 * 60
    assert [a.name for a in serialized.get_task("publish_field_dataset").outlets] == [FIELD_DATASET_ASSET.name]


@pytest.mark.parametrize("conf, message", [
    ({"min_new_episodes": 0}, "0 is less than the minimum of 1"),
    ({"min_new_episodes": -3}, "-3 is less than the minimum of 1"),
    ({"min_new_episodes": "ten"}, "min_new_episodes"),
    ({"min_new_episodes": 2.5}, "min_new_episodes"),
])
def test_a_bad_threshold_is_refused_before_a_run_exists(serialized, conf, message):
    """The check the API server runs on a trigger (SerializedDAG.create_dagrun → params.validate)."""
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match=message):
        serialized.params.deep_merge(conf).validate()


def test_the_threshold_defaults_to_the_environment_configs(serialized):
    from sim2real.orchestration.params import PARAM_SCHEMA_DIALECT

    assert serialized.params.deep_merge({}).validate() == {"min_new_episodes": None}
    assert serialized.params.deep_merge({"min_new_episodes": 5}).validate() == {"min_new_episodes": 5}
    assert all(p.schema.get("$schema") == PARAM_SCHEMA_DIALECT for p in serialized.params.values())
