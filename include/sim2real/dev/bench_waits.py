"""Wait bench, polling vs AWS events: resume latency, AWS calls per waiting hour and triggerer CPU at 1, 10 and 50
concurrent waits, through the production trigger (:class:`~sim2real.orchestration.triggers.batch.BatchTrainingJobTrigger`).

``python -m sim2real.dev.bench_waits [--waits 1,10,50] [--poll-seconds 5] [--hold-seconds 20]`` (also
``make bench BENCH_ARGS="--only waits"``).

In the local sandbox (moto), N Batch jobs are submitted whose launcher only sleeps ``--hold-seconds`` (no training:
the sandbox moves each job through SUBMITTED ... RUNNING ... SUCCEEDED, one step every ``--step-seconds``). One
trigger per job runs on one asyncio event loop in its own thread, as the waits of one triggerer do, once with
``events.mode = "polling"`` (``DescribeJobs`` every ``--poll-seconds``) and once with ``"events"`` (one consumer of
the sandbox's wait-event queue, 20 s long polling, reconcile describe every 600 s). Measured per row:

* resume latency: from the sandbox's state change to SUCCEEDED (the moment its responder changed the job and
  handed the event to its one sender thread) to the trigger yielding its event (the task resuming), p50 / p95 over
  the waits; beside it the same from moto's PutEvents returning (the difference is the sandbox's own publishing
  backlog: one thread sends every event of every job, up to 10 per PutEvents call; EventBridge has no such queue);
* AWS calls, counted by the sandbox's server (every request from outside the sandbox): SQS (ReceiveMessage,
  DeleteMessageBatch, ChangeMessageVisibilityBatch) and DescribeJobs, separately and together, divided by the
  summed waiting hours (per wait) and by the wall hours of the row (all waits together);
* triggerer CPU seconds: the CPU time of the event loop's thread (the triggers, the consumer, aiobotocore); the
  in-process sandbox runs in other threads and is not counted.

Honest limits: the waits are short (tens of seconds), so fixed costs (each wait's first describe, the receives
that return early while events flow) dominate the per-hour rates; a wait that lasts hours costs, with events, its
reconcile describes (3600 / ``reconcile_interval_seconds``) plus its share of one consumer's ~180 long-poll
receives an hour (180 / N for N waits in the triggerer) plus one delete per state change: the
``steady state`` rows compute that from the settings (computed, not measured). Polling at the production 30 s
interval costs 120 DescribeJobs per waiting hour per wait. The bench polls every ``--poll-seconds`` (default 5 s)
to stay short; its polling latency and call rate scale with that interval. Figures depend on the machine and its
load: measurements, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SQS_ACTIONS = ("ReceiveMessage", "DeleteMessageBatch", "ChangeMessageVisibilityBatch")
DESCRIBE_ACTIONS = ("DescribeJobs",)
#: Seconds one idle long-polling receive takes (SQS's maximum WaitTimeSeconds).
LONG_POLL_SECONDS = 20


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(q * (len(ordered) - 1)))))
    return ordered[k]


def _succeeded_at(sandbox: Any, job_id: str) -> tuple[float, float | None] | None:
    """``(time.time() when the sandbox's responder set job_id SUCCEEDED, when the PutEvents of that change
    returned)``, from the responder's own status log and the event bus's record of the events sent since (None
    when not sent yet: a polling wait can resume first); None when the job never got SUCCEEDED."""
    changed = [e.time for e in sandbox.events.find("batch", "job-status", job_id=job_id, status="SUCCEEDED")]
    put = [p for detail_type, key, c, _, p in list(sandbox.aws_events.published)
           if detail_type == "Batch Job State Change" and key == job_id and changed and c >= changed[0] - 1e-3]
    if not changed:
        return None
    return changed[0], (min(put) if put else None)


def _run_triggers(sandbox: Any, n: int, mode: str, poll_seconds: float) -> dict[str, Any]:
    """N triggers on one event loop in one thread; returns the row (see the module doc)."""
    from sim2real.orchestration.triggers.batch import BatchTrainingJobTrigger

    batch = sandbox.client("batch", internal=True)
    config = sandbox.config["batch"]
    events = {**(sandbox.config.get("events") or {}), "mode": mode}
    resumed: dict[str, float] = {}
    started: dict[str, float] = {}
    outcome: dict[str, str] = {}
    cpu: dict[str, float] = {}
    seen: dict[str, int] = {"describe": 0, "event": 0}

    async def one(index: int) -> None:
        job_id = (await asyncio.to_thread(batch.submit_job, jobName=f"bench-{mode}-{n}-{index}",
                                          jobQueue=config["job_queue"],
                                          jobDefinition=config["job_definition"]))["jobId"]
        trigger = BatchTrainingJobTrigger(job_id=job_id, progress=False, runnable_timeout_seconds=None,
                                          waiter_delay=int(poll_seconds), waiter_max_attempts=100000, events=events)
        started[job_id] = time.time()
        async for event in trigger.run():
            resumed[job_id] = time.time()
            outcome[job_id] = event.payload["status"]
            break
        for origin, count in trigger.responses_seen.items():
            seen[origin] += count

    async def main() -> None:
        from sim2real.orchestration.events.consumer import active_consumers

        cpu0 = time.thread_time()
        await asyncio.gather(*(one(i) for i in range(n)))
        cpu["waits"] = time.thread_time() - cpu0
        for consumer in active_consumers():
            await consumer.drained()      # the receive in flight ends (up to 20 s), as in a triggerer
        cpu["total"] = time.thread_time() - cpu0

    t0 = time.time()
    error: list[BaseException] = []

    def thread() -> None:
        try:
            asyncio.run(main())
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller
            error.append(err)

    worker = threading.Thread(target=thread, name=f"bench-triggerer-{mode}-{n}")
    worker.start()
    worker.join()
    if error:
        raise error[0]
    t_end = max(resumed.values(), default=time.time())
    requests = [r for r in sandbox.requests.since(t0) if r.time <= t_end + 0.001]
    sqs = {a: sum(1 for r in requests if r.action == a) for a in SQS_ACTIONS}
    describes = sum(1 for r in requests if r.action in DESCRIBE_ACTIONS)
    latencies, from_put = [], []
    for job_id, at in resumed.items():
        changed = _succeeded_at(sandbox, job_id)
        if changed is not None:
            latencies.append(at - changed[0])
            if changed[1] is not None:
                from_put.append(at - changed[1])
    waiting_s = sum(resumed[j] - started[j] for j in resumed)
    wall_s = t_end - min(started.values())
    calls = sum(sqs.values()) + describes
    per_wait_hour = 3600 / waiting_s if waiting_s else float("nan")
    return {
        "mode": mode, "waits": n, "outcomes": sorted(set(outcome.values())), "latency_n": len(latencies),
        "responses_seen": seen,
        "latency_p50_s": statistics.median(latencies) if latencies else float("nan"),
        "latency_p95_s": _percentile(latencies, 0.95),
        "from_put_events_p50_s": statistics.median(from_put) if from_put else float("nan"),
        "from_put_events_p95_s": _percentile(from_put, 0.95),
        "sqs_calls": sqs, "describe_calls": describes, "calls": calls,
        "sqs_per_waiting_hour_per_wait": sum(sqs.values()) * per_wait_hour,
        "describes_per_waiting_hour_per_wait": describes * per_wait_hour,
        "calls_per_waiting_hour_per_wait": calls * per_wait_hour,
        "calls_per_hour_all_waits": calls * 3600 / wall_s if wall_s else float("nan"),
        "mean_wait_s": waiting_s / max(len(resumed), 1), "wall_s": wall_s,
        "triggerer_cpu_s": cpu.get("waits", float("nan")), "triggerer_cpu_with_drain_s": cpu.get("total", float("nan")),
        "poll_seconds": poll_seconds if mode == "polling" else None,
        "reconcile_interval_seconds": events.get("reconcile_interval_seconds") if mode == "events" else None,
    }


def _drain(sandbox: Any, queue_url: str) -> None:
    """Delete the events of earlier rows that nobody waits for any more (the sandbox's own client: not counted;
    PurgeQueue allows one call a minute)."""
    sqs = sandbox.client("sqs", internal=True)
    while True:
        messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                                       VisibilityTimeout=60).get("Messages") or []
        if not messages:
            return
        sqs.delete_message_batch(QueueUrl=queue_url, Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)])


def steady_state(n: int, reconcile_s: float, state_changes_per_hour: float = 0.0) -> dict[str, float]:
    """Computed (not measured) calls per waiting hour per wait of N long waits sharing one consumer: reconcile
    describes + 1/N of the consumer's idle long-poll receives + a delete per state change."""
    receives = 3600 / LONG_POLL_SECONDS
    return {"describes": 3600 / reconcile_s, "sqs": receives / n + state_changes_per_hour,
            "total": 3600 / reconcile_s + receives / n + state_changes_per_hour}


