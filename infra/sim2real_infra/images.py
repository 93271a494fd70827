"""Images: ECR repositories and the CodeBuild project that builds the training image."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from .settings import Settings

#: The inline buildspec. The DAG's ``build.build_image`` task starts the build on the resolved commit with
#: ``IMAGE_TAG`` (``build-`` + the image key: commit + build-context hash) and ``IMAGE_REPO_NAME`` overrides
#: and reads the pushed image's digest from the exported ``IMAGE_DIGEST``; tags are immutable, and the DAG
#: reuses an image only by the digest it recorded for a key (``images/<repo>/<key>.json`` in the bucket).
BUILDSPEC = {
    "version": "0.2",
    "env": {"shell": "bash", "exported-variables": ["IMAGE_DIGEST"]},
    "phases": {
        "pre_build": {"commands": [
            "set -euo pipefail",
            "REGISTRY=${AWS_ACCOUNT_ID}.dkr.ecr.${AWS_DEFAULT_REGION}.amazonaws.com",
            "aws ecr get-login-password --region ${AWS_DEFAULT_REGION} | docker login --username AWS --password-stdin ${REGISTRY}",
        ]},
        "build": {"commands": [
            "docker build -f containers/rl/Dockerfile"
            " --label org.opencontainers.image.revision=${CODEBUILD_RESOLVED_SOURCE_VERSION}"
            " -t ${REGISTRY}/${IMAGE_REPO_NAME}:${IMAGE_TAG} .",
        ]},
        "post_build": {"commands": [
            "docker push ${REGISTRY}/${IMAGE_REPO_NAME}:${IMAGE_TAG}",
            "IMAGE_DIGEST=$(aws ecr describe-images --repository-name ${IMAGE_REPO_NAME} --image-ids imageTag=${IMAGE_TAG}"
            " --query 'imageDetails[0].imageDigest' --output text)",
            "echo pushed ${IMAGE_REPO_NAME}@${IMAGE_DIGEST}",
        ]},
    },
}


class ImagesStack(cdk.Stack):
    """ECR repositories (scan on push, immutable tags) and the CodeBuild project ``<prefix>-training-image``.

    ``training`` holds the RL training image (``containers/rl``); ``groot`` holds the GR00T pipeline
    images the SageMaker pipeline runs.
    """

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.repositories: dict[str, ecr.Repository] = {}
        for key, name in (("training", settings.name("training")), ("groot", settings.name("groot"))):
            self.repositories[key] = ecr.Repository(
                self, f"{key.capitalize()}Repository",
                repository_name=name,
                image_scan_on_push=True,
                image_tag_mutability=ecr.TagMutability.IMMUTABLE,
                encryption=ecr.RepositoryEncryption.AES_256,
                lifecycle_rules=[ecr.LifecycleRule(description="drop untagged layers after 14 days",
                                                   tag_status=ecr.TagStatus.UNTAGGED,
                                                   max_image_age=cdk.Duration.days(14))],
                removal_policy=cdk.RemovalPolicy.RETAIN,
            )
        self.training_repository = self.repositories["training"]

        self.build_key = kms.Key(self, "BuildKey", enable_key_rotation=True,
                                 description="sim2real CodeBuild artifacts/log encryption",
                                 removal_policy=cdk.RemovalPolicy.DESTROY)
        log_group = logs.LogGroup(self, "BuildLogs", log_group_name=f"/aws/codebuild/{settings.name('training-image')}",
                                  retention=logs.RetentionDays.THREE_MONTHS,
                                  removal_policy=cdk.RemovalPolicy.DESTROY)
        self.project = codebuild.Project(
            self, "TrainingImage",
            project_name=settings.name("training-image"),
            description="Builds containers/rl and pushes <repo>:$IMAGE_TAG (the DAG pins the digest)",
            source=codebuild.Source.git_hub(**_github(settings.source_repository_url),
                                            branch_or_ref=settings.source_version, clone_depth=1),
            build_spec=codebuild.BuildSpec.from_object(BUILDSPEC),
            environment=codebuild.BuildEnvironment(
                build_image=codebuild.LinuxBuildImage.STANDARD_7_0,
                compute_type=codebuild.ComputeType.X2_LARGE,
                privileged=True,  # docker build needs the Docker daemon
                environment_variables={
                    "IMAGE_REPO_NAME": codebuild.BuildEnvironmentVariable(value=self.training_repository.repository_name),
                    "IMAGE_TAG": codebuild.BuildEnvironmentVariable(value="manual"),
                    "AWS_ACCOUNT_ID": codebuild.BuildEnvironmentVariable(value=cdk.Aws.ACCOUNT_ID),
                },
            ),
            encryption_key=self.build_key,
            logging=codebuild.LoggingOptions(cloud_watch=codebuild.CloudWatchLoggingOptions(log_group=log_group)),
            timeout=cdk.Duration.hours(2),
        )
        self.training_repository.grant_pull_push(self.project)


def _github(url: str) -> dict[str, str]:
    """``{"owner": ..., "repo": ...}`` of ``https://github.com/<owner>/<repo>(.git)``.

    :raises ValueError: when ``url`` is not a GitHub repository URL.
    """
    path = url.removeprefix("https://github.com/").removesuffix(".git").strip("/")
    parts = path.split("/")
    if not url.startswith("https://github.com/") or len(parts) != 2 or not all(parts):
        raise ValueError(f"sim2real:source_repository_url must be https://github.com/<owner>/<repo>, got {url!r}")
    return {"owner": parts[0], "repo": parts[1]}
