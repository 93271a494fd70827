"""sim2real.orchestration.release: the release DAG's validation, package resolution (moto model registry), policy
manifest re-verification, components and the release.json record."""

from __future__ import annotations

import datetime as dt
import hashlib
import json

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from airflow.providers.common.compat.sdk import AirflowFailException
from sim2real.orchestration import release as r
from sim2real.orchestration.hooks.model_registry import ModelRegistryHook
from sim2real.orchestration.params import ParamRuleError

REGION = "us-east-1"
ACCOUNT = "123456789012"
GROUP = "sim2real-groot-models"
ARN_V3 = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package/{GROUP}/3"
ENV = {
    "region": REGION, "artifacts_bucket": f"sim2real-artifacts-{ACCOUNT}",
    "sagemaker": {"model_package_group": GROUP, "pipeline_name": "p", "pipeline_role_arn": "arn:aws:iam::1:role/r"},
    "greengrass": {"thing_group_name": "sim2real-robots",
                   "components": {"com.sim2real.PolicySetup": "1.0.0", "com.sim2real.PolicyInference": "1.0.0"}},
}
DEFAULTS = {"model_package_arn": "", "model_package_group_name": "", "thing_group_name": "",
            "rollout_max_per_minute": 10, "abort_failure_threshold_percent": 10.0,
            "policy_checkpoint_manifest_uri": ""}


def plan(**params):
    return r.plan_release(dag_id="sim_to_real_release", run_id="manual__2026-03-01T00:00:00+00:00",
                          params={**DEFAULTS, **params}, env=ENV)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize("params, error", [
    ({}, None),
    ({"model_package_arn": ARN_V3}, None),
    ({"model_package_arn": ARN_V3, "model_package_group_name": GROUP}, None),
    # SageMaker writes the group lower-case in ARNs: a group name in another case is the same group.
    ({"model_package_arn": ARN_V3, "model_package_group_name": "Sim2Real-Groot-Models"}, None),
    ({"model_package_group_name": "other-group"}, None),
    ({"model_package_arn": ARN_V3, "model_package_group_name": "other-group"},
     f"belongs to model package group '{GROUP}', not to model_package_group_name 'other-group'"),
    ({"model_package_arn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package/{GROUP}"},
     "is not a versioned model package ARN"),
    ({"model_package_arn": "sim2real-groot-models/3"}, "is not a versioned model package ARN"),
])
def test_cross_field_rules(params, error):
    if error is None:
        r.check_release_params({**DEFAULTS, **params})
    else:
        with pytest.raises(ParamRuleError, match=error):
            r.check_release_params({**DEFAULTS, **params})


