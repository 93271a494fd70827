"""sim2real.orchestration.field_dataset: the field dataset's versions built from moto's S3 (summaries, data files
uploaded with ChecksumSHA256 as the robots do), their growth from a parent and the one-time write."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from tests.orchestration.test_field import BUCKET, put
from tests.orchestration.test_field import episode as summary

from sim2real.contract import field as contract
from sim2real.orchestration.field_dataset import (
    REASONS,
    FieldDatasetError,
    build_manifest,
    checksum_hex,
    publish_manifest,
    read_manifest,
)

PREFIX = "fleet/"


def episode(thing: str = "arm-1", n: int = 1, *, data: bytes | None = b"PAR1 frames", sha: str | None = None,
            frames: int = 30, success: bool = True, prefix: str = PREFIX) -> dict:
    """A field episode summary (:func:`tests.orchestration.test_field.episode`) naming ``data`` as its recorded
    data file (None: recorded without data)."""
    doc = summary(thing, n, success=success)
    if data is not None:
        doc.update({"data_uri": f"s3://{BUCKET}/{contract.data_key(prefix, thing, doc['episode_id'])}",
                    "data_sha256": sha or hashlib.sha256(data).hexdigest(), "data_frames": frames, "data_fps": 15.0,
                    "task": "pick the cube"})
    return doc


def upload(s3, doc: dict, data: bytes | None = b"PAR1 frames", *, checksum: bool = True, key: str | None = None,
           prefix: str = PREFIX) -> str:
    """The summary (and, given, its data file: PutObject with ChecksumSHA256, as the robot does)."""
    if data is not None:
        extra = {"ChecksumAlgorithm": "SHA256",
                 "ChecksumSHA256": base64.b64encode(hashlib.sha256(data).digest()).decode()} if checksum else {}
        s3.put_object(Bucket=BUCKET, Key=contract.data_key(prefix, doc["thing_name"], doc["episode_id"]), Body=data,
                      **extra)
    return put(s3, doc, key=key, prefix=prefix)


def test_a_version_of_good_episodes(s3):
    upload(s3, episode("arm-2", 1, frames=20, success=False, data=b"PAR1 two"), b"PAR1 two")
    upload(s3, episode("arm-1", 2, frames=30, data=b"PAR1 one, longer"), b"PAR1 one, longer")
    upload(s3, episode("arm-1", 1, frames=10, data=b"PAR1 x"), b"PAR1 x")
    build = build_manifest(s3, BUCKET, PREFIX)
    m = build.manifest
    assert contract.dataset_errors(m) == [] and build.refusals == []
    assert [(e["thing_name"], e["episode_id"]) for e in m["episodes"]] == [
        ("arm-1", "s1-000001"), ("arm-1", "s1-000002"), ("arm-2", "s1-000001")]
    first = m["episodes"][0]
    assert first == {"thing_name": "arm-1", "episode_id": "s1-000001",
                     "summary_key": "fleet/field/episodes/arm-1/s1-000001.json",
                     "data_key": "fleet/field/data/arm-1/s1-000001.parquet",
                     "sha256": hashlib.sha256(b"PAR1 x").hexdigest(), "size_bytes": len(b"PAR1 x"), "frames": 10,
                     "fps": 15.0, "task": "pick the cube", "success": True, "model_version": "ab" * 32,
                     "ended_at": "2026-12-04T06:11:00Z"}
    assert m["totals"] == {"episodes": 3, "frames": 60, "successes": 2, "things": ["arm-1", "arm-2"],
                           "new_episodes": 3}
    assert m["parent_version"] is None and m["dataset_version"] == contract.dataset_version(m["episodes"])
    assert m["refused"] == dict.fromkeys(REASONS, 0) and (m["bucket"], m["prefix"]) == (BUCKET, PREFIX)


def test_each_refusal_reason_is_counted_and_named(s3):
    upload(s3, episode("arm-1", 1))
    bad = episode("arm-1", 2)
    bad["steps"] = 0
    refused = {
        upload(s3, bad): ("malformed", "$.steps: 0 is less than the minimum of 1"),
        upload(s3, episode("arm-1", 3), key="fleet/field/episodes/arm-1/copy.json"):
            ("duplicated", "a copy of episode 's1-000003'"),
        upload(s3, episode("arm-1", 4, data=None), None): ("no_data", "no data_uri"),
        upload(s3, episode("arm-1", 5), None): ("data_missing", "no data file at s3://"),
        upload(s3, episode("arm-2", 6, sha="00" * 32)): ("checksum_mismatch", "the summary's data_sha256 " + "00" * 32),
        upload(s3, episode("arm-2", 7), checksum=False): ("checksum_mismatch", "ChecksumSHA256 of "),
    }
    upload(s3, episode("arm-1", 3))
    build = build_manifest(s3, BUCKET, PREFIX)
    assert build.manifest["refused"] == {"malformed": 1, "duplicated": 1, "no_data": 1, "data_missing": 1,
                                         "checksum_mismatch": 2}
    assert [(e["thing_name"], e["episode_id"]) for e in build.manifest["episodes"]] == [
        ("arm-1", "s1-000001"), ("arm-1", "s1-000003")]
    assert [key for key, _, _ in build.refusals] == sorted(refused)
    for key, reason, detail in build.refusals:
        assert reason == refused[key][0] and refused[key][1] in detail, (key, reason, detail)
    assert "is absent" in dict((k, d) for k, _, d in build.refusals)["fleet/field/episodes/arm-2/s1-000007.json"]


def test_a_version_grows_from_its_parent(s3):
    for n in (1, 2):
        upload(s3, episode("arm-1", n, data=f"PAR1 {n}".encode()), f"PAR1 {n}".encode())
    parent = build_manifest(s3, BUCKET, PREFIX).manifest
    uri, written = publish_manifest(s3, parent)
    assert written and uri == f"s3://{BUCKET}/fleet/field/datasets/{parent['dataset_version']}/manifest.json"
    assert read_manifest(s3, uri, parent["dataset_version"]) == parent
    for n in (3, 4, 5):
        upload(s3, episode("arm-2", n, data=f"PAR1 {n}".encode()), f"PAR1 {n}".encode())
    child = build_manifest(s3, BUCKET, PREFIX, parent=read_manifest(s3, uri)).manifest
    assert child["parent_version"] == parent["dataset_version"] != child["dataset_version"]
    assert child["totals"]["episodes"] == 5 and child["totals"]["new_episodes"] == 3
    assert all(e in child["episodes"] for e in parent["episodes"])
    # nothing new: the same version, no episode new
    again = build_manifest(s3, BUCKET, PREFIX, parent=child).manifest
    assert again["dataset_version"] == child["dataset_version"] and again["totals"]["new_episodes"] == 0


def test_an_episode_of_the_parent_that_vanished_is_an_error_naming_it(s3):
    for n in (1, 2):
        upload(s3, episode("arm-1", n, data=f"PAR1 {n}".encode()), f"PAR1 {n}".encode())
    parent = build_manifest(s3, BUCKET, PREFIX).manifest
    s3.delete_object(Bucket=BUCKET, Key=contract.data_key(PREFIX, "arm-1", "s1-000002"))
    upload(s3, episode("arm-2", 3))
    with pytest.raises(FieldDatasetError) as err:
        build_manifest(s3, BUCKET, PREFIX, parent=parent)
    assert err.value.problems == [
        f"episode 's1-000002' of 'arm-1' of the parent version {parent['dataset_version']} is not in the new one "
        f"(data_missing: no data file at s3://{BUCKET}/fleet/field/data/arm-1/s1-000002.parquet)"]
    s3.delete_object(Bucket=BUCKET, Key=contract.episode_key(PREFIX, "arm-1", "s1-000001"))
    with pytest.raises(FieldDatasetError, match=r"episode 's1-000001' of 'arm-1' .*\(its summary is gone\)"):
        build_manifest(s3, BUCKET, PREFIX, parent=parent)


def test_publishing_the_same_version_again_writes_nothing(s3):
    upload(s3, episode("arm-1", 1))
    first = build_manifest(s3, BUCKET, PREFIX).manifest
    uri, written = publish_manifest(s3, first)
    stored = s3.get_object(Bucket=BUCKET, Key=uri.split(BUCKET + "/", 1)[1])
    later = build_manifest(s3, BUCKET, PREFIX, created_at=None).manifest
    later["created_at"] = "2027-01-01T00:00:00Z"
    assert later["dataset_version"] == first["dataset_version"]
    assert publish_manifest(s3, later) == (uri, False)  # 412 Precondition Failed: kept
    after = s3.get_object(Bucket=BUCKET, Key=uri.split(BUCKET + "/", 1)[1])
    assert written and after["ETag"] == stored["ETag"] and json.loads(after["Body"].read()) == first


def test_an_invalid_manifest_is_not_written(s3):
    upload(s3, episode("arm-1", 1))
    manifest = build_manifest(s3, BUCKET, PREFIX).manifest
    manifest["totals"]["frames"] += 1
    with pytest.raises(contract.FieldEpisodeError, match=r"\$.totals.frames"):
        publish_manifest(s3, manifest)
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix="fleet/field/datasets/")["KeyCount"] == 0


def test_a_manifest_read_as_another_version_is_refused(s3):
    upload(s3, episode("arm-1", 1))
    manifest = build_manifest(s3, BUCKET, PREFIX).manifest
    uri, _ = publish_manifest(s3, manifest)
    with pytest.raises(FieldDatasetError, match="announced as fd-0000000000000000"):
        read_manifest(s3, uri, "fd-0000000000000000")


def test_checksum_hex_reads_only_a_whole_object_sha256():
    digest = hashlib.sha256(b"x").digest()
    assert checksum_hex(base64.b64encode(digest).decode()) == digest.hex()
    assert checksum_hex(base64.b64encode(digest).decode() + "-3") is None  # a multipart object's composite checksum
    assert checksum_hex(None) is None and checksum_hex(base64.b64encode(b"short").decode()) is None
