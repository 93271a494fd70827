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
    :ivar earlier_objects: objects uploaded before the window (``LastModified``), not read: the robots' history,
        no refusal (only with ``uploaded_not_before``).
    """

    accepted: list[dict[str, Any]] = field(default_factory=list)
    refused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    refusals: list[tuple[str, str, str]] = field(default_factory=list)
    earlier_objects: int = 0

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


def read_episode_objects(s3_hook_or_client: Any, bucket: str, prefix: str, out: FieldEpisodes, *,
                         roots: Iterable[str] | None = None,
                         uploaded_not_before: datetime | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Every valid episode object under ``roots``, each under its own key; the others refused into ``out``.

    Lists each root (``ListObjectsV2``, every page), reads each object (``GetObject``) and refuses, into ``out``:
    an object that is not JSON, not the schema or not under the key its content names (``malformed``), a copy of an
    episode under another key (``duplicated``; the episode under its own key is kept) and, with
    ``uploaded_not_before``, an object uploaded (``LastModified``) before it is not read and only counted
    (``out.earlier_objects``: the robots' history, no refusal).

    :param s3_hook_or_client: an Airflow ``S3Hook`` (its ``get_conn()``) or a boto3 S3 client.
    :param prefix: the key prefix (``""`` or ending in ``/``); ``roots``: the key prefixes listed (default
        ``<prefix>field/episodes/``).
    :param out: where refusals go (:meth:`FieldEpisodes.refuse`; its ``refused`` must hold each reason used).
    :return: ``(key, document)`` of each valid episode object, ordered by key.
    :raises botocore.exceptions.ClientError: listing or reading failed (e.g. AccessDenied).
    """
    client = _client(s3_hook_or_client)
    valid: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    objects = [obj for root in (roots or [contract.episodes_prefix(prefix)])
               for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=root)
               for obj in page.get("Contents", [])]
    for obj in sorted(objects, key=lambda obj: obj["Key"]):
        key = obj["Key"]
        if uploaded_not_before is not None and obj["LastModified"] < uploaded_not_before:
            out.earlier_objects += 1  # the robot's history: its episode ended before the window
            continue
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
    return sorted(checked, key=lambda kd: kd[0])


def collect_field_episodes(s3_hook_or_client: Any, bucket: str, prefix: str, *, model_version: str,
                           deployment_ids: Iterable[str], thing_names: Iterable[str], not_before: datetime | str,
                           not_after: datetime | str, thing_folders_only: bool = False,
                           skip_uploaded_before: bool = False) -> FieldEpisodes:
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
    :param thing_folders_only: list only the folders of ``thing_names`` (``<prefix>field/episodes/<thing>/``)
        instead of every robot's: the other robots' objects are not read nor counted.
    :param skip_uploaded_before: count an object uploaded (``LastModified``) before ``not_before`` in
        ``earlier_objects`` without reading it (its episode ended before the window): a robot's history is not read
        again, nor refused.
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
    roots = ([contract.episodes_prefix(prefix, thing) for thing in sorted(things)] if thing_folders_only
             else [contract.episodes_prefix(prefix)])
    out = FieldEpisodes()
    checked = read_episode_objects(s3_hook_or_client, bucket, prefix, out, roots=roots,
                                   uploaded_not_before=start if skip_uploaded_before else None)
    for key, doc in checked:
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


#: The canary verdicts (:func:`canary_verdict`).
VERDICTS = ("promote", "roll_back", "wait")


@dataclass(frozen=True)
class CanaryVerdict:
    """What :func:`canary_verdict` decided.

    :ivar decision: one of :data:`VERDICTS`.
    :ivar message: for a person: the decision and its numbers (rate, interval, threshold, episodes).
    :ivar silent: the canary robots that reported no episode (name order).
    """

    decision: str
    message: str
    silent: tuple[str, ...] = ()


def canary_evidence(summary: Mapping[str, Any] | None, min_success_rate: float) -> str:
    """``"field success rate 0.900 (95 % Wilson interval [0.732, 0.965]) over 30 episode(s), threshold 0.800"``
    from one model version's :func:`field_summary` entry (None: no episode)."""
    if not summary or not summary.get("n"):
        return f"no field episode (95 % Wilson interval [0.000, 1.000]), threshold {min_success_rate:.3f}"
    low, high = summary["ci95"]
    return (f"field success rate {summary['rate']:.3f} (95 % Wilson interval [{low:.3f}, {high:.3f}]) over "
            f"{summary['n']} episode(s), threshold {min_success_rate:.3f}")


