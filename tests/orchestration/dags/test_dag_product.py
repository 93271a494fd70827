"""The DAG as a product: notifications wired to the right events, links, budget, schedule."""

from __future__ import annotations

import json


import pytest

from sim2real.contract import task_ids as ids

from tests.paths import DAGS


@pytest.fixture(scope="module")
def dag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS / "sim_to_real.py"))
    assert bag.import_errors == {}
    return bag.dags["sim_to_real"]


@pytest.fixture(scope="module")
def serialized(dag):
    """The scheduler's copy of ``dag``: serialized and read back (``DagSerialization``), once for the module."""
    from airflow.serialization.serialized_objects import DagSerialization

    return DagSerialization.from_dict(json.loads(json.dumps(DagSerialization.to_dict(dag))))  # as stored: JSON text


def _events(callbacks) -> list[str]:
    from sim2real.orchestration.notifications import Sim2RealSnsNotifier

    callbacks = callbacks if isinstance(callbacks, list) else [callbacks]
    return [cb.event for cb in callbacks if isinstance(cb, Sim2RealSnsNotifier)]


def test_notifications_are_wired_to_the_four_events(dag):
    assert _events(dag.on_failure_callback) == ["run_failed"]
    assert _events(dag.get_task("quality_gate").on_failure_callback) == ["gate_failed"]
    assert _events(dag.get_task(ids.WAIT_FOR_APPROVAL).on_execute_callback) == ["approval_needed"]
    assert _events(dag.get_task(ids.DEPLOY_TO_ROBOTS).on_success_callback) == ["deployed"]


def test_run_folder_link_survives_serialization(serialized):
    for task_id in (ids.PREPARE_RUN, ids.WRITE_LINEAGE):
        assert "S3 run folder" in serialized.get_task(task_id).extra_links, task_id