@pytest.fixture(scope="module")
def form():
    """The release form as the API server validates a trigger (serialized DAG params)."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    from tests.conftest import REPO_ROOT

    bag = DagBag(dag_folder=str(REPO_ROOT / "dags" / "sim_to_real_release.py"))
    assert bag.import_errors == {}
    return DagSerialization.from_dict(DagSerialization.to_dict(bag.dags["sim_to_real_release"])).params


@pytest.mark.parametrize("conf, field", [
    ({"model_package_arn": "arn:aws:s3:::bucket/key"}, "model_package_arn"),
    ({"model_package_group_name": "bad group!"}, "model_package_group_name"),
    ({"thing_group_name": "robots with spaces"}, "thing_group_name"),
    ({"rollout_max_per_minute": 0}, "rollout_max_per_minute"),
    ({"rollout_max_per_minute": 1001}, "rollout_max_per_minute"),
    ({"abort_failure_threshold_percent": 100.5}, "abort_failure_threshold_percent"),
    ({"policy_checkpoint_manifest_uri": "s3://bucket/runs/k/checkpoints/agent.pt"}, "policy_checkpoint_manifest_uri"),
    ({"policy_checkpoint_manifest_uri": "/local/manifest.json"}, "policy_checkpoint_manifest_uri"),
])
def test_form_refuses_bad_fields_before_a_run(form, conf, field):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match=field):
        form.deep_merge(conf).validate()


def test_form_defaults_and_limits_match_the_main_dag(form):
    from sim2real.orchestration.stages.run import build_params

    resolved = form.deep_merge({"model_package_arn": ARN_V3,
                                "policy_checkpoint_manifest_uri": "s3://b-1/runs/k/checkpoints/manifest.json"}).validate()
    assert resolved["model_package_arn"] == ARN_V3 and resolved["rollout_max_per_minute"] == 10
    main = build_params()
    for name in ("rollout_max_per_minute", "abort_failure_threshold_percent", "thing_group_name"):
        assert r.build_release_params()[name].schema == main[name].schema, name


def test_plan_defaults_come_from_the_environment_config():
    p = plan()
    assert p["model_package_arn"] is None and p["model_package_group"] == GROUP
    assert p["run_key"].startswith("sim-to-real-release-manual-2026-03-01")
    assert p["release_uri"] == f"s3://{ENV['artifacts_bucket']}/runs/{p['run_key']}/release.json"
    assert p["deploy"]["thing_group_name"] == "sim2real-robots"
    assert p["deploy"]["deployment_name"] == f"sim2real-{p['run_key']}"
    assert p["deploy"]["components"] == ENV["greengrass"]["components"]
    assert p["policy_checkpoint_manifest_uri"] is None


def test_plan_overrides():
    p = plan(model_package_arn=ARN_V3, thing_group_name="lab-robots", rollout_max_per_minute=3,
             abort_failure_threshold_percent=25.0)
    assert p["model_package_arn"] == ARN_V3 and p["model_package_group"] == GROUP  # the ARN's group
    assert p["deploy"]["thing_group_name"] == "lab-robots"
    job = p["deploy"]["iot_job_configuration"]
    assert job["jobExecutionsRolloutConfig"] == {"maximumPerMinute": 3}
    assert job["abortConfig"]["criteriaList"][0]["thresholdPercentage"] == 25.0
    assert plan(model_package_group_name="other")["model_package_group"] == "other"


# ---------------------------------------------------------------- model registry (moto)


@pytest.fixture
def registry():
    with mock_aws():
        sm = boto3.client("sagemaker", region_name=REGION)
        sm.create_model_package_group(ModelPackageGroupName=GROUP)
        yield sm, ModelRegistryHook(aws_conn_id=None, region_name=REGION)


def register(sm, status, description=None, group=GROUP):
    n = len(sm.list_model_packages(ModelPackageGroupName=group)["ModelPackageSummaryList"]) + 1
    arn = sm.create_model_package(
        ModelPackageGroupName=group, ModelApprovalStatus="PendingManualApproval",
        InferenceSpecification={"Containers": [{"Image": "img:1", "ModelDataUrl": f"s3://b/models/v{n}/model.tar.gz"}],
                                "SupportedContentTypes": ["application/json"],
                                "SupportedResponseMIMETypes": ["application/json"]},
    )["ModelPackageArn"]
    if status != "PendingManualApproval" or description:
        sm.update_model_package(ModelPackageArn=arn, ModelApprovalStatus=status,
                                **({"ApprovalDescription": description} if description else {}))
    return arn


def test_latest_approved_skips_newer_pending_and_rejected(registry):
    sm, hook = registry
    v1 = register(sm, "Approved")
    v2 = register(sm, "Approved")
    register(sm, "Rejected", "drifts left")
    register(sm, "PendingManualApproval")
    assert hook.latest_approved_model_package(GROUP)["ModelPackageArn"] == v2
    out = r.resolve_model_package(hook, plan())
    assert out["model_package_arn"] == v2 and out["version"] == 2 and out["selected_by"] == "latest_approved"
    assert out["approval_status"] == "Approved" and out["model_data_url"] == "s3://b/models/v2/model.tar.gz"
    assert out["model_package_group_name"] == GROUP and out["creation_time"]
    # An older approved version by ARN (a rollback) is released as asked.
    old = r.resolve_model_package(hook, plan(model_package_arn=v1))
    assert old["model_package_arn"] == v1 and old["version"] == 1 and old["selected_by"] == "arn"


def test_group_without_an_approved_version_is_refused(registry):
    sm, hook = registry
    register(sm, "PendingManualApproval")
    assert hook.latest_approved_model_package(GROUP) is None
    with pytest.raises(AirflowFailException, match=f"model package group {GROUP} has no Approved version"):
        r.resolve_model_package(hook, plan())


@pytest.mark.parametrize("status, description", [
    ("PendingManualApproval", None),
    ("Rejected", "grasp success below the bar on the real arm"),
])
def test_package_that_is_not_approved_is_refused_with_how_to_approve(registry, status, description):
    sm, hook = registry
    register(sm, "Approved")
    arn = register(sm, status, description)
    with pytest.raises(AirflowFailException) as err:
        r.resolve_model_package(hook, plan(model_package_arn=arn))
    message = str(err.value)
    assert f"Model package {arn} is {status}" in message and "not Approved" in message
    assert f"aws sagemaker update-model-package --model-package-arn {arn} --model-approval-status Approved" in message
    assert f"Models > Registered models > {GROUP}" in message
    if description:
        assert description in message


def test_unknown_arn_is_refused(registry):
    _, hook = registry
    with pytest.raises(AirflowFailException, match="model package .*/9 not found"):
        r.resolve_model_package(hook, plan(model_package_arn=ARN_V3.replace("/3", "/9")))


def test_arn_of_another_group_than_the_described_one_is_refused(registry):
    sm, hook = registry
    sm.create_model_package_group(ModelPackageGroupName="other-models")
    arn = register(sm, "Approved", group="other-models")
    p = {**plan(model_package_arn=arn), "model_package_group": GROUP}  # plan built around the rule
    with pytest.raises(AirflowFailException, match="belongs to group other-models, not sim2real-groot-models"):
        r.resolve_model_package(hook, p)


# ---------------------------------------------------------------- policy manifest


@pytest.fixture
def policy(tmp_path):
    ckpt, onnx = tmp_path / "agent_000010.pt", tmp_path / "policy.onnx"
    ckpt.write_bytes(b"checkpoint bytes")
    onnx.write_bytes(b"onnx bytes")
    manifest = {"schema_version": 1, "task": "Reacher-v5", "iteration": 10, "run_key": "older-run",
                "checkpoint_uri": str(ckpt), "sha256": hashlib.sha256(b"checkpoint bytes").hexdigest(),
                "onnx_uri": str(onnx), "onnx_sha256": hashlib.sha256(b"onnx bytes").hexdigest()}
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    return path, manifest


def test_manifest_is_verified_again(policy):
    path, manifest = policy
    out = r.verify_policy_manifest(str(path), None)
    assert out["verified_sha256"] is True and out["manifest_uri"] == str(path) and out["sha256"] == manifest["sha256"]


@pytest.mark.parametrize("change, error", [
    ({"sha256": "0" * 64}, "checkpoint .* sha256 mismatch"),
    ({"onnx_sha256": "f" * 64}, "ONNX policy .* sha256 mismatch"),
    ({"onnx_sha256": None}, "onnx_uri without onnx_sha256"),
    ({"checkpoint_uri": "/nowhere/agent.pt"}, "checkpoint /nowhere/agent.pt named by .* does not exist"),
    ({"sha256": "not-a-hash"}, "has no valid sha256"),
])
def test_manifest_that_does_not_verify_is_refused(policy, change, error):
    path, manifest = policy
    path.write_text(json.dumps({**manifest, **change}))
    with pytest.raises(AirflowFailException, match=error):
        r.verify_policy_manifest(str(path), None)


def test_missing_manifest_is_refused(tmp_path):
    with pytest.raises(AirflowFailException, match="does not exist"):
        r.verify_policy_manifest(str(tmp_path / "manifest.json"), None)


# ---------------------------------------------------------------- the package alone: its run's policy


def _run_with_lineage(sm, runs, run_key="sim-to-real-older-run", *, lineage=True, evaluated=None):
    """A package registered by run ``run_key`` (CustomerMetadataProperties) whose checkpoint, manifest and lineage
    record are in the runs folder ``runs`` (a local stand-in for s3://<bucket>/runs/), as a finished run leaves them."""
    ckpt = b"run checkpoint bytes"
    sha = hashlib.sha256(ckpt).hexdigest()
    folder = runs / run_key / "checkpoints"
    folder.mkdir(parents=True)
    (folder / "agent_000100.pt").write_bytes(ckpt)
    manifest = {"schema_version": 1, "task": "Reacher-v5", "iteration": 100, "run_key": run_key,
                "checkpoint_uri": str(folder / "agent_000100.pt"), "sha256": sha}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    if lineage:
        doc = {"run_key": run_key, "stages": {"checkpoint": {**manifest, "sha256": evaluated or sha}}}
        (runs / run_key / "lineage.json").write_text(json.dumps(doc))
    arn = register(sm, "Approved")
    sm.update_model_package(ModelPackageArn=arn, ModelApprovalStatus="Approved",
                            CustomerMetadataProperties={"sim2real:run-key": run_key})
    return arn, manifest


def test_the_package_alone_ships_the_policy_of_the_run_that_registered_it(registry, tmp_path):
    """The form's documented default (no manifest): the robots get the RL policy the package's own run trained and
    evaluated (its lineage record), verified again; not a configuration with nothing to serve."""
    sm, hook = registry
    arn, manifest = _run_with_lineage(sm, tmp_path)
    p = {**plan(), "runs_uri": f"{tmp_path}/"}
    assert plan()["runs_uri"] == f"s3://{ENV['artifacts_bucket']}/runs/"
    out = r.resolve_release(hook, p, aws_conn_id=None)
    assert out["model_package_arn"] == arn and out["run_key"] == "sim-to-real-older-run"
    policy = out["manifest"]
    assert policy["verified_sha256"] is True and policy["sha256"] == manifest["sha256"]
    assert policy["manifest_uri"] == f"{tmp_path}/sim-to-real-older-run/checkpoints/manifest.json"
    merge = json.loads(r.release_components(p, out, policy)["com.sim2real.PolicySetup"]
                       ["configurationUpdate"]["merge"])
    assert merge["ModelSha256"] == manifest["sha256"] and merge["ModelS3Uri"] == manifest["checkpoint_uri"]


@pytest.mark.parametrize("case, error", [
    ("no_run", "was not registered by a sim_to_real run .* give policy_checkpoint_manifest_uri"),
    ("no_lineage", "which has no lineage record at .*/lineage.json .* give policy_checkpoint_manifest_uri"),
    ("other_sha", "names checkpoint sha256 .* but run sim-to-real-older-run evaluated and registered 0{64}"),
])
def test_the_package_alone_without_a_known_policy_is_refused_before_any_deployment(registry, tmp_path, case, error):
    sm, hook = registry
    if case == "no_run":
        register(sm, "Approved")
    else:
        _run_with_lineage(sm, tmp_path, lineage=case != "no_lineage", evaluated="0" * 64 if case == "other_sha" else None)
    with pytest.raises(AirflowFailException, match=error):
        r.resolve_release(hook, {**plan(), "runs_uri": f"{tmp_path}/"}, aws_conn_id=None)


# ---------------------------------------------------------------- components and record

PACKAGE = {"model_package_arn": ARN_V3, "model_package_group_name": GROUP, "version": 3,
           "approval_status": "Approved", "approval_description": "ok on the bench",
           "model_data_url": "s3://b/models/v3/model.tar.gz", "creation_time": "2026-02-01T00:00:00+00:00",
           "selected_by": "arn"}


def test_components_carry_the_package_and_the_policy(policy):
    _, manifest = policy
    p = plan(model_package_arn=ARN_V3)
    components = r.release_components(p, PACKAGE, {**manifest, "verified_sha256": True})
    assert set(components) == set(ENV["greengrass"]["components"])
    merge = json.loads(components["com.sim2real.PolicySetup"]["configurationUpdate"]["merge"])
    assert merge == {"ModelPackageArn": ARN_V3, "ModelS3Uri": manifest["onnx_uri"],
                     "ModelSha256": manifest["onnx_sha256"], "Exporter": ""}  # the ONNX export, as is
    with pytest.raises(ValueError, match="no RL checkpoint manifest"):
        r.release_components(p, PACKAGE, None)


def record(**kwargs):
    p = plan(model_package_arn=ARN_V3)
    args = {"plan": p, "dag_id": "sim_to_real_release", "run_id": "manual__2026-03-01T00:00:00+00:00",
            "package": PACKAGE, "manifest": None,
            "components": r.release_components(p, PACKAGE, {"checkpoint_uri": "s3://b/c.pt", "sha256": "ab" * 32}),
            "deployment": {"deployment_id": "d-1", "deployment_name": p["deploy"]["deployment_name"],
                           "iot_job_id": "j-1", "target_arn": "arn:aws:iot:us-east-1:1:thinggroup/sim2real-robots",
                           "deployment_status": "COMPLETED", "devices": {"robot-1": "SUCCEEDED", "robot-2": "SUCCEEDED"},
                           "device_reasons": {}},
            "task_states": {"prepare_release": {"state": "success", "duration_s": 0.4},
                            "deploy_to_robots": {"state": "success", "duration_s": 12.5}},
            "started_at": dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc),
            "now": dt.datetime(2026, 3, 1, 0, 1, tzinfo=dt.timezone.utc)}
    return r.build_release_record(**{**args, **kwargs})


