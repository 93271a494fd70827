"""Hooks for building the training image: AWS CodeBuild and the ECR image lookup.

Sources: AWS CodeBuild API reference (``StartBuild``, ``BatchGetBuilds``, ``StopBuild``;
``Build.buildStatus`` = SUCCEEDED | FAILED | FAULT | TIMED_OUT | IN_PROGRESS | STOPPED,
``Build.phases[].phaseStatus`` / ``contexts[].message``) and Amazon ECR API reference
(``DescribeImages``, ``DescribeRepositories``).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
from airflow.providers.amazon.aws.hooks.ecr import EcrHook

#: CodeBuild build statuses that end a build, and whether each is a success.
CODEBUILD_TERMINAL_STATUSES: dict[str, bool] = {
    "SUCCEEDED": True,
    "FAILED": False,
    "FAULT": False,
    "TIMED_OUT": False,
    "STOPPED": False,
}
CODEBUILD_INTERMEDIATE_STATUSES = ("IN_PROGRESS",)

WAITERS_DIR = Path(__file__).resolve().parents[1] / "waiters"


class CodeBuildHook(AwsBaseHook):
    """
    Interact with AWS CodeBuild (thin hook, ``client_type="codebuild"``).

    Custom waiters come from ``sim2real/waiters/codebuild.json`` (``build_complete``:
    ``BatchGetBuilds`` ``builds[].buildStatus``; SUCCEEDED = success; FAILED, FAULT,
    TIMED_OUT, STOPPED = failure; IN_PROGRESS = retry).

    Additional arguments (such as ``aws_conn_id``) are passed down to ``AwsBaseHook``.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs["client_type"] = "codebuild"
        super().__init__(*args, **kwargs)

    @cached_property
    def waiter_path(self) -> Path:
        return WAITERS_DIR / "codebuild.json"

    def start_build(
        self,
        project_name: str,
        source_version: str | None = None,
        environment_variables: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """
        Start a build (``StartBuild``).

        :param project_name: the CodeBuild project.
        :param source_version: git ref / S3 object version to build; None = the project's default.
        :param environment_variables: ``environmentVariablesOverride`` as a plain mapping
            (all sent as ``PLAINTEXT``; values cast to ``str``).
        :return: the ``build`` object of the response (``id``, ``arn``, ``buildStatus``...).
        """
        kwargs: dict[str, Any] = {"projectName": project_name}
        if source_version:
            kwargs["sourceVersion"] = source_version
        if environment_variables:
            kwargs["environmentVariablesOverride"] = [
                {"name": str(k), "value": str(v), "type": "PLAINTEXT"} for k, v in environment_variables.items()
            ]
        return self.conn.start_build(**kwargs)["build"]

    def get_build(self, build_id: str) -> dict[str, Any]:
        """
        Describe one build (``BatchGetBuilds``).

        :raises LookupError: when CodeBuild does not know the id (``buildsNotFound``).
        """
        response = self.conn.batch_get_builds(ids=[build_id])
        builds = response.get("builds") or []
        if not builds:
            raise LookupError(f"CodeBuild build {build_id} not found: {response.get('buildsNotFound')}")
        return builds[0]

    def stop_build(self, build_id: str) -> dict[str, Any]:
        """Stop a build (``StopBuild``); returns the ``build`` object."""
        return self.conn.stop_build(id=build_id)["build"]

    @staticmethod
    def failing_phase(build: dict[str, Any]) -> str:
        """
        Name the phase(s) that failed in a ``Build`` object.

        :return: e.g. ``"phase BUILD FAILED: COMMAND_EXECUTION_ERROR: Error while executing command: docker
            build ... Reason: exit status 1"``; ``"no failed phase reported (current phase X)"`` when
            no phase has a ``phaseStatus`` other than SUCCEEDED / IN_PROGRESS.
        """
        parts = []
        for phase in build.get("phases") or []:
            status = phase.get("phaseStatus")
            if status and status not in ("SUCCEEDED", "IN_PROGRESS"):
                contexts = "; ".join(
                    ": ".join(x for x in (c.get("statusCode"), c.get("message")) if x)
                    for c in phase.get("contexts") or []
                )
                parts.append(f"phase {phase.get('phaseType')} {status}" + (f": {contexts}" if contexts else ""))
        if parts:
            return "; ".join(parts)
        return f"no failed phase reported (current phase {build.get('currentPhase')})"

    @staticmethod
    def build_account_id(build: dict[str, Any]) -> str | None:
        """Account id from a build ARN ``arn:<partition>:codebuild:<region>:<account>:build/<id>``."""
        arn = build.get("arn") or ""
        parts = arn.split(":")
        return parts[4] if len(parts) > 5 else None


class EcrImageHook(EcrHook):
    """
    ECR image lookups the provider's ``EcrHook`` lacks (``DescribeImages``, ``DescribeRepositories``).

    Additional arguments (such as ``aws_conn_id``) are passed down to ``AwsBaseHook``.
    """

    def find_image(self, repository_name: str, image_tag: str) -> dict[str, Any] | None:
        """
        Look an image up by tag.

        :return: the ``imageDetails`` entry (``imageDigest``, ``imageTags``, ``imagePushedAt``...)
            or None when the tag does not exist (``ImageNotFoundException``).
        :raises botocore.exceptions.ClientError: for other errors (e.g. ``RepositoryNotFoundException``).
        """
        client = self.conn
        try:
            details = (
                client.describe_images(repositoryName=repository_name, imageIds=[{"imageTag": image_tag}]).get(
                    "imageDetails"
                )
                or []
            )
        except client.exceptions.ImageNotFoundException:
            return None
        return details[0] if details else None

    def repository_uri(self, repository_name: str) -> str:
        """``<account>.dkr.ecr.<region>.amazonaws.com/<repo>`` from ``DescribeRepositories``."""
        repos = self.conn.describe_repositories(repositoryNames=[repository_name])["repositories"]
        return repos[0]["repositoryUri"]

    def image_uri(self, repository_name: str, image_digest: str) -> str:
        """Immutable image reference ``<repositoryUri>@sha256:<hex>``."""
        return f"{self.repository_uri(repository_name)}@{image_digest}"
