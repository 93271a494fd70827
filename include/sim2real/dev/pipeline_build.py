"""Generate the GR00T fine-tuning pipeline definition with the SageMaker Python SDK (v3).

Run in the pipeline toolchain venv (``make pipeline-definition``; the SDK is pinned in
``requirements-pipeline.txt`` and kept out of the Airflow runtime, whose pins conflict with it)::

    python -m sim2real.dev.pipeline_build --out include/sim2real/orchestration/pipelines/groot_pipeline.template.json

The result is a *template*: the account-specific values (execution role, image URIs, artifacts
bucket, model package group) are placeholders (:data:`PLACEHOLDERS`) that
:func:`sim2real.orchestration.pipelines.groot.fill_template` replaces at run time with plain JSON substitution,
so the Airflow runtime never imports the SDK. Everything else is fixed at generation time and
written canonically (sorted keys, compact separators), so the same SDK version and the same code
always produce the same bytes (idempotent upserts; step caching survives).

Steps (names are a contract with the DAG's operators, the sandbox and the README):

1. ``TransformDataset`` — ProcessingStep (CPU): LeRobot dataset → checked v2.1 layout in S3, with the
   field dataset version named by ``FieldDatasetManifestS3Uri`` appended (``--field-manifest=``; empty: none);
   ``CacheConfig`` 30 days.
2. ``GR00TFinetune`` — TrainingStep (GPU, ``ModelTrainer``): ``CheckpointConfig`` on this
   execution's S3 prefix (the entry script resumes from what SageMaker restores there); the
   model directory is exported to S3 as ``model.tar.gz``.
3. ``SmokeEval`` — ProcessingStep: loads the checkpoint offline, checks the action chunks;
   ``PropertyFile`` ``SmokeReport`` (``smoke.json``).
4. ``SmokeGate`` — ConditionStep on ``smoke.json``'s ``passed``: → ``RegisterModel``
   (ModelStep over ``ModelBuilder.register``, PendingManualApproval, run key and execution ARN in
   ``CustomerMetadataProperties``), else ``SmokeFailed`` (FailStep with the smoke check's reason).

Parameters ``GrootVersion`` (:mod:`sim2real.contract.groot`; the fine-tune's ``groot_version`` hyperparameter,
the smoke check's ``--groot-version``, the package's ``sim2real:groot-version``) and ``HfTokenSecretId`` (the
Secrets Manager secret *name* of the Hugging Face token, ``HF_TOKEN_SECRET_ID`` in the training and smoke-check
environments: CreateTrainingJob's ``Environment`` is a plain string map with no secret reference, so the entry
scripts call ``GetSecretValue`` when they start and the token is in no definition, DescribeTrainingJob or
DescribeProcessingJob).

No AWS call is made: role validation, default-bucket lookup and telemetry are switched off
before the SDK is imported (the three conditions for an offline ``Pipeline.definition()``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sim2real.contract.groot import DEFAULT_VERSION as GROOT_DEFAULT_VERSION
from sim2real.orchestration.pipelines.groot import FIELD_MANIFEST_PARAMETER, PLACEHOLDERS, TEMPLATE_PATH

PIPELINE_NAME = "sim2real-groot-finetune"
#: Step names: a contract with the sandbox, the operators' failure messages and the README.
STEP_NAMES = ("TransformDataset", "GR00TFinetune", "SmokeEval", "SmokeGate", "RegisterModel", "SmokeFailed")
#: Action horizon the smoke check requires (GR00T N1.x action chunks: 16 steps).
ACTION_HORIZON = 16
RUN_KEY_METADATA = "sim2real:run-key"
EXECUTION_ARN_METADATA = "sim2real:pipeline-execution-arn"

# Container paths (SageMaker Processing/Training conventions).
PROCESSING_INPUT = "/opt/ml/processing/input/dataset"
PROCESSING_OUTPUT = "/opt/ml/processing/output/dataset"
SMOKE_MODEL = "/opt/ml/processing/input/model"
SMOKE_OUTPUT = "/opt/ml/processing/output/smoke"
CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"


def _offline_sdk_environment(config_dir: Path) -> None:
    """Make ``Pipeline.definition()`` run with no AWS call (see the module docstring)."""
    os.environ["SAGEMAKER_VALIDATE_ROLE"] = "false"
    config = config_dir / "config.yaml"
    config.write_text(json.dumps({"SchemaVersion": "1.0",
                                  "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}}}))
    os.environ["SAGEMAKER_ADMIN_CONFIG_OVERRIDE"] = str(config)
    os.environ["SAGEMAKER_USER_CONFIG_OVERRIDE"] = str(config)
    # A fixed region and dummy credentials: the output never depends on the caller's AWS setup,
    # and nothing could be sent with real credentials even by mistake.
    os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
    for key in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        os.environ.pop(key, None)
    os.environ["AWS_ACCESS_KEY_ID"] = "offline"
    os.environ["AWS_SECRET_ACCESS_KEY"] = "offline"
    os.environ["AWS_CONFIG_FILE"] = os.devnull
    os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull


_QUIET = False


def _quiet_sdk_logs() -> None:
    """Set every SDK/botocore logger to ERROR (the SDK sets its own levels when imported)."""
    import logging

    for name in list(logging.root.manager.loggerDict):
        if name.split(".")[0] in ("sagemaker", "botocore", "boto3"):
            logging.getLogger(name).setLevel(logging.ERROR)


def _once(validate: Callable[..., Any]) -> Callable[..., Any]:
    """``validate`` run once per distinct config (later calls with the same config are no-ops)."""
    if getattr(validate, "_sim2real_once", False):
        return validate
    seen: set[str] = set()

    def validate_once(sagemaker_config: dict | None = None, *args: Any, **kwargs: Any) -> Any:
        key = json.dumps(sagemaker_config, sort_keys=True, default=str)
        if key not in seen:
            validate(sagemaker_config, *args, **kwargs)
            seen.add(key)

    validate_once._sim2real_once = True  # type: ignore[attr-defined]
    return validate_once


def _validate_sdk_config_once() -> None:
    """Validate the SDK defaults config once per distinct config instead of on every lookup.

    The SDK calls ``jsonschema.validate`` (which re-checks its large schema against the
    meta-schema, about 1 s) on every session creation and config lookup, some 60 times per
    definition; the config is ours and constant, so one real validation is enough.
    """
    from sagemaker.core.config import config as config_module
    from sagemaker.core.config.config_manager import SageMakerConfig

    SageMakerConfig.validate_sagemaker_config = staticmethod(_once(SageMakerConfig.validate_sagemaker_config))
    config_module.validate_sagemaker_config = _once(config_module.validate_sagemaker_config)


def build_pipeline() -> Any:
    """Build the ``sagemaker.mlops.workflow.Pipeline`` object (placeholders for account values)."""
    import boto3
    from sagemaker.core.processing import Processor
    from sagemaker.core.shapes import (
        ProcessingInput,
        ProcessingOutput,
        ProcessingS3Input,
        ProcessingS3Output,
    )
    from sagemaker.core.training.configs import CheckpointConfig, Compute, InputData, OutputDataConfig, StoppingCondition
    from sagemaker.core.workflow import (
        ConditionEquals,
        ExecutionVariables,
        JsonGet,
        Join,
        ParameterInteger,
        ParameterString,
        PropertyFile,
    )
    from sagemaker.core.workflow.pipeline_context import PipelineSession
    from sagemaker.mlops.workflow import (
        CacheConfig,
        ConditionStep,
        FailStep,
        ModelStep,
        Pipeline,
        ProcessingStep,
        TrainingStep,
    )
    from sagemaker.mlops.workflow.retry import SageMakerJobExceptionTypeEnum, SageMakerJobStepRetryPolicy
    from sagemaker.serve.model_builder import ModelBuilder
    from sagemaker.train import ModelTrainer

    _validate_sdk_config_once()
    if _QUIET:
        _quiet_sdk_logs()
    session = PipelineSession(boto_session=boto3.Session(region_name=os.environ["AWS_DEFAULT_REGION"]),
                              default_bucket=PLACEHOLDERS["bucket"])
    role = PLACEHOLDERS["role_arn"]
    bucket = PLACEHOLDERS["bucket"]

    # Parameters: the workshop's fine-tuning defaults + RunKey, OutputS3Uri, ActionHorizon.
    run_key = ParameterString(name="RunKey", default_value="manual")
    embodiment = ParameterString(name="EmbodimentTag", default_value="new_embodiment")
    # The GR00T generation (sim2real.contract.groot) and the Secrets Manager secret *name* of the Hugging Face
    # token ("" = none): the jobs read the token when they start, so its value is in no definition or job.
    groot_version = ParameterString(name="GrootVersion", default_value=GROOT_DEFAULT_VERSION)
    hf_secret = ParameterString(name="HfTokenSecretId", default_value="")
    base_model = ParameterString(name="BaseModelS3Uri", default_value=f"s3://{bucket}/models/groot-base/")
    dataset = ParameterString(name="DatasetS3Uri", default_value=f"s3://{bucket}/datasets/default/")
    output = ParameterString(name="OutputS3Uri", default_value=f"s3://{bucket}/runs/manual/vla/")
    instance_type = ParameterString(name="InstanceType", default_value="ml.p4d.24xlarge")
    max_steps = ParameterInteger(name="MaxSteps", default_value=10000)
    batch = ParameterInteger(name="GlobalBatchSize", default_value=32)
    num_gpus = ParameterInteger(name="NumGpus", default_value=8)
    horizon = ParameterInteger(name="ActionHorizon", default_value=ACTION_HORIZON)
    # A field dataset version's manifest (s3://.../field/datasets/<version>/manifest.json) whose episodes
    # TransformDataset appends; "" = none. Part of the step's arguments, so of its cache key.
    field_manifest = ParameterString(name=FIELD_MANIFEST_PARAMETER, default_value="")
    parameters = [run_key, embodiment, base_model, dataset, output, instance_type, max_steps, batch,
                  num_gpus, horizon, field_manifest, groot_version, hf_secret]

    # 1. TransformDataset (CPU, cached 30 days: same dataset URI → step skipped).
    transform_processor = Processor(
        role=role, image_uri=PLACEHOLDERS["processing_image"], instance_count=1, instance_type="ml.m5.xlarge",
        entrypoint=["python3", "-m", "sim2real.workloads.groot.transform_dataset"], volume_size_in_gb=100,
        max_runtime_in_seconds=7200, sagemaker_session=session,
    )
    transform = ProcessingStep(
        name="TransformDataset",
        step_args=transform_processor.run(
            inputs=[ProcessingInput(input_name="dataset", s3_input=ProcessingS3Input(
                s3_uri=dataset, local_path=PROCESSING_INPUT, s3_data_type="S3Prefix", s3_input_mode="File"))],
            outputs=[ProcessingOutput(output_name="dataset", s3_output=ProcessingS3Output(
                s3_uri=Join(on="/", values=[f"s3://{bucket}/datasets/converted", ExecutionVariables.PIPELINE_EXECUTION_ID]),
                local_path=PROCESSING_OUTPUT, s3_upload_mode="EndOfJob"))],
            # one argument "--field-manifest=<uri>" (never an empty one when no field dataset is asked for)
            arguments=["--input", PROCESSING_INPUT, "--output", PROCESSING_OUTPUT,
                       Join(on="", values=["--field-manifest=", field_manifest])],
        ),
        cache_config=CacheConfig(enable_caching=True, expire_after="P30D"),
    )

    # 2. GR00TFinetune (GPU): checkpoints under this execution's prefix, restored on retry/restart.
    checkpoint_s3 = Join(on="/", values=[f"s3://{bucket}/runs", run_key, "vla/checkpoints",
                                         ExecutionVariables.PIPELINE_EXECUTION_ID])
    trainer = ModelTrainer(
        sagemaker_session=session, role=role, training_image=PLACEHOLDERS["training_image"],
        base_job_name="sim2real-groot-finetune",
        compute=Compute(instance_type=instance_type, instance_count=1, volume_size_in_gb=500),
        stopping_condition=StoppingCondition(max_runtime_in_seconds=86400),
        output_data_config=OutputDataConfig(s3_output_path=Join(on="", values=[output, "model"])),
        checkpoint_config=CheckpointConfig(s3_uri=checkpoint_s3, local_path=CHECKPOINT_LOCAL_PATH),
        # CreateTrainingJob's HyperParameters map holds strings only: Integer parameters go in as a Join
        # (``Std:Join``), which the service renders as text (a bare ``Get`` would send the number).
        hyperparameters={"embodiment_tag": embodiment, "max_steps": max_steps.to_string(),
                         "global_batch_size": batch.to_string(), "num_gpus": num_gpus.to_string(),
                         "save_steps": "2000", "groot_version": groot_version},
        environment={"SIM2REAL_RUN_KEY": run_key, "HF_TOKEN_SSM_PARAMETER": "/groot/hf-token",
                     "HF_TOKEN_SECRET_ID": hf_secret},
    )
    finetune = TrainingStep(
        name="GR00TFinetune",
        step_args=trainer.train(input_data_config=[
            InputData(channel_name="dataset",
                      data_source=transform.properties.ProcessingOutputConfig.Outputs["dataset"].S3Output.S3Uri),
            InputData(channel_name="model", data_source=base_model),
        ], wait=False),
        retry_policies=[SageMakerJobStepRetryPolicy(
            exception_types=[SageMakerJobExceptionTypeEnum.CAPACITY_ERROR, SageMakerJobExceptionTypeEnum.INTERNAL_ERROR],
            interval_seconds=60, backoff_rate=2.0, max_attempts=3)],
    )
    model_data = finetune.properties.ModelArtifacts.S3ModelArtifacts

    # 3. SmokeEval: load the exported checkpoint offline, check action chunks → smoke.json.
    smoke_report = PropertyFile(name="SmokeReport", output_name="smoke", path="smoke.json")
    smoke_processor = Processor(
        role=role, image_uri=PLACEHOLDERS["smoke_eval_image"], instance_count=1, instance_type="ml.g5.2xlarge",
        entrypoint=["python3", "-m", "sim2real.workloads.groot.smoke_eval"], volume_size_in_gb=100,
        max_runtime_in_seconds=3600, sagemaker_session=session, env={"HF_TOKEN_SECRET_ID": hf_secret},
    )
    smoke = ProcessingStep(
        name="SmokeEval",
        step_args=smoke_processor.run(
            inputs=[ProcessingInput(input_name="model", s3_input=ProcessingS3Input(
                s3_uri=model_data, local_path=SMOKE_MODEL, s3_data_type="S3Prefix", s3_input_mode="File"))],
            outputs=[ProcessingOutput(output_name="smoke", s3_output=ProcessingS3Output(
                s3_uri=Join(on="", values=[output, "smoke"]), local_path=SMOKE_OUTPUT, s3_upload_mode="EndOfJob"))],
            arguments=["--model", SMOKE_MODEL, "--output", SMOKE_OUTPUT, "--embodiment-tag", embodiment,
                       "--action-horizon", horizon.to_string(), "--groot-version", groot_version],
        ),
        property_files=[smoke_report],
    )

    # 4. RegisterModel (only when the smoke check passed) / SmokeFailed.
    builder = ModelBuilder(
        image_uri=PLACEHOLDERS["inference_image"], s3_model_data_url=model_data, role_arn=role,
        sagemaker_session=session, dependencies=None,
    )
    register = ModelStep(
        name="RegisterModel",
        step_args=builder.register(
            model_package_group_name=PLACEHOLDERS["model_package_group"],
            approval_status="PendingManualApproval",
            content_types=["application/json"], response_types=["application/json"],
            inference_instances=["ml.g5.2xlarge"], transform_instances=["ml.g5.2xlarge"],
            customer_metadata_properties={
                RUN_KEY_METADATA: run_key,
                EXECUTION_ARN_METADATA: ExecutionVariables.PIPELINE_EXECUTION_ARN,
                "sim2real:embodiment-tag": embodiment,
                "sim2real:groot-version": groot_version,
                "sim2real:dataset-s3-uri": dataset,
            },
        ),
    )
    failed = FailStep(name="SmokeFailed", error_message=Join(on="", values=[
        "smoke check failed: ", JsonGet(step_name=smoke.name, property_file=smoke_report, json_path="reason")]))
    gate = ConditionStep(
        name="SmokeGate",
        conditions=[ConditionEquals(left=JsonGet(step_name=smoke.name, property_file=smoke_report,
                                                 json_path="passed"), right=True)],
        if_steps=[register], else_steps=[failed],
    )
    return Pipeline(name=PIPELINE_NAME, parameters=parameters, steps=[transform, finetune, smoke, gate],
                    sagemaker_session=session)


def canonical(definition: dict[str, Any]) -> str:
    """The definition as canonical JSON text (sorted keys, compact, trailing newline)."""
    return json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n"


def generate() -> str:
    """Return the template text (canonical JSON) generated with the SDK, offline."""
    with tempfile.TemporaryDirectory(prefix="sim2real-sdk-config-") as tmp:
        _offline_sdk_environment(Path(tmp))
        definition = json.loads(build_pipeline().definition())
    return canonical(definition)


def main(argv: list[str] | None = None) -> int:
    """CLI: write the template to ``--out`` (default: the packaged template), or check it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=TEMPLATE_PATH, help="where to write the template")
    parser.add_argument("--check", action="store_true",
                        help="do not write: exit 1 when --out differs from a fresh generation")
    parser.add_argument("--verbose", action="store_true", help="keep the SDK's INFO/WARNING log lines")
    args = parser.parse_args(argv)
    if not args.verbose:  # the SDK logs every field it pops or defaults; only errors matter here
        import logging
        import warnings

        global _QUIET
        _QUIET = True
        logging.basicConfig(level=logging.ERROR)
        warnings.filterwarnings("ignore", message="Running within a PipelineSession")
    text = generate()
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: run `make pipeline-definition`", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    args.out.write_text(text)
    print(f"wrote {args.out} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