def test_deployed_record_matches_the_schema_and_renders():
    doc = record()
    assert r.release_errors(doc) == []
    assert doc["outcome"] == "deployed" and doc["durations"] == {"elapsed_s": 60.0, "deploy_s": 12.5,
                                                                 "tasks_total_s": 12.9}
    assert doc["tasks"]["resolve"] == {"task_id": "resolve_model_package", "state": None, "duration_s": None}
    md = r.render_release_markdown(doc)
    assert "deployed" in md and ARN_V3 in md and "device `robot-1`: SUCCEEDED" in md and "d-1" in md


@pytest.mark.parametrize("devices, says", [
    ({"robot-2": "SUCCEEDED"}, "- Rolled back automatically to `sim2real-run-0`"),
    ({"robot-2": "QUEUED"}, "- Automatic rollback NOT finished (the fleet may be mixed): back to `sim2real-run-0`"),
    ({}, "- Automatic rollback NOT finished"),
])
def test_a_rollback_is_in_the_record_and_the_summary_says_only_what_happened(devices, says):
    rollback = {"deployment_id": "d-2", "deployment_name": "sim2real-k-rollback", "previous_deployment_id": "d-0",
                "previous_deployment_name": "sim2real-run-0", "deployment_status": "ACTIVE", "devices": devices}
    failed = record(deployment={**record()["deployment"], "deployment_status": "CANCELED",
                                "devices": {"robot-1": "FAILED", "robot-2": "SUCCEEDED"}, "rollback": rollback})
    assert r.release_errors(failed) == []
    md = r.render_release_markdown(failed)
    assert says in md and "rollback deployment `d-2` (ACTIVE)" in md
    assert ("Rolled back automatically" in md) is (devices == {"robot-2": "SUCCEEDED"})


