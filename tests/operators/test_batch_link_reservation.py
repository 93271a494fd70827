"""Regression: before the training job is waited on, every link key that is persisted only after the
job ended holds an empty value, so rendering links at deferral finds "no link yet" instead of a missing
XCom (which Airflow logs at error level in a run that then succeeds)."""

from __future__ import annotations

from airflow.providers.amazon.aws.links.logs import CloudWatchEventsLink

from operator_helpers import FakeTI
from sim2real.contract import task_ids as ids
from sim2real.orchestration.links.batch import NODE_LOG_LINKS
from sim2real.orchestration.operators.batch import BatchTrainingOperator


def test_links_persisted_after_the_wait_are_reserved(aws_env):
    op = BatchTrainingOperator(task_id="train_policy", job_name="j", job_queue="q", job_definition="d",
                               image_uri="r@sha256:" + "0" * 64, num_nodes=1, run_key="run-1")
    ti = FakeTI(ids.BATCH_TRAIN_POLICY)
    op._reserve_node_links({"ti": ti})
    expected = {CloudWatchEventsLink().key, *(link.key for link in NODE_LOG_LINKS)}
    assert expected <= set(ti.xcom) and all(ti.xcom[k] is None for k in expected)
