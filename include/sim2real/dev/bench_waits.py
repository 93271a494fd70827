"""Wait-event bench: event latency and AWS calls per waiting hour at 1, 10 and 50 concurrent waits.

``python -m sim2real.dev.bench_waits [--waits 1,10,50]`` (also ``make bench BENCH_ARGS="--only waits"``).

In the local sandbox (moto), N Batch jobs are submitted whose launcher only exits (no training: the sandbox moves
each job through SUBMITTED ... SUCCEEDED, one step every ``--step-seconds``). One :class:`EventDrivenResponses` per
job, all sharing this process's consumer of the wait-event queue (as the waits of one triggerer do), reads
observations until its job is SUCCEEDED. Measured per wait count:

* event latency: from the sandbox's state change (the moment the responder publishes the event) to the consumer
  handing the event to the wait, p50 and p95, seconds, over every delivered event; beside it the same from the
  moment moto's PutEvents returned (what the sandbox's own publishing adds is the difference);
* API calls per waiting hour: SQS ReceiveMessage/DeleteMessageBatch/ChangeMessageVisibilityBatch of the consumer plus the
  waits' DescribeJobs calls (the first describe and reconcile describes), divided by the summed waiting hours
  (per wait) and by the wall hours (all waits together);
* triggerer CPU seconds: this process's CPU time during the waits (consumer, waits, and in this harness also
  the in-process sandbox, so an upper bound).

Polling rows (the same waits calling DescribeJobs every poll interval) are to be added beside these once the
step-function wait core drives both paths. Figures depend on the machine and its load: measurements, not
assertions. Short waits inflate the per-hour rates (the first describe and the long-poll receives are spread
over minutes of waiting, not hours); the rows print the waiting time they cover.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(q * (len(ordered) - 1)))))
    return ordered[k]


async def _run_waits(sandbox: Any, n: int, settings: Any) -> dict[str, Any]:
    from sim2real.orchestration.events import envelope as ev
    from sim2real.orchestration.events.consumer import EventDrivenResponses, subscribe

    batch = sandbox.client("batch")
    config = sandbox.config["batch"]
    describe_calls = 0

    def make_describe(job_id: str):
        async def describe() -> dict[str, Any]:
            nonlocal describe_calls
            describe_calls += 1
            return await asyncio.to_thread(batch.describe_jobs, jobs=[job_id])
        return describe

    published = {e[3]: e for e in sandbox.aws_events.published}
    from_put: list[float] = []
    latencies: list[float] = []
    wait_seconds: list[float] = []
    seen_consumers: list[Any] = []
    origins: dict[str, int] = {}

    async def one_wait(index: int) -> None:
        job_id = (await asyncio.to_thread(batch.submit_job, jobName=f"bench-wait-{n}-{index}",
                                          jobQueue=config["job_queue"], jobDefinition=config["job_definition"]))["jobId"]
        started = time.monotonic()
        subscription = subscribe(ev.batch_job(job_id), settings)
        if subscription is not None and subscription.consumer not in seen_consumers:
            seen_consumers.append(subscription.consumer)
        source = EventDrivenResponses(subscription, make_describe(job_id), poll_interval=30.0, settings=settings)
        try:
            while True:
                observation = await source()
                delivered = time.time()
                origins[observation.origin] = origins.get(observation.origin, 0) + 1
                if observation.event is not None:
                    published.update({e[3]: e for e in sandbox.aws_events.published})
                    entry = published.get(observation.event.envelope.id)
                    if entry is not None:
                        latencies.append(delivered - entry[2])
                        from_put.append(delivered - entry[4])
                (job,) = observation.response["jobs"]
                if job["status"] in ("SUCCEEDED", "FAILED"):
                    break
        finally:
            source.close()
            wait_seconds.append(time.monotonic() - started)

    cpu0, wall0 = time.process_time(), time.monotonic()
    await asyncio.gather(*(one_wait(i) for i in range(n)))
    for consumer in seen_consumers:
        await consumer.drained()
    stats: dict[str, int] = {}
    for consumer in seen_consumers:
        for k, v in consumer.stats.items():
            stats[k] = stats.get(k, 0) + v
    wall = time.monotonic() - wall0
    cpu = time.process_time() - cpu0
    sqs_calls = sum(stats.get(k, 0) for k in ("ReceiveMessage", "DeleteMessageBatch", "ChangeMessageVisibilityBatch"))
    waiting_hours = sum(wait_seconds) / 3600
    calls = sqs_calls + describe_calls
    return {
        "waits": n, "events_delivered": len(latencies),
        "latency_p50_s": statistics.median(latencies) if latencies else float("nan"),
        "latency_p95_s": _percentile(latencies, 0.95),
        "from_put_events_p50_s": statistics.median(from_put) if from_put else float("nan"),
        "from_put_events_p95_s": _percentile(from_put, 0.95),
        "sqs_calls": sqs_calls, "describe_calls": describe_calls,
        "calls_per_waiting_hour_per_wait": calls / waiting_hours if waiting_hours else float("nan"),
        "calls_per_hour_all_waits": calls / (wall / 3600) if wall else float("nan"),
        "mean_wait_s": statistics.mean(wait_seconds) if wait_seconds else 0.0, "wall_s": wall, "cpu_s": cpu,
        "consumer_stats": stats, "origins": origins,
        "unavailable": [c.unavailable_reason for c in seen_consumers if c.unavailable_reason],
    }


def run(waits: list[int], step_seconds: float = 1.0) -> list[dict[str, Any]]:
    """Run the bench for each wait count in one sandbox; a result dict per count (keys: see the module doc)."""
    from sim2real.dev.sandbox import Sandbox
    from sim2real.orchestration.events.settings import EventSettings

    with tempfile.TemporaryDirectory(prefix="sim2real-bench-waits-") as tmp:
        launcher = Path(tmp) / "launcher.sh"
        launcher.write_text("#!/bin/bash\nexit 0\n")
        with Sandbox(step_seconds=step_seconds, batch_launcher=launcher) as sandbox:
            sandbox.provision(hyperpod=False, robots=1)
            saved = dict(os.environ)
            os.environ.update(sandbox.airflow_env())
            try:
                settings = EventSettings.from_environment(sandbox.config)
                return [asyncio.run(_run_waits(sandbox, n, settings)) for n in waits]
            finally:
                os.environ.clear()
                os.environ.update(saved)


def rows(results: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Table rows for ``make bench``."""
    out = []
    for r in results:
        out.append((f"wait events, {r['waits']} concurrent Batch waits: latency state change -> wait, p50 / p95",
                     f"{r['latency_p50_s']:.2f} / {r['latency_p95_s']:.2f} s ({r['events_delivered']} events; "
                     f"from PutEvents {r['from_put_events_p50_s']:.2f} / {r['from_put_events_p95_s']:.2f} s)"))
        out.append((f"wait events, {r['waits']} concurrent Batch waits: AWS calls per waiting hour, per wait / all",
                     f"{r['calls_per_waiting_hour_per_wait']:.0f} / {r['calls_per_hour_all_waits']:.0f} "
                     f"({r['sqs_calls']} SQS + {r['describe_calls']} describe calls, waits of "
                     f"{r['mean_wait_s']:.0f} s)"))
        out.append((f"wait events, {r['waits']} concurrent Batch waits: process CPU (consumer + sandbox)",
                     f"{r['cpu_s']:.1f} s in {r['wall_s']:.1f} s"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim2real.dev.bench_waits", description=__doc__.splitlines()[0])
    ap.add_argument("--waits", default="1,10,50", help="concurrent wait counts, comma-separated")
    ap.add_argument("--step-seconds", type=float, default=1.0, help="seconds between a job's state changes")
    args = ap.parse_args(argv)
    counts = [int(x) for x in args.waits.split(",") if x.strip()]
    if not counts or min(counts) < 1:
        ap.error("--waits needs positive counts")
    results = run(counts, args.step_seconds)
    for name, value in rows(results):
        print(f"| {name} | {value} |")
    print(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