def test_failed_and_refused_records_match_the_schema():
    failed = record(deployment={**record()["deployment"], "deployment_status": "CANCELED",
                                "devices": {"robot-1": "FAILED", "robot-2": "SUCCEEDED"},
                                "device_reasons": {"robot-1": "component com.sim2real.PolicySetup errored"}})
    assert failed["outcome"] == "deployment_failed" and r.release_errors(failed) == []
    assert "robot-1`: FAILED (component com.sim2real.PolicySetup errored)" in r.render_release_markdown(failed)
    refused = record(package=None, components=None, deployment=None, started_at=None)
    assert refused["outcome"] == "not_deployed" and r.release_errors(refused) == []


def test_schema_catches_a_wrong_record():
    doc = record()
    doc["model_package"]["approval_status"] = "PendingManualApproval"
    doc["deployment"]["devices"] = "robot-1"
    del doc["tasks"]
    errors = r.release_errors(doc)
    assert any(e.startswith("$.model_package") for e in errors)
    assert any("tasks" in e for e in errors)


# ---------------------------------------------------------------- deployment state (Stubber)


def _greengrass_hook():
    from sim2real.orchestration.hooks.greengrass import GreengrassV2Hook

    hook = GreengrassV2Hook(aws_conn_id=None, region_name=REGION)
    hook.__dict__["conn"] = boto3.client("greengrassv2", region_name=REGION)
    hook.__dict__["iot"] = boto3.client("iot", region_name=REGION)
    return hook


