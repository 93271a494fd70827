"""Field evaluation on the Airflow side: read the episodes the robots uploaded and sum them up per model version.

The robots write one object per episode (:mod:`sim2real.edge.field_recorder`, schema ``field_episode``,
``<prefix>field/episodes/<thing_name>/<episode_id>.json``, :mod:`sim2real.contract.field`).
:func:`collect_field_episodes` lists them and keeps those of one deployed model in one time window; every other
object is refused with its reason, counted, never merged. :func:`field_summary` gives the numbers a canary reads
beside the simulation's success rate (the same Wilson interval, :func:`sim2real.contract.stats.wilson_interval`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sim2real.contract import field as contract
from sim2real.contract.stats import nearest_rank, wilson_interval

#: Why an episode object was refused, in the order the checks run.
#: ``malformed``: not JSON, not the schema, or its key is not the one its content names; ``duplicated``: two or
#: more objects name the same (thing, episode id) (the key layout prevents it unless keys were written by hand;
#: every copy is refused); ``foreign``: another model version, a deployment not asked for, a thing outside the
#: group; ``early`` / ``late``: started before the window or ended after it.
REASONS = ("malformed", "duplicated", "foreign", "early", "late")


@dataclass
class FieldEpisodes:
    """What :func:`collect_field_episodes` read.

    :ivar accepted: the valid episodes of the model, deployments, things and window asked for (documents as
        uploaded), ordered by key.
    :ivar refused: ``{reason: count}`` for every reason of :data:`REASONS` (0 when none).
    :ivar refusals: ``(key, reason, detail)`` of each refused object, ordered by key (detail: what was wrong).
    """

    accepted: list[dict[str, Any]] = field(default_factory=list)
    refused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    refusals: list[tuple[str, str, str]] = field(default_factory=list)

    def refuse(self, key: str, reason: str, detail: str) -> None:
        self.refused[reason] += 1
        self.refusals.append((key, reason, detail))


def _client(s3_hook_or_client: Any) -> Any:
    return s3_hook_or_client.get_conn() if hasattr(s3_hook_or_client, "get_conn") else s3_hook_or_client


def _time(value: datetime | str) -> datetime:
    moment = contract.parse_time(value) if isinstance(value, str) else value
    if moment.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone: give the window's bounds with an offset (UTC)")
    return moment


def _read(client: Any, bucket: str, key: str) -> tuple[Any, list[str]]:
    body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    try:
        doc = json.loads(body)
    except ValueError as exc:
        return None, [f"not JSON: {exc}"]
    return doc, contract.errors(doc)


def collect_field_episodes(s3_hook_or_client: Any, bucket: str, prefix: str, *, model_version: str,
                           deployment_ids: Iterable[str], thing_names: Iterable[str], not_before: datetime | str,
                           not_after: datetime | str) -> FieldEpisodes:
    """The field episodes of one deployed model in one window, and every other episode object refused by reason.

    Lists ``<prefix>field/episodes/`` (``ListObjectsV2``, every page), reads each object there
    (``GetObject``) and checks, in this order: the schema and the key layout (``malformed``), one object per
    (thing, episode id) (``duplicated``: every copy refused), ``model_version`` / ``deployment_ids`` /
    ``thing_names`` (``foreign``), ``started_at >= not_before`` (``early``) and ``ended_at <= not_after``
    (``late``). Nothing is merged or repaired.

    :param s3_hook_or_client: an Airflow ``S3Hook`` (its ``get_conn()``) or a boto3 S3 client; needs
        ``s3:ListBucket`` on the prefix and ``s3:GetObject`` on its objects.
    :param bucket: the bucket; ``prefix``: the key prefix the robots were given (``""`` or ending in ``/``).
    :param model_version: what the robots were to serve (the deployment's ``ModelSha256`` or package version).
    :param deployment_ids: the Greengrass deployment ids that count (e.g. the canary's).
    :param thing_names: the things of the group (an episode of another thing is foreign).
    :param not_before: the window's start, aware datetime or RFC 3339 string (inclusive).
    :param not_after: the window's end, the same (inclusive).
    :return: :class:`FieldEpisodes` (accepted documents, counts by reason, each refusal with its key).
    :raises ValueError: a prefix not ending in ``/``, a bound without a time zone, ``not_after`` before
        ``not_before``. botocore's ``ClientError``: listing or reading failed (e.g. AccessDenied).
    """
    if prefix and not prefix.endswith("/"):
        raise ValueError(f"prefix must be empty or end with '/', got {prefix!r}")
    start, end = _time(not_before), _time(not_after)
    if end < start:
        raise ValueError(f"the window ends ({end.isoformat()}) before it starts ({start.isoformat()})")
    deployments, things = set(deployment_ids), set(thing_names)
    client = _client(s3_hook_or_client)
    root = contract.episodes_prefix(prefix)
    out = FieldEpisodes()
    valid: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    keys = [obj["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=root)
            for obj in page.get("Contents", [])]
    for key in sorted(keys):
        doc, problems = _read(client, bucket, key)
        if problems:
            out.refuse(key, "malformed", "; ".join(problems))
        else:
            valid[(doc["thing_name"], doc["episode_id"])].append((key, doc))
    checked: list[tuple[str, dict[str, Any]]] = []
    for (thing, episode_id), copies in valid.items():
        # The object under the episode's own key is the episode (one key per episode: at most one); a copy under
        # another key is refused, and never takes the genuine one down with it.
        expected = contract.episode_key(prefix, thing, episode_id)
        genuine = any(key == expected for key, _ in copies)
        for key, doc in copies:
            if key == expected:
                checked.append((key, doc))
            elif genuine:
                out.refuse(key, "duplicated", f"a copy of episode {episode_id!r} of {thing!r}, whose object is "
                           f"{expected!r}")
            else:
                out.refuse(key, "malformed", f"the key is not {expected!r}, which its thing_name / episode_id name")
    for key, doc in sorted(checked, key=lambda kd: kd[0]):
        foreign = [f"{name} {doc[name]!r} is not {want}" for name, ok, want in (
            ("model_version", doc["model_version"] == model_version, repr(model_version)),
            ("deployment_id", doc["deployment_id"] in deployments, f"one of {sorted(deployments)}"),
            ("thing_name", doc["thing_name"] in things, "a thing of the group")) if not ok]
        if foreign:
            out.refuse(key, "foreign", "; ".join(foreign))
        elif contract.parse_time(doc["started_at"]) < start:
            out.refuse(key, "early", f"started {doc['started_at']}, before the window ({start.isoformat()})")
        elif contract.parse_time(doc["ended_at"]) > end:
            out.refuse(key, "late", f"ended {doc['ended_at']}, after the window ({end.isoformat()})")
        else:
            out.accepted.append(doc)
    out.refusals.sort()
    return out


def field_summary(episodes: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The field numbers per model version, from accepted episodes (:func:`collect_field_episodes`).

    :param episodes: valid field episode documents.
    :return: ``{model_version: {"n", "successes", "rate", "ci95", "interventions", "latency_p95_ms",
        "latency_max_ms", "robots"}}``: episodes, successful ones, ``successes / n``, the Wilson 95 % interval
        ``[low, high]`` (:func:`sim2real.contract.stats.wilson_interval`), interventions summed, the nearest-rank
        95th percentile of the episodes' own ``action_latency_ms.p95`` and the largest ``action_latency_ms.max``
        (milliseconds), and ``robots``: ``{thing_name: {"n", "successes", "interventions"}}``. Versions and robots
        in name order; an empty input gives ``{}``.
    """
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for doc in episodes:
        groups[doc["model_version"]].append(doc)
    out: dict[str, dict[str, Any]] = {}
    for version in sorted(groups):
        docs = groups[version]
        n, successes = len(docs), sum(1 for d in docs if d["outcome"]["success"])
        robots: dict[str, dict[str, int]] = {}
        for d in sorted(docs, key=lambda d: d["thing_name"]):
            robot = robots.setdefault(d["thing_name"], {"n": 0, "successes": 0, "interventions": 0})
            robot["n"] += 1
            robot["successes"] += int(d["outcome"]["success"])
            robot["interventions"] += d["interventions"]
        low, high = wilson_interval(successes, n)
        out[version] = {
            "n": n, "successes": successes, "rate": successes / n, "ci95": [low, high],
            "interventions": sum(d["interventions"] for d in docs),
            "latency_p95_ms": nearest_rank([float(d["action_latency_ms"]["p95"]) for d in docs], 0.95),
            "latency_max_ms": max(float(d["action_latency_ms"]["max"]) for d in docs),
            "robots": robots,
        }
    return out
