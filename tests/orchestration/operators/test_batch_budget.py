"""The training job's cost limit: BatchTrainingOperator (sync and deferred) and BatchTrainingJobTrigger
stop a RUNNING job whose cost at the next poll would be above ``cost_limit_usd``.

Same sandbox as ``test_batch.py`` (moto, the ``script`` fixture for the status sequence); the
``started`` fixture makes DescribeJobs report the job's ``startedAt`` an hour in the past, so one poll
sees a job that has already spent money. 2 nodes x $3.60/h for 3600 s = $7.20; $0.002 per second, so
the next poll 600 s later would be at $8.40.
"""

from __future__ import annotations

import re
import time

import pytest
from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException, TaskDeferred
from moto import mock_aws
from moto.batch.models import Job
from sim2real.contract import task_ids as ids
from sim2real.orchestration.triggers.batch import BatchTrainingJobTrigger

from operator_helpers import FakeTI, first_event
from test_batch import (  # noqa: F401 - fixtures
    MOTO_BATCH,
    RecordingLog,
    make_op,
    moto_batch_gaps,
    script,
    setup_batch,
    submit_on_server,
)

PRICE = 3.6
RAN_S = 3600
COST_NOW = 2 * PRICE * RAN_S / 3600  # 7.20

#: (id, cost_limit_usd, usd_per_node_hour, poll interval s, stopped)
CASES = [
    ("limit-already-spent-at-first-poll", 7.0, PRICE, 0, True),
    ("would-exceed-by-the-next-poll", 8.0, PRICE, 600, True),
    ("below-the-limit-now-and-at-the-next-poll", 8.0, PRICE, 0, False),
    ("next-poll-still-below", 9.0, PRICE, 600, False),
    ("no-limit", None, PRICE, 0, False),
    ("no-price", 1.0, None, 0, False),
]


@pytest.fixture
def started(monkeypatch, script):
    """DescribeJobs reports ``startedAt`` RAN_S seconds ago (and ``stoppedAt`` now once SUCCEEDED)."""
    scripted = Job.describe

    def describe(self):
        result = scripted(self)
        now_ms = int(time.time() * 1000)
        if result["status"] in ("RUNNING", "SUCCEEDED", "FAILED"):
            result["startedAt"] = now_ms - RAN_S * 1000
            result["attempts"] = []
            result.pop("stoppedAt", None)
            if result["status"] != "RUNNING":
                result["stoppedAt"] = now_ms
        return result

    monkeypatch.setattr(Job, "describe", describe)
    return script


def assert_stop_message(message: str, limit: float) -> None:
    assert "stopped at the training cost limit" in message
    # "ran 3600 s": the job started RAN_S before the describe; a loaded machine may take a few seconds more
    ran = re.search(r"ran (\d+) s \(1\.00 h\) on 2 node\(s\) at \$3\.6 per node-hour = \$7\.2\d", message)
    assert ran and RAN_S <= int(ran.group(1)) <= RAN_S + 10, message
    assert f"above the limit ${limit:.2f}" in message and "The job was terminated." in message
    assert "Raise max_budget_usd, or lower num_nodes or train_time_budget_seconds" in message


@pytest.mark.parametrize(("case", "limit", "price", "poll", "stopped"), CASES, ids=[c[0] for c in CASES])
def test_trigger_cost_limit_table_one_poll(moto_server, moto_batch_gaps, started, case, limit, price, poll, stopped):
    job_id = submit_on_server(moto_server)
    started[job_id] = [("RUNNING", None, None)]
    trigger = BatchTrainingJobTrigger(job_id=job_id, cost_limit_usd=limit, usd_per_node_hour=price,
                                      waiter_delay=poll, waiter_max_attempts=1)
    trigger._log = RecordingLog()
    event = first_event(trigger)
    if not stopped:
        assert event["status"] == "timeout" and "no end after 1 polls" in event["message"]
        assert started["terminated"] == []
        if price is not None and limit is not None:
            assert any(f"elapsed cost ${COST_NOW:.2f} of limit ${limit:.2f}" in m for m in trigger._log.messages)
        return
    assert event["status"] == "failure" and event["reason"] == "cost_limit" and event["job_status"] == "RUNNING"
    assert_stop_message(event["message"], limit)
    [(terminated, reason)] = started["terminated"]
    assert terminated == job_id and reason.startswith(f"sim2real: cost limit ${limit:.2f} reached")
    assert event["job_cost"]["cost_usd"] == pytest.approx(COST_NOW, abs=0.01)
    assert event["job_cost"]["stopped_by_budget"] is True


