"""The wait bench at toy size: both modes through the production trigger, in the sandbox.

Figures are not asserted (they depend on the machine: ``make bench`` prints them); what is checked is what the
rows claim: every wait ended, the events rows were resolved by events (one describe per wait, the first, shared
by waits starting together), the polling rows by describes, and the calls are counted by kind and told apart by
row; the time scale's arithmetic.
"""

from __future__ import annotations

import json
import math
import urllib.parse

import pytest

from sim2real.dev import bench_waits
from sim2real.dev.sandbox._core import RecordedRequest
from sim2real.orchestration.events.settings import settings_problems


@pytest.mark.integration  # waits in the sandbox
def test_bench_rows_polling_and_events_through_the_trigger() -> None:
    results = bench_waits.run([2], step_seconds=0.3, poll_seconds=1, hold_seconds=3)
    by_mode = {r["mode"]: r for r in results}
    assert set(by_mode) == {"polling", "events"}
    polling, events = by_mode["polling"], by_mode["events"]
    for r in results:
        assert r["waits"] == 2 and r["outcomes"] == ["success"] and r["latency_n"] == 2
        assert not math.isnan(r["latency_p95_s"]) and r["triggerer_cpu_s"] > 0
        assert r["calls"] == sum(r["sqs_calls"].values()) + r["describe_calls"]
    # polling: no queue, a describe per poll; events: the first describe of each wait only, the rest from SQS
    assert sum(polling["sqs_calls"].values()) == 0 and polling["describe_calls"] >= 2
    assert polling["responses_seen"] == {"describe": 0, "event": 0}      # the polling path keeps no such count
    assert events["responses_seen"]["describe"] == 2 and 1 <= events["describe_calls"] <= 2   # shared or not
    assert events["responses_seen"]["event"] >= 1 and events["sqs_calls"]["ReceiveMessage"] >= 1
    rows = dict(bench_waits.rows(results))
    assert any(k.startswith("waits by polling every 1 s, 2 concurrent") for k in rows)
    assert any(k.startswith("waits by events (reconcile 600 s), 2 concurrent") for k in rows)


def test_scaled_intervals_divide_every_production_interval() -> None:
    assert bench_waits.scaled_intervals(20) == {"wait_time_seconds": 1, "reconcile_interval_seconds": 30.0,
                                                "poll_seconds": 1.5, "hold_seconds": 180.0}
    assert bench_waits.scaled_intervals(1) == {"wait_time_seconds": 20, "reconcile_interval_seconds": 600.0,
                                               "poll_seconds": 30.0, "hold_seconds": 3600.0}
    five = bench_waits.scaled_intervals(5)
    assert five["wait_time_seconds"] == 4 and isinstance(five["wait_time_seconds"], int)
    for bad in (0, 3, 40, 2.5, True, -20):
        with pytest.raises(ValueError, match="whole number dividing 20"):
            bench_waits.scaled_intervals(bad)
    # the scaled long poll is a valid events section
    section = {"queue_url": "https://sqs.us-east-1.amazonaws.com/1/q",
               "wait_time_seconds": bench_waits.scaled_intervals(20)["wait_time_seconds"],
               "reconcile_interval_seconds": bench_waits.scaled_intervals(20)["reconcile_interval_seconds"]}
    assert settings_problems(section) == []


def test_per_hour_counts_scaled_seconds_as_production_seconds() -> None:
    # 186 calls over 180 s of a run scaled by 20 = 186 calls in one production hour
    assert bench_waits.per_hour(186, 180, 20) == pytest.approx(186)
    assert bench_waits.per_hour(10, 3600, 1) == pytest.approx(10)
    assert bench_waits.per_hour(6, 90, 20) == pytest.approx(12)
    assert math.isnan(bench_waits.per_hour(5, 0, 20))


def test_count_calls_tells_rows_apart_by_queue_and_job() -> None:
    url, other = "http://127.0.0.1:5/123456789012/bench-hour-events-10", "http://127.0.0.1:5/123456789012/q"

    def req(action: str, body: str) -> RecordedRequest:
        return RecordedRequest(0.0, "x", action, body)

    requests = [
        req("ReceiveMessage", json.dumps({"QueueUrl": url, "WaitTimeSeconds": 1})),            # JSON protocol
        req("ReceiveMessage", urllib.parse.urlencode({"Action": "ReceiveMessage", "QueueUrl": url})),  # query
        req("ReceiveMessage", json.dumps({"QueueUrl": other})),                                 # another row
        req("DeleteMessageBatch", json.dumps({"QueueUrl": url, "Entries": []})),
        req("DescribeJobs", json.dumps({"jobs": ["a", "b", "z"]})),                             # shared: once
        req("DescribeJobs", json.dumps({"jobs": ["y"]})),                                       # another row
        req("DescribeJobs", "not json"),
        req("SubmitJob", json.dumps({"jobName": "a"})),
    ]
    sqs, describes = bench_waits.count_calls(requests, url, {"a", "b"})
    assert sqs == {"ReceiveMessage": 2, "DeleteMessageBatch": 1, "ChangeMessageVisibilityBatch": 0}
    assert describes == 1
    sqs, describes = bench_waits.count_calls(requests, None, {"y"})       # a polling row: no queue
    assert sum(sqs.values()) == 0 and describes == 1


@pytest.mark.integration  # waits in the sandbox
def test_hour_rows_run_together_in_one_sandbox_and_count_per_row() -> None:
    """Toy size (jobs RUNNING 3 s): the rows' structure and attribution, not the per-hour figures."""
    results = bench_waits.run_hour([1, 3], scale=20, step_seconds=0.3, hold_seconds=3)
    assert [(r["mode"], r["waits"]) for r in results] == [("polling", 1), ("events", 1), ("polling", 3),
                                                          ("events", 3)]
    for r in results:
        assert r["outcomes"] == ["success"] and r["latency_n"] == r["waits"] and r["hour_scale"] == 20
        assert r["waiting_hours"] == pytest.approx(r["mean_wait_s"] * r["waits"] * 20 / 3600)
        assert r["calls_per_waiting_hour_per_wait"] == pytest.approx(r["calls"] / r["waiting_hours"])
    by = {(r["mode"], r["waits"]): r for r in results}
    for n in (1, 3):
        polling, events = by[("polling", n)], by[("events", n)]
        assert sum(polling["sqs_calls"].values()) == 0 and polling["describe_calls"] >= n   # polled at 1.5 s
        assert events["sqs_calls"]["ReceiveMessage"] >= 1 and events["responses_seen"]["describe"] >= n
        assert events["long_poll_seconds"] == 1 and events["reconcile_interval_seconds"] == 30
        assert events["responses_seen"]["event"] >= n                     # its own queue delivered its events
    assert by[("polling", 1)]["poll_seconds"] == 1.5
    rows = dict(bench_waits.hour_rows(results))
    assert any("time-scaled by k = 20" in k and "waits by polling every 30 s (run at 1.5 s), 3 concurrent" in k
               for k in rows)
