"""sim2real.edge.field_recorder: the episode summary, the atomic spool, and the one-time upload to S3
(moto's S3, which honours PutObject's IfNoneMatch / IfMatch; Stubber for the request shapes and AccessDenied)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber

from tests.moto_server import moto_s3_bucket
from tests.paths import REPO_ROOT

from sim2real.contract import field
from sim2real.edge import field_recorder
from sim2real.edge.field_recorder import FieldRecorder, upload_spool

BUCKET, THING, SHA = "sim2real-artifacts-123456789012", "so101-arm-03", "ab" * 32
ARN = "arn:aws:sagemaker:us-east-1:123456789012:model-package/sim2real-groot/4"


def clock(*times: str):
    it = iter(times)
    return lambda: next(it)


def recorder(spool: Path, session_id: str = "s1", **kw) -> FieldRecorder:
    return FieldRecorder(spool, thing_name=THING, model_version=SHA, deployment_id="dep-1", model_package_arn=ARN,
                         component_versions={"com.sim2real.PolicyInference": "1.0.0"}, session_id=session_id,
                         clock=kw.pop("clock", clock("2026-12-04T06:00:00.000Z", "2026-12-04T06:00:40.000Z",
                                                     "2026-12-04T06:01:00.000Z", "2026-12-04T06:01:30.000Z")), **kw)


def run_episode(rec: FieldRecorder, latencies=(10.0, 12.0, 30.0, 11.0), interventions=0, success=True,
                source="task_success_fn") -> Path:
    rec.start_episode()
    for latency in latencies:
        rec.record_step(latency)
    for _ in range(interventions):
        rec.record_intervention()
    return rec.end_episode(success, source)


@pytest.fixture
def s3() -> Iterator:
    with moto_s3_bucket(BUCKET) as client:
        yield client


def stored(client, key: str) -> bytes:
    return client.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def test_the_recorder_spools_a_valid_summary(tmp_path):
    rec = recorder(tmp_path / "spool")
    path = run_episode(rec, latencies=[float(v) for v in range(1, 21)], interventions=2, success=False,
                       source="operator_label")
    doc = json.loads(path.read_bytes())
    assert path.name == "s1-000001.json" and field.errors(doc) == []
    assert doc == {
        "schema_version": 1, "episode_id": "s1-000001", "thing_name": THING, "model_package_arn": ARN,
        "model_version": SHA, "deployment_id": "dep-1", "component_versions": {"com.sim2real.PolicyInference": "1.0.0"},
        "started_at": "2026-12-04T06:00:00.000Z", "ended_at": "2026-12-04T06:00:40.000Z",
        "outcome": {"success": False, "source": "operator_label"}, "interventions": 2, "steps": 20,
        "action_latency_ms": {"p50": 10.0, "p95": 19.0, "max": 20.0}}  # nearest rank: 10th and 19th of 20
    assert run_episode(rec).name == "s1-000002.json"  # ids stay unique within the session
    assert sorted(p.name for p in (tmp_path / "spool").iterdir()) == ["s1-000001.json", "s1-000002.json"]


def test_an_invalid_summary_is_refused_and_nothing_is_spooled(tmp_path):
    rec = recorder(tmp_path / "spool")
    rec.start_episode()
    with pytest.raises(field.FieldEpisodeError, match=r"\$.steps: 0 is less than the minimum of 1"):
        rec.end_episode(True, "task_success_fn")
    rec.record_step(5.0)
    with pytest.raises(field.FieldEpisodeError, match=r"\$.outcome.source: 'guess' is not one of"):
        rec.end_episode(True, "guess")
    assert list((tmp_path / "spool").iterdir()) == []
    with pytest.raises(RuntimeError, match="no episode started"):
        FieldRecorder(tmp_path / "s2", thing_name=THING, model_version=SHA, deployment_id="d").record_step(1.0)


def test_spool_upload_and_idempotent_reupload(tmp_path, s3):
    spool = tmp_path / "spool"
    path = run_episode(recorder(spool))
    body = path.read_bytes()
    key = "field/episodes/so101-arm-03/s1-000001.json"
    assert upload_spool(s3, spool, BUCKET, thing_name=THING).uploaded == ["s1-000001.json"]
    assert stored(s3, key) == body and not path.exists()
    # the answer was lost and the file is still there (or it is spooled again): S3 holds the same bytes
    path.write_bytes(body)
    result = upload_spool(s3, spool, BUCKET)
    assert (result.uploaded, result.already, result.clean) == ([], ["s1-000001.json"], True)
    assert not path.exists() and stored(s3, key) == body
    objects = s3.list_objects_v2(Bucket=BUCKET, Prefix="field/")["Contents"]
    assert [o["Key"] for o in objects] == [key]  # one object; its body never changed (above)


def test_another_body_under_an_existing_key_is_reported_not_overwritten(tmp_path, s3, caplog):
    spool = tmp_path / "spool"
    path = run_episode(recorder(spool))
    key = field.episode_key("", THING, "s1-000001")
    s3.put_object(Bucket=BUCKET, Key=key, Body=b'{"written": "by hand"}')
    result = upload_spool(s3, spool, BUCKET)
    assert result.conflicts == ["s1-000001.json"] and not result.clean
    assert stored(s3, key) == b'{"written": "by hand"}'
    assert json.loads((spool / "conflicts" / "s1-000001.json").read_bytes())["episode_id"] == "s1-000001"
    assert not path.exists()
    assert "holds another body than spooled episode s1-000001.json: not overwritten" in caplog.text


def test_offline_retries_with_backoff_then_uploads_when_s3_answers(tmp_path, s3):
    spool = tmp_path / "spool"
    rec = recorder(spool)
    run_episode(rec)
    run_episode(rec)
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        offline = boto3.client("s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s",
                               endpoint_url=f"http://127.0.0.1:{closed.getsockname()[1]}",
                               config=Config(retries={"max_attempts": 1}, connect_timeout=1))
        slept: list[float] = []
        result = upload_spool(offline, spool, BUCKET, attempts=3, base_delay_s=0.5, sleep=slept.append)
    assert slept == [0.5, 1.0]  # one request's tries, then the pass stops
    assert result.pending == ["s1-000001.json", "s1-000002.json"] and result.uploaded == []
    assert sorted(p.name for p in spool.glob("*.json")) == ["s1-000001.json", "s1-000002.json"]
    assert upload_spool(s3, spool, BUCKET).uploaded == ["s1-000001.json", "s1-000002.json"]
    assert list(spool.glob("*.json")) == []


#: A child process that records one episode and dies (``os._exit``, no cleanup) halfway through writing its
#: spool file: after the first half of the bytes, before the rename.
DIE_MID_WRITE = r"""
import os, sys
from sim2real.edge import field_recorder
real_open = open
class HalfFile:
    def __init__(self, f): self.f = f
    def __enter__(self): return self
    def __exit__(self, *exc): self.f.close()
    def fileno(self): return self.f.fileno()
    def flush(self): self.f.flush()
    def write(self, data):
        self.f.write(data[:len(data) // 2]); self.f.flush(); os.fsync(self.f.fileno()); os._exit(9)
field_recorder.open = lambda path, mode: HalfFile(real_open(path, mode))
rec = field_recorder.FieldRecorder(sys.argv[1], thing_name="so101-arm-03", model_version="ab" * 32,
                                   deployment_id="dep-1", session_id="s1")
rec.start_episode()
rec.record_step(3.0)
rec.end_episode(True, "task_success_fn")
"""


def test_a_write_the_process_did_not_finish_is_never_uploaded(tmp_path, s3):
    spool = tmp_path / "spool"
    child = subprocess.run([sys.executable, "-c", DIE_MID_WRITE, str(spool)], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "include")})
    assert child.returncode == 9, child.stderr
    part = spool / "s1-000001.json.part"
    assert 0 < len(part.read_bytes()) and list(spool.glob("*.json")) == []  # half written, never renamed
    # a non-atomic writer's half file under the final name is refused, not uploaded
    (spool / "half.json").write_bytes(b'{"schema_version": 1, "episode_id": "s1-0')
    result = upload_spool(s3, spool, BUCKET)
    assert (result.uploaded, result.rejected) == ([], ["half.json"])
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET) and part.exists()
    # the next recorder (a new session id) spools and uploads its own episodes beside the left-over part file
    run_episode(recorder(spool, session_id="s2"))
    assert upload_spool(s3, spool, BUCKET).uploaded == ["s2-000001.json"]


def test_an_episode_of_another_thing_is_rejected(tmp_path, s3):
    spool = tmp_path / "spool"
    run_episode(recorder(spool))
    result = upload_spool(s3, spool, BUCKET, thing_name="so101-arm-04")
    assert result.rejected == ["s1-000001.json"] and (spool / "rejected" / "s1-000001.json").exists()
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET)


def test_the_conditional_requests_match_the_s3_model_and_access_denied_keeps_the_file(tmp_path):
    """Stubber checks the PutObject parameters (IfNoneMatch, IfMatch) against botocore's S3 model."""
    spool = tmp_path / "spool"
    path = run_episode(recorder(spool))
    body = path.read_bytes()
    key = field.episode_key("p/", THING, "s1-000001")
    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
    put = {"Bucket": BUCKET, "Key": key, "Body": body, "ContentType": "application/json"}
    with Stubber(client) as stub:
        stub.add_client_error("put_object", "PreconditionFailed", http_status_code=412,
                              expected_params={**put, "IfNoneMatch": "*"})
        stub.add_response("put_object", {"ETag": '"x"'},
                          {**put, "IfMatch": f'"{hashlib.md5(body).hexdigest()}"'})
        assert upload_spool(client, spool, BUCKET, "p/").already == ["s1-000001.json"]
        stub.assert_no_pending_responses()
    path.write_bytes(body)
    with Stubber(client) as stub:
        stub.add_client_error("put_object", "AccessDenied", http_status_code=403)
        with pytest.raises(Exception, match="AccessDenied"):
            upload_spool(client, spool, BUCKET, "p/")
    assert path.read_bytes() == body


def test_main_uploads_once(tmp_path, s3, capsys):
    spool = tmp_path / "spool"
    run_episode(recorder(spool))
    assert field_recorder.main(["upload", "--spool", str(spool), "--bucket", BUCKET, "--prefix", "fleet/",
                                "--thing-name", THING, "--region", "us-east-1"]) == 0
    assert json.load(io.BytesIO(stored(s3, "fleet/field/episodes/so101-arm-03/s1-000001.json")))["steps"] == 4
    with pytest.raises(SystemExit):
        field_recorder.main(["upload", "--spool", str(spool), "--bucket", BUCKET, "--prefix", "fleet"])
    assert "--prefix must be empty or end with '/'" in capsys.readouterr().err
