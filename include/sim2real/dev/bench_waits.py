"""Wait bench, polling vs AWS events: resume latency, AWS calls per waiting hour and triggerer CPU at 1, 10 and 50
concurrent waits, through the production trigger (:class:`~sim2real.orchestration.triggers.batch.BatchTrainingJobTrigger`).

``python -m sim2real.dev.bench_waits [--waits 1,10,50] [--poll-seconds 5] [--hold-seconds 20] [--hour-scale 20]
[--only-hour | --no-hour] [--hour-one-at-a-time]`` (also ``make bench BENCH_ARGS="--only waits"``, or
``"--only waits-hour"`` for the waiting-hour rows alone).

Two row sets, both in the local sandbox (moto), where N Batch jobs are submitted whose launcher only sleeps (no
training: the sandbox moves each job through SUBMITTED ... RUNNING ... SUCCEEDED, one step every
``--step-seconds``), and one trigger per job runs on one asyncio event loop in its own thread, as the waits of one
triggerer do, once with ``events.mode = "polling"`` and once with ``"events"`` (one consumer of a wait-event queue):

* **short waits** (:func:`run`, latency): jobs RUNNING ``--hold-seconds`` (20 s), polling every ``--poll-seconds``
  (5 s), events with the 20 s long poll and the 600 s reconcile; the rows one after the other. Waits this short
  are dominated by fixed costs (each wait's first describe, receives returning early while events flow), so their
  per-hour call rates say little about long waits;
* **the waiting hour** (:func:`run_hour`, calls): every interval the wait uses divided by k (``--hour-scale``,
  default 20; :func:`scaled_intervals`): the consumer's long poll 20 s -> 1 s (``events.wait_time_seconds``), the
  reconcile 600 s -> 30 s, the polling interval 30 s (the operators' default) -> 1.5 s, and the job RUNNING
  3600 s -> 180 s, so the calls counted over those 180 s are the calls of one waiting hour at production
  intervals; per-hour figures divide by ``seconds * k / 3600``. Not scaled: the sandbox's 1 s between state changes
  before RUNNING (20 s at production time) and the API latency. Each (mode, count) is its own triggerer on its
  own Batch job queue with its own wait-event queue and rule, so all six rows run at once in one sandbox without
  sharing messages or a consumer (their calls are told apart by queue URL and job id; :func:`count_calls`).

Measured per row:

* resume latency: from the sandbox's state change to SUCCEEDED (the moment its responder changed the job and
  handed the event to its one sender thread) to the trigger yielding its event (the task resuming), p50 / p95 over
  the waits; beside it the same from moto's PutEvents returning (the difference is the sandbox's own publishing
  backlog: one thread sends every event of every job, up to 10 per PutEvents call; EventBridge has no such queue);
* AWS calls, counted by the sandbox's server (every request from outside the sandbox): SQS (ReceiveMessage,
  DeleteMessageBatch, ChangeMessageVisibilityBatch) and DescribeJobs, separately and together, divided by the
  summed waiting hours (per wait) and by the wall hours of the row (all waits together);
* triggerer CPU seconds: the CPU time of the event loop's thread (the triggers, the consumer, aiobotocore); the
  in-process sandbox runs in other threads and is not counted.

With events, the Batch waits of a triggerer describe at the ticks of a shared reconcile clock and share one
DescribeJobs call per tick (:mod:`sim2real.orchestration.events.shared`), so an idle long wait costs its share of
the consumer's 3600 / 20 = 180 long-poll receives an hour (180 / N for N waits), 6 / N reconcile calls, and
its start and its state changes (a describe share, receives and deletes of its events). Figures depend on the
machine and its load: measurements, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
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


def _run_triggers(sandbox: Any, n: int, mode: str, poll_seconds: float, *, job_queue: str | None = None,
                  events: dict[str, Any] | None = None, scale: float = 1.0) -> dict[str, Any]:
    """N triggers on one event loop in one thread (one triggerer); returns the row (see the module doc).

    :param job_queue: the Batch job queue the jobs go to (default the sandbox's); its events reach the queue of
        ``events`` only (the hour rows give each row its own job queue and wait-event queue).
    :param events: the events section of the triggers (default the sandbox's, with ``mode``).
    :param scale: the time scale k of the row: every interval of the wait was divided by k, so ``x`` seconds of
        this row stand for ``k * x`` seconds at production intervals (per-hour figures are divided by k).
    """
    from sim2real.orchestration.triggers.batch import BatchTrainingJobTrigger

    batch = sandbox.client("batch", internal=True)
    config = sandbox.config["batch"]
    queue = job_queue or config["job_queue"]
    events = {**(events if events is not None else sandbox.config.get("events") or {}), "mode": mode}
    resumed: dict[str, float] = {}
    started: dict[str, float] = {}
    outcome: dict[str, str] = {}
    cpu: dict[str, float] = {}
    seen: dict[str, int] = {"describe": 0, "event": 0}

    async def one(index: int) -> None:
        job_id = (await asyncio.to_thread(batch.submit_job, jobName=f"bench-{mode}-{n}-{index}",
                                          jobQueue=queue,
                                          jobDefinition=config["job_definition"]))["jobId"]
        trigger = BatchTrainingJobTrigger(job_id=job_id, progress=False, runnable_timeout_seconds=None,
                                          waiter_delay=poll_seconds, waiter_max_attempts=100000, events=events)
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
        loop = asyncio.get_running_loop()
        for consumer in active_consumers():
            if consumer.loop is loop:     # other rows' triggerers run their own consumers
                await consumer.drained()  # the receive in flight ends (up to 20 s), as in a triggerer
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
    queue_url = events.get("queue_url") if mode == "events" else None
    sqs, describes = count_calls([r for r in sandbox.requests.since(t0) if r.time <= t_end + 0.001],
                                 queue_url, set(started))
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
    return {
        "mode": mode, "waits": n, "outcomes": sorted(set(outcome.values())), "latency_n": len(latencies),
        "responses_seen": seen,
        "latency_p50_s": statistics.median(latencies) if latencies else float("nan"),
        "latency_p95_s": _percentile(latencies, 0.95),
        "from_put_events_p50_s": statistics.median(from_put) if from_put else float("nan"),
        "from_put_events_p95_s": _percentile(from_put, 0.95),
        "sqs_calls": sqs, "describe_calls": describes, "calls": calls,
        # waiting_s sums every wait's seconds: calls per hour of it are calls per waiting hour per wait
        "sqs_per_waiting_hour_per_wait": per_hour(sum(sqs.values()), waiting_s, scale),
        "describes_per_waiting_hour_per_wait": per_hour(describes, waiting_s, scale),
        "calls_per_waiting_hour_per_wait": per_hour(calls, waiting_s, scale),
        "calls_per_hour_all_waits": per_hour(calls, wall_s, scale),
        "hour_scale": scale, "waiting_hours": waiting_s * scale / 3600,
        "mean_wait_s": waiting_s / max(len(resumed), 1), "wall_s": wall_s,
        "triggerer_cpu_s": cpu.get("waits", float("nan")), "triggerer_cpu_with_drain_s": cpu.get("total", float("nan")),
        "poll_seconds": poll_seconds if mode == "polling" else None,
        "reconcile_interval_seconds": events.get("reconcile_interval_seconds") if mode == "events" else None,
        "long_poll_seconds": events.get("wait_time_seconds", LONG_POLL_SECONDS) if mode == "events" else None,
    }


def _request_params(body: str) -> dict[str, Any]:
    """The parameters of a recorded request body: JSON (SQS's and Batch's JSON protocols) or a query string."""
    body = body.strip()
    if body.startswith("{"):
        try:
            return json.loads(body)
        except ValueError:
            return {}
    return {k: v[0] for k, v in urllib.parse.parse_qs(body).items()}


def count_calls(requests: list[Any], queue_url: str | None, job_ids: set[str]) -> tuple[dict[str, int], int]:
    """``({SQS action: calls}, DescribeJobs calls)`` of one row among ``requests`` (the sandbox's
    :class:`RecordedRequest` s): SQS calls on ``queue_url`` (none when None: a polling row), DescribeJobs calls
    naming at least one of ``job_ids`` (a call for several waits' jobs counts once)."""
    sqs = dict.fromkeys(SQS_ACTIONS, 0)
    describes = 0
    for r in requests:
        if r.action in SQS_ACTIONS:
            if queue_url is not None and _request_params(r.body).get("QueueUrl") == queue_url:
                sqs[r.action] += 1
        elif r.action in DESCRIBE_ACTIONS:
            jobs = _request_params(r.body).get("jobs") or []
            if isinstance(jobs, str):
                jobs = [jobs]
            if job_ids.intersection(jobs):
                describes += 1
    return sqs, describes


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


#: The production intervals of a wait the waiting-hour rows scale (seconds): the consumer's SQS long poll
#: (``events.wait_time_seconds``), the reconcile describe (``events.reconcile_interval_seconds``), the polling
#: interval (the operators' ``waiter_delay``) and the hour the job stays RUNNING.
PRODUCTION_INTERVALS = {"wait_time_seconds": LONG_POLL_SECONDS, "reconcile_interval_seconds": 600.0,
                        "poll_seconds": 30.0, "hold_seconds": 3600.0}
#: Default time scale k of the waiting-hour rows (the largest SQS allows: 20 s long polls become 1 s).
HOUR_SCALE = 20


def scaled_intervals(k: int) -> dict[str, float]:
    """Every interval of :data:`PRODUCTION_INTERVALS` divided by ``k``: with them, the calls made in
    ``3600 / k`` seconds of waiting are the calls of one waiting hour at production intervals.

    :param k: the time scale, a whole number dividing 20 (SQS takes a whole ``WaitTimeSeconds`` of 1..20).
    :return: ``{"wait_time_seconds": int, "reconcile_interval_seconds", "poll_seconds", "hold_seconds"}``.
    :raises ValueError: for any other ``k``.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1 or LONG_POLL_SECONDS % k:
        raise ValueError(f"the hour scale must be a whole number dividing {LONG_POLL_SECONDS} (SQS long polls "
                         f"last a whole 1..{LONG_POLL_SECONDS} s), got {k!r}")
    out = {name: value / k for name, value in PRODUCTION_INTERVALS.items()}
    out["wait_time_seconds"] = LONG_POLL_SECONDS // k
    return out


def per_hour(calls: float, seconds: float, k: float) -> float:
    """Calls per hour at production intervals of ``calls`` counted over ``seconds`` of a row scaled by ``k``
    (``seconds * k`` production seconds); NaN for no time."""
    return calls * 3600 / (seconds * k) if seconds > 0 else float("nan")


def _provision_hour_rows(sandbox: Any, waits: list[int]) -> dict[tuple[str, int], dict[str, Any]]:
    """For each (mode, count): its own Batch job queue and, for an events row, its own wait-event queue behind an
    EventBridge rule for that job queue only (infra/'s Batch pattern), so rows running at the same time share
    neither messages nor consumers. Polling rows' job queue has no rule (its events reach no queue)."""
    from sim2real.orchestration.events.patterns import ProjectResources, rule_patterns

    batch = sandbox.client("batch", internal=True)
    sqs = sandbox.client("sqs", internal=True)
    events = sandbox.client("events", internal=True)
    ce = sandbox.config["batch"]["compute_environment"]
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for n in waits:
        for mode in ("polling", "events"):
            name = f"bench-hour-{mode}-{n}"
            arn = batch.create_job_queue(jobQueueName=name, state="ENABLED", priority=1,
                                         computeEnvironmentOrder=[{"order": 1, "computeEnvironment": ce}])["jobQueueArn"]
            row: dict[str, Any] = {"job_queue": name, "queue_url": None}
            if mode == "events":
                url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
                queue_arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
                pattern = rule_patterns(ProjectResources(job_queue_arn=arn, codebuild_project="-", ssm_documents=(),
                                                         pipeline_arn="-", model_package_group="-",
                                                         greengrass=False))["BatchJobStateChange"]
                events.put_rule(Name=name, EventPattern=json.dumps(pattern), State="ENABLED")
                events.put_targets(Rule=name, Targets=[{"Id": "BenchQueue", "Arn": queue_arn}])
                row["queue_url"] = url
            out[(mode, n)] = row
    return out


@contextlib.contextmanager
def _sandbox_for_waits(prefix: str, hold_seconds: float, step_seconds: float) -> Iterator[Any]:
    """A provisioned sandbox (no HyperPod, one robot) whose Batch jobs run ``hold_seconds`` s each, with this
    process's environment pointing the Airflow side at it until the context exits (then restored)."""
    from sim2real.dev.sandbox import Sandbox

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        launcher = Path(tmp) / "launcher.sh"
        launcher.write_text(f"#!/bin/bash\nsleep {float(hold_seconds):g}\nexit 0\n")
        with Sandbox(step_seconds=step_seconds, batch_launcher=launcher) as sandbox:
            sandbox.provision(hyperpod=False, robots=1)
            saved = dict(os.environ)
            os.environ.update(sandbox.airflow_env())
            try:
                yield sandbox
            finally:
                os.environ.clear()
                os.environ.update(saved)


def run_hour(waits: list[int], scale: int = HOUR_SCALE, step_seconds: float = 1.0,
             together: bool = True, hold_seconds: float | None = None) -> list[dict[str, Any]]:
    """The measured waiting-hour rows: both modes at each count with every interval divided by ``scale``
    (:func:`scaled_intervals`; the job RUNNING ``3600 / scale`` s), per-hour figures of the calls counted.

    Each (mode, count) is its own triggerer (event loop, thread, consumer) on its own job queue and wait-event
    queue (:func:`_provision_hour_rows`), so with ``together`` all rows run at once in one sandbox (their calls are
    told apart by queue URL and job id); otherwise one after the other.

    ``hold_seconds`` (default ``3600 / scale``) shortens the job for tests: the rows then measure less than an
    hour of waiting (``waiting_hours`` says how much).

    :return: a row dict per (mode, count), as :func:`run`'s, with ``hour_scale`` and ``scaled``.
    """
    iv = scaled_intervals(scale)
    if hold_seconds is not None:
        iv["hold_seconds"] = float(hold_seconds)
    with _sandbox_for_waits("sim2real-bench-hour-", iv["hold_seconds"], step_seconds) as sandbox:
        setup = _provision_hour_rows(sandbox, waits)
        results: dict[tuple[str, int], dict[str, Any]] = {}
        errors: list[BaseException] = []

        def one(mode: str, n: int) -> None:
            row = setup[(mode, n)]
            events = ({"mode": "events", "queue_url": row["queue_url"],
                       "reconcile_interval_seconds": iv["reconcile_interval_seconds"],
                       "wait_time_seconds": iv["wait_time_seconds"]} if mode == "events" else {})
            try:
                results[(mode, n)] = {**_run_triggers(sandbox, n, mode, iv["poll_seconds"],
                                                      job_queue=row["job_queue"], events=events, scale=scale),
                                      "scaled": iv, "together": together}
            except BaseException as err:  # noqa: BLE001 - re-raised below
                errors.append(err)

        order = [(mode, n) for n in waits for mode in ("polling", "events")]
        if together:
            threads = [threading.Thread(target=one, args=key, name=f"bench-hour-{key[0]}-{key[1]}")
                       for key in order]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:
            for key in order:
                one(*key)
        if errors:
            raise errors[0]
        return [results[key] for key in order]


def _calls_per_wait(r: dict[str, Any], digits: int) -> str:
    """A row's AWS calls per waiting hour per wait, ``"<SQS> + <DescribeJobs> = <total>"`` with ``digits``
    decimals."""
    return (f"{r['sqs_per_waiting_hour_per_wait']:.{digits}f} + {r['describes_per_waiting_hour_per_wait']:.{digits}f}"
            f" = {r['calls_per_waiting_hour_per_wait']:.{digits}f}")


def _calls_made(r: dict[str, Any]) -> str:
    """The AWS calls a row made, by kind, and over how long: ``"<n> calls: ... DescribeJobs in <s> s"``."""
    sqs = r["sqs_calls"]
    return (f"{r['calls']} calls: {sqs['ReceiveMessage']} Receive, {sqs['DeleteMessageBatch']} DeleteBatch, "
            f"{sqs['ChangeMessageVisibilityBatch']} VisibilityBatch, {r['describe_calls']} DescribeJobs in "
            f"{r['wall_s']:.0f} s")


def hour_rows(results: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Table rows of :func:`run_hour`: per count, polling beside events, labelled with the scale."""
    out = []
    for r in results:
        k, iv = r["hour_scale"], r["scaled"]
        how = (f"time-scaled by k = {k:g}: every interval / {k:g}, job RUNNING {iv['hold_seconds']:g} s = "
               f"{iv['hold_seconds'] * k / 3600:.2g} h"
               + (", all rows at once" if r.get("together") else ""))
        label = (f"waits by polling every 30 s (run at {iv['poll_seconds']:g} s)" if r["mode"] == "polling"
                 else f"waits by events (reconcile 600 s, long poll 20 s; run at {iv['reconcile_interval_seconds']:g}"
                      f" s, {iv['wait_time_seconds']:g} s)")
        head = f"waiting hour, measured ({how}): {label}, {r['waits']} concurrent Batch waits"
        out.append((f"{head}: AWS calls per waiting hour per wait, SQS + DescribeJobs = total",
                    f"{_calls_per_wait(r, 1)} ({r['waiting_hours']:.2f} waiting hours)"))
        out.append((f"{head}: AWS calls per hour, all waits together",
                    f"{r['calls_per_hour_all_waits']:.0f} ({_calls_made(r)} = {r['wall_s'] * k / 3600:.2f} h scaled)"))
        out.append((f"{head}: resume latency p50 / p95 (not scaled)",
                    f"{r['latency_p50_s']:.2f} / {r['latency_p95_s']:.2f} s ({r['latency_n']} waits, outcomes "
                    f"{','.join(r['outcomes'])})"))
        out.append((f"{head}: triggerer CPU (event loop thread, over the scaled hour)",
                    f"{r['triggerer_cpu_s']:.2f} s"))
    return out


def run(waits: list[int], step_seconds: float = 1.0, poll_seconds: float = 5.0,
        hold_seconds: float = 20.0) -> list[dict[str, Any]]:
    """Both modes for each wait count in one sandbox; a row dict per (mode, count) (keys: see the module doc)."""
    with _sandbox_for_waits("sim2real-bench-waits-", hold_seconds, step_seconds) as sandbox:
        queue_url = (sandbox.config.get("events") or {}).get("queue_url")
        out = []
        for n in waits:
            for mode in ("polling", "events"):
                if queue_url:
                    _drain(sandbox, queue_url)
                out.append(_run_triggers(sandbox, n, mode, poll_seconds))
        return out


def rows(results: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Table rows for ``make bench``: polling and events beside each other per wait count."""
    out = []
    for r in results:
        label = (f"waits by polling every {r['poll_seconds']:g} s" if r["mode"] == "polling"
                 else f"waits by events (reconcile {r['reconcile_interval_seconds']:g} s)")
        head = f"{label}, {r['waits']} concurrent Batch waits"
        out.append((f"{head}: resume latency state change -> trigger event, p50 / p95",
                    f"{r['latency_p50_s']:.2f} / {r['latency_p95_s']:.2f} s ({r['latency_n']} waits, "
                    f"outcomes {','.join(r['outcomes'])}; from the sandbox's PutEvents returning: "
                    f"{r['from_put_events_p50_s']:.2f} / {r['from_put_events_p95_s']:.2f} s)"))
        out.append((f"{head}: AWS calls per waiting hour per wait, SQS + DescribeJobs = total",
                    f"{_calls_per_wait(r, 0)} (waits of {r['mean_wait_s']:.0f} s)"))
        out.append((f"{head}: AWS calls per hour, all waits together",
                    f"{r['calls_per_hour_all_waits']:.0f} ({_calls_made(r)})"))
        out.append((f"{head}: triggerer CPU (event loop thread)",
                    f"{r['triggerer_cpu_s']:.2f} s ({r['triggerer_cpu_with_drain_s']:.2f} s with the last receive)"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim2real.dev.bench_waits", description=__doc__.splitlines()[0])
    ap.add_argument("--waits", default="1,10,50", help="concurrent wait counts, comma-separated")
    ap.add_argument("--step-seconds", type=float, default=1.0, help="seconds between a job's state changes")
    ap.add_argument("--poll-seconds", type=float, default=5.0, help="the polling rows' DescribeJobs interval")
    ap.add_argument("--hold-seconds", type=float, default=20.0, help="seconds each job stays RUNNING")
    ap.add_argument("--hour-scale", type=int, default=HOUR_SCALE,
                    help="time scale k of the waiting-hour rows (a divisor of 20): every interval / k, "
                         "the job RUNNING 3600 / k s")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--only-hour", action="store_true", help="only the measured waiting-hour rows")
    which.add_argument("--no-hour", action="store_true", help="only the short-wait rows (latency)")
    ap.add_argument("--hour-one-at-a-time", action="store_true",
                    help="run the waiting-hour rows one after the other instead of all at once")
    args = ap.parse_args(argv)
    counts = [int(x) for x in args.waits.split(",") if x.strip()]
    if not counts or min(counts) < 1:
        ap.error("--waits needs positive counts")
    try:
        scaled_intervals(args.hour_scale)
    except ValueError as err:
        ap.error(str(err))
    out: dict[str, Any] = {}
    table: list[tuple[str, str]] = []
    if not args.only_hour:
        out["short"] = run(counts, args.step_seconds, args.poll_seconds, args.hold_seconds)
        table += rows(out["short"])
    if not args.no_hour:
        out["hour"] = run_hour(counts, args.hour_scale, args.step_seconds, together=not args.hour_one_at_a_time)
        table += hour_rows(out["hour"])
    for name, value in table:
        print(f"| {name} | {value} |")
    print(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