def run(waits: list[int], step_seconds: float = 1.0, poll_seconds: float = 5.0,
        hold_seconds: float = 20.0) -> list[dict[str, Any]]:
    """Both modes for each wait count in one sandbox; a row dict per (mode, count) (keys: see the module doc)."""
    from sim2real.dev.sandbox import Sandbox

    with tempfile.TemporaryDirectory(prefix="sim2real-bench-waits-") as tmp:
        launcher = Path(tmp) / "launcher.sh"
        launcher.write_text(f"#!/bin/bash\nsleep {float(hold_seconds):g}\nexit 0\n")
        with Sandbox(step_seconds=step_seconds, batch_launcher=launcher) as sandbox:
            sandbox.provision(hyperpod=False, robots=1)
            queue_url = (sandbox.config.get("events") or {}).get("queue_url")
            saved = dict(os.environ)
            os.environ.update(sandbox.airflow_env())
            out = []
            try:
                for n in waits:
                    for mode in ("polling", "events"):
                        if queue_url:
                            _drain(sandbox, queue_url)
                        out.append(_run_triggers(sandbox, n, mode, poll_seconds))
                return out
            finally:
                os.environ.clear()
                os.environ.update(saved)


def rows(results: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Table rows for ``make bench``: polling and events beside each other per wait count."""
    out = []
    for r in results:
        label = (f"waits by polling every {r['poll_seconds']:g} s" if r["mode"] == "polling"
                 else f"waits by events (reconcile {r['reconcile_interval_seconds']:g} s)")
        head = f"{label}, {r['waits']} concurrent Batch waits"
        sqs = r["sqs_calls"]
        out.append((f"{head}: resume latency state change -> trigger event, p50 / p95",
                    f"{r['latency_p50_s']:.2f} / {r['latency_p95_s']:.2f} s ({r['latency_n']} waits, "
                    f"outcomes {','.join(r['outcomes'])}; from the sandbox's PutEvents returning: "
                    f"{r['from_put_events_p50_s']:.2f} / {r['from_put_events_p95_s']:.2f} s)"))
        out.append((f"{head}: AWS calls per waiting hour per wait, SQS + DescribeJobs = total",
                    f"{r['sqs_per_waiting_hour_per_wait']:.0f} + {r['describes_per_waiting_hour_per_wait']:.0f} = "
                    f"{r['calls_per_waiting_hour_per_wait']:.0f} (waits of {r['mean_wait_s']:.0f} s)"))
        out.append((f"{head}: AWS calls per hour, all waits together",
                    f"{r['calls_per_hour_all_waits']:.0f} ({r['calls']} calls: {sqs['ReceiveMessage']} Receive, "
                    f"{sqs['DeleteMessageBatch']} DeleteBatch, {sqs['ChangeMessageVisibilityBatch']} "
                    f"VisibilityBatch, {r['describe_calls']} DescribeJobs in {r['wall_s']:.0f} s)"))
        out.append((f"{head}: triggerer CPU (event loop thread)",
                    f"{r['triggerer_cpu_s']:.2f} s ({r['triggerer_cpu_with_drain_s']:.2f} s with the last receive)"))
    counts = sorted({r["waits"] for r in results})
    reconcile = next((r["reconcile_interval_seconds"] for r in results if r["mode"] == "events"), 600) or 600
    for n in counts:
        s = steady_state(n, reconcile)
        out.append((f"steady state (computed, not measured): {n} waits of hours, events, reconcile {reconcile:g} s",
                    f"{s['sqs']:.1f} SQS + {s['describes']:.1f} DescribeJobs = {s['total']:.1f} calls per waiting "
                    f"hour per wait (+1 delete share per state change); polling at 30 s: 120"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim2real.dev.bench_waits", description=__doc__.splitlines()[0])
    ap.add_argument("--waits", default="1,10,50", help="concurrent wait counts, comma-separated")
    ap.add_argument("--step-seconds", type=float, default=1.0, help="seconds between a job's state changes")
    ap.add_argument("--poll-seconds", type=float, default=5.0, help="the polling rows' DescribeJobs interval")
    ap.add_argument("--hold-seconds", type=float, default=20.0, help="seconds each job stays RUNNING")
    args = ap.parse_args(argv)
    counts = [int(x) for x in args.waits.split(",") if x.strip()]
    if not counts or min(counts) < 1:
        ap.error("--waits needs positive counts")
    results = run(counts, args.step_seconds, args.poll_seconds, args.hold_seconds)
    for name, value in rows(results):
        print(f"| {name} | {value} |")
    print(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
