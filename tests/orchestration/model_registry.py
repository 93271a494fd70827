"""SageMaker Model Registry helpers for the approval tests (against moto)."""

from __future__ import annotations


def register_model_package(sm, group: str, run_key: str) -> str:
    """Register a model package ``PendingManualApproval`` in ``group`` (created when absent) as the VLA stage
    does (a container image by digest, the run key in ``sim2real:run-key``); returns its ARN."""
    try:
        sm.create_model_package_group(ModelPackageGroupName=group)
    except sm.exceptions.ClientError:
        pass
    return sm.create_model_package(
        ModelPackageGroupName=group, ModelApprovalStatus="PendingManualApproval",
        CustomerMetadataProperties={"sim2real:run-key": run_key},
        InferenceSpecification={
            "Containers": [{"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/groot@sha256:" + "a" * 64,
                            "ModelDataUrl": f"s3://bucket/runs/{run_key}/vla/model.tar.gz"}],
            "SupportedContentTypes": ["application/json"], "SupportedResponseMIMETypes": ["application/json"]},
    )["ModelPackageArn"]


def decide_in_registry(sm, arn: str, run_key: str, status: str, description: str | None):
    """A decision in SageMaker (Studio, the CLI): ``status`` with ``description``; returns the package's
    LastModifiedTime."""
    sm.update_model_package(ModelPackageArn=arn, ModelApprovalStatus=status, ApprovalDescription=description,
                            CustomerMetadataProperties={"sim2real:run-key": run_key})
    return sm.describe_model_package(ModelPackageName=arn)["LastModifiedTime"]
