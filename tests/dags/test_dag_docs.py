"""The DAG documents itself in the UI: every stage (task group or top-level stage task) has doc_md."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim2real.contract import task_ids as ids

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(scope="module")
def serialized_dag():
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    bag = DagBag(dag_folder=str(DAGS / "sim_to_real.py"))
    assert bag.import_errors == {}
    return DagSerialization.from_dict(DagSerialization.to_dict(bag.dags["sim_to_real"]))


GROUPS = ("build", "preflight", "train", "hyperpod", "checkpoint", "evaluate", "vla", "deploy")
STAGE_TASKS = (ids.PREPARE_RUN, ids.BUILD_IMAGE, ids.BATCH_CHECK_CAPACITY, ids.BATCH_TRAIN_POLICY,
               ids.WAIT_FOR_CHECKPOINT, ids.RUN_EVALUATION, "quality_gate",
               ids.FINETUNE_GROOT, ids.WAIT_FOR_APPROVAL, ids.DEPLOY_TO_ROBOTS, ids.WRITE_LINEAGE,
               ids.TRAINING_BACKEND, ids.HYPERPOD_CHECK_CAPACITY, ids.HYPERPOD_SCALE_UP, ids.HYPERPOD_WAIT_FOR_NODES,
               ids.HYPERPOD_TRAIN_POLICY,
               ids.HYPERPOD_SCALE_DOWN, ids.TRAINING_JOB)


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