def test_run_folder_link_is_registered_by_the_plugin():
    import importlib.util

    spec = importlib.util.spec_from_file_location("sim2real_plugin", DAGS.parent / "plugins" / "sim2real_plugin.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert "S3 run folder" in {link.name for link in module.Sim2RealPlugin.operator_extra_links}


def test_run_folder_link_url():
    from sim2real.orchestration.links.s3 import S3RunFolderLink, partition_of

    url = S3RunFolderLink().format_link(region_name="us-east-1", aws_domain="aws.amazon.com",
                                        bucket="sim2real-artifacts-123456789012", prefix="runs/k-1/")
    assert url == ("https://console.aws.amazon.com/s3/buckets/sim2real-artifacts-123456789012"
                   "?region=us-east-1&prefix=runs%2Fk-1%2F&showversions=false")
    assert partition_of("cn-north-1") == "aws-cn" and partition_of("eu-west-1") == "aws"


def test_nightly_schedule_one_run_at_a_time_no_catchup(dag):
    from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable

    assert isinstance(dag.timetable, AssetOrTimeSchedule)
    nightly = dag.timetable.timetable
    assert isinstance(nightly, CronTriggerTimetable)
    assert nightly.expression == "0 2 * * *" and str(nightly.timezone) == "UTC"
    assert dag.catchup is False and dag.max_active_runs == 1


def test_a_new_field_dataset_version_also_starts_a_run(dag, serialized):
    """Asset-or-time: the nightly cron, or an event of the field dataset asset (sim_to_real_field_data publishes
    it), whichever comes first; the scheduler's (serialized) DAG keeps both."""
    from sim2real.orchestration.assets import FIELD_DATASET_ASSET

    assert dag.timetable.asset_condition == FIELD_DATASET_ASSET
    assert [a.name for _, a in serialized.timetable.asset_condition.iter_assets()] == [FIELD_DATASET_ASSET.name]
    assert serialized.timetable.description == "Triggered by assets or At 02:00"
    assert "on each new field dataset version" in dag.description


def test_nightly_schedule_time_zone_comes_from_the_configuration(monkeypatch):
    """infra/ sets [sim2real] schedule_timezone on MWAA from the environment config; the DAG reads it at parse
    time (no Variable lookup) and shows it in its description."""
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("AIRFLOW__SIM2REAL__SCHEDULE_TIMEZONE", "Europe/Berlin")
    bag = DagBag(dag_folder=str(DAGS / "sim_to_real.py"))
    assert bag.import_errors == {}
    dag = bag.dags["sim_to_real"]
    assert str(dag.timetable.timetable.timezone) == "Europe/Berlin" and "02:00 Europe/Berlin" in dag.description
    monkeypatch.setenv("AIRFLOW__SIM2REAL__SCHEDULE_TIMEZONE", "Mars/Olympus")
    bag = DagBag(dag_folder=str(DAGS / "sim_to_real.py"))
    assert "[sim2real] schedule_timezone: 'Mars/Olympus' is not an IANA time zone name" in "".join(bag.import_errors.values())


@pytest.mark.parametrize("run_type, nodes, task", [("scheduled", 2, "Isaac-Velocity-Rough-H1-v0"),
                                                     ("manual", 1, "Reacher-v5"),
                                                     # a new field dataset version: as the nightly run
                                                     ("asset_triggered", 2, "Isaac-Velocity-Rough-H1-v0")])
def test_prepare_run_merges_run_defaults_for_unattended_runs_only(dag, monkeypatch, run_type, nodes, task):
    """prepare_run's own code: a scheduled or asset-triggered run takes the config's run_defaults, a manual run the form's values;
    the gate reads its threshold from the plan, so the nightly values reach every stage."""
    import json
    from types import SimpleNamespace

    from tests.orchestration.environments import MINIMAL_ENVIRONMENT as GOOD

    run_defaults = {"task": "Isaac-Velocity-Rough-H1-v0", "num_nodes": 2, "train_time_budget_seconds": 0,
                    "min_success_rate": 0.6}
    monkeypatch.setenv("AIRFLOW_VAR_SIM2REAL_ENVIRONMENT", json.dumps({**GOOD, "run_defaults": run_defaults}))
    prepare = dag.get_task(ids.PREPARE_RUN).python_callable
    monkeypatch.setitem(prepare.__globals__, "get_current_context", lambda: {"ti": None, "task": None})
    monkeypatch.setattr("sim2real.orchestration.sweeper.sweep_before_run", lambda *args, **kwargs: None)  # no AWS here
    form = dag.params.validate()
    out = prepare(params=form, dag_run=SimpleNamespace(run_id=f"{run_type}__2026-12-01T02:00:00+00:00",
                                                       run_type=run_type, conf={}), dag=dag)
    assert out["batch.num_nodes"] == nodes and out["checkpoint.task"] == task
    assert out["plan"]["params"]["num_nodes"] == nodes
    expected_gate = 0.6 if run_type != "manual" else form["min_success_rate"]
    assert out["quality_gate.min_success_rate"] == expected_gate


def _prepare(dag, monkeypatch, calls: list, tracking: dict):
    """prepare_run's callable with MLflow and the sweep recorded into ``calls`` (no server, no AWS here)."""
    import json

    from tests.orchestration.environments import MINIMAL_ENVIRONMENT as GOOD

    monkeypatch.setenv("AIRFLOW_VAR_SIM2REAL_ENVIRONMENT", json.dumps(GOOD))
    prepare = dag.get_task(ids.PREPARE_RUN).python_callable
    monkeypatch.setitem(prepare.__globals__, "get_current_context", lambda: {"ti": None, "task": None})
    monkeypatch.setattr("sim2real.orchestration.tracking.start_tracking",
                        lambda **kwargs: calls.append("start_tracking") or tracking)
    monkeypatch.setattr("sim2real.orchestration.tracking.close_tracking",
                        lambda t, **kwargs: calls.append(("close_tracking", t["parent_run_id"], kwargs)))
    return prepare


def test_prepare_run_refuses_a_round_whose_checkpoint_changed_before_starting_tracking(dag, monkeypatch):
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException

    calls: list = []
    prepare = _prepare(dag, monkeypatch, calls, {"enabled": False, "reason": "off"})

    def changed(plan, **kwargs):
        calls.append("seed_checkpoint")
        raise ValueError("round 2: the checkpoint s3://b/agent_000040.pt hashes to ...: start a new run")

    monkeypatch.setattr("sim2real.orchestration.stages.rounds.seed_checkpoint", changed)
    with pytest.raises(AirflowFailException, match="round 2: the checkpoint"):
        prepare(params=dag.params.validate(), dag=dag,
                dag_run=SimpleNamespace(run_id="manual__2026-12-02T00:00:00+00:00", run_type="manual", conf={}))
    assert calls == ["seed_checkpoint"]  # no MLflow run was started that nothing would end


def test_prepare_run_fails_the_mlflow_runs_it_started_when_it_fails_after(dag, monkeypatch):
    from types import SimpleNamespace

    calls: list = []
    tracking = {"enabled": True, "tracking_uri": "http://127.0.0.1:9", "experiment_name": "sim2real",
                "experiment_id": "1", "parent_run_id": "parent-1", "runs": {"rl_training": "child-1"}, "ui_url": None}
    prepare = _prepare(dag, monkeypatch, calls, tracking)

    def sweep(*args, **kwargs):
        calls.append("sweep_before_run")
        raise TimeoutError("the orphan sweep ran out of time")

    monkeypatch.setattr("sim2real.orchestration.sweeper.sweep_before_run", sweep)
    with pytest.raises(TimeoutError):
        prepare(params=dag.params.validate(), dag=dag,
                dag_run=SimpleNamespace(run_id="manual__2026-12-02T00:00:00+00:00", run_type="manual", conf={}))
    assert calls == ["start_tracking", "sweep_before_run", ("close_tracking", "parent-1", {"succeeded": False})]


@pytest.mark.parametrize("build", ["sim2real.orchestration.stages.run:build_params", "sim2real.orchestration.release:build_release_params"])
def test_optional_text_fields_of_both_forms_accept_the_forms_empty_value(build):
    """The trigger form sends an empty text field as null and marks a field required unless its type allows
    null: an optional field defaulting to "" with type "string" kept the Trigger button disabled."""
    import importlib

    from airflow.sdk import Param

    module, name = build.split(":")
    params = getattr(importlib.import_module(module), name)()
    optional = {key: p for key, p in params.items() if p.value in (None, "")}
    assert optional, "expected optional text fields"
    for key, spec in optional.items():
        assert spec.value is None and "null" in spec.schema["type"], (key, spec.value, spec.schema["type"])
        Param(None, **spec.schema).resolve()  # the form's empty value is valid
    # Their patterns still refuse a wrong value (the text fields; retrain_round is an optional object).
    patterned = [spec for spec in optional.values() if "pattern" in spec.schema]
    assert patterned, "expected optional text fields with a pattern"
    with pytest.raises(Exception, match="does not match"):
        Param("bad value!", **patterned[0].schema).resolve()


def test_the_deployment_is_the_deployed_model_assets_producer(dag):
    from airflow.dag_processing.dagbag import DagBag

    from sim2real.orchestration import assets
    from sim2real.orchestration.stages.deploy import DEPLOYED_MODEL_PACKAGE_ASSET

    deploy = dag.get_task(ids.DEPLOY_TO_ROBOTS)
    assert deploy.outlets == [DEPLOYED_MODEL_PACKAGE_ASSET]
    assert deploy._post_execute_hook is assets.deployed_model_post_execute
    # the same asset as the release DAG's deployment (one asset, two producers)
    release = DagBag(dag_folder=str(DAGS / "sim_to_real_release.py")).dags["sim_to_real_release"]
    assert [a.name for a in release.get_task("deploy_to_robots").outlets] == [DEPLOYED_MODEL_PACKAGE_ASSET.name]
    # only the deployment produces it: a run whose deployment is skipped or fails emits no event
    producers = [t.task_id for t in dag.tasks if DEPLOYED_MODEL_PACKAGE_ASSET in (t.outlets or [])]
    assert producers == [ids.DEPLOY_TO_ROBOTS]


def test_the_checkpoint_sensor_announces_through_the_alias_once_per_sha256(dag):
    """The wiring tests/orchestration/test_checkpoint_event_once.py runs under dag.test(): no static Asset outlet
    (it would emit on every successful try), the alias as outlet and inlet, the announcing post_execute."""
    from sim2real.orchestration import assets
    from sim2real.orchestration.assets import CHECKPOINT_ANNOUNCEMENTS, CHECKPOINT_ASSET

    sensor = dag.get_task(ids.WAIT_FOR_CHECKPOINT)
    assert sensor.outlets == [CHECKPOINT_ANNOUNCEMENTS] and sensor.inlets == [CHECKPOINT_ANNOUNCEMENTS]
    assert sensor._post_execute_hook is assets.checkpoint_post_execute
    assert not [t.task_id for t in dag.tasks if CHECKPOINT_ASSET in (t.outlets or [])]


@pytest.mark.parametrize("now", ["2026-12-05T01:59:00", "2026-12-05T02:00:00", "2026-12-05T02:00:01",
                                 "2026-12-05T02:12:17", "2026-12-05T04:23:00", "2026-12-05T04:25:00",
                                 "2026-12-05T23:59:59"])
def test_the_first_nightly_run_is_the_next_02_00_not_a_past_one(serialized, monkeypatch, now):
    """What the scheduler stores as the DAG's next run (the UI's "Next Run") when the DAG is first deployed (no
    scheduled run yet), at any time of day: the next 02:00 to come (now, at 02:00:00 exactly), then every night. A
    start date in the past made CronTriggerTimetable without catchup pick the latest 02:00 already gone: a past "Next
    Run" (for ever where scheduling is off, as in make ui) and a full training started the moment the DAG was
    deployed. So did ``run_immediately=False`` within a tenth of the period after 02:00 (until 04:24): Airflow 3.3.1
    treats False as "within 10 % of the gap" (False fails at 02:00:01, 02:12:17 and 04:23)."""
    import datetime as dt

    import airflow.timetables.trigger as trigger
    import pendulum

    # the stored DAG (read back from JSON text) keeps the zero delta: a 0 without its type would mean False again
    assert serialized.timetable.timetable._run_immediately == dt.timedelta(0)
    clock = pendulum.parse(now, tz="UTC")
    monkeypatch.setattr(trigger, "utcnow", lambda: clock)
    first = serialized.next_dagrun_info(last_automated_run_info=None)
    assert clock <= first.run_after < clock + dt.timedelta(days=1), first
    assert (first.run_after.hour, first.run_after.minute) == (2, 0)
    second = serialized.next_dagrun_info(last_automated_run_info=first)
    assert second.run_after == first.run_after + dt.timedelta(days=1), second


#: Keywords that draft-07 does not know (2019-09 / 2020-12): a field using one would be checked by nothing.
NEWER_KEYWORDS = {"$defs", "$anchor", "$dynamicRef", "$dynamicAnchor", "$vocabulary", "prefixItems",
                  "dependentRequired", "dependentSchemas", "unevaluatedItems", "unevaluatedProperties", "minContains",
                  "maxContains"}


def _keywords(schema) -> set[str]:
    if isinstance(schema, dict):
        return set(schema) | {k for v in schema.values() for k in _keywords(v)}
    if isinstance(schema, list):
        return {k for v in schema for k in _keywords(v)}
    return set()


@pytest.mark.parametrize("build", ["sim2real.orchestration.stages.run:build_params",
                                   "sim2real.orchestration.release:build_release_params"])
def test_every_form_field_declares_the_draft_07_dialect_and_uses_only_its_keywords(build):
    """Before: no ``$schema``, so jsonschema checked each field's schema against the 2020-12 metaschema at every
    validation, and serializing the DAG (88 dumps of every field) took 12 s instead of about 1."""
    import importlib

    from jsonschema import Draft7Validator, validators

    from sim2real.orchestration.params import PARAM_SCHEMA_DIALECT

    module, name = build.split(":")
    params = getattr(importlib.import_module(module), name)()
    for key, spec in params.items():
        assert spec.schema.get("$schema") == PARAM_SCHEMA_DIALECT, key
        assert validators.validator_for(spec.schema) is Draft7Validator, key
        Draft7Validator.check_schema(spec.schema)
        assert not (_keywords(spec.schema) & NEWER_KEYWORDS), (key, _keywords(spec.schema) & NEWER_KEYWORDS)
        spec.resolve()  # the default is valid in this dialect too


def test_the_sweeper_dags_field_declares_the_dialect():
    from airflow.dag_processing.dagbag import DagBag

    from sim2real.orchestration.params import PARAM_SCHEMA_DIALECT

    bag = DagBag(dag_folder=str(DAGS / "sim_to_real_sweeper.py"))
    assert bag.import_errors == {}
    assert all(p.schema.get("$schema") == PARAM_SCHEMA_DIALECT for p in bag.dags["sim_to_real_sweeper"].params.values())
