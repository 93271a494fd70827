"""sim2real.edge.field_recorder with data recording: the LeRobot v2.1 episode data file (read back with pyarrow), its
upload before the summary with ChecksumSHA256 (moto's S3, which checks it and honours IfNoneMatch / IfMatch), a
conflict, S3 unreachable, and the spool left untouched when the data cannot make a file."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from tests.edge.test_field_recorder import BUCKET, SHA, THING, clock, stored
from tests.moto_server import moto_s3_bucket

from sim2real.contract import field
from sim2real.edge.field_recorder import EpisodeDataError, FieldRecorder, upload_spool


TASK = "Reach the target with the arm's tip."
DATA_KEY = "field/data/so101-arm-03/s1-000001.parquet"
EPISODE_KEY = "field/episodes/so101-arm-03/s1-000001.json"


@pytest.fixture
def s3() -> Iterator:
    with moto_s3_bucket(BUCKET) as client:
        yield client


def recorder(spool: Path, **kw) -> FieldRecorder:
    times = ["2026-12-04T06:00:00.000Z", "2026-12-04T06:00:40.000Z", "2026-12-04T06:01:00.000Z",
             "2026-12-04T06:01:30.000Z"]
    return FieldRecorder(spool, thing_name=THING, model_version=SHA, deployment_id="dep-1", clock=clock(*times),
                         **{"session_id": "s1", "record_data": True, "task": TASK, "fps": 50.0, "bucket": BUCKET,
                            **kw})


def record(rec: FieldRecorder, steps: int = 3, width: int = 4) -> Path:
    rec.start_episode()
    for i in range(steps):
        rec.record_step(10.0 + i, observation_state=[i + 0.5 * j for j in range(width)], action=[-i, i / 4])
    return rec.end_episode(True, "task_success_fn")


def test_the_recorder_spools_a_lerobot_episode_file_named_in_the_summary(tmp_path):
    spool = tmp_path / "spool"
    path = record(recorder(spool, prefix="fleet/"))
    data = spool / "s1-000001.parquet"
    doc = json.loads(path.read_bytes())
    assert field.errors(doc) == []
    assert {k: v for k, v in doc.items() if k.startswith("data_") or k == "task"} == {
        "data_uri": f"s3://{BUCKET}/fleet/field/data/so101-arm-03/s1-000001.parquet",
        "data_sha256": hashlib.sha256(data.read_bytes()).hexdigest(), "data_frames": 3, "data_fps": 50.0,
        "task": TASK}
    table = pq.read_table(data)
    assert table.schema.names == ["observation.state", "action", "timestamp", "frame_index", "episode_index",
                                  "index", "task_index"]
    types = {name: table.schema.field(name).type for name in table.schema.names}
    assert types == {"observation.state": pa.list_(pa.float32()), "action": pa.list_(pa.float32()),
                     "timestamp": pa.float32(), "frame_index": pa.int64(), "episode_index": pa.int64(),
                     "index": pa.int64(), "task_index": pa.int64()}
    assert table.to_pydict() == {
        "observation.state": [[0.0, 0.5, 1.0, 1.5], [1.0, 1.5, 2.0, 2.5], [2.0, 2.5, 3.0, 3.5]],
        "action": [[0.0, 0.0], [-1.0, 0.25], [-2.0, 0.5]],
        "timestamp": pytest.approx([0.0, 0.02, 0.04]), "frame_index": [0, 1, 2], "episode_index": [0, 0, 0],
        "index": [0, 1, 2], "task_index": [0, 0, 0]}
    assert sorted(p.name for p in spool.iterdir()) == ["s1-000001.json", "s1-000001.parquet"]


def test_without_recording_no_data_file_and_no_data_fields(tmp_path):
    rec = FieldRecorder(tmp_path, thing_name=THING, model_version=SHA, deployment_id="dep-1", session_id="s1")
    rec.start_episode()
    rec.record_step(3.0, observation_state=[1.0], action=[2.0])
    doc = json.loads(rec.end_episode(True, "task_success_fn").read_bytes())
    assert "data_uri" not in doc and "task" not in doc and list(tmp_path.glob("*.parquet")) == []


@pytest.mark.parametrize(("steps", "match"), [
    ([(None, None)], r"step\(s\) \[0\] recorded without observation_state"),
    ([([1.0, 2.0], [0.1]), ([1.0], [0.1])], r"observation_state length changed within the episode: \[1, 2\]"),
    ([([1.0], [0.1]), ([1.0], None)], r"step\(s\) \[1\] recorded without action"),
])
def test_recording_without_vectors_or_with_changing_lengths_spools_nothing(tmp_path, steps, match):
    rec = recorder(tmp_path)
    rec.start_episode()
    for state, action in steps:
        rec.record_step(1.0, observation_state=state, action=action)
    with pytest.raises(EpisodeDataError, match=match):
        rec.end_episode(True, "task_success_fn")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="record_data needs a task"):
        FieldRecorder(tmp_path, thing_name=THING, model_version=SHA, deployment_id="d", record_data=True, fps=50.0,
                      bucket=BUCKET)


def test_the_data_goes_first_with_its_sha256_and_a_reupload_changes_nothing(tmp_path, s3):
    spool = tmp_path / "spool"
    path = record(recorder(spool))
    data, body = (spool / "s1-000001.parquet").read_bytes(), path.read_bytes()
    sent: list[str] = []
    s3.meta.events.register("before-call.s3.PutObject", lambda params, **_: sent.append(params["url_path"]))
    assert upload_spool(s3, spool, BUCKET, thing_name=THING).uploaded == ["s1-000001.json"]
    assert [p.rsplit("/", 1)[-1] for p in sent] == ["s1-000001.parquet", "s1-000001.json"]
    assert stored(s3, DATA_KEY) == data and stored(s3, EPISODE_KEY) == body and list(spool.iterdir()) == []
    # what the field dataset's publisher relies on: S3 returns the SHA-256 the robot sent
    head = s3.head_object(Bucket=BUCKET, Key=DATA_KEY, ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(data).digest()).decode()
    assert head["ContentType"] == "application/vnd.apache.parquet"
    # the answers were lost: both files are spooled again; S3 holds the same bytes under both keys
    path.write_bytes(body)
    (spool / "s1-000001.parquet").write_bytes(data)
    result = upload_spool(s3, spool, BUCKET)
    assert (result.uploaded, result.already, result.clean) == ([], ["s1-000001.json"], True)
    assert list(spool.iterdir()) == [] and stored(s3, DATA_KEY) == data
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]] == [DATA_KEY, EPISODE_KEY]


def test_an_old_data_file_without_its_summary_is_removed_and_a_young_one_kept(tmp_path, s3):
    """A process that died between writing an episode's data and its summary (or between removing an uploaded
    summary and its data) left a data file nothing uploads or removes; before, it stayed in the spool for good. A
    young one may be an episode whose summary is being written: kept."""
    import os
    import time

    spool = tmp_path / "spool"
    path = record(recorder(spool))
    path.unlink()  # its summary never made it
    young = spool / "s2-000001.parquet"
    young.write_bytes(b"written a moment ago")
    old = time.time() - 2 * 3600
    os.utime(spool / "s1-000001.parquet", (old, old))
    result = upload_spool(s3, spool, BUCKET, thing_name=THING)
    assert (result.uploaded, result.orphans_removed) == ([], ["s1-000001.parquet"])
    assert sorted(p.name for p in spool.iterdir()) == ["s2-000001.parquet"]
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET)  # nothing uploaded


def test_the_summary_is_not_sent_when_s3_refuses_the_data(tmp_path):
    """Stubber checks the data request against botocore's S3 model (IfNoneMatch, ChecksumSHA256); S3 refusing it
    (BadDigest: the body's SHA-256 is not ChecksumSHA256) sends no summary and leaves both files spooled. moto does
    not compare ChecksumSHA256 with the body, so the refusal is stubbed."""
    spool = tmp_path / "spool"
    path = record(recorder(spool))
    data = (spool / "s1-000001.parquet").read_bytes()
    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
    with Stubber(client) as stub:
        stub.add_client_error("put_object", "BadDigest", http_status_code=400, expected_params={
            "Bucket": BUCKET, "Key": DATA_KEY, "Body": data, "ContentType": "application/vnd.apache.parquet",
            "ChecksumAlgorithm": "SHA256", "ChecksumSHA256": base64.b64encode(hashlib.sha256(data).digest()).decode(),
            "IfNoneMatch": "*"})
        with pytest.raises(ClientError, match="BadDigest"):
            upload_spool(client, spool, BUCKET)
        stub.assert_no_pending_responses()  # one request: the summary was not sent
    assert sorted(p.name for p in spool.iterdir()) == ["s1-000001.json", "s1-000001.parquet"] and path.exists()


def test_a_data_file_s3_holds_other_bytes_for_moves_the_pair_to_conflicts(tmp_path, s3, caplog):
    spool = tmp_path / "spool"
    record(recorder(spool))
    s3.put_object(Bucket=BUCKET, Key=DATA_KEY, Body=b"not this episode")
    result = upload_spool(s3, spool, BUCKET)
    assert result.conflicts == ["s1-000001.json"] and not result.clean
    assert stored(s3, DATA_KEY) == b"not this episode"
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]] == [DATA_KEY]  # no summary
    assert sorted(p.name for p in (spool / "conflicts").iterdir()) == ["s1-000001.json", "s1-000001.parquet"]
    assert list(spool.glob("*.*")) == []
    assert f"{DATA_KEY} holds another body than spooled episode s1-000001.json" in caplog.text


def test_a_data_file_that_is_missing_changed_or_elsewhere_is_rejected_with_its_summary(tmp_path, s3):
    spool = tmp_path / "spool"
    record(recorder(spool))
    (spool / "s1-000001.parquet").write_bytes(b"changed on disk")
    result = upload_spool(s3, spool, BUCKET)
    assert result.rejected == ["s1-000001.json"]
    assert sorted(p.name for p in (spool / "rejected").iterdir()) == ["s1-000001.json", "s1-000001.parquet"]
    record(recorder(spool, prefix="other/", session_id="s2"))  # named for another prefix than the uploader's
    record(recorder(spool, session_id="s3")).with_suffix(".parquet").unlink()  # its data file is gone
    result = upload_spool(s3, spool, BUCKET)
    assert (result.rejected, result.uploaded) == (["s2-000001.json", "s3-000001.json"], [])
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET)


def test_s3_unreachable_keeps_both_files_then_uploads_them(tmp_path, s3):
    spool = tmp_path / "spool"
    record(recorder(spool))
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        offline = boto3.client("s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s",
                               endpoint_url=f"http://127.0.0.1:{closed.getsockname()[1]}",
                               config=Config(retries={"max_attempts": 1}, connect_timeout=1))
        result = upload_spool(offline, spool, BUCKET, attempts=2, base_delay_s=0.5, sleep=lambda _: None)
    assert result.pending == ["s1-000001.json"]
    assert sorted(p.name for p in spool.iterdir()) == ["s1-000001.json", "s1-000001.parquet"]
    assert upload_spool(s3, spool, BUCKET).uploaded == ["s1-000001.json"] and list(spool.iterdir()) == []
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]] == [DATA_KEY, EPISODE_KEY]


def test_the_robots_pyarrow_is_the_one_airflow_and_the_dev_venv_pin() -> None:
    """requirements-edge.txt (the robots' venv), constraints.txt (make demo / test) and Airflow 3.3.1's constraints
    (what MWAA resolves for the field dataset's readers) name one pyarrow version, the one installed here."""
    from tests.paths import REPO_ROOT

    def pin(path: str) -> str:
        (line,) = [x for x in (REPO_ROOT / path).read_text().splitlines() if x.startswith("pyarrow==")]
        return line.split("==")[1]

    assert pin("containers/greengrass/artifacts/requirements-edge.txt") == pin("constraints.txt") == pin(
        "constraints/mwaa-3.3.1-airflow.txt") == pa.__version__
