"""The run note under a real Airflow (``airflow standalone``: scheduler, LocalExecutor worker, API server), the
``make ui`` stack: a task writes its run's note through the REST API named by the stack's
``sim2real_airflow_api`` connection (the supervised task has no database access), and the note is what the
REST API (and so the run's Note panel) shows; a person's "Mark Dag Run as failed" with a note afterwards updates
that one note row (no duplicate insert, no 409).

One small DAG calling the same writer the report uses keeps this to one short run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from sim2real.dev.ui import UiStack, free_port

from tests.dev.ui import STOP_GRACE_S

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

DAG_ID = "run_note_probe"
DAG_FILE = '''
import datetime as dt
from airflow.sdk import DAG, task

with DAG("run_note_probe", schedule=None, start_date=dt.datetime(2026, 1, 1), catchup=False):
    @task
    def write_note(**context):
        from sim2real.orchestration.run_note import set_run_note
        run = context["dag_run"]
        out = set_run_note(dag_id=run.dag_id, run_id=run.run_id, note="**Round 2 of 2** written by the task",
                           env={"sandbox": True})
        if not out["set"]:
            raise RuntimeError(out["error"])
        return out
    write_note()
'''


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[UiStack]:
    home = tmp_path_factory.mktemp("note-stack")
    dags = home / "dags"
    dags.mkdir()
    (dags / f"{DAG_ID}.py").write_text(DAG_FILE)
    # a busy 2-core machine answers the worker's Execution API calls slowly: more than Airflow's 5 s default
    ui = UiStack(home, api_port=free_port(), poll_seconds=1, mlflow=False, dags_folder=dags, dag_id=DAG_ID,
                 parallelism=2, extra_env={"AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60"})
    ui.start(timeout=400)
    yield ui
    ui.stop(airflow_grace=STOP_GRACE_S)


def get(stack: UiStack, path: str) -> dict:
    """GET through a busy API server (one worker on a loaded machine): a timed-out read is asked again."""
    for _ in range(5):
        try:
            return stack.api("GET", path, timeout=60)
        except (TimeoutError, OSError) as err:  # urllib wraps some timeouts in URLError (an OSError)
            last = err
    raise last


def test_a_task_writes_its_run_note_through_the_rest_api_and_mark_failed_updates_it(stack):
    run = stack.api("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": None}, timeout=120)
    path = f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run['dag_run_id'], safe='')}"
    deadline = time.monotonic() + 240
    while (got := get(stack, path))["state"] not in ("success", "failed"):
        assert time.monotonic() < deadline, f"the run did not end in 240 s:\n{stack.logs_tail()}"
        time.sleep(1)
    if got["state"] != "success":
        log = stack.api("GET", f"{path}/taskInstances/write_note/logs/1?full_content=true", timeout=60)
        pytest.fail(f"the run failed; the task's log:\n{json.dumps(log, indent=1)[-6000:]}")
    assert got["note"] == "**Round 2 of 2** written by the task"
    # The UI's "Mark Dag Run as failed" sends the state with the dialog's note: it updates the note row the task
    # wrote (Airflow's patch_dag_run_note), it does not insert a second one.
    marked = stack.api("PATCH", path, {"state": "failed", "note": "stopped by a person"}, timeout=120)
    assert marked["state"] == "failed" and marked["note"] == "stopped by a person"
    assert get(stack, path)["note"] == "stopped by a person"
