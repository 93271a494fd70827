"""The fine-tune's field dataset version: refused at trigger time when malformed, resolved at run time (none,
the triggering asset event's, the latest published, an explicit one) and checked in S3 before the pipeline starts."""

from __future__ import annotations

import datetime as dt
import json

import boto3
import pytest
from airflow.sdk.api.datamodels._generated import AssetReferenceAssetEventDagRun, AssetResponse
from airflow.sdk.exceptions import ParamValidationError
from airflow.sdk.execution_time.comms import AssetEventDagRunReferenceResult, AssetEventResult
from airflow.sdk.execution_time.context import InletEventsAccessor, TriggeringAssetEventsAccessor
from moto import mock_aws

from sim2real.contract import field
from sim2real.orchestration.assets import FIELD_DATASET_ASSET
from sim2real.orchestration.stages import vla, vla_field
from sim2real.orchestration.stages.run import plan_run

from tests.orchestration.stages.test_stages import PARAMS
from tests.orchestration.test_config import GOOD

BUCKET = "field-bucket"
T0 = dt.datetime(2026, 12, 4, 6, tzinfo=dt.timezone.utc)


def _entry(episode_id: str, frames: int) -> dict:
    return {"thing_name": "robot-1", "episode_id": episode_id, "summary_key": f"field/episodes/robot-1/{episode_id}.json",
            "data_key": f"field/data/robot-1/{episode_id}.parquet", "sha256": "0" * 64, "size_bytes": 10,
            "frames": frames, "fps": 10, "task": "pick", "success": True, "model_version": "1",
            "ended_at": "2026-12-04T06:00:00Z"}


def _publish(s3, *frames: int, bucket: str = BUCKET) -> str:
    """A valid manifest in ``bucket`` (prefix ""); its version."""
    episodes = [_entry(f"ep-{i}", n) for i, n in enumerate(frames)]
    version = field.dataset_version(episodes)
    doc = {"schema_version": 1, "dataset_version": version, "created_at": "2026-12-04T07:00:00Z", "bucket": bucket,
           "prefix": "", "parent_version": None, "codebase_version": "v2.1", "episodes": episodes,
           "totals": {"episodes": len(episodes), "frames": sum(frames), "successes": len(episodes),
                      "things": ["robot-1"], "new_episodes": len(episodes)}, "refused": {}}
    s3.put_object(Bucket=bucket, Key=field.manifest_key("", version), Body=json.dumps(doc).encode())
    return version


def _extra(version: str | None, bucket: str = BUCKET) -> dict:
    """An event extra as the field data DAG writes it; ``None``: an event whose extra names no version."""
    if version is None:
        return {"note": "published by hand"}
    return {"dataset_version": version, "manifest_uri": f"s3://{bucket}/{field.manifest_key('', version)}",
            "episodes": 1, "frames": 5, "new_episodes": 1, "parent_version": None}


def _triggering(*versions: str | None, bucket: str = BUCKET) -> TriggeringAssetEventsAccessor:
    """The context's ``triggering_asset_events`` of a run the field dataset asset's events started."""
    return TriggeringAssetEventsAccessor.build([AssetEventDagRunReferenceResult(
        asset=AssetReferenceAssetEventDagRun(name=FIELD_DATASET_ASSET.name, uri=FIELD_DATASET_ASSET.uri, extra={}),
        extra=_extra(v, bucket), source_task_id="publish", source_dag_id="sim_to_real_field_data", source_run_id=f"r{i}",
        source_map_index=-1, source_aliases=[], timestamp=T0 + dt.timedelta(minutes=i)) for i, v in enumerate(versions)])


