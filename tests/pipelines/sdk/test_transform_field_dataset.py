"""TransformDataset with --field-manifest: a field dataset version appended to the v2.1 output, or refused."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber
from lerobot_fixtures import EPISODES, FIELD_EPISODES, TASKS, VIDEO, field_frames, write_field_dataset, write_v2, \
    write_v30

from sim2real.workloads.groot.field_episodes import load_field_episodes
from sim2real.workloads.groot.transform_dataset import V21_DATA_PATH, DatasetError, transform

BASE_FRAMES = sum(e[1] for e in EPISODES)


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("write_base", [write_v2, lambda root: write_v30(root, video=False)])
def test_field_episodes_are_appended_with_new_indices_and_merged_tasks(tmp_path, write_base):
    src, dst = write_base(tmp_path / "src"), tmp_path / "dst"
    manifest = write_field_dataset(tmp_path / "bucket")
    report = transform(src, dst, field_manifest=str(manifest), run=lambda cmd: None)

    version = json.loads(manifest.read_text())["dataset_version"]
    field_frames_total = sum(e[2] for e in FIELD_EPISODES)
    assert report["field_dataset"] == {"dataset_version": version, "manifest_uri": str(manifest),
                                       "episodes": 2, "frames": field_frames_total}
    assert report["episodes"] == 5 and report["frames"] == BASE_FRAMES + field_frames_total
    assert json.loads((dst / "transform_report.json").read_text())["field_dataset"]["dataset_version"] == version
    # "pick the orange" is task 0 already; "wipe the table" is new: task 2
    assert _jsonl(dst / "meta/tasks.jsonl") == [{"task_index": 0, "task": TASKS[0]},
                                                {"task_index": 1, "task": TASKS[1]},
                                                {"task_index": 2, "task": "wipe the table"}]
    assert _jsonl(dst / "meta/episodes.jsonl")[3:] == [
        {"episode_index": 3, "tasks": [TASKS[0]], "length": 6}, {"episode_index": 4, "tasks": ["wipe the table"],
                                                                  "length": 3}]
    first = pq.read_table(dst / V21_DATA_PATH.format(episode_chunk=0, episode_index=3))
    second = pq.read_table(dst / V21_DATA_PATH.format(episode_chunk=0, episode_index=4))
    assert set(first.column("episode_index").to_pylist()) == {3} and set(second.column("task_index").to_pylist()) == {2}
    assert first.column("index").to_pylist() == list(range(BASE_FRAMES, BASE_FRAMES + 6))
    assert second.column("index").to_pylist() == list(range(BASE_FRAMES + 6, BASE_FRAMES + 9))
    assert first.column("observation.state").to_pylist() == field_frames(0, 6).column("observation.state").to_pylist()
    stats = _jsonl(dst / "meta/episodes_stats.jsonl")
    assert [s["episode_index"] for s in stats] == [0, 1, 2, 3, 4] and stats[4]["stats"]["action"]["count"] == [3]
    info = json.loads((dst / "meta/info.json").read_text())
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"], info["splits"]) == (
        5, BASE_FRAMES + field_frames_total, 3, {"train": "0:5"})


def test_bad_sha256_refused_and_nothing_written(tmp_path):
    manifest = write_field_dataset(tmp_path / "bucket")
    doc = json.loads(manifest.read_text())
    pq.write_table(field_frames(7, 6), tmp_path / "bucket" / doc["episodes"][0]["data_key"])  # not the published file
    with pytest.raises(DatasetError, match=r"field episode robot-1/ep-a: data file sha256 [0-9a-f]{64} is not the "
                                           r"manifest's " + doc["episodes"][0]["sha256"]):
        transform(write_v2(tmp_path / "src"), tmp_path / "dst", field_manifest=str(manifest))
    assert not (tmp_path / "dst").exists()


def test_columns_and_vector_lengths_checked_against_the_base_features(tmp_path):
    short = field_frames(0, 6, state_dim=5)
    no_action = field_frames(1, 3).drop_columns(["action"])
    manifest = write_field_dataset(tmp_path / "bucket", tables={"ep-a": short, "ep-b": no_action})
    with pytest.raises(DatasetError) as err:
        transform(write_v2(tmp_path / "src"), tmp_path / "dst", field_manifest=str(manifest))
    assert err.value.problems == [
        "field episode robot-1/ep-a: 'action' has vectors of length [5], the base dataset's feature has shape [6]",
        "field episode robot-1/ep-a: 'observation.state' has vectors of length [5], the base dataset's feature has "
        "shape [6]",
        "field episode robot-2/ep-b: lacks the base dataset's feature 'action'"]


def test_a_data_file_that_is_not_parquet_or_of_another_value_type_is_a_listed_problem(tmp_path):
    """Before: a data file with the manifest's sha256 that was no parquet file raised pyarrow's ArrowInvalid (a
    traceback, exit 1), and a float64 column under a float32 feature was appended (mixed parquet schemas)."""
    import hashlib

    import pyarrow as pa

    from sim2real.contract import field

    wide = field_frames(1, 3)
    wide = wide.set_column(wide.column_names.index("action"), "action",
                           pa.array(wide.column("action").to_pylist(), type=pa.list_(pa.float64())))
    manifest = write_field_dataset(tmp_path / "bucket", tables={"ep-b": wide})
    doc = json.loads(manifest.read_text())
    entry = doc["episodes"][0]  # ep-a: bytes that are no parquet file, published with their own sha256
    body = b"not a parquet file"
    (tmp_path / "bucket" / entry["data_key"]).write_bytes(body)
    entry.update(sha256=hashlib.sha256(body).hexdigest(), size_bytes=len(body))
    doc["dataset_version"] = field.dataset_version(doc["episodes"])
    moved = tmp_path / "bucket" / field.manifest_key("", doc["dataset_version"])
    moved.parent.mkdir(parents=True, exist_ok=True)
    moved.write_text(json.dumps(doc))
    with pytest.raises(DatasetError) as err:
        transform(write_v2(tmp_path / "src"), tmp_path / "dst", field_manifest=str(moved))
    problems = err.value.problems
    assert len(problems) == 2, problems
    assert problems[0].startswith(f"field episode robot-1/ep-a: data file {entry['data_key']} is not a parquet file: "
                                  "ArrowInvalid"), problems
    assert problems[1] == ("field episode robot-2/ep-b: 'action' holds float64 values, the base dataset's feature is "
                           "float32")


def test_a_base_camera_the_field_data_lacks_is_listed_never_dropped(tmp_path):
    manifest = write_field_dataset(tmp_path / "bucket")
    with pytest.raises(DatasetError) as err:
        transform(write_v30(tmp_path / "src"), tmp_path / "dst", field_manifest=str(manifest), run=lambda c: None)
    assert f"field episode robot-1/ep-a: lacks the base dataset's feature '{VIDEO}' (video)" in err.value.problems
    assert f"field episode robot-2/ep-b: lacks the base dataset's feature '{VIDEO}' (video)" in err.value.problems
    assert not any((tmp_path / "dst").rglob("*.parquet"))


def test_invalid_manifest_and_frames_mismatch_refused(tmp_path):
    manifest = write_field_dataset(tmp_path / "bucket")
    doc = json.loads(manifest.read_text())
    doc["totals"]["frames"] = 1
    manifest.write_text(json.dumps(doc))
    with pytest.raises(DatasetError, match=r"\$\.totals\.frames: 1, the episodes give 9"):
        transform(write_v2(tmp_path / "src"), tmp_path / "dst", field_manifest=str(manifest))
    manifest = write_field_dataset(tmp_path / "b2", tables={"ep-b": field_frames(1, 4)})  # the manifest says 3
    with pytest.raises(DatasetError, match="robot-2/ep-b: the manifest says 3 frames, the data file has 4"):
        transform(write_v2(tmp_path / "src2"), tmp_path / "dst2", field_manifest=str(manifest))


def test_s3_manifest_and_data_read_with_get_object(tmp_path):
    import boto3

    manifest = write_field_dataset(tmp_path / "bucket", bucket="field-bucket")
    doc = json.loads(manifest.read_text())
    client = boto3.client("s3", region_name="us-east-1")
    stub = Stubber(client)
    key = str(manifest.relative_to(tmp_path / "bucket"))
    for bucket, object_key, path in [("artifacts", key, manifest)] + [
            ("field-bucket", e["data_key"], tmp_path / "bucket" / e["data_key"]) for e in doc["episodes"]]:
        body = path.read_bytes()
        stub.add_response("get_object", {"Body": StreamingBody(io.BytesIO(body), len(body))},
                          {"Bucket": bucket, "Key": object_key})
    info = json.loads((write_v2(tmp_path / "src") / "meta/info.json").read_text())
    with stub:
        dataset = load_field_episodes(f"s3://artifacts/{key}", info, s3_client=client)
    stub.assert_no_pending_responses()
    assert dataset.dataset_version == doc["dataset_version"] and len(dataset.episodes) == 2


def test_cli_field_manifest_exit_codes(tmp_path):
    src = write_v2(tmp_path / "src")
    cli = [sys.executable, "-m", "sim2real.workloads.groot.transform_dataset", "--input", str(src)]
    none = subprocess.run(cli + ["--output", str(tmp_path / "o1"), "--field-manifest="], capture_output=True, text=True)
    assert none.returncode == 0, none.stderr
    assert json.loads((tmp_path / "o1/transform_report.json").read_text())["field_dataset"] is None
    manifest = write_field_dataset(tmp_path / "bucket")
    ok = subprocess.run(cli + ["--output", str(tmp_path / "o2"), f"--field-manifest={manifest}"], capture_output=True,
                        text=True)
    assert ok.returncode == 0, ok.stderr
    assert json.loads((tmp_path / "o2/transform_report.json").read_text())["field_dataset"]["episodes"] == 2
    missing = subprocess.run(cli + ["--output", str(tmp_path / "o3"), f"--field-manifest={tmp_path}/none.json"],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "cannot be read" in missing.stderr
