"""The SDK-generated definition, filled for one environment: structure, values, determinism.

(The byte comparison of a fresh SDK generation with the committed template and the golden copy
runs in the pipeline venv: ``sdk/test_definition_sdk.py`` via ``test_pipeline_venv.py``.)
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from sim2real.orchestration.pipelines import groot

from .golden_env import BUCKET, GOLDEN_NAME, GROUP, IMAGES, KWARGS, ROLE_ARN

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def definition() -> dict:
    return groot.pipeline_definition(**KWARGS)


def _steps(d: dict) -> dict[str, dict]:
    out = {}
    for step in d["Steps"]:
        out[step["Name"]] = step
        for nested in step.get("Arguments", {}).get("IfSteps", []) + step.get("Arguments", {}).get("ElseSteps", []):
            out[nested["Name"]] = nested
    return out


def _refs(value) -> set[str]:
    """Step names a value reads from (``{"Get": "Steps.X..."}``, property files)."""
    text = json.dumps(value)
    import re

    return set(re.findall(r'"Steps\.([A-Za-z0-9]+)[.\[]', text))


def test_step_names_types_and_nesting(definition):
    assert [s["Name"] for s in definition["Steps"]] == ["TransformDataset", "GR00TFinetune", "SmokeEval", "SmokeGate"]
    steps = _steps(definition)
    assert {n: s["Type"] for n, s in steps.items()} == {
        "TransformDataset": "Processing", "GR00TFinetune": "Training", "SmokeEval": "Processing",
        "SmokeGate": "Condition", "RegisterModel": "RegisterModel", "SmokeFailed": "Fail"}
    gate = steps["SmokeGate"]["Arguments"]
    assert [s["Name"] for s in gate["IfSteps"]] == ["RegisterModel"]
    assert [s["Name"] for s in gate["ElseSteps"]] == ["SmokeFailed"]


def test_dependencies_follow_the_data(definition):
    steps = _steps(definition)
    assert _refs(steps["TransformDataset"]["Arguments"]) == set()
    assert _refs(steps["GR00TFinetune"]["Arguments"]) == {"TransformDataset"}
    assert _refs(steps["SmokeEval"]["Arguments"]) == {"GR00TFinetune"}
    assert _refs(steps["SmokeGate"]["Arguments"]["Conditions"]) == {"SmokeEval"}
    assert _refs(steps["RegisterModel"]["Arguments"]) == {"GR00TFinetune"}
    dataset_in = steps["GR00TFinetune"]["Arguments"]["InputDataConfig"]
    assert {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in dataset_in} == {
        "dataset": {"Get": "Steps.TransformDataset.ProcessingOutputConfig.Outputs['dataset'].S3Output.S3Uri"},
        "model": {"Get": "Parameters.BaseModelS3Uri"}}


def test_parameters_and_workshop_defaults(definition):
    params = {p["Name"]: (p["Type"], p.get("DefaultValue")) for p in definition["Parameters"]}
    assert params == {
        "RunKey": ("String", "manual"),
        "EmbodimentTag": ("String", "new_embodiment"),
        "BaseModelS3Uri": ("String", f"s3://{BUCKET}/models/groot-base/"),
        "DatasetS3Uri": ("String", f"s3://{BUCKET}/datasets/default/"),
        "OutputS3Uri": ("String", f"s3://{BUCKET}/runs/manual/vla/"),
        "InstanceType": ("String", "ml.p4d.24xlarge"),
        "MaxSteps": ("Integer", 10000),
        "GlobalBatchSize": ("Integer", 32),
        "NumGpus": ("Integer", 8),
        "ActionHorizon": ("Integer", 16),
        "FieldDatasetManifestS3Uri": ("String", ""),
        "GrootVersion": ("String", "n1.6"),
        "HfTokenSecretId": ("String", ""),
    }
    assert definition["Version"] == "2020-12-01"


def test_plan_parameters_are_all_declared_with_matching_types(definition):
    """StartPipelineExecution refuses undeclared parameters: every one the run plan sends must exist."""
    from sim2real.orchestration.stages.run import plan_run

    from tests.orchestration.test_config import GOOD
    from tests.orchestration.stages.test_stages import PARAMS

    plan = plan_run(dag_id="sim_to_real", run_id="manual__2026-11-29T00:00:00+00:00", params=PARAMS, env=GOOD)
    declared = {p["Name"]: p["Type"] for p in definition["Parameters"]}
    sent = plan["vla"]["parameters"]
    assert set(sent) <= set(declared)
    for name, value in sent.items():
        assert declared[name] == ("Integer" if isinstance(value, int) else "String"), name


def test_transform_step_cpu_cached_30_days(definition):
    step = _steps(definition)["TransformDataset"]
    assert step["CacheConfig"] == {"Enabled": True, "ExpireAfter": "P30D"}
    args = step["Arguments"]
    assert args["ProcessingResources"]["ClusterConfig"]["InstanceType"] == "ml.m5.xlarge"
    assert args["AppSpecification"]["ImageUri"] == IMAGES["processing"]
    assert args["AppSpecification"]["ContainerEntrypoint"] == ["python3", "-m", "sim2real.workloads.groot.transform_dataset"]
    assert args["ProcessingInputs"][0]["S3Input"]["S3Uri"] == {"Get": "Parameters.DatasetS3Uri"}
    assert args["RoleArn"] == ROLE_ARN


def test_transform_step_gets_the_field_manifest_as_one_argument(definition):
    """FieldDatasetManifestS3Uri reaches TransformDataset as ``--field-manifest=<uri>`` (one argument, never an
    empty one), so a field dataset version is part of the step's cache key."""
    args = _steps(definition)["TransformDataset"]["Arguments"]["AppSpecification"]["ContainerArguments"]
    assert args[-1] == {"Std:Join": {"On": "", "Values": [
        "--field-manifest=", {"Get": "Parameters.FieldDatasetManifestS3Uri"}]}}