def _inlet(*versions: str, bucket: str = BUCKET) -> dict:
    """The context's ``inlet_events`` for the task's inlet, its events as the Execution API returned them."""
    accessor = InletEventsAccessor(asset_name=FIELD_DATASET_ASSET.name, asset_uri=FIELD_DATASET_ASSET.uri)
    accessor._asset_events = [AssetEventResult(  # what GetAssetEventByAsset answered (the cached property)
        id=i, timestamp=T0 + dt.timedelta(minutes=i), extra=_extra(v, bucket), created_dagruns=[],
        asset=AssetResponse(name=FIELD_DATASET_ASSET.name, uri=FIELD_DATASET_ASSET.uri, group="asset"))
        for i, v in enumerate(versions)]
    return {FIELD_DATASET_ASSET: accessor}


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def test_form_field_refuses_a_malformed_version_at_trigger_time():
    spec = vla.params()["field_dataset_version"]
    assert spec.resolve(None) is None and spec.resolve("latest") == "latest"
    assert spec.resolve("fd-0123456789abcdef") == "fd-0123456789abcdef"
    for bad in ("fd-123", "FD-0123456789ABCDEF", "newest", "fd-0123456789abcdeg", "s3://b/manifest.json"):
        with pytest.raises(ParamValidationError, match="does not match"):
            spec.resolve(bad)


def test_plan_carries_the_request_and_an_empty_parameter():
    plan = plan_run(dag_id="sim_to_real", run_id="manual__1", params={**PARAMS, "field_dataset_version": "latest"},
                    env=GOOD)
    section = vla.VlaPlan.from_plan(plan)
    assert (section.field_dataset_version, section.field_bucket, section.field_prefix) == ("latest", "b", "")
    assert section.parameters["FieldDatasetManifestS3Uri"] == ""
    assert vla.VlaPlan.from_plan(plan_run(dag_id="d", run_id="r", params=PARAMS, env=GOOD)).field_dataset_version is None


def _resolve(s3, form_value, **context):
    return vla_field.resolve(form_value, s3, bucket=BUCKET, prefix="", **context)


def test_null_is_none_unless_a_field_dataset_event_started_the_run(s3):
    assert _resolve(s3, None) is None
    assert _resolve(s3, "", triggering_asset_events=TriggeringAssetEventsAccessor.build([])) is None
    older, newer = _publish(s3, 4), _publish(s3, 4, 6)
    got = _resolve(s3, None, triggering_asset_events=_triggering(older, newer))
    assert got == {"dataset_version": newer, "manifest_uri": f"s3://{BUCKET}/field/datasets/{newer}/manifest.json",
                   "episodes": 2, "frames": 10, "source": "asset_event"}


def test_latest_is_the_assets_newest_event_and_fails_when_none_is_published(s3):
    older, newer = _publish(s3, 3), _publish(s3, 3, 7)
    got = _resolve(s3, "latest", inlet_events=_inlet(older, newer))
    assert (got["dataset_version"], got["frames"], got["source"]) == (newer, 10, "latest")
    with pytest.raises(vla_field.FieldDatasetUnavailable, match="'latest': no field dataset version is published"):
        _resolve(s3, "latest", inlet_events=_inlet())


def test_explicit_version_wins_over_the_event_and_a_missing_manifest_fails_before_the_pipeline(s3):
    version = _publish(s3, 5)
    got = _resolve(s3, version, triggering_asset_events=_triggering(_publish(s3, 1, 2)))
    assert (got["dataset_version"], got["episodes"], got["source"]) == (version, 1, "explicit")
    with pytest.raises(vla_field.FieldDatasetUnavailable,
                       match=r"fd-00000000000000ff: no manifest at s3://field-bucket/field/datasets/fd-00000000000000ff/"
                             r"manifest.json \(HeadObject 404\)"):
        _resolve(s3, "fd-00000000000000ff")


def test_an_invalid_manifest_fails_with_its_problems(s3):
    version = _publish(s3, 5)
    key = field.manifest_key("", version)
    doc = json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    doc["totals"]["frames"] = 99
    s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(doc).encode())
    with pytest.raises(vla_field.FieldDatasetUnavailable, match=r"is not valid: \$\.totals\.frames: 99"):
        _resolve(s3, version)


def _vla_dag():
    from airflow.sdk import DAG

    with DAG("t", schedule=None) as dag:
        from airflow.sdk import task

        @task
        def gate():
            return True

        @task(multiple_outputs=True)
        def prepare():
            return {}

        vla.add_tasks(prepare(), image=gate().operator, gate=gate(), resources=gate().operator)
    return dag


