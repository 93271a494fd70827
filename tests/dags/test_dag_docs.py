"""The DAG documents itself in the UI: every stage (task group or top-level stage task) has doc_md."""

from __future__ import annotations

from pathlib import Path

import pytest

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(scope="module")
def serialized_dag():
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    bag = DagBag(dag_folder=str(DAGS / "sim_to_real.py"))
    assert bag.import_errors == {}
    return DagSerialization.from_dict(DagSerialization.to_dict(bag.dags["sim_to_real"]))


GROUPS = ("build", "preflight", "train", "hyperpod", "checkpoint", "evaluate", "vla", "deploy")
STAGE_TASKS = ("prepare_run", "build.build_image", "preflight.check_capacity", "train.train_policy",
               "checkpoint.wait_for_checkpoint", "evaluate.run_evaluation", "quality_gate",
               "vla.finetune_groot", "vla.wait_for_approval", "deploy.deploy_to_robots", "write_lineage",
               "training_backend", "hyperpod.check_capacity", "hyperpod.scale_up", "hyperpod.wait_for_nodes", "hyperpod.train_policy",
               "hyperpod.scale_down", "checkpoint.training_job")


@pytest.mark.parametrize("group_id", GROUPS)
def test_every_task_group_has_doc_md_after_serialization(serialized_dag, group_id):
    group = serialized_dag.task_group_dict[group_id]
    doc = group.doc_md or ""
    assert len(doc) > 150, f"task group {group_id} has no doc_md"
    # what it calls, what it waits for, what it hands on
    assert "Calls" in doc or "call" in doc
    assert "Wait" in doc or "wait" in doc
    assert "Hands on" in doc


@pytest.mark.parametrize("task_id", STAGE_TASKS)
def test_every_stage_task_has_doc_md(serialized_dag, task_id):
    doc = serialized_dag.get_task(task_id).doc_md or ""
    assert "Hands on" in doc, f"{task_id} has no stage doc_md"
