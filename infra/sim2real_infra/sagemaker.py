"""SageMaker: the GR00T model package group and the pipeline execution role."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from .policies import as_bucket, grant_prefixes
from .settings import Settings


class SageMakerStack(cdk.Stack):
    """Model package group ``<prefix>-groot-models`` and role ``<prefix>-pipeline``.

    The pipeline ``<prefix>-groot-finetune`` itself is created/updated by the DAG
    (``vla.upsert_pipeline``) from ``sim2real.orchestration.pipelines``; this stack only names it. The role runs the
    pipeline's processing/training jobs (SageMaker names them ``pipelines-<execution>-<step>-...``)
    and registers model packages in the group.
    """

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, artifacts: s3.IBucket | str,
                 repositories: list[ecr.IRepository], **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        artifacts = as_bucket(self, artifacts)
        self.model_package_group_name = settings.name("groot-models")
        self.pipeline_name = settings.name("groot-finetune")
        self.model_package_group = sagemaker.CfnModelPackageGroup(
            self, "GrootModels",
            model_package_group_name=self.model_package_group_name,
            model_package_group_description="GR00T fine-tunes registered by the sim2real pipeline (manual approval)",
        )
        self.role = iam.Role(self, "PipelineRole", role_name=settings.name("pipeline"),
                             assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
                             description="sim2real GR00T pipeline and the jobs it starts")
        arn = lambda resource: cdk.Stack.of(self).format_arn(service="sagemaker", resource=resource, resource_name=None)  # noqa: E731
        jobs = [arn("processing-job/pipelines-*"), arn("training-job/pipelines-*")]
        group_arn = arn(f"model-package-group/{self.model_package_group_name}")
        package_arn = arn(f"model-package/{self.model_package_group_name}/*")
        self.role.add_to_policy(iam.PolicyStatement(
            sid="PipelineJobs",
            actions=["sagemaker:CreateProcessingJob", "sagemaker:DescribeProcessingJob", "sagemaker:StopProcessingJob",
                     "sagemaker:CreateTrainingJob", "sagemaker:DescribeTrainingJob", "sagemaker:StopTrainingJob",
                     "sagemaker:AddTags"],
            resources=jobs,
        ))
        self.role.add_to_policy(iam.PolicyStatement(
            sid="RegisterModel",
            actions=["sagemaker:CreateModelPackage", "sagemaker:DescribeModelPackage", "sagemaker:AddTags",
                     "sagemaker:DescribeModelPackageGroup"],
            resources=[group_arn, package_arn],
        ))
        self.role.add_to_policy(iam.PolicyStatement(
            sid="PassOwnRoleToJobs", actions=["iam:PassRole"], resources=[self.role.role_arn],
            conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
        ))
        self.role.add_to_policy(iam.PolicyStatement(
            sid="JobLogs",
            actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
            resources=[cdk.Stack.of(self).format_arn(service="logs", resource="log-group",
                                                     resource_name="/aws/sagemaker/*",
                                                     arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)],
        ))
        self.role.add_to_policy(iam.PolicyStatement(
            sid="JobMetrics", actions=["cloudwatch:PutMetricData"], resources=["*"],
            conditions={"StringLike": {"cloudwatch:namespace": ["/aws/sagemaker/*", "aws/sagemaker/*"]}},
        ))
        # GR00TFinetune and SmokeEval read the Hugging Face token (GR00T N1.7's gated backbone) when they start, from
        # the secret the pipeline parameter HfTokenSecretId names (sim2real.workloads.groot.hf_auth): <prefix>-groot/...
        self.role.add_to_policy(iam.PolicyStatement(
            sid="HuggingFaceToken", actions=["secretsmanager:GetSecretValue"],
            resources=[cdk.Stack.of(self).format_arn(service="secretsmanager", resource="secret",
                                                     resource_name=f"{settings.name('groot')}/*",
                                                     arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)],
        ))
        # field/datasets/ + field/data/: TransformDataset reads a field dataset version's manifest and its data files
        # (pipeline parameter FieldDatasetManifestS3Uri)
        grant_prefixes(self.role, artifacts, read=["datasets/", "field/datasets/", "field/data/"], write=["runs/"],
                       sid="Artifacts")
        for repository in repositories:
            repository.grant_pull(self.role)
