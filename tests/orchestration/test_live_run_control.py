"""What a person does to a run, in a RUNNING Airflow: a stop stops (and only a stop), and the run's state is true.

One stack for the whole file (:class:`tests.orchestration.live_airflow.LiveAirflow`: API server, scheduler, DAG
processor and triggerers as separate processes, LocalExecutor, SQLite) against an in-process sandbox whose Batch
jobs run ``sleep`` until terminated; person actions go through the REST API, as the UI sends them, and the
assertions read the AWS calls the sandbox received (``sandbox.requests``) and the states Airflow reports.

Two tiny DAGs stand in for ``sim_to_real``:

* ``runctl_train``: ``train`` submits a Batch job and waits for it deferred on the project's
  :class:`~sim2real.orchestration.triggers.batch.BatchTrainingJobTrigger` (the shared trigger base under test);
* ``runctl_outcome``: ``prepare`` (setup) → ``evaluate`` (in a pool with no slot: it never starts, as a task the
  scheduler has not reached yet) → ``run_outcome`` (the project's last teardown, ``check_run_outcome``).
"""

from __future__ import annotations

import json
import time
import urllib.error
from collections.abc import Iterator

import pytest

from sim2real.dev.sandbox import Sandbox

from tests.orchestration.live_airflow import LiveAirflow

#: A live Airflow (scheduler, DAG processor, two triggerers, API server) against the sandbox.
pytestmark = pytest.mark.integration

#: The Batch job: runs until terminated (10 minutes at most).
LAUNCHER = 'echo "training (a stand-in that sleeps)"\nsleep 600\n'

TRAIN_DAG = '''
import datetime as dt
import re

from airflow.sdk import DAG, BaseOperator


class TrainOnBatch(BaseOperator):
    """Submit a Batch job and wait for it deferred (the project's trigger)."""

    def execute(self, context):
        from sim2real.orchestration.hooks.batch import BatchTrainingHook
        from sim2real.orchestration.triggers.batch import BatchTrainingJobTrigger

        name = "sim2real-train-" + re.sub("[^A-Za-z0-9_-]", "-", context["run_id"])[:100]
        job_id = BatchTrainingHook(aws_conn_id="aws_default").conn.submit_job(
            jobName=name, jobQueue="sim2real-gpu", jobDefinition="sim2real-train")["jobId"]
        context["ti"].xcom_push(key="job_id", value=job_id)
        self.defer(trigger=BatchTrainingJobTrigger(job_id=job_id, waiter_delay=1, waiter_max_attempts=3600,
                                                   progress=False, runnable_timeout_seconds=None),
                   method_name="execute_complete")

    def execute_complete(self, context, event=None):
        if (event or {}).get("status") != "success":
            raise RuntimeError(f"training ended: {event}")
        return event


with DAG("runctl_train", schedule=None, start_date=dt.datetime(2026, 1, 1), catchup=False, max_active_runs=4):
    TrainOnBatch(task_id="train", retries=0)
'''

OUTCOME_DAG = '''
import datetime as dt

from airflow.sdk import DAG, task

with DAG("runctl_outcome", schedule=None, start_date=dt.datetime(2026, 1, 1), catchup=False, max_active_runs=4):
    @task
    def prepare():
        return "plan"

    @task(pool="closed")
    def evaluate():
        return 0.9

    @task
    def run_outcome(dag_run=None, ti=None):
        from sim2real.orchestration.run_state import check_run_outcome

        return check_run_outcome(dag_run.dag_id, dag_run.run_id, own_task_id=ti.task_id)

    plan = prepare()
    plan >> evaluate() >> run_outcome().as_teardown(setups=plan, on_failure_fail_dagrun=True)
'''



@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[tuple[LiveAirflow, Sandbox]]:
    home = tmp_path_factory.mktemp("live-airflow")
    launcher = home / "launcher.sh"
    launcher.write_text(LAUNCHER)
    with Sandbox(step_seconds=0.05, batch_launcher=launcher) as sandbox:
        sandbox.provision(hyperpod=False, robots=1)
        airflow = LiveAirflow(home, {"runctl_train.py": TRAIN_DAG, "runctl_outcome.py": OUTCOME_DAG},
                              sandbox.airflow_env())
        try:
            airflow.start()
            airflow.api("POST", "/api/v2/pools", {"name": "closed", "slots": 0})
            yield airflow, sandbox
        finally:
            airflow.stop()


