"""Asset events carry metadata: checkpoint URI + sha256, success rate, model package ARN."""

from __future__ import annotations

from types import SimpleNamespace

from airflow.sdk import Asset

from sim2real.orchestration import assets


class Events(dict):
    def __missing__(self, asset):
        self[asset] = SimpleNamespace(extra={})
        return self[asset]


class AliasEvents(dict):
    """``outlet_events`` of an alias outlet: ``add(asset, extra=...)`` records what the task emits."""

    def __missing__(self, alias):
        added = []
        self[alias] = SimpleNamespace(added=added, add=lambda asset, extra=None: added.append((asset, extra)))
        return self[alias]


def test_checkpoint_sensor_puts_uri_and_sha256_on_its_event():
    from sim2real.orchestration.assets import CHECKPOINT_ANNOUNCEMENTS, CHECKPOINT_ASSET

    events = AliasEvents()
    ctx = {"task": SimpleNamespace(outlets=[CHECKPOINT_ANNOUNCEMENTS], run_key=None),
           "dag_run": SimpleNamespace(dag_id="sim_to_real", run_id="manual__1"), "outlet_events": events,
           "inlet_events": {CHECKPOINT_ANNOUNCEMENTS: []}}  # nothing announced by this run yet
    assets.checkpoint_post_execute(ctx, {"checkpoint_uri": "s3://b/c.pt", "sha256": "ab" * 32, "iteration": 225,
                                         "task": "Reacher-v5", "verified_sha256": True})
    [(asset, extra)] = events[CHECKPOINT_ANNOUNCEMENTS].added
    assert asset == CHECKPOINT_ASSET
    assert extra["checkpoint_uri"] == "s3://b/c.pt" and extra["sha256"] == "ab" * 32
    assert extra["iteration"] == 225 and extra["run_key"].startswith("sim-to-real-manual-1-")


def test_model_package_event_has_the_arn():
    asset = Asset(name="pkg", uri="sim2real://vla/approved-model-package")
    events = Events()
    ctx = {"task": SimpleNamespace(outlets=[asset], run_key="k-1"), "outlet_events": events}
    assets.model_package_post_execute(ctx, {"model_package_arn": "arn:pkg/1", "approval_status": "Approved",
                                            "model_data_url": "s3://b/m.tar.gz"})
    assert events[asset].extra == {"run_key": "k-1", "model_package_arn": "arn:pkg/1",
                                   "model_data_url": "s3://b/m.tar.gz", "approval_status": "Approved"}


def test_eval_report_event_has_the_success_rate():
    asset = Asset(name="rep", uri="sim2real://rl/eval-report")
    events = Events()
    assets.set_eval_report_extra(events, asset, {"success_rate": 0.2, "ci95": [0.11, 0.33], "episodes": 50,
                                                 "checkpoint_sha256": "ab" * 32, "report_uri": "s3://b/r.json"},
                                 "k-1")
    assert events[asset].extra["success_rate"] == 0.2 and events[asset].extra["ci95"] == [0.11, 0.33]


def test_no_result_no_crash():
    events = Events()
    assets.model_package_post_execute({"task": SimpleNamespace(outlets=[], run_key="k"), "outlet_events": events})
    assert events == {}


def test_deployment_event_has_package_deployment_group_and_devices():
    asset = Asset(name="sim2real_deployed_model_package", uri="sim2real://edge/deployed-model-package")
    events = Events()
    ctx = {"task": SimpleNamespace(outlets=[asset], run_key=None, thing_group_name="sim2real-robots"),
           "dag_run": SimpleNamespace(dag_id="sim_to_real", run_id="manual__1"), "outlet_events": events}
    assets.deployed_model_post_execute(ctx, {"deployment_id": "d-1", "model_package_arn": "arn:pkg/1",
                                             "model_approval_status": "Approved",
                                             "devices": {"robot-1": "SUCCEEDED"}, "iot_job_id": "j"})
    extra = events[asset].extra
    assert extra["deployment_id"] == "d-1" and extra["model_package_arn"] == "arn:pkg/1"
    assert extra["thing_group_name"] == "sim2real-robots" and extra["devices"] == {"robot-1": "SUCCEEDED"}
    assert extra["run_key"].startswith("sim-to-real-manual-1-")
