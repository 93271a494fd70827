"""The bench's DAG-parse rows name the task counts the parsed files really hold (a fixed count in the row's
label once said 19 for a DAG of 40 tasks)."""

from __future__ import annotations

import pytest

from sim2real.dev.bench import REPO_ROOT, dag_parse_seconds, processor_parse_seconds


@pytest.mark.parametrize("relative", ["dags/sim_to_real.py", "bench/provider_dag.py"])
def test_dag_parse_counts_the_parsed_tasks(relative):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO_ROOT / relative))
    assert not bag.import_errors
    expected = sum(len(dag.tasks) for dag in bag.dags.values())
    out = dag_parse_seconds(REPO_ROOT / relative, repeats=1)
    assert out["tasks"] == expected > 0
    assert out["repeats"] == 1 and out["median_s"] == out["min_s"] > 0
    assert out["serialize_median_s"] > 0  # the parsed DAGs serialized after the parse


def test_processor_parse_rows_measure_the_parse_alone_quiet_and_beside_busy_processes():
    quiet = processor_parse_seconds(REPO_ROOT / "dags" / "sim_to_real_sweeper.py", repeats=1)
    busy = processor_parse_seconds(REPO_ROOT / "dags" / "sim_to_real_sweeper.py", repeats=1, busy=1)
    assert quiet["busy"] == 0 and busy["busy"] == 1  # one CPU-bound process beside it (2 cores: the other runs tests)
    assert 0 < quiet["median_s"] == quiet["min_s"] and busy["median_s"] > 0
