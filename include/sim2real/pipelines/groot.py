"""The GR00T fine-tuning pipeline definition (SageMaker Pipelines JSON, schema 2020-12-01).

Steps: TransformDataset (Processing, CPU, cached 30 days) → GR00TFinetune (Training, GPU,
checkpoints to S3 for resume) → SmokeEval (Processing, writes ``smoke.json``) → SmokeGate
(Condition on ``smoke.json``'s ``passed``) → RegisterModel (model package, PendingManualApproval,
with the run key in ``CustomerMetadataProperties``) or SmokeFailed (Fail step with the reason).

This module builds the definition as plain JSON with no SDK import, so the Airflow runtime
can upsert it (``PipelineDefinitionUpsertOperator``) without the ~1 GB SageMaker SDK.
The JSON shapes follow the SageMaker API's CreateProcessingJob / CreateTrainingJob /
CreateModelPackage request syntax, with pipeline parameters as ``{"Get": "Parameters.X"}``.
"""

from __future__ import annotations

import json
from typing import Any

#: Pipeline parameters and their defaults (the workshop's values; seed-repo.md §10 #10).
PARAMETERS: dict[str, tuple[str, Any]] = {
    "RunKey": ("String", "manual"),
    "EmbodimentTag": ("String", "new_embodiment"),
    "BaseModelS3Uri": ("String", ""),
    "DatasetS3Uri": ("String", ""),
    "OutputS3Uri": ("String", ""),
    "InstanceType": ("String", "ml.p4d.24xlarge"),
    "MaxSteps": ("Integer", 10000),
    "GlobalBatchSize": ("Integer", 32),
    "NumGpus": ("Integer", 8),
    "ActionHorizon": ("Integer", 16),
}


def _p(name: str) -> dict[str, str]:
    return {"Get": f"Parameters.{name}"}


def _join(*values: Any) -> dict[str, Any]:
    return {"Std:Join": {"On": "", "Values": list(values)}}


