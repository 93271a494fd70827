"""``sim_to_real_field_data`` under a real Airflow (``dag.test()``, SQLite) against moto's S3.

One subprocess (a fresh ``AIRFLOW_HOME`` and metadata database; Airflow reads its config at import) runs the DAG
file of dags/ six times while the robots' uploads grow (summaries, and data files written with ChecksumSHA256 as
the robots do). The field dataset events are read from Airflow's database, the manifests from moto.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fresh_process import drive_fresh

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]  # integration: dag.test() on an Airflow metadata DB

BUCKET = "sim2real-artifacts-123456789012"


def drive(home: str, out: str) -> None:
    """Subprocess body: moto, the Airflow home, the runs; writes what the tests check to ``out``."""
    import os

    from tests.moto_server import moto_aws_default
    from tests.orchestration.environments import MINIMAL_ENVIRONMENT

    with moto_aws_default() as endpoint:  # aws_default and plain boto3 clients reach it
        os.environ.pop("SIM2REAL_ENVIRONMENT_FILE", None)
        os.environ["AIRFLOW_VAR_SIM2REAL_ENVIRONMENT"] = json.dumps(
            {**MINIMAL_ENVIRONMENT, "artifacts_bucket": BUCKET, "field_data": {"min_new_episodes": 3}})
        Path(out).write_text(json.dumps(_runs(home, endpoint), indent=2, default=str))


def _runs(home: str, endpoint: str) -> dict:
    """The Airflow home and the DAG's runs as the uploads grow; what each left (task state, asset events)."""
    import datetime as dt

    from tests.fresh_process import dag_in_fresh_home
    from tests.orchestration.test_field_dataset import episode, upload
    from tests.paths import DAGS

    name = "sim_to_real_field_data"
    dag = dag_in_fresh_home(home, f"{name}.py", (DAGS / f"{name}.py").read_text(), name)  # the DAG file of dags/

    import boto3
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=endpoint)
    s3.create_bucket(Bucket=BUCKET)

    def put(thing: str, n: int) -> None:
        data = f"PAR1 {thing} {n}".encode()
        upload(s3, episode(thing, n, data=data, prefix=""), data, prefix="")  # the robots' prefix: none

    def run(hour: int, conf: dict | None = None) -> dict:
        when = dt.datetime(2026, 3, 1, hour, 17, tzinfo=dt.timezone.utc)
        try:
            dag_run = dag.test(logical_date=when, run_after=when, run_conf=conf or {})
        except Exception as err:  # noqa: BLE001 - the trigger-time refusal is what is recorded
            return {"refused": f"{type(err).__name__}: {err}"}
        ti = dag_run.get_task_instance("publish_field_dataset")
        with create_session() as session:
            rows = session.execute(
                select(AssetEvent.source_run_id, AssetEvent.extra).join(AssetModel, AssetModel.id == AssetEvent.asset_id)
                .where(AssetModel.name == "sim2real_field_dataset").order_by(AssetEvent.id)).all()
        return {"run_id": dag_run.run_id, "state": str(getattr(ti.state, "value", ti.state)),
                "events": [{"run_id": run_id, **(extra or {})} for run_id, extra in rows]}

    result = {}
    put("arm-1", 1)
    put("arm-1", 2)
    result["below_env_threshold"] = run(1)  # 2 new, the environment config's 3 needed
    put("arm-2", 3)
    result["first_version"] = run(2)
    put("arm-2", 4)
    result["below_form_threshold"] = run(3, {"min_new_episodes": 2})
    result["second_version"] = run(4, {"min_new_episodes": 1})
    result["nothing_new"] = run(5, {"min_new_episodes": 1})
    result["bad_threshold"] = run(6, {"min_new_episodes": 0})
    result["typo_in_conf"] = run(7, {"min_new_episode": 1})  # Airflow accepts an unknown key; the task refuses it
    s3.delete_object(Bucket=BUCKET, Key="field/data/arm-1/s1-000002.parquet")
    put("arm-2", 5)
    result["parent_episode_gone"] = run(8, {"min_new_episodes": 1})
    result["manifests"] = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="field/datasets/")
                                 .get("Contents", []))
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    summary, log = drive_fresh("tests.orchestration.operators.test_field_dataset_dag",
                               tmp_path_factory.mktemp("field-data"), "runs", timeout=880)
    return {**summary, "log": log}


def test_below_the_threshold_the_task_is_skipped_with_no_event_and_no_write(runs):
    assert runs["below_env_threshold"]["state"] == "skipped" and runs["below_env_threshold"]["events"] == []
    assert "2 new episodes, 3 needed" in runs["log"] and "0 new episodes, 1 needed" in runs["log"]
    assert runs["below_form_threshold"]["state"] == "skipped"
    assert runs["below_form_threshold"]["events"] == runs["first_version"]["events"]
    assert runs["nothing_new"]["state"] == "skipped"
    assert runs["nothing_new"]["events"] == runs["second_version"]["events"]
    assert len(runs["manifests"]) == 2  # one per announced version


def test_enough_new_episodes_publish_a_version_and_announce_it(runs):
    first = runs["first_version"]
    assert first["state"] == "success" and len(first["events"]) == 1
    event = first["events"][0]
    version = event["dataset_version"]
    assert event == {"run_id": first["run_id"], "run_key": event["run_key"], "dataset_version": version,
                     "manifest_uri": f"s3://{BUCKET}/field/datasets/{version}/manifest.json", "episodes": 3,
                     "frames": 90, "new_episodes": 3, "parent_version": None}
    assert f"field/datasets/{version}/manifest.json" in runs["manifests"]


def test_the_next_version_grows_from_the_latest_event(runs):
    first = runs["first_version"]["events"][0]
    second = runs["second_version"]
    assert second["state"] == "success" and second["events"][:1] == [first] and len(second["events"]) == 2
    event = second["events"][1]
    assert event["parent_version"] == first["dataset_version"] != event["dataset_version"]
    assert (event["episodes"], event["new_episodes"], event["run_id"]) == (4, 1, second["run_id"])


def test_a_bad_threshold_is_refused_when_the_run_is_triggered(runs):
    refused = runs["bad_threshold"]["refused"]
    assert "ParamValidationError" in refused and "min_new_episodes" in refused, refused


def test_an_unknown_conf_key_fails_the_run_naming_the_field(runs):
    assert runs["typo_in_conf"]["state"] == "failed"
    assert runs["typo_in_conf"]["events"] == runs["second_version"]["events"]
    assert "'min_new_episode' is not a field of the trigger form (did you mean 'min_new_episodes'" in runs["log"]


def test_an_episode_of_the_latest_version_gone_fails_the_run_with_no_event(runs):
    gone = runs["parent_episode_gone"]
    assert gone["state"] == "failed" and gone["events"] == runs["second_version"]["events"]
    assert (f"episode 's1-000002' of 'arm-1' of the parent version {runs['second_version']['events'][1]['dataset_version']}"
            " is not in the new one (data_missing: no data file at") in runs["log"]
