"""Field episodes: what a robot reports about one episode it ran with a deployed policy, and where it goes.

The document is ``schemas/field_episode.schema.json`` (JSON Schema 2020-12), checked by :func:`errors` with
``jsonschema`` on the robot (:mod:`sim2real.edge.field_recorder`; its venv installs
``containers/greengrass/artifacts/requirements-edge.txt``) and on the Airflow side (:mod:`sim2real.orchestration.field`)
alike. The success rate's interval comes from :func:`sim2real.contract.stats.wilson_interval`.

Object layout (one key per episode; another body is never written over it)::

    <prefix>field/episodes/<thing_name>/<episode_id>.json      the summary (schema ``field_episode``)
    <prefix>field/data/<thing_name>/<episode_id>.parquet       its data, when recording is on (LeRobot v2.1)
    <prefix>field/datasets/<dataset_version>/manifest.json     a field dataset version (schema ``field_dataset``)
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sim2real.contract import schemas

SCHEMA = "field_episode"
SCHEMA_VERSION = 1
#: Who decided an episode's success (``outcome.source``).
SOURCES = ("task_success_fn", "operator_label", "intervention")
#: Folder of the episode objects under the prefix.
EPISODES_FOLDER = "field/episodes/"
#: Folder of the episodes' data files (LeRobot v2.1 episode parquet files) under the prefix.
DATA_FOLDER = "field/data/"
#: Folder of the field dataset versions (one ``<dataset_version>/manifest.json`` each) under the prefix.
DATASETS_FOLDER = "field/datasets/"
DATASET_SCHEMA = "field_dataset"
DATASET_SCHEMA_VERSION = 1


class FieldEpisodeError(ValueError):
    """A field episode does not follow the schema; ``errors`` lists every mismatch (``"<json path>: message"``)."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


def episode_key(prefix: str, thing_name: str, episode_id: str) -> str:
    """The S3 key of one episode: ``<prefix>field/episodes/<thing_name>/<episode_id>.json``.

    The same episode always has the same key (the id is the robot's own), so a second upload of it is refused by
    S3's conditional write instead of adding a copy.

    :param prefix: key prefix, ``""`` or ending in ``/`` (e.g. ``"sandbox/"``).
    :param thing_name: the robot's IoT thing name (``[A-Za-z0-9:_-]{1,128}``).
    :param episode_id: the robot's episode id (``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``: one path segment).
    :raises ValueError: a prefix not ending in ``/``, or a thing name / episode id the schema refuses.
    """
    if prefix and not prefix.endswith("/"):
        raise ValueError(f"prefix must be empty or end with '/', got {prefix!r}")
    props = schemas.load(SCHEMA)["properties"]
    for name, value in (("thing_name", thing_name), ("episode_id", episode_id)):
        if not isinstance(value, str) or not re.search(props[name]["pattern"], value):
            raise ValueError(f"{name} {value!r} does not match {props[name]['pattern']!r}")
    return f"{prefix}{EPISODES_FOLDER}{thing_name}/{episode_id}.json"


def data_key(prefix: str, thing_name: str, episode_id: str) -> str:
    """The S3 key of one episode's data file: ``<prefix>field/data/<thing_name>/<episode_id>.parquet``.

    :raises ValueError: as :func:`episode_key`.
    """
    episode_key(prefix, thing_name, episode_id)  # the same checks
    return f"{prefix}{DATA_FOLDER}{thing_name}/{episode_id}.parquet"


def data_uri(bucket: str, prefix: str, thing_name: str, episode_id: str) -> str:
    """The ``data_uri`` an episode summary names its data file with: ``s3://<bucket>/`` and :func:`data_key`.

    :raises ValueError: as :func:`data_key`.
    """
    return f"s3://{bucket}/{data_key(prefix, thing_name, episode_id)}"


def dataset_version(episodes: Sequence[Mapping[str, Any]]) -> str:
    """The content-addressed version of a field dataset: ``fd-`` and the first 16 hex digits of the sha256 of the
    canonical JSON (sorted keys, no spaces) of its ``episodes`` list (schema ``field_dataset``), so the same
    episodes always give the same version.
    """
    canonical = json.dumps(list(episodes), sort_keys=True, separators=(",", ":"))
    return "fd-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def manifest_key(prefix: str, version: str) -> str:
    """The S3 key of a field dataset version's manifest: ``<prefix>field/datasets/<version>/manifest.json``.

    :raises ValueError: a version that is not ``fd-`` and 16 hex digits.
    """
    if not isinstance(version, str) or not re.fullmatch(r"fd-[0-9a-f]{16}", version):
        raise ValueError(f"field dataset version {version!r} is not 'fd-' and 16 hex digits")
    return f"{prefix}{DATASETS_FOLDER}{version}/manifest.json"