def test_finetune_step_gpu_checkpoints_and_export(definition):
    step = _steps(definition)["GR00TFinetune"]
    args = step["Arguments"]
    assert args["AlgorithmSpecification"]["TrainingImage"] == IMAGES["training"]
    assert args["ResourceConfig"]["InstanceType"] == {"Get": "Parameters.InstanceType"}
    assert args["CheckpointConfig"] == {"LocalPath": "/opt/ml/checkpoints", "S3Uri": {"Std:Join": {"On": "/", "Values": [
        f"s3://{BUCKET}/runs", {"Get": "Parameters.RunKey"}, "vla/checkpoints", {"Get": "Execution.PipelineExecutionId"}]}}}
    assert args["OutputDataConfig"]["S3OutputPath"] == {"Std:Join": {"On": "", "Values": [
        {"Get": "Parameters.OutputS3Uri"}, "model"]}}
    # HyperParameters are strings on the wire: Integer parameters go in as a one-value Join
    as_text = lambda name: {"Std:Join": {"On": "", "Values": [{"Get": f"Parameters.{name}"}]}}  # noqa: E731
    assert args["HyperParameters"] == {
        "embodiment_tag": {"Get": "Parameters.EmbodimentTag"}, "max_steps": as_text("MaxSteps"),
        "global_batch_size": as_text("GlobalBatchSize"), "num_gpus": as_text("NumGpus"), "save_steps": "2000",
        "groot_version": {"Get": "Parameters.GrootVersion"}}
    assert args["Environment"]["HF_TOKEN_SSM_PARAMETER"] == "/groot/hf-token"
    # the token's secret is named (a parameter), its value is read by the job at start: never in the definition
    assert args["Environment"]["HF_TOKEN_SECRET_ID"] == {"Get": "Parameters.HfTokenSecretId"}
    assert "HF_TOKEN" not in args["Environment"]
    smoke = _steps(definition)["SmokeEval"]["Arguments"]
    assert smoke["Environment"] == {"HF_TOKEN_SECRET_ID": {"Get": "Parameters.HfTokenSecretId"}}
    assert smoke["AppSpecification"]["ContainerArguments"][-2:] == ["--groot-version", {"Get": "Parameters.GrootVersion"}]
    # a capacity/internal error reruns the job; it resumes from the same execution's checkpoints
    assert step["RetryPolicies"][0]["ExceptionType"] == ["SageMaker.CAPACITY_ERROR", "SageMaker.JOB_INTERNAL_ERROR"]


def test_smoke_eval_property_file_and_arguments(definition):
    step = _steps(definition)["SmokeEval"]
    assert step["PropertyFiles"] == [{"FilePath": "smoke.json", "OutputName": "smoke", "PropertyFileName": "SmokeReport"}]
    args = step["Arguments"]
    app = args["AppSpecification"]
    assert app["ImageUri"] == IMAGES["smoke_eval"]
    assert app["ContainerEntrypoint"] == ["python3", "-m", "sim2real.workloads.groot.smoke_eval"]
    assert app["ContainerArguments"][app["ContainerArguments"].index("--action-horizon") + 1] == {
        "Std:Join": {"On": "", "Values": [{"Get": "Parameters.ActionHorizon"}]}}
    assert args["ProcessingInputs"][0]["S3Input"]["S3Uri"] == {"Get": "Steps.GR00TFinetune.ModelArtifacts.S3ModelArtifacts"}
    assert [o["OutputName"] for o in args["ProcessingOutputConfig"]["Outputs"]] == ["smoke"]