def test_deferred_cost_limit_fails_without_retry_and_keeps_the_figures(moto_server, moto_batch_gaps, started):
    setup_batch(moto_server)
    started["*"] = [("RUNNABLE", None, None)]
    op = make_op(cost_limit_usd="8.0", usd_per_node_hour=PRICE, poll_interval=600, max_retries=10)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({})
    _, kwargs = deferred.value.trigger.serialize()
    assert kwargs["cost_limit_usd"] == 8.0 and kwargs["usd_per_node_hour"] == PRICE and kwargs["num_nodes"] == 2

    # the trigger, run against the same job in the sandbox, stops it; execute_complete fails the task
    started["*"] = [("RUNNING", None, None)]
    trigger = BatchTrainingJobTrigger(**{**kwargs, "waiter_max_attempts": 1})
    trigger._log = RecordingLog()
    event = first_event(trigger)
    assert event["reason"] == "cost_limit"
    ti = FakeTI(ids.BATCH_TRAIN_POLICY)
    with pytest.raises(AirflowFailException) as err:
        op.execute_complete({"ti": ti}, event)
    assert_stop_message(str(err.value), 8.0)
    assert ti.xcom["job_cost"] == event["job_cost"]
    assert [j for j, _ in started["terminated"]] == [op.job_id]


@mock_aws(config=MOTO_BATCH)
def test_success_result_has_start_stop_and_cost(aws_env, moto_batch_gaps, started):
    setup_batch()
    started["*"] = [("SUCCEEDED", None, 0)]
    result = make_op(cost_limit_usd=100.0, usd_per_node_hour=PRICE).execute({})
    assert result["status"] == "SUCCEEDED"
    assert result["stopped_at"] - result["started_at"] == pytest.approx(RAN_S, abs=5)
    assert result["cost_usd"] == pytest.approx(COST_NOW, abs=0.01)
    no_price = make_op(job_name="other-job").execute({})
    assert no_price["cost_usd"] is None and no_price["started_at"] is not None


@pytest.mark.parametrize(("field", "value"), [("cost_limit_usd", "ten dollars"), ("usd_per_node_hour", -1)])
@mock_aws(config=MOTO_BATCH)
def test_bad_cost_arguments_name_the_field(aws_env, moto_batch_gaps, field, value):
    setup_batch()
    with pytest.raises(ValueError, match=f"{field} must be a number of USD >= 0 or None"):
        make_op(**{field: value}).execute({})


@mock_aws(config=MOTO_BATCH)
def test_log_explains_the_cost_limit_before_submitting(aws_env, moto_batch_gaps, started, monkeypatch):
    from sim2real.orchestration.operators.batch import BatchTrainingOperator

    setup_batch()
    started["*"] = [("SUCCEEDED", None, 0)]
    log = RecordingLog()
    monkeypatch.setattr(BatchTrainingOperator, "log", property(lambda self: log))
    make_op(cost_limit_usd=14.4, usd_per_node_hour=PRICE).execute({})
    line = next(m for m in log.messages if m.startswith("Training cost limit"))
    # what it is, where it comes from (form field), what happens when reached
    assert "$14.40" in line and "max_budget_usd" in line and "other stages" in line
    assert "terminated" in line and "fails without retry" in line
    assert "after about 2.00 h" in line  # $14.40 / (2 nodes x $3.60/h)
    make_op(job_name="other-job").execute({})
    assert any(m.startswith("Training cost limit: none") for m in log.messages)


