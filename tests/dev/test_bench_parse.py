"""The bench's DAG-parse rows name the task counts the parsed files really hold (a fixed count in the row's
label once said 19 for a DAG of 40 tasks)."""

from __future__ import annotations

import pytest

from sim2real.dev.bench import REPO_ROOT
from sim2real.dev.bench_parse import dag_parse_seconds, processor_parse_seconds


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


def test_processor_parse_rows_measure_the_parse_alone_quiet_and_beside_busy_processes(monkeypatch):
    from sim2real.dev import bench_parse

    quiet = processor_parse_seconds(REPO_ROOT / "dags" / "sim_to_real_sweeper.py", repeats=1)  # a real parse
    assert quiet["busy"] == 0 and 0 < quiet["median_s"] == quiet["min_s"] and quiet["repeats"] == 1

    # the busy row: the same parse (the function above), each one while `busy` CPU-bound processes run beside it
    # (2 cores: the other runs tests); they are gone afterwards
    import psutil

    me = psutil.Process()
    beside: list[list[psutil.Process]] = []
    times = iter([0.3, 0.1, 0.2])

    def parse_beside_hogs(paths):
        hogs = [c for c in me.children() if c.cmdline()[-1:] == ["while True: pass"]]
        beside.append(hogs)
        return {"files": {str(paths[0]): {"parse_s": next(times)}}}

    monkeypatch.setattr(bench_parse, "processor_parse", parse_beside_hogs)
    busy = processor_parse_seconds(REPO_ROOT / "dags" / "sim_to_real_sweeper.py", repeats=3, busy=2)
    assert busy == {"median_s": 0.2, "min_s": 0.1, "repeats": 3, "busy": 2}
    assert [len(hogs) for hogs in beside] == [2, 2, 2] and all(h.is_running() is False for h in beside[0])
