"""Field bench: the canary's wait and the field report ingestion, measured against moto's S3 in this process.

``make bench BENCH_ARGS="--only field"``. Rows:

* **the canary wait's AWS calls per waiting hour**: the production trigger
  (:class:`~sim2real.orchestration.triggers.canary.CanaryFieldEpisodesTrigger`) waits on 2 canary robots whose
  folders already hold objects of earlier releases, ``--polls`` polls with ``waiter_delay`` 0; the S3 requests it made
  are counted (its client's ListObjectsV2 calls) and scaled to an hour at :data:`FIELD_POLL_AWS` (300 s, the
  canary's listing interval on AWS). Beside it, measured in the same run, the anchor: a wait that reads every episode
  object each poll (ListObjectsV2 + GetObject of each, what reading the episodes in every poll would cost);
* **worker-slot seconds of the canary wait**: the operator's ``execute`` from its start until it defers (the rest
  of the window runs in the triggerer); the anchor is a poke-mode sensor, which holds its slot for the whole window
  (3600 s for a one-hour window: by definition, not measured);
* **field report ingestion**: :func:`sim2real.orchestration.field.collect_field_episodes` + ``field_summary`` over
  ``--episodes`` valid episode objects (list, read, validate with the schema, summarize), episodes per second,
  beside the anchor of listing and reading the same objects with no check (the I/O alone).

Figures depend on the machine and its load: measurements, not assertions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

#: The canary's listing interval on AWS (``dag_defaults.FIELD_POLL`` with ``SIM2REAL_POLL_SECONDS`` 30).
FIELD_POLL_AWS = 300
BUCKET, ROBOTS = "sim2real-bench-field", ("robot-1", "robot-2")


def _episode(thing: str, i: int, start: datetime) -> dict[str, Any]:
    """A valid field episode document (schema ``field_episode`` v1) of ``thing``, number ``i``."""
    return {"schema_version": 1, "episode_id": f"bench-{thing}-{i:06d}", "thing_name": thing,
            "model_package_arn": None, "model_version": "a" * 64, "deployment_id": "d-bench",
            "component_versions": {"com.sim2real.FieldUploader": "1.0.0"},
            "started_at": (start + timedelta(seconds=i)).isoformat().replace("+00:00", "Z"),
            "ended_at": (start + timedelta(seconds=i + 1)).isoformat().replace("+00:00", "Z"),
            "outcome": {"success": i % 3 != 0, "source": "task_success_fn"}, "interventions": 0, "steps": 50,
            "action_latency_ms": {"p50": 1.0, "p95": 2.0, "max": 3.0}}


def _upload(s3: Any, episodes: int, start: datetime) -> None:
    from sim2real.contract.field import episode_key

    for i in range(episodes):
        thing = ROBOTS[i % len(ROBOTS)]
        doc = _episode(thing, i, start)
        s3.put_object(Bucket=BUCKET, Key=episode_key("", thing, doc["episode_id"]), Body=json.dumps(doc).encode())


@contextlib.contextmanager
def _moto_s3() -> Iterator[Any]:
    """A moto server on 127.0.0.1 (the trigger's aiobotocore client needs a real socket) that the ``aws_default``
    connection reaches while open, with the bench bucket; yields a boto3 S3 client of it."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    # moto's backends live in this process, not in the server: each measurement starts from an empty account
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"), timeout=30)
    saved = {k: os.environ.get(k) for k in ("AIRFLOW_CONN_AWS_DEFAULT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update({"AIRFLOW_CONN_AWS_DEFAULT": json.dumps({
        "conn_type": "aws", "login": "testing", "password": "testing",
        "extra": {"region_name": "us-east-1", "endpoint_url": url}}),
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})
    try:
        s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=url)
        s3.create_bucket(Bucket=BUCKET)
        yield s3
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


def _read_everything(s3: Any) -> int:
    """The anchor's poll: list every episode object and read each; returns the S3 calls it made."""
    calls = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="field/episodes/"):
        calls += 1
        for obj in page.get("Contents", []):
            json.loads(s3.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read())
            calls += 1
    return calls