def test_the_task_runs_before_the_pipeline_with_the_asset_as_inlet():
    from sim2real.contract import task_ids as ids

    dag = _vla_dag()
    task_ = dag.get_task(ids.FIELD_DATASET)
    assert [a.name for a in task_.inlets] == [FIELD_DATASET_ASSET.name]
    assert ids.FIELD_DATASET in dag.get_task(ids.FINETUNE_GROOT).upstream_task_ids
    assert ids.FIELD_DATASET in {t.task_id for t in dag.get_task(ids.UPSERT_PIPELINE).get_flat_relatives(upstream=True)}


def test_the_task_hands_the_pipeline_the_version_the_preflight_checked(s3, monkeypatch):
    """``latest`` moved on after check_resources: the fine-tune still gets the version the preflight resolved."""
    import airflow.sdk
    from airflow.sdk.exceptions import AirflowFailException

    from sim2real.contract import task_ids as ids

    checked, newer = _publish(s3, 5), _publish(s3, 5, 6)
    callable_ = _vla_dag().get_task(ids.FIELD_DATASET).python_callable
    plan = plan_run(dag_id="sim_to_real", run_id="manual__1", params={**PARAMS, "field_dataset_version": "latest"},
                    env=GOOD)
    plan["vla"]["field_bucket"] = BUCKET
    resources = {"ok": True, "field_dataset": _resolve(s3, "latest", inlet_events=_inlet(checked))}
    monkeypatch.setattr(airflow.sdk, "get_current_context", lambda: {"inlet_events": _inlet(checked, newer)})
    out = callable_(plan, resources)
    assert out["field_dataset"] == resources["field_dataset"] and out["field_dataset"]["dataset_version"] == checked
    assert out["pipeline_params"] == {**plan["vla"]["parameters"],
                                      "FieldDatasetManifestS3Uri": f"s3://{BUCKET}/field/datasets/{checked}/manifest.json"}
    with pytest.raises(AirflowFailException, match="check_resources handed on no field dataset"):
        callable_(plan, {"ok": True})
    assert callable_(plan, {"ok": True, "field_dataset": None}) == {"field_dataset": None,
                                                                   "pipeline_params": plan["vla"]["parameters"]}


def test_a_manifest_uri_that_is_not_the_versions_key_is_refused(s3):
    version = _publish(s3, 5)
    elsewhere = f"s3://{BUCKET}/copies/{version}/manifest.json"
    s3.copy_object(Bucket=BUCKET, Key=f"copies/{version}/manifest.json",
                   CopySource={"Bucket": BUCKET, "Key": field.manifest_key("", version)})
    wanted = {"dataset_version": version, "manifest_uri": elsewhere, "source": "asset_event"}
    with pytest.raises(vla_field.FieldDatasetUnavailable,
                       match=rf"manifest URI {elsewhere} is not s3://{BUCKET}/field/datasets/{version}/manifest.json"):
        vla_field.check_manifest(s3, wanted, bucket=BUCKET, prefix="")


def test_access_denied_is_named_and_not_called_a_missing_manifest(s3):
    from botocore.stub import Stubber

    version = "fd-00000000000000ff"
    wanted = vla_field.requested(version, bucket=BUCKET, prefix="")
    with Stubber(s3) as stub:
        stub.add_client_error("head_object", service_error_code="403", http_status_code=403)
        with pytest.raises(vla_field.FieldDatasetUnavailable) as err:
            vla_field.check_manifest(s3, wanted, bucket=BUCKET, prefix="")
    message = str(err.value)
    assert "HeadObject 403" in message and "s3:GetObject" in message and "no manifest" not in message


def test_a_manifest_that_is_not_json_names_its_uri(s3):
    version = "fd-00000000000000ff"
    s3.put_object(Bucket=BUCKET, Key=field.manifest_key("", version), Body=b"<html>not json</html>")
    with pytest.raises(vla_field.FieldDatasetUnavailable,
                       match=rf"s3://{BUCKET}/field/datasets/{version}/manifest.json is not JSON"):
        _resolve(s3, version)