@mock_aws(config=MOTO_BATCH)
def test_a_failed_job_hands_on_its_cost_figures(aws_env, moto_batch_gaps, started):
    """A job that ended FAILED has no return value: its job_cost XCom carries its DescribeJobs times, so the
    run's actual cost (a sweep that picks among its survivors goes on to succeed) counts the hour it ran."""
    from sim2real.orchestration.cost_actual import _training_actual

    setup_batch()
    started["*"] = [("FAILED", "Host EC2 (instance i-1) terminated.", 1)]
    ti = FakeTI(ids.BATCH_TRAIN_POLICY)
    with pytest.raises(AirflowException, match="ended FAILED"):  # a reclaimed host: retryable
        make_op(usd_per_node_hour=PRICE).execute({"ti": ti})
    record = ti.xcom["job_cost"]
    assert record["status"] == "FAILED" and record["job_id"] == record["jobId"]
    assert record["nodeProperties"]["numNodes"] == 2
    plan = {"budget": {"items": [{"stage": "training", "instance_type": "g6.12xlarge", "usd_per_hour": PRICE,
                                  "instances": 2}]}, "batch": {"num_nodes": 2}}
    item = _training_actual(plan, record, time.time(), {})
    assert item["hours"] == pytest.approx(RAN_S / 3600, abs=0.01)
    assert item["usd"] == pytest.approx(COST_NOW, abs=0.05)


@mock_aws(config=MOTO_BATCH)
def test_a_job_stopped_at_its_runnable_budget_hands_on_zero_cost_not_unknown(aws_env, moto_batch_gaps, started):
    """Terminated while RUNNABLE (no instance ever ran it): its job_cost XCom says so, and the run's actual cost
    counts $0 for it instead of leaving a sweep's total "unknown" (and its budget verdict with it)."""
    from sim2real.orchestration.cost_actual import actual_run_cost

    setup_batch()
    started["*"] = [("RUNNABLE", None, None)]
    op = make_op(runnable_timeout_seconds=900, poll_interval=15, max_retries=100, usd_per_node_hour=PRICE)
    with pytest.raises(TaskDeferred):
        op.execute({})
    # moto stamps startedAt at submission; AWS sets it only when the job goes STARTING -> RUNNING (Batch API
    # reference, JobDetail.startedAt), so a job terminated while RUNNABLE has none
    describe = op.hook.get_job_description
    op.hook.get_job_description = lambda job_id: {k: v for k, v in describe(job_id).items() if k != "startedAt"}
    ti = FakeTI(ids.BATCH_TRAIN_POLICY)
    with pytest.raises(AirflowFailException, match="failure class CAPACITY"):
        op.execute_complete({"ti": ti}, {"status": "failure", "job_id": op.job_id, "job_status": "RUNNABLE",
                                         "reason": "runnable_timeout", "message": "stayed RUNNABLE"})
    record = ti.xcom["job_cost"]
    assert record["job_id"] == op.job_id and "startedAt" not in record and record["attempts"] == []
    plan = {"budget": {"max_budget_usd": 100.0, "items": [{"stage": "training", "instance_type": "g6.12xlarge",
                                                           "usd_per_hour": PRICE, "instances": 2}]},
            "batch": {"num_nodes": 2}}
    winner = {"job_id": "j-won", "started_at": time.time() - 3600, "stopped_at": time.time(), "num_nodes": 2}
    actual = actual_run_cost(plan, [winner, record])
    assert actual["unknown"] == [] and actual["within_budget"] is True
    assert actual["items"][1]["usd"] == 0.0 and "never started" in actual["items"][1]["basis"]