def canary_wait(polls: int = 20) -> dict[str, Any]:
    """S3 calls of ``polls`` polls of the canary wait (2 robots, 40 objects of an earlier release), ours and the
    read-everything anchor, per poll and per waiting hour at :data:`FIELD_POLL_AWS`."""
    from sim2real.orchestration.triggers.canary import CanaryFieldEpisodesTrigger

    calls = {"ListObjectsV2": 0}

    class Counted(CanaryFieldEpisodesTrigger):
        """The production trigger, its S3 client's ListObjectsV2 calls counted."""

        async def describe(self, client, state):
            class Client:
                def __getattr__(self, name: str) -> Any:
                    return getattr(client, name)

                async def list_objects_v2(self, **kwargs: Any) -> Any:
                    calls["ListObjectsV2"] += 1
                    return await client.list_objects_v2(**kwargs)

            return await super().describe(Client(), state)

    with _moto_s3() as s3:
        _upload(s3, 40, datetime.now(timezone.utc) - timedelta(days=1))
        later = datetime.now(timezone.utc) + timedelta(seconds=5)  # the window opens after those objects
        trigger = Counted(bucket=BUCKET, prefix="", thing_names=list(ROBOTS), min_episodes=20,
                          window_start=later.timestamp(), window_end=later.timestamp() + 3600,
                          waiter_delay=0, waiter_max_attempts=polls)

        async def run() -> dict[str, Any]:
            async for event in trigger.run():
                return event.payload
            return {}

        event = asyncio.run(run())
        anchor = sum(_read_everything(s3) for _ in range(polls))
    ours = calls["ListObjectsV2"]
    per_hour = 3600 / FIELD_POLL_AWS
    return {"polls": polls, "robots": len(ROBOTS), "objects": 40, "status": event.get("status"), "ours_calls": ours,
            "anchor_calls": anchor, "ours_per_hour": ours / polls * per_hour,
            "anchor_per_hour": anchor / polls * per_hour}


def worker_slot_seconds() -> dict[str, Any]:
    """Seconds the canary verdict's ``execute`` holds a worker slot before it defers (Stubber for Greengrass)."""
    from airflow.sdk.exceptions import TaskDeferred
    from botocore.stub import Stubber

    from sim2real.orchestration.operators.canary import CanaryVerdictOperator

    class TI:
        def __init__(self) -> None:
            self.xcom: dict[str, Any] = {}

        def xcom_push(self, key: str, value: Any) -> None:
            self.xcom[key] = value

    import boto3

    start = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
    with _moto_s3() as s3:  # IoT DescribeThingGroup on moto; Greengrass ListCoreDevices stubbed
        boto3.client("iot", region_name="us-east-1", endpoint_url=s3.meta.endpoint_url).create_thing_group(
            thingGroupName="robots-canary")
        op = CanaryVerdictOperator(task_id="canary_verdict", thing_group_name="robots-canary",
                                   deployment_id="d-bench", deployment_name="sim2real-bench-canary",
                                   model_version="a" * 64, bucket=BUCKET, min_episodes=20, window_minutes=60,
                                   min_success_rate=0.5, window_start=start)
        with Stubber(op.hook.conn) as stub:
            stub.add_response("list_core_devices", {"coreDevices": [{"coreDeviceThingName": t} for t in ROBOTS]})
            t0 = time.perf_counter()
            try:
                op.execute({"ti": TI()})
            except TaskDeferred:
                pass
            seconds = time.perf_counter() - t0
    return {"execute_s": seconds, "window_s": 3600}


def ingestion(episodes: int = 500) -> dict[str, Any]:
    """Episodes per second of reading, checking and summarizing ``episodes`` objects, beside plain list + get."""
    from sim2real.orchestration.field import collect_field_episodes, field_summary

    start = datetime.now(timezone.utc) - timedelta(hours=1)
    with _moto_s3() as s3:
        _upload(s3, episodes, start)
        t0 = time.perf_counter()
        got = collect_field_episodes(s3, BUCKET, "", model_version="a" * 64, deployment_ids=["d-bench"],
                                     thing_names=list(ROBOTS), not_before=start,
                                     not_after=start + timedelta(days=1))
        summary = field_summary(got.accepted)
        ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        _read_everything(s3)
        anchor = time.perf_counter() - t0
    return {"episodes": episodes, "accepted": len(got.accepted), "refused": sum(got.refused.values()),
            "n": summary["a" * 64]["n"], "ours_s": ours, "anchor_s": anchor,
            "ours_per_s": episodes / ours, "anchor_per_s": episodes / anchor}


def measure(polls: int = 20, episodes: int = 500) -> dict[str, Any]:
    return {"canary_wait": canary_wait(polls), "worker_slot": worker_slot_seconds(), "ingestion": ingestion(episodes)}


def rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    wait, slot, ing = result["canary_wait"], result["worker_slot"], result["ingestion"]
    return [
        (f"canary wait, S3 calls per waiting hour ({wait['robots']} canary robots, a listing every {FIELD_POLL_AWS} s; "
         f"{wait['objects']} objects of an earlier release in their folders; {wait['polls']} polls measured)",
         f"ours {wait['ours_per_hour']:.0f} (ListObjectsV2 only) vs {wait['anchor_per_hour']:.0f} reading every "
         "object each poll"),
        ("canary wait, worker-slot seconds for a one-hour window",
         f"ours {slot['execute_s']:.3f} s (execute until it defers) vs {slot['window_s']} s for a poke-mode sensor"),
        (f"field report ingestion ({ing['episodes']} episodes in moto S3: list, read, schema check, summary)",
         f"ours {ing['ours_per_s']:.0f} episodes/s vs {ing['anchor_per_s']:.0f} episodes/s list + read alone "
         f"({ing['accepted']} accepted, {ing['refused']} refused)"),
    ]