# -- helpers ------------------------------------------------------------------------------------
def _job_status(sandbox: Sandbox, job_id: str) -> str:
    return sandbox.client("batch", internal=True).describe_jobs(jobs=[job_id])["jobs"][0]["status"]


def _terminations(sandbox: Sandbox, job_id: str) -> list:
    return [r for r in sandbox.requests.since(0, "TerminateJob") if job_id in r.body]


def _deferred_training(airflow: LiveAirflow, sandbox: Sandbox) -> tuple[str, str]:
    """Start ``runctl_train``; return ``(run_id, job_id)`` once the task is deferred, its trigger has described the
    job at least once and the job runs."""
    run_id = airflow.trigger("runctl_train")
    airflow.wait(lambda: airflow.ti("runctl_train", run_id, "train")["state"] == "deferred", 180, "deferred train")
    job_id = airflow.api("GET", f"{airflow.run_path('runctl_train', run_id)}/taskInstances/train/xcomEntries/job_id"
                         )["value"]
    job_id = json.loads(job_id) if isinstance(job_id, str) and job_id.startswith('"') else job_id
    airflow.wait(lambda: _job_status(sandbox, job_id) == "RUNNING", 60, f"job {job_id} RUNNING")
    seen = len([r for r in sandbox.requests.since(0, "DescribeJobs") if job_id in r.body])
    airflow.wait(lambda: len([r for r in sandbox.requests.since(0, "DescribeJobs") if job_id in r.body]) > seen + 1,
                 60, "the trigger describing the job")
    return run_id, job_id


def _trigger_logs(airflow: LiveAirflow, dag_id: str, run_id: str) -> str:
    """Every trigger log of the run's tasks (``attempt=<n>.log.trigger.<triggerer job id>.log``)."""
    folder = airflow.home / "airflow" / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
    return "\n".join(p.read_text(errors="replace") for p in sorted(folder.rglob("*.trigger.*.log")))


def _assert_terminated(airflow: LiveAirflow, sandbox: Sandbox, job_id: str, timeout: float = 60) -> None:
    airflow.wait(lambda: _terminations(sandbox, job_id), timeout, f"TerminateJob of {job_id}")
    airflow.wait(lambda: _job_status(sandbox, job_id) == "FAILED", 30, f"job {job_id} ended")


def _final_state(airflow: LiveAirflow, dag_id: str, run_id: str, timeout: float = 180) -> str:
    return airflow.wait(lambda: (s := airflow.run_state(dag_id, run_id)) in ("success", "failed") and s, timeout,
                        f"run {run_id} over")


# -- a stop stops ---------------------------------------------------------------------------------
def test_marking_the_deferred_training_failed_terminates_its_job_also_when_aws_answers_slowly(stack):
    """Before: the triggerer logged "terminating AWS Batch job", but its cancel, repeated about every second until
    the trigger ended, cancelled the on_kill while the TerminateJob call was still under way (here AWS throttles
    the first calls, as a busy account does, and botocore backs off): the job ran to its end."""
    airflow, sandbox = stack
    run_id, job_id = _deferred_training(airflow, sandbox)
    sandbox.faults["throttle"] = {"TerminateJob": 3}
    try:
        airflow.api("PATCH", f"{airflow.run_path('runctl_train', run_id)}/taskInstances/train",
                    {"new_state": "failed"})
        airflow.wait(lambda: _job_status(sandbox, job_id) == "FAILED", 120,
                     f"job {job_id} terminated")
    finally:
        sandbox.faults.pop("throttle", None)
    assert "Airflow task killed by the user" in _terminations(sandbox, job_id)[-1].body
    assert _final_state(airflow, "runctl_train", run_id) == "failed"


def test_clearing_the_deferred_training_terminates_its_job(stack):
    """A cleared task starts again from scratch (here: a new job); the job of the cleared try is stopped."""
    airflow, sandbox = stack
    run_id, job_id = _deferred_training(airflow, sandbox)
    airflow.api("POST", "/api/v2/dags/runctl_train/clearTaskInstances",
                {"dag_run_id": run_id, "task_ids": ["train"], "dry_run": False, "only_failed": False})
    _assert_terminated(airflow, sandbox, job_id)
    airflow.api("PATCH", airflow.run_path("runctl_train", run_id), {"note": "cleanup", "state": "failed"})