def test_gate_condition_and_fail_reason(definition):
    steps = _steps(definition)
    report = {"Get": "Steps.SmokeEval.PropertyFiles.SmokeReport"}
    assert steps["SmokeGate"]["Arguments"]["Conditions"] == [{
        "Type": "Equals", "LeftValue": {"Std:JsonGet": {"Path": "passed", "PropertyFile": report}}, "RightValue": True}]
    assert steps["SmokeFailed"]["Arguments"]["ErrorMessage"] == {"Std:Join": {"On": "", "Values": [
        "smoke check failed: ", {"Std:JsonGet": {"Path": "reason", "PropertyFile": report}}]}}


def test_register_model_pending_with_run_key(definition):
    args = _steps(definition)["RegisterModel"]["Arguments"]
    assert args["ModelPackageGroupName"] == GROUP
    assert args["ModelApprovalStatus"] == "PendingManualApproval"
    assert args["CustomerMetadataProperties"]["sim2real:run-key"] == {"Get": "Parameters.RunKey"}
    assert args["CustomerMetadataProperties"]["sim2real:pipeline-execution-arn"] == {"Get": "Execution.PipelineExecutionArn"}
    container = args["InferenceSpecification"]["Containers"][0]
    assert container["Image"] == IMAGES["inference"]
    assert container["ModelDataUrl"] == {"Get": "Steps.GR00TFinetune.ModelArtifacts.S3ModelArtifacts"}


def test_golden_copy_matches_the_committed_template(definition):
    assert definition == json.loads((HERE / GOLDEN_NAME).read_text())


def test_deterministic_bytes_and_no_placeholder_left():
    first = groot.pipeline_definition_json(**KWARGS)
    again = groot.pipeline_definition_json(**copy.deepcopy(KWARGS))
    assert first == again
    assert not any(p in first for p in groot.PLACEHOLDERS.values())
    assert "sim2real-placeholder" not in first and "000000000000" not in first


def test_inference_image_defaults_to_training_and_bad_values_refused():
    images = {k: v for k, v in IMAGES.items() if k != "inference"}
    d = groot.pipeline_definition(**dict(KWARGS, images=images))
    assert _steps(d)["RegisterModel"]["Arguments"]["InferenceSpecification"]["Containers"][0]["Image"] == IMAGES["training"]
    with pytest.raises(KeyError):
        groot.pipeline_definition(**dict(KWARGS, images={"training": "x"}))
    with pytest.raises(ValueError, match="bucket"):
        groot.pipeline_definition(**dict(KWARGS, bucket='b"; x'))
    with pytest.raises(ValueError, match="role_arn"):
        groot.pipeline_definition(**dict(KWARGS, role_arn=groot.PLACEHOLDERS["role_arn"]))


def test_the_template_is_canonical_json():
    text = groot.TEMPLATE_PATH.read_text()
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n"


def _resolve(value, params: dict):
    """Replace pipeline expressions with values of the right type, as the service would at run time."""
    if isinstance(value, dict):
        if set(value) == {"Get"}:
            ref = value["Get"]
            if ref.startswith("Parameters."):
                return params[ref.split(".", 1)[1]]
            return "s3://bucket/resolved/property" if ref.startswith("Steps.") else "resolved-execution-variable"
        if set(value) == {"Std:Join"}:
            join = value["Std:Join"]
            return join["On"].join(str(_resolve(v, params)) for v in join["Values"])
        if set(value) == {"Std:JsonGet"}:
            return "resolved-json-value"
        return {k: _resolve(v, params) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, params) for v in value]
    return value


@pytest.mark.parametrize("step, operation, extra", [
    ("TransformDataset", "CreateProcessingJob", {"ProcessingJobName": "p"}),
    ("GR00TFinetune", "CreateTrainingJob", {"TrainingJobName": "t"}),
    ("SmokeEval", "CreateProcessingJob", {"ProcessingJobName": "s"}),
    ("RegisterModel", "CreateModelPackage", {}),
])
def test_step_arguments_are_valid_api_requests(definition, step, operation, extra):
    """Each step's arguments, expressions resolved, validate against the SageMaker API model."""
    import botocore.session
    from botocore.validate import ParamValidator

    params = {p["Name"]: p["DefaultValue"] for p in definition["Parameters"]}
    request = dict(_resolve(_steps(definition)[step]["Arguments"], params), **extra)
    model = botocore.session.get_session().get_service_model("sagemaker").operation_model(operation)
    report = ParamValidator().validate(request, model.input_shape)
    assert not report.has_errors(), report.generate_report()
