"""Extra links at the end of a task (Airflow 3's ``finalize`` asks each link of the task for its URL): a link whose
running task persisted nothing (an untracked run's MLflow run, a picture that was not drawn) answers "" without
asking the API server for the XCom, which the Task SDK would log as ``[error] XCom not found``; a persisted one is
looked up as before."""

from __future__ import annotations

import datetime as dt
import uuid
from types import SimpleNamespace

import pytest

from sim2real.orchestration.links.mlflow import MlflowRunLink
from sim2real.orchestration.links.s3 import S3RoundSuccessLink


class RecordingComms:
    """The task runner's supervisor comms: records each request, answers a GetXCom with what was pushed."""

    def __init__(self):
        self.sent, self.store = [], {}

    def send(self, msg):
        from airflow.sdk.execution_time.comms import XComResult

        self.sent.append(msg)
        name = type(msg).__name__
        if name == "SetXCom":
            self.store[msg.key] = msg.value
            return None
        if name == "GetXCom":
            return XComResult(key=msg.key, value=self.store.get(msg.key))
        raise AssertionError(f"unexpected request {name}")


@pytest.fixture
def running(monkeypatch):
    """A RuntimeTaskInstance of a task that ran in this process (not resumed from a deferral)."""
    from airflow.sdk import BaseOperator
    from airflow.sdk.execution_time import task_runner

    comms = RecordingComms()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", comms, raising=False)
    task = BaseOperator(task_id="write_lineage")
    ti = task_runner.RuntimeTaskInstance.model_construct(
        id=uuid.uuid4(), task_id="write_lineage", dag_id="sim_to_real", run_id="manual__1", try_number=1,
        map_index=-1, task=task, start_date=dt.datetime.now(dt.timezone.utc),
        _ti_context_from_server=SimpleNamespace(next_method=None))
    return ti, comms


def gets(comms):
    return [m.key for m in comms.sent if type(m).__name__ == "GetXCom"]


def test_links_the_task_did_not_persist_are_not_looked_up(running):
    ti, comms = running
    assert MlflowRunLink.persist(ti, {"enabled": False, "reason": "no tracking_uri"}) is None
    assert MlflowRunLink().get_link(ti.task, ti_key=ti) == ""
    assert S3RoundSuccessLink().get_link(ti.task, ti_key=ti) == ""  # max_rounds 1: never drawn
    assert gets(comms) == []  # no lookup: nothing for the Task SDK to log as "XCom not found"


def test_links_the_task_persisted_are_read_back(running):
    ti, comms = running
    tracking = {"enabled": True, "ui_url": "http://127.0.0.1:5000", "experiment_id": "1", "parent_run_id": "abc"}
    url = MlflowRunLink.persist(ti, tracking)
    assert url and MlflowRunLink().get_link(ti.task, ti_key=ti) == url
    plan = {"region": "us-east-1", "bucket": "b"}
    S3RoundSuccessLink.persist_for_object(ti, plan, "runs/k/report/round_success.png")
    assert "round_success.png" in S3RoundSuccessLink().get_link(ti.task, ti_key=ti)
    assert gets(comms) == [MlflowRunLink.key, S3RoundSuccessLink.key]


def test_a_task_resumed_from_a_deferral_or_another_caller_still_looks_up(running):
    ti, comms = running
    resumed = ti.model_copy(update={"_ti_context_from_server": SimpleNamespace(next_method="execute_complete")})
    MlflowRunLink().get_link(ti.task, ti_key=resumed)
    key = SimpleNamespace(dag_id="sim_to_real", task_id="write_lineage", run_id="manual__1", map_index=-1)
    MlflowRunLink().get_link(ti.task, ti_key=key)  # not the running task instance: cannot know, so look
    assert gets(comms) == [MlflowRunLink.key, MlflowRunLink.key]
