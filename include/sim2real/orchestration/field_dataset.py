"""The field dataset: every field episode with recorded data, as one versioned manifest in S3.

A version (``<prefix>field/datasets/<dataset_version>/manifest.json``, schema ``field_dataset``,
:mod:`sim2real.contract.field`) lists every valid episode summary under ``<prefix>field/episodes/`` whose data file
S3 holds with the summary's sha256. Versions only grow: each names the version it grew from (``parent_version``),
and every episode of that parent is in it. The previous version is the one the asset ``sim2real_field_dataset``
last announced (:data:`sim2real.orchestration.assets.FIELD_DATASET_ASSET`, its event extra's ``manifest_uri``);
there is no second pointer object.

:func:`build_manifest` reads (no write); :func:`publish_manifest` writes a manifest once (conditional
``PutObject``); :func:`read_manifest` reads a published one back.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from botocore.exceptions import ClientError

from sim2real.contract import field as contract
from sim2real.contract.storage import MISSING_OBJECT_CODES, split_s3
from sim2real.orchestration.field import FieldEpisodes, _client, read_episode_objects

#: Why an episode object is left out of a version, in the order the checks run. ``malformed``: not JSON, not the
#: schema, not under its own key, or a ``data_uri`` that is not its data file's key; ``duplicated``: a copy of an
#: episode under another key; ``no_data``: recorded without data (no ``data_uri``); ``data_missing``: S3 has no
#: (or an empty) data file; ``checksum_mismatch``: S3's ``ChecksumSHA256`` of the data file is absent or not the
#: summary's ``data_sha256``.
REASONS = ("malformed", "duplicated", "no_data", "data_missing", "checksum_mismatch")


class FieldDatasetError(ValueError):
    """The new version cannot be built: an episode of the parent version is gone or changed, or the parent
    manifest is not the version it is announced as. ``problems`` lists each (naming the episode)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass
class FieldDatasetBuild:
    """What :func:`build_manifest` found.

    :ivar manifest: the new version's manifest (schema ``field_dataset``, valid).
    :ivar refusals: ``(key, reason, detail)`` of each episode object left out, ordered by key.
    """

    manifest: dict[str, Any]
    refusals: list[tuple[str, str, str]] = field(default_factory=list)