def test_failed_deployment_is_found_by_name_with_each_device_status():
    """The deploy task failed (no XCom): the record still gets the deployment and why each robot failed."""
    p = plan()
    hook = _greengrass_hook()
    group_arn = f"arn:aws:iot:{REGION}:{ACCOUNT}:thinggroup/sim2real-robots"
    name = p["deploy"]["deployment_name"]
    with Stubber(hook.conn) as gg, Stubber(hook.iot) as iot:
        iot.add_response("describe_thing_group", {"thingGroupArn": group_arn},
                         {"thingGroupName": "sim2real-robots"})
        gg.add_response("list_deployments", {"deployments": [
            {"deploymentId": "d-other", "deploymentName": "sim2real-another-run", "deploymentStatus": "COMPLETED"}],
            "nextToken": "t"}, {"targetArn": group_arn, "historyFilter": "ALL"})
        gg.add_response("list_deployments", {"deployments": [
            {"deploymentId": "d-7", "deploymentName": name, "deploymentStatus": "CANCELED"}]},
            {"targetArn": group_arn, "historyFilter": "ALL", "nextToken": "t"})
        gg.add_response("get_deployment", {"deploymentId": "d-7", "deploymentStatus": "CANCELED",
                                           "iotJobId": "job-7", "targetArn": group_arn}, {"deploymentId": "d-7"})
        gg.add_response("list_core_devices", {"coreDevices": [{"coreDeviceThingName": "robot-1"}]},
                        {"thingGroupArn": group_arn})
        gg.add_response("list_effective_deployments", {"effectiveDeployments": [{
            "deploymentId": "d-7", "deploymentName": name, "targetArn": group_arn,
            "coreDeviceExecutionStatus": "FAILED", "reason": "PolicySetup: sha256 mismatch",
            "creationTimestamp": dt.datetime(2026, 3, 1), "modifiedTimestamp": dt.datetime(2026, 3, 1)}]},
            {"coreDeviceThingName": "robot-1"})
        state = r.deployment_state(hook, p, None)
    assert state == {"deployment_id": "d-7", "deployment_name": name, "iot_job_id": "job-7",
                     "target_arn": group_arn, "deployment_status": "CANCELED", "devices": {"robot-1": "FAILED"},
                     "device_reasons": {"robot-1": "PolicySetup: sha256 mismatch"}}
    assert r.release_outcome(PACKAGE, state) == "deployment_failed"


