"""The DAG as a product: notifications wired to the right events, links, budget, schedule."""

from __future__ import annotations

from pathlib import Path

import pytest

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(scope="module")
def dag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS / "sim_to_real.py"))
    assert bag.import_errors == {}
    return bag.dags["sim_to_real"]


def _events(callbacks) -> list[str]:
    from sim2real.notifications import Sim2RealSnsNotifier

    callbacks = callbacks if isinstance(callbacks, list) else [callbacks]
    return [cb.event for cb in callbacks if isinstance(cb, Sim2RealSnsNotifier)]


def test_notifications_are_wired_to_the_four_events(dag):
    assert _events(dag.on_failure_callback) == ["run_failed"]
    assert _events(dag.get_task("quality_gate").on_failure_callback) == ["gate_failed"]
    assert _events(dag.get_task("vla.wait_for_approval").on_execute_callback) == ["approval_needed"]
    assert _events(dag.get_task("deploy.deploy_to_robots").on_success_callback) == ["deployed"]