def canary_verdict(summary: Mapping[str, Any] | None, thing_names: Iterable[str], *, min_episodes: int,
                   min_success_rate: float, window_ended: bool, window_minutes: float) -> CanaryVerdict:
    """Promote the canary's release to the fleet, roll the canary back, or wait for more field episodes.

    Pure: no AWS call, no clock. In this order:

    * ``roll_back``: at least ``min_episodes`` episodes and the Wilson interval's *upper* bound below
      ``min_success_rate`` (the field says the release is worse than the threshold, at 95 %: no later episode is
      waited for);
    * ``promote``: at least ``min_episodes`` episodes, the lower bound at or above the threshold, and every canary
      robot reported at least one episode;
    * ``wait``: the window has not ended (too few episodes, a robot not heard from yet, or an interval that still
      holds the threshold: more episodes narrow it);
    * ``roll_back``: the window ended with too few episodes, with a canary robot that reported none (named:
      ``not promoted: robot X reported no episode in N min``), or with the lower bound still below the threshold.

    A release is promoted only when the field shows, at 95 %, that it reaches the threshold, and rolled back early
    only when it shows that it does not; in between the window decides (a first cut rolled back whenever the lower
    bound was below the threshold at ``min_episodes``: at 20 episodes and a threshold of 0.8 only 20 of 20 passed,
    so a release that succeeds 95 % of the time was rolled back two times out of three).

    :param summary: the deployed model version's :func:`field_summary` entry (``n``, ``successes``, ``rate``,
        ``ci95``, ``robots``), None when no episode was accepted.
    :param thing_names: the canary thing group's robots (IoT thing names).
    :param min_episodes: episodes needed before the rate decides (>= 1).
    :param min_success_rate: the field threshold, a fraction in ``[0, 1]``.
    :param window_ended: whether the canary window (``window_minutes`` after the canary deployment) is over.
    :param window_minutes: the window's length in minutes (named in the messages).
    :return: :class:`CanaryVerdict`; its message names the success rate, its 95 % Wilson interval, the threshold
        and the episode count.
    :raises ValueError: ``min_episodes`` < 1, a threshold outside ``[0, 1]``, or no canary robot.
    """
    things = sorted(set(thing_names))
    if not things:
        raise ValueError("the canary thing group has no robot: nothing to judge")
    if int(min_episodes) < 1:
        raise ValueError(f"min_episodes must be >= 1, got {min_episodes}")
    if not 0.0 <= float(min_success_rate) <= 1.0:
        raise ValueError(f"min_success_rate must be a fraction in [0, 1], got {min_success_rate}")
    n = int(summary["n"]) if summary else 0
    robots = (summary or {}).get("robots") or {}
    silent = tuple(t for t in things if not robots.get(t, {}).get("n"))
    evidence = canary_evidence(summary, min_success_rate)
    minutes = f"{window_minutes:g} min"
    enough = n >= min_episodes
    low, high = summary["ci95"] if summary else (0.0, 1.0)
    if enough and high < min_success_rate:
        return CanaryVerdict("roll_back", f"roll back: {evidence}: the whole interval is below the threshold with "
                                          f"{n} >= {min_episodes} episodes", silent)
    if enough and not silent and low >= min_success_rate:
        return CanaryVerdict("promote", f"promote: {evidence}: the interval's lower bound is at or above the "
                                        f"threshold, and each of the {len(things)} canary robot(s) reported", silent)
    if not window_ended:
        waiting = [f"{n} of {min_episodes} episodes"] if not enough else []
        waiting += [f"no episode yet from {', '.join(silent)}"] if silent else []
        if enough and not silent:
            waiting.append("the interval still holds the threshold: more episodes narrow it")
        return CanaryVerdict("wait", f"wait: {'; '.join(waiting)} ({evidence})", silent)
    reasons = [f"robot {t} reported no episode in {minutes}" for t in silent]
    if not enough:
        reasons.insert(0, f"only {n} episode(s) in {minutes}, {min_episodes} needed")
    if enough and not silent:
        reasons.append(f"the interval's lower bound is still below the threshold after {minutes}")
    return CanaryVerdict("roll_back", f"not promoted: {'; '.join(reasons)} ({evidence})", silent)