def test_no_deployment_when_none_was_created():
    p = plan()
    hook = _greengrass_hook()
    group_arn = f"arn:aws:iot:{REGION}:{ACCOUNT}:thinggroup/sim2real-robots"
    with Stubber(hook.conn) as gg, Stubber(hook.iot) as iot:
        iot.add_response("describe_thing_group", {"thingGroupArn": group_arn}, {"thingGroupName": "sim2real-robots"})
        gg.add_response("list_deployments", {"deployments": []}, {"targetArn": group_arn, "historyFilter": "ALL"})
        assert r.deployment_state(hook, p, None) is None


# ---------------------------------------------------------------- MWAA bundle


def test_mwaa_bundle_ships_the_release_dag_and_its_schema(tmp_path):
    """scripts/package_mwaa.py: the release DAG in dags/, its module and schema in plugins.zip, importable."""
    import importlib.util
    import os
    import subprocess
    import sys
    import zipfile

    from tests.conftest import REPO_ROOT

    spec = importlib.util.spec_from_file_location("package_mwaa", REPO_ROOT / "scripts" / "package_mwaa.py")
    package_mwaa = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(package_mwaa)
    bundle = package_mwaa.build(tmp_path / "mwaa")
    assert (bundle / "dags" / "sim_to_real_release.py").read_bytes() == \
        (REPO_ROOT / "dags" / "sim_to_real_release.py").read_bytes()
    names = zipfile.ZipFile(bundle / "plugins.zip").namelist()
    assert {"sim2real/orchestration/release.py", "sim2real/contract/schemas/release.schema.json"} <= set(names)
    plugins = tmp_path / "plugins"  # MWAA unpacks plugins.zip there; the checkout's include/ is taken off the path
    zipfile.ZipFile(bundle / "plugins.zip").extractall(plugins)
    code = (f"import sys; sys.path[:] = [p for p in sys.path if p != {str(REPO_ROOT / 'include')!r}]; "
            "import sim2real.orchestration.release as r; print(r.__file__); print(r.SCHEMA_PATH); "
            "print(sorted(r.build_release_params()))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(plugins)},
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    module, schema = out.stdout.splitlines()[:2]
    assert module.startswith(str(plugins)) and schema.startswith(str(plugins)) and "model_package_arn" in out.stdout


def test_a_release_run_outlasts_its_longest_canary_and_fleet_deployment():
    """A run past dagrun_timeout has every unfinished task skipped, its record and a canary rollback's wait
    included: the run's limit holds the canary's deployment, window, rollback and review, then the fleet's (it was
    4 h, less than a canary review may wait alone)."""
    import datetime as dt

    from airflow.dag_processing.dagbag import DagBag

    from sim2real.orchestration.stages.deploy import (
        CANARY_REVIEW_RESPONSE_TIMEOUT,
        CANARY_WINDOW_MAX_MINUTES,
        DEPLOY_EXECUTION_TIMEOUT,
    )
    from tests.conftest import REPO_ROOT

    dag = DagBag(dag_folder=str(REPO_ROOT / "dags" / "sim_to_real_release.py")).dags["sim_to_real_release"]
    longest = (2 * DEPLOY_EXECUTION_TIMEOUT + dt.timedelta(minutes=CANARY_WINDOW_MAX_MINUTES) + dt.timedelta(hours=1)
               + CANARY_REVIEW_RESPONSE_TIMEOUT)
    assert dag.dagrun_timeout >= longest, (dag.dagrun_timeout, longest)
