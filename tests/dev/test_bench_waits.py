"""The wait bench at toy size: both modes through the production trigger, in the sandbox.

Figures are not asserted (they depend on the machine: ``make bench`` prints them); what is checked is what the
rows claim: every wait ended, the events rows were resolved by events (one describe per wait, the first), the
polling rows by describes, and the calls are counted by kind.
"""

from __future__ import annotations

import math

from sim2real.dev import bench_waits


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
    assert events["describe_calls"] == events["responses_seen"]["describe"] == 2
    assert events["responses_seen"]["event"] >= 1 and events["sqs_calls"]["ReceiveMessage"] >= 1
    rows = dict(bench_waits.rows(results))
    assert any(k.startswith("waits by polling every 1 s, 2 concurrent") for k in rows)
    assert any(k.startswith("waits by events (reconcile 600 s), 2 concurrent") for k in rows)
    steady = bench_waits.steady_state(50, 600)
    assert steady == {"describes": 6.0, "sqs": 3.6, "total": 9.6}