def test_a_trigger_handed_to_another_triggerer_keeps_the_job_and_the_wait(stack):
    """A frozen triggerer loses its trigger to a second one; when it wakes up, Airflow cancels its copy "by user
    action". Before: that on_kill terminated the job, and the new copy saw it FAILED. Now the job keeps running,
    the wait goes on in the other triggerer, and a person's stop still stops it there."""
    airflow, sandbox = stack
    run_id, job_id = _deferred_training(airflow, sandbox)
    second = "triggerer-b"
    if second not in airflow.procs:
        airflow.start_triggerer(second)
    airflow.freeze("triggerer-a")
    try:
        airflow.wait(lambda: _trigger_logs(airflow, "runctl_train", run_id).count(") starting") >= 2, 90,
                     "the second triggerer running the trigger", interval=1)
    finally:
        airflow.thaw("triggerer-a")
    airflow.wait(lambda: "NOT stopping what it waits on" in _trigger_logs(airflow, "runctl_train", run_id), 90,
                 "the first triggerer cancelling its copy and leaving the job alone", interval=1)
    assert "Trigger cancelled by user action" in _trigger_logs(airflow, "runctl_train", run_id)
    time.sleep(3)
    assert _terminations(sandbox, job_id) == [], "a hand-over between triggerers stopped the job"
    assert _job_status(sandbox, job_id) == "RUNNING"
    assert airflow.ti("runctl_train", run_id, "train")["state"] == "deferred"
    described = len([r for r in sandbox.requests.since(0, "DescribeJobs") if job_id in r.body])
    airflow.wait(lambda: len([r for r in sandbox.requests.since(0, "DescribeJobs") if job_id in r.body]) > described,
                 30, "the wait going on in the second triggerer")
    airflow.api("PATCH", f"{airflow.run_path('runctl_train', run_id)}/taskInstances/train", {"new_state": "failed"})
    _assert_terminated(airflow, sandbox, job_id)


# -- the run state is true ------------------------------------------------------------------------
def test_a_run_marked_failed_between_tasks_ends_failed(stack):
    """Before: Airflow skipped the task that had not started and failed none; run_outcome found no failed task and
    the run ended success with no evaluation."""
    airflow, _ = stack
    run_id = airflow.trigger("runctl_outcome")
    airflow.wait(lambda: airflow.task_states("runctl_outcome", run_id).get("evaluate") == "scheduled", 120,
                 "evaluate waiting for a slot")
    airflow.api("PATCH", airflow.run_path("runctl_outcome", run_id), {"state": "failed"})
    assert _final_state(airflow, "runctl_outcome", run_id) == "failed"
    states = airflow.task_states("runctl_outcome", run_id)
    assert states["evaluate"] == "skipped" and states["run_outcome"] == "failed", states


def test_mark_failed_from_the_ui_on_a_run_without_a_note_still_ends_failed(stack):
    """The UI's "Mark Dag Run as failed" sends ``{"note": <the run's note>, "state": "failed"}``. Airflow 3.3.1
    answers 409 for a run that has no note yet (the note row is inserted twice: once by the skip of the pending
    tasks, which ``set_state`` commits in a session of its own, and again at the request's commit), and then only
    that skip is applied. Before: the run ended success. run_outcome now sees the unexplained skip."""
    airflow, _ = stack
    run_id = airflow.trigger("runctl_outcome")
    airflow.wait(lambda: airflow.task_states("runctl_outcome", run_id).get("evaluate") == "scheduled", 120,
                 "evaluate waiting for a slot")
    with pytest.raises(urllib.error.HTTPError) as conflict:
        airflow.api("PATCH", airflow.run_path("runctl_outcome", run_id), {"note": None, "state": "failed"})
    assert conflict.value.code == 409  # Airflow 3.3.1's duplicate dag_run_note insert
    assert _final_state(airflow, "runctl_outcome", run_id) == "failed"


def test_mark_failed_from_the_ui_on_a_run_with_a_note_applies_fully_and_stops_the_job(stack):
    """With the run's note row written before (the rule for the run note: write it at the run's start through the
    REST API, and never empty it), the UI's request is a plain update: 200, the deferred training is failed, its
    trigger cancelled and the job terminated."""
    airflow, sandbox = stack
    run_id, job_id = _deferred_training(airflow, sandbox)
    path = airflow.run_path("runctl_train", run_id)
    airflow.api("PATCH", path, {"note": "round 1 of 1: training"}, )
    answer = airflow.api("PATCH", path, {"note": "round 1 of 1: training", "state": "failed"})
    assert answer["state"] == "failed"
    assert airflow.ti("runctl_train", run_id, "train")["state"] == "failed"
    _assert_terminated(airflow, sandbox, job_id)