def s3_uri(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"


def checksum_hex(checksum_sha256: str | None) -> str | None:
    """S3's ``ChecksumSHA256`` (base64 of the 32-byte digest, ``HeadObject`` with ``ChecksumMode=ENABLED``) as hex;
    None when absent or not a whole-object digest (a multipart object's composite checksum ends in ``-<parts>``)."""
    if not checksum_sha256:
        return None
    try:
        digest = base64.b64decode(checksum_sha256, validate=True)
    except (binascii.Error, ValueError):
        return None
    return digest.hex() if len(digest) == 32 else None


def _head(client: Any, bucket: str, key: str) -> dict[str, Any] | None:
    """``HeadObject`` with ``ChecksumMode=ENABLED``; None on 404. :raises ClientError: any other error."""
    try:
        return client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") in MISSING_OBJECT_CODES:
            return None
        raise


def _entry(client: Any, bucket: str, prefix: str, key: str, doc: Mapping[str, Any]) -> tuple[dict | None, str, str]:
    """The manifest entry of one valid summary, or ``(None, reason, detail)``."""
    if "data_uri" not in doc:
        return None, "no_data", "no data_uri (recorded without data)"
    thing, episode_id = doc["thing_name"], doc["episode_id"]
    data_key = contract.data_key(prefix, thing, episode_id)
    data_uri = contract.data_uri(bucket, prefix, thing, episode_id)
    if doc["data_uri"] != data_uri:
        return None, "malformed", f"data_uri {doc['data_uri']!r} is not {data_uri!r}"
    head = _head(client, bucket, data_key)
    if head is None or int(head.get("ContentLength") or 0) < 1:
        return None, "data_missing", f"no data file at {data_uri}" + (" (empty)" if head else "")
    found = checksum_hex(head.get("ChecksumSHA256"))
    if found != doc["data_sha256"]:
        return None, "checksum_mismatch", (f"S3's ChecksumSHA256 of {data_key} is {found or 'absent'}, the summary's "
                                           f"data_sha256 {doc['data_sha256']}")
    return {"thing_name": thing, "episode_id": episode_id, "summary_key": key, "data_key": data_key,
            "sha256": found, "size_bytes": int(head["ContentLength"]), "frames": doc["data_frames"],
            "fps": doc["data_fps"], "task": doc["task"], "success": doc["outcome"]["success"],
            "model_version": doc["model_version"], "ended_at": doc["ended_at"]}, "", ""


def build_manifest(s3_hook_or_client: Any, bucket: str, prefix: str, *, parent: Mapping[str, Any] | None = None,
                   created_at: datetime | None = None) -> FieldDatasetBuild:
    """The next version of the field dataset: every valid summary with data, checked against its data file.

    Reads the summaries as :func:`sim2real.orchestration.field.read_episode_objects` does (``ListObjectsV2``,
    ``GetObject``; ``malformed`` / ``duplicated``), then, per summary, ``no_data`` (no ``data_uri``) and its data
    file's ``HeadObject`` with ``ChecksumMode=ENABLED``: missing or empty → ``data_missing``; ``ChecksumSHA256``
    (base64) absent or not ``data_sha256`` → ``checksum_mismatch``; ``ContentLength`` → ``size_bytes``. No write.

    :param s3_hook_or_client: an Airflow ``S3Hook`` or a boto3 S3 client (``s3:ListBucket``, ``s3:GetObject``).
    :param bucket: the bucket; ``prefix``: the robots' key prefix (``""`` or ending in ``/``).
    :param parent: the previous version's manifest (:func:`read_manifest`), None for the first version.
    :param created_at: the manifest's ``created_at`` (aware; default now, UTC).
    :return: :class:`FieldDatasetBuild`; its manifest's ``totals.new_episodes`` counts episodes not in ``parent``,
        ``refused`` each reason of :data:`REASONS`.
    :raises FieldDatasetError: an episode of ``parent`` is not in the new version (its summary or data file gone,
        refused, or changed): each named, with the reason.
    :raises ValueError: a prefix not ending in ``/``. botocore's ``ClientError``: an S3 call failed (not a 404).
    """
    if prefix and not prefix.endswith("/"):
        raise ValueError(f"prefix must be empty or end with '/', got {prefix!r}")
    client = _client(s3_hook_or_client)
    out = FieldEpisodes(refused=dict.fromkeys(REASONS, 0))
    episodes = []
    for key, doc in read_episode_objects(client, bucket, prefix, out):
        entry, reason, detail = _entry(client, bucket, prefix, key, doc)
        if entry is None:
            out.refuse(key, reason, detail)
        else:
            episodes.append(entry)
    episodes.sort(key=lambda e: (e["thing_name"], e["episode_id"]))
    out.refusals.sort()
    ours = {(e["thing_name"], e["episode_id"]): e for e in episodes}
    why = {key: f"{reason}: {detail}" for key, reason, detail in out.refusals}
    problems, old = [], set()
    for earlier in (parent or {}).get("episodes", []):
        name = (earlier["thing_name"], earlier["episode_id"])
        old.add(name)
        now = ours.get(name)
        if now is None:
            problems.append(f"episode {name[1]!r} of {name[0]!r} of the parent version {parent['dataset_version']} "
                            f"is not in the new one ({why.get(earlier['summary_key'], 'its summary is gone')})")
        elif now["sha256"] != earlier["sha256"]:
            problems.append(f"episode {name[1]!r} of {name[0]!r} of the parent version {parent['dataset_version']} "
                            f"changed: sha256 {earlier['sha256']} then, {now['sha256']} now")
    if problems:
        raise FieldDatasetError(problems)
    moment = (created_at or datetime.now(timezone.utc)).astimezone(timezone.utc)
    manifest = {
        "schema_version": contract.DATASET_SCHEMA_VERSION, "dataset_version": contract.dataset_version(episodes),
        "created_at": moment.isoformat().replace("+00:00", "Z"), "bucket": bucket, "prefix": prefix,
        "parent_version": parent["dataset_version"] if parent else None, "codebase_version": "v2.1",
        "episodes": episodes,
        "totals": {"episodes": len(episodes), "frames": sum(e["frames"] for e in episodes),
                   "successes": sum(1 for e in episodes if e["success"]),
                   "things": sorted({e["thing_name"] for e in episodes}),
                   "new_episodes": sum(1 for name in ours if name not in old)},
        "refused": dict(out.refused),
    }
    return FieldDatasetBuild(contract.validate_dataset(manifest), out.refusals)


def publish_manifest(s3_hook_or_client: Any, manifest: Mapping[str, Any]) -> tuple[str, bool]:
    """Write a manifest to its key once: ``PutObject`` with ``IfNoneMatch="*"`` (S3 conditional writes).

    :param manifest: a manifest of :func:`build_manifest`; checked with
        :func:`sim2real.contract.field.validate_dataset` before the write.
    :return: ``(manifest_uri, written)``: ``s3://<bucket>/<prefix>field/datasets/<version>/manifest.json``, and
        False when S3 answered 412 Precondition Failed (that version was already published: its manifest stays).
    :raises sim2real.contract.field.FieldEpisodeError: not a valid manifest. ``ClientError``: any other S3 error.
    """
    contract.validate_dataset(manifest)
    key = contract.manifest_key(manifest["prefix"], manifest["dataset_version"])
    body = json.dumps(manifest, indent=1, sort_keys=True).encode()
    try:
        _client(s3_hook_or_client).put_object(Bucket=manifest["bucket"], Key=key, Body=body, IfNoneMatch="*",
                                              ContentType="application/json", ChecksumAlgorithm="SHA256")
    except ClientError as err:
        error = err.response.get("Error", {})
        if error.get("Code") in ("PreconditionFailed", "412") or \
                err.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 412:
            return s3_uri(manifest["bucket"], key), False
        raise
    return s3_uri(manifest["bucket"], key), True


def read_manifest(s3_hook_or_client: Any, manifest_uri: str, dataset_version: str | None = None) -> dict[str, Any]:
    """A published manifest (``GetObject``), valid (:func:`sim2real.contract.field.validate_dataset`).

    :param dataset_version: the version it is announced as (an asset event's extra); checked when given.
    :raises FieldDatasetError: the body is not JSON (naming the URI), the manifest is not that version, or not
        under its own key. ``FieldEpisodeError``: not a valid manifest. ``ClientError``: S3 (e.g. NoSuchKey).
    """
    bucket, key = split_s3(manifest_uri) if isinstance(manifest_uri, str) else ("", "")
    if not key or key.endswith("/"):
        raise ValueError(f"{manifest_uri!r} is not an s3://<bucket>/<key> URI")
    body = _client(s3_hook_or_client).get_object(Bucket=bucket, Key=key)["Body"].read()
    try:
        document = json.loads(body)
    except ValueError as err:  # json.JSONDecodeError, UnicodeDecodeError
        raise FieldDatasetError([f"{manifest_uri} is not JSON ({err})"]) from err
    manifest = contract.validate_dataset(document)
    problems = []
    if dataset_version is not None and manifest["dataset_version"] != dataset_version:
        problems.append(f"{manifest_uri} is version {manifest['dataset_version']}, announced as {dataset_version}")
    if key != contract.manifest_key(manifest["prefix"], manifest["dataset_version"]) or manifest["bucket"] != bucket:
        problems.append(f"{manifest_uri} is not the key of its version {manifest['dataset_version']}")
    if problems:
        raise FieldDatasetError(problems)
    return manifest