def pipeline_definition(*, role_arn: str, model_package_group: str, images: dict[str, str],
                        bucket: str) -> dict[str, Any]:
    """Return the pipeline definition as a dict (``json.dumps`` it for the API).

    :param role_arn: execution role of the pipeline's jobs.
    :param model_package_group: Model Registry group RegisterModel writes to.
    :param images: ECR image URIs for ``processing``, ``training`` and ``smoke_eval``.
    :param bucket: artifacts bucket (checkpoints under ``runs/<RunKey>/vla/``).
    :raises KeyError: when an image URI is missing.
    """
    run_prefix = _join("s3://", bucket, "/runs/", _p("RunKey"), "/vla")
    processing_resources = {"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.xlarge",
                                              "VolumeSizeInGB": 100}}
    transform = {
        "Name": "TransformDataset",
        "Type": "Processing",
        "CacheConfig": {"Enabled": True, "ExpireAfter": "P30D"},
        "Arguments": {
            "ProcessingResources": processing_resources,
            "AppSpecification": {"ImageUri": images["processing"],
                                 "ContainerEntrypoint": ["python3", "-m", "sim2real.pipelines.transform_dataset"]},
            "RoleArn": role_arn,
            "ProcessingInputs": [{"InputName": "dataset", "S3Input": {
                "S3Uri": _p("DatasetS3Uri"), "LocalPath": "/opt/ml/processing/input",
                "S3DataType": "S3Prefix", "S3InputMode": "File"}}],
            "ProcessingOutputConfig": {"Outputs": [{"OutputName": "dataset", "S3Output": {
                "S3Uri": _join(run_prefix, "/dataset"), "LocalPath": "/opt/ml/processing/output",
                "S3UploadMode": "EndOfJob"}}]},
            "StoppingCondition": {"MaxRuntimeInSeconds": 7200},
        },
    }
    finetune = {
        "Name": "GR00TFinetune",
        "Type": "Training",
        "DependsOn": ["TransformDataset"],
        "Arguments": {
            "AlgorithmSpecification": {"TrainingImage": images["training"], "TrainingInputMode": "File"},
            "RoleArn": role_arn,
            "HyperParameters": {"embodiment_tag": _p("EmbodimentTag"), "max_steps": _p("MaxSteps"),
                                "global_batch_size": _p("GlobalBatchSize"), "num_gpus": _p("NumGpus")},
            "InputDataConfig": [
                {"ChannelName": "dataset", "DataSource": {"S3DataSource": {
                    "S3DataType": "S3Prefix", "S3DataDistributionType": "FullyReplicated",
                    "S3Uri": {"Get": "Steps.TransformDataset.ProcessingOutputConfig.Outputs['dataset']"
                                     ".S3Output.S3Uri"}}}},
                {"ChannelName": "model", "DataSource": {"S3DataSource": {
                    "S3DataType": "S3Prefix", "S3DataDistributionType": "FullyReplicated",
                    "S3Uri": _p("BaseModelS3Uri")}}},
            ],
            "OutputDataConfig": {"S3OutputPath": _join(run_prefix, "/output")},
            "CheckpointConfig": {"S3Uri": _join(run_prefix, "/checkpoints"), "LocalPath": "/opt/ml/checkpoints"},
            "ResourceConfig": {"InstanceCount": 1, "InstanceType": _p("InstanceType"), "VolumeSizeInGB": 500},
            "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
        },
    }
    smoke = {
        "Name": "SmokeEval",
        "Type": "Processing",
        "DependsOn": ["GR00TFinetune"],
        "PropertyFiles": [{"PropertyFileName": "SmokeReport", "OutputName": "smoke", "FilePath": "smoke.json"}],
        "Arguments": {
            "ProcessingResources": {"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.g5.2xlarge",
                                                      "VolumeSizeInGB": 100}},
            "AppSpecification": {"ImageUri": images["smoke_eval"],
                                 "ContainerEntrypoint": ["python3", "-m", "sim2real.pipelines.smoke_eval"],
                                 "ContainerArguments": ["--action-horizon", "16"]},
            "RoleArn": role_arn,
            "ProcessingInputs": [{"InputName": "model", "S3Input": {
                "S3Uri": {"Get": "Steps.GR00TFinetune.ModelArtifacts.S3ModelArtifacts"},
                "LocalPath": "/opt/ml/processing/model", "S3DataType": "S3Prefix", "S3InputMode": "File"}}],
            "ProcessingOutputConfig": {"Outputs": [{"OutputName": "smoke", "S3Output": {
                "S3Uri": _join(run_prefix, "/smoke"), "LocalPath": "/opt/ml/processing/smoke",
                "S3UploadMode": "EndOfJob"}}]},
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        },
    }
    register = {
        "Name": "RegisterModel",
        "Type": "RegisterModel",
        "Arguments": {
            "ModelPackageGroupName": model_package_group,
            "ModelApprovalStatus": "PendingManualApproval",
            "ModelPackageDescription": _join("GR00T fine-tune of run ", _p("RunKey")),
            "CustomerMetadataProperties": {"sim2real:run-key": _p("RunKey"),
                                           "sim2real:pipeline-execution-arn": {"Get": "Execution.PipelineExecutionArn"}},
            "InferenceSpecification": {
                "Containers": [{"Image": images["training"],
                                "ModelDataUrl": {"Get": "Steps.GR00TFinetune.ModelArtifacts.S3ModelArtifacts"}}],
                "SupportedContentTypes": ["application/x-msgpack"],
                "SupportedResponseMIMETypes": ["application/x-msgpack"],
            },
        },
    }
    fail = {"Name": "SmokeFailed", "Type": "Fail", "Arguments": {"ErrorMessage": _join(
        "smoke check failed: ", {"Std:JsonGet": {"PropertyFile": {"Get": "Steps.SmokeEval.PropertyFiles.SmokeReport"},
                                                 "Path": "reason"}})}}
    gate = {
        "Name": "SmokeGate",
        "Type": "Condition",
        "DependsOn": ["SmokeEval"],
        "Arguments": {
            "Conditions": [{"Type": "Equals", "LeftValue": {"Std:JsonGet": {
                "PropertyFile": {"Get": "Steps.SmokeEval.PropertyFiles.SmokeReport"}, "Path": "passed"}},
                "RightValue": True}],
            "IfSteps": [register],
            "ElseSteps": [fail],
        },
    }
    return {
        "Version": "2020-12-01",
        "Metadata": {},
        "Parameters": [{"Name": n, "Type": t, "DefaultValue": d} for n, (t, d) in PARAMETERS.items()],
        "PipelineExperimentConfig": {"ExperimentName": {"Get": "Execution.PipelineName"},
                                     "TrialName": {"Get": "Execution.PipelineExecutionId"}},
        "Steps": [transform, finetune, smoke, gate],
    }


def pipeline_definition_json(**kwargs: Any) -> str:
    """``pipeline_definition`` serialised canonically (sorted keys), for idempotent upserts."""
    return json.dumps(pipeline_definition(**kwargs), sort_keys=True, separators=(",", ":"))
