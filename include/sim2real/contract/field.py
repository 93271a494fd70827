"""Field episodes: what a robot reports about one episode it ran with a deployed policy, and where it goes.

The document is ``schemas/field_episode.schema.json`` (JSON Schema 2020-12). The robots have no ``jsonschema``
(``containers/greengrass/artifacts/requirements-edge.txt``), so :func:`errors` validates with the standard library:
it interprets the schema file itself (the keywords of :data:`KEYWORDS`, and refuses a schema with any other), so
the robot (:mod:`sim2real.edge.field_recorder`) and the Airflow side (:mod:`sim2real.orchestration.field`) check
the same rules. The success rate's interval comes from :func:`sim2real.contract.stats.wilson_interval`.

Object layout (one object per episode, written once, never overwritten)::

    <prefix>field/episodes/<thing_name>/<episode_id>.json
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sim2real.contract import schemas

SCHEMA = "field_episode"
SCHEMA_VERSION = 1
#: Who decided an episode's success (``outcome.source``).
SOURCES = ("task_success_fn", "operator_label", "intervention")
#: Folder of the episode objects under the prefix.
EPISODES_FOLDER = "field/episodes/"
#: The schema keywords :func:`errors` checks; the others it accepts are annotations.
KEYWORDS = frozenset({"type", "const", "enum", "required", "properties", "additionalProperties", "propertyNames",
                      "minimum", "minLength", "pattern", "format"})
ANNOTATIONS = frozenset({"$schema", "$id", "title", "description"})


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
    by path (the messages read like ``sim2real.contract.schemas.errors``'), plus ``ended_at`` before ``started_at``.

    Standard library only: the robots validate with it before spooling, the Airflow side before accepting.

    :return: an empty list when ``document`` is a valid episode.
    :raises ValueError: the schema file uses a keyword outside :data:`KEYWORDS` (a schema change this
        validator does not follow yet).
    """
    found: list[tuple[str, str]] = []
    _check(schemas.load(SCHEMA), document, "$", found)
    if not found and parse_time(document["ended_at"]) < parse_time(document["started_at"]):
        found.append(("$.ended_at", f"{document['ended_at']!r} is before started_at {document['started_at']!r}"))
    return [f"{where}: {message}" for where, message in sorted(found, key=lambda f: f[0])]


def validate(document: Any) -> dict[str, Any]:
    """``document`` itself when it is a valid episode.

    :raises FieldEpisodeError: listing every mismatch (:func:`errors`).
    """
    problems = errors(document)
    if problems:
        raise FieldEpisodeError(problems)
    return document


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return {"object": isinstance(value, Mapping), "array": isinstance(value, list), "string": isinstance(value, str),
            "boolean": isinstance(value, bool), "null": value is None}[name]


def _check(schema: Mapping[str, Any], value: Any, where: str, found: list[tuple[str, str]]) -> None:
    unknown = set(schema) - KEYWORDS - ANNOTATIONS
    if unknown:
        raise ValueError(f"the {SCHEMA} schema uses {sorted(unknown)} at {where}, which "
                         "sim2real.contract.field.errors does not check")
    types = schema.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        if not any(_is_type(value, t) for t in types):
            shown = repr(types[0]) if len(types) == 1 else repr(types)
            found.append((where, f"{value!r} is not of type {shown}"))
            return
    if "const" in schema and not (value == schema["const"] and type(value) is type(schema["const"])):
        found.append((where, f"{schema['const']!r} was expected"))
    if "enum" in schema and value not in schema["enum"]:
        found.append((where, f"{value!r} is not one of {schema['enum']!r}"))
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            found.append((where, f"{value!r} should be non-empty" if schema["minLength"] == 1
                          else f"{value!r} is too short"))
        if "pattern" in schema and not re.search(schema["pattern"], value):
            found.append((where, f"{value!r} does not match {schema['pattern']!r}"))
        if schema.get("format") == "date-time":
            try:
                parse_time(value)
            except ValueError:
                found.append((where, f"{value!r} is not a 'date-time'"))
    if "minimum" in schema and _is_type(value, "number") and value < schema["minimum"]:
        found.append((where, f"{value!r} is less than the minimum of {schema['minimum']!r}"))
    if isinstance(value, Mapping):
        _check_object(schema, value, where, found)


def _check_object(schema: Mapping[str, Any], value: Mapping[str, Any], where: str,
                  found: list[tuple[str, str]]) -> None:
    for name in schema.get("required", []):
        if name not in value:
            found.append((where, f"{name!r} is a required property"))
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    unexpected = [k for k in value if k not in props]
    if extra is False and unexpected:
        found.append((where, "Additional properties are not allowed "
                             f"({', '.join(repr(k) for k in unexpected)} {'was' if len(unexpected) == 1 else 'were'} "
                             "unexpected)"))
    for key, item in value.items():
        if "propertyNames" in schema:
            _check(schema["propertyNames"], key, where, found)
        if key in props:
            _check(props[key], item, f"{where}.{key}", found)
        elif isinstance(extra, Mapping):
            _check(extra, item, f"{where}.{key}", found)