def dataset_errors(document: Any) -> list[str]:
    """Every mismatch between ``document`` and the field dataset schema (``"<json path>: <message>"``, sorted), plus
    a ``dataset_version`` that is not :func:`dataset_version` of its episodes, episodes out of (thing_name,
    episode_id) order or repeated, and totals that do not add up.

    :return: an empty list when ``document`` is a valid manifest. :raises ImportError: no ``jsonschema``.
    """
    found = schemas.errors(DATASET_SCHEMA, document)
    if found or not isinstance(document, Mapping):
        return sorted(found)
    episodes = document["episodes"]
    order = [(e["thing_name"], e["episode_id"]) for e in episodes]
    if order != sorted(set(order)):
        found.append("$.episodes: not ordered by (thing_name, episode_id) or an episode is listed twice")
    if document["dataset_version"] != dataset_version(episodes):
        found.append(f"$.dataset_version: {document['dataset_version']!r} is not the episodes' version "
                     f"{dataset_version(episodes)!r}")
    totals, expected = document["totals"], {
        "episodes": len(episodes), "frames": sum(e["frames"] for e in episodes),
        "successes": sum(1 for e in episodes if e["success"]),
        "things": sorted({e["thing_name"] for e in episodes})}
    for name, value in expected.items():
        if (sorted(totals[name]) if name == "things" else totals[name]) != value:
            found.append(f"$.totals.{name}: {totals[name]!r}, the episodes give {value!r}")
    if totals["new_episodes"] > len(episodes):
        found.append(f"$.totals.new_episodes: {totals['new_episodes']} is more than the {len(episodes)} episodes")
    return sorted(found)


def validate_dataset(document: Any) -> dict[str, Any]:
    """``document`` itself when it is a valid field dataset manifest. :raises FieldEpisodeError: every mismatch
    (:func:`dataset_errors`)."""
    problems = dataset_errors(document)
    if problems:
        raise FieldEpisodeError(problems)
    return document


def episodes_prefix(prefix: str, thing_name: str | None = None) -> str:
    """The key prefix of every episode (``<prefix>field/episodes/``), or of one thing's (``.../<thing_name>/``)."""
    return f"{prefix}{EPISODES_FOLDER}" + (f"{thing_name}/" if thing_name else "")


def parse_time(value: str) -> datetime:
    """An RFC 3339 date-time (``2026-12-04T06:00:00Z``, ``...+02:00``, fractions allowed) as an aware datetime.

    :raises ValueError: not RFC 3339, or no offset.
    """
    if not isinstance(value, str) or not re.fullmatch(
            r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", value, flags=re.IGNORECASE):
        raise ValueError(f"{value!r} is not an RFC 3339 date-time with an offset")
    return datetime.fromisoformat(value.upper().replace("Z", "+00:00"))


def errors(document: Any) -> list[str]:
    """Every mismatch between ``document`` and the field episode schema, as ``"<json path>: <message>"``, sorted
    by path (:func:`sim2real.contract.schemas.errors`, ``jsonschema``), plus a ``started_at`` / ``ended_at`` that
    is not an RFC 3339 date-time with an offset (:func:`parse_time`; ``jsonschema`` checks ``date-time`` only
    where a format checker is installed) or an ``ended_at`` before ``started_at``.

    The robots validate with it before spooling (``jsonschema`` is in ``requirements-edge.txt``), the Airflow side
    before accepting.

    :return: an empty list when ``document`` is a valid episode.
    :raises ImportError: ``jsonschema`` is not installed.
    """
    found = schemas.errors(SCHEMA, document)
    if isinstance(document, Mapping):
        times = {}
        for name in ("started_at", "ended_at"):
            try:
                times[name] = parse_time(document.get(name))
            except ValueError as error:
                if name in document and not any(e.startswith(f"$.{name}:") for e in found):
                    found.append(f"$.{name}: {error}")
        if len(times) == 2 and times["ended_at"] < times["started_at"]:
            found.append(f"$.ended_at: {document['ended_at']!r} is before started_at {document['started_at']!r}")
    return sorted(found)


def validate(document: Any) -> dict[str, Any]:
    """``document`` itself when it is a valid episode.

    :raises FieldEpisodeError: listing every mismatch (:func:`errors`).
    """
    problems = errors(document)
    if problems:
        raise FieldEpisodeError(problems)
    return document
