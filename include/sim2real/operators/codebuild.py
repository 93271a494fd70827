"""Build the training image with AWS CodeBuild and hand on its immutable ECR digest."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.utils import validate_execute_complete_event
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.amazon.aws.utils.waiter_with_logging import wait
from airflow.providers.common.compat.sdk import AirflowException, conf

from sim2real.hooks.codebuild import CodeBuildHook, EcrImageHook
from sim2real.links.codebuild import CodeBuildBuildLink
from sim2real.triggers.codebuild import CodeBuildBuildCompleteTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context


class CodeBuildImageOperator(AwsBaseOperator[CodeBuildHook]):
    """
    Build and push a container image with CodeBuild, unless ECR already has the tag.

    Steps: ECR ``DescribeImages`` by ``image_tag`` — found: return it with ``skipped=True``.
    Otherwise ``StartBuild`` on ``project_name`` with ``environmentVariablesOverride``
    ``IMAGE_TAG=image_tag``, ``IMAGE_REPO_NAME=repository_name`` (+ ``environment_variables``),
    wait for the build (custom waiter ``build_complete``; deferrable by default), then read the
    pushed image's digest from ECR. The buildspec must push ``<repo>:<IMAGE_TAG>``.

    :param project_name: CodeBuild project name (templated).
    :param repository_name: ECR repository name (templated).
    :param image_tag: tag the build pushes; use a source hash so an unchanged source skips the build (templated).
    :param source_version: git ref / S3 object version to build; None = the project's default (templated).
    :param environment_variables: extra build environment variables, name -> value (templated).
    :param waiter_delay: seconds between status polls (default 30).
    :param waiter_max_attempts: polls before giving up (default 240 = 2 h at 30 s).
    :param deferrable: wait in the triggerer (default ``[operators] default_deferrable``, fallback True).
    :return: ``{"image_uri": "<acct>.dkr.ecr.<region>.amazonaws.com/<repo>@sha256:<hex>",
        "image_digest": "sha256:<hex>", "image_tag": str, "build_id": str | None, "skipped": bool}``.
    :raises AirflowException: build FAILED / FAULT / TIMED_OUT / STOPPED (message names the build,
        its status and the failing phase with its context message); waiter max attempts reached;
        build SUCCEEDED but ECR has no image with ``image_tag`` (the buildspec did not push it).
    """

    aws_hook_class = CodeBuildHook
    ui_color = "#d4e7c5"
    template_fields: Sequence[str] = aws_template_fields(
        "project_name", "repository_name", "image_tag", "source_version", "environment_variables"
    )
    template_fields_renderers = {"environment_variables": "json"}
    operator_extra_links = (CodeBuildBuildLink(),)

    def __init__(
        self,
        *,
        project_name: str,
        repository_name: str,
        image_tag: str,
        source_version: str | None = None,
        environment_variables: dict[str, str] | None = None,
        waiter_delay: int = 30,
        waiter_max_attempts: int = 240,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=True),
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.project_name = project_name
        self.repository_name = repository_name
        self.image_tag = image_tag
        self.source_version = source_version
        self.environment_variables = environment_variables
        self.waiter_delay = waiter_delay
        self.waiter_max_attempts = waiter_max_attempts
        self.deferrable = deferrable
        self.build_id: str | None = None

    @property
    def ecr_hook(self) -> EcrImageHook:
        return EcrImageHook(**self._hook_parameters)

    def _validate(self) -> None:
        for name in ("project_name", "repository_name", "image_tag"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"CodeBuildImageOperator: {name} must be a non-empty string")

    def _result(self, build_id: str | None, skipped: bool) -> dict[str, Any]:
        image = self.ecr_hook.find_image(self.repository_name, self.image_tag)
        if image is None:
            raise AirflowException(
                f"CodeBuild build {build_id} of project {self.project_name} SUCCEEDED but ECR repository "
                f"{self.repository_name} has no image tagged {self.image_tag!r}: the buildspec must push "
                "$IMAGE_REPO_NAME:$IMAGE_TAG"
            )
        digest = image["imageDigest"]
        uri = self.ecr_hook.image_uri(self.repository_name, digest)
        self.log.info("Image %s:%s -> %s", self.repository_name, self.image_tag, uri)
        return {
            "image_uri": uri,
            "image_digest": digest,
            "image_tag": self.image_tag,
            "build_id": build_id,
            "skipped": skipped,
        }

    def execute(self, context: Context) -> dict[str, Any]:
        self._validate()
        if self.ecr_hook.find_image(self.repository_name, self.image_tag) is not None:
            self.log.info(
                "ECR %s already has tag %s: skipping the CodeBuild build", self.repository_name, self.image_tag
            )
            return self._result(None, skipped=True)

        env = {
            **(self.environment_variables or {}),
            "IMAGE_TAG": self.image_tag,
            "IMAGE_REPO_NAME": self.repository_name,
        }
        build = self.hook.start_build(self.project_name, self.source_version, env)
        self.build_id = build["id"]
        self.log.info("CodeBuild build %s started (project %s)", self.build_id, self.project_name)
        CodeBuildBuildLink.persist(
            context=context,
            operator=self,
            region_name=self.hook.conn_region_name,
            aws_partition=self.hook.conn_partition,
            account_id=self.hook.build_account_id(build),
            project_name=self.project_name,
            build_id=self.build_id,
        )

        if self.deferrable:
            self.defer(
                trigger=CodeBuildBuildCompleteTrigger(
                    build_id=self.build_id,
                    waiter_delay=self.waiter_delay,
                    waiter_max_attempts=self.waiter_max_attempts,
                    aws_conn_id=self.aws_conn_id,
                    region_name=self.region_name,
                    verify=self.verify,
                    botocore_config=self.botocore_config,
                ),
                method_name="execute_complete",
                timeout=timedelta(seconds=self.waiter_delay * self.waiter_max_attempts + 60),
            )

        try:
            wait(
                waiter=self.hook.get_waiter("build_complete"),
                waiter_delay=self.waiter_delay,
                waiter_max_attempts=self.waiter_max_attempts,
                args={"ids": [self.build_id]},
                failure_message=f"CodeBuild build {self.build_id} failed",
                status_message=f"CodeBuild build {self.build_id} status",
                status_args=["builds[0].buildStatus", "builds[0].currentPhase"],
            )
        except AirflowException as err:
            raise AirflowException(self._failure_message(self.build_id, str(err))) from err
        return self._result(self.build_id, skipped=False)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        event = validate_execute_complete_event(event)
        self.build_id = event.get("build_id")
        if event.get("status") != "success":
            raise AirflowException(self._failure_message(self.build_id, event.get("message", "")))
        return self._result(self.build_id, skipped=False)

    def _failure_message(self, build_id: str | None, detail: str) -> str:
        try:
            build = self.hook.get_build(build_id) if build_id else {}
        except Exception as err:  # noqa: BLE001 - the message must still be raised
            build = {}
            self.log.warning("Could not describe CodeBuild build %s: %s", build_id, err)
        status = build.get("buildStatus", "unknown")
        phase = CodeBuildHook.failing_phase(build) if build else "build not described"
        return (
            f"CodeBuild build {build_id} of project {self.project_name} ended {status}: {phase}. "
            f"Open the build log (CodeBuild console / CloudWatch) to fix the buildspec or source. ({detail})"
        )

    def on_kill(self) -> None:
        """Stop the build this task started (``StopBuild``); sync path only (deferred: trigger ``on_kill``)."""
        if self.build_id:
            self.hook.stop_build(self.build_id)
            self.log.info("CodeBuild build %s stopped (task killed)", self.build_id)
