"""Build the training image with AWS CodeBuild, keyed on its content, and hand on its immutable ECR digest."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
)

from sim2real.orchestration.hooks.codebuild import (
    COMMIT_ID,
    CodeBuildHook,
    EcrImageHook,
    build_context_sha256,
    image_key,
)
from sim2real.orchestration.links.codebuild import CodeBuildBuildLink
from sim2real.orchestration.stop_rule import operator_should_stop, starts_afresh
from sim2real.orchestration.triggers.base import defer_wait
from sim2real.orchestration.triggers.codebuild import CodeBuildBuildCompleteTrigger
from sim2real.orchestration.waits.codebuild import codebuild_build_step
from sim2real.orchestration.waits.core import event_outcome, settle_now

if TYPE_CHECKING:
    from airflow.sdk import Context


class CodeBuildImageOperator(AwsBaseOperator[CodeBuildHook]):
    """
    Build and push a container image with CodeBuild, keyed on its content; reuse a recorded image only.

    1. Resolve the source version to an immutable source identity before building
       (:meth:`CodeBuildHook.resolve_source_commit`: a commit id as is, a git branch/tag to the commit it points
       at now, an S3 source archive to its object version), and hash the build context
       (:func:`~sim2real.orchestration.hooks.codebuild.build_context_sha256`: the project's source settings, buildspec,
       build environment and the build's variable overrides). The **image key** is
       :func:`~sim2real.orchestration.hooks.codebuild.image_key` of the two.
    2. Reuse: when ``s3://<record_bucket>/<record_prefix><repository>/<key>.json`` records a digest for this key
       and ECR still has an image with that digest (``DescribeImages`` by digest), that digest is returned with
       ``skipped=True``. A tag is never trusted: a tag re-pushed to another image, or a branch that moved to
       a new commit, does not match a record.
    3. Otherwise ``StartBuild`` on the resolved commit (``sourceVersion``) with ``IMAGE_TAG=<prefix><key[:40]>``
       and ``IMAGE_REPO_NAME``; on a retry, a build of the same tag still IN_PROGRESS is reattached instead
       (``ListBuildsForProject``); the first try after a person cleared the task starts afresh instead
       (:func:`sim2real.orchestration.stop_rule.starts_afresh`): it stops that build (``StopBuild``) and starts
       a new one. The wait is deferred; a build that is already over when it would defer is
       finished at once (no trigger). The digest is the build's exported ``IMAGE_DIGEST`` (buildspec
       ``env.exported-variables``), else ECR's image of the tag; it is recorded under the key (and under the
       key of the build's ``resolvedSourceVersion`` when the source could not be resolved beforehand).

    :param project_name: CodeBuild project name (templated).
    :param repository_name: ECR repository name (templated).
    :param record_bucket: S3 bucket of the image records (the artifacts bucket) (templated).
    :param source_version: git ref / commit / S3 object version; None = the project's default (templated).
    :param image_tag_prefix: prefix of the tag the build pushes (default ``build-``) (templated).
    :param record_prefix: key prefix of the records in ``record_bucket`` (default ``images/``).
    :param environment_variables: extra build environment variables, name -> value (templated).
    :param waiter_delay: seconds between status polls (default 30).
    :param waiter_max_attempts: polls before giving up (default 240 = 2 h at 30 s).
    :return: ``{"image_uri": "<acct>.dkr.ecr.<region>.amazonaws.com/<repo>@sha256:<hex>",
        "image_digest": "sha256:<hex>", "image_tag": str, "build_id": str | None, "skipped": bool,
        "image_key": str | None, "source_commit": str | None, "context_sha256": str}``; ``build_id`` of a reused
        image is the build that produced it.
    :raises AirflowException: build FAILED / FAULT / TIMED_OUT / STOPPED (message names the build,
        its status and the failing phase with its context message); waiter max attempts reached;
        build SUCCEEDED but neither its exported ``IMAGE_DIGEST`` nor ECR names the image it pushed.
    :raises AirflowFailException: the CodeBuild project does not exist.
    """

    #: Always True: the wait runs in the triggerer (there is no blocking mode); read by the DAG checks.
    deferrable = True

    aws_hook_class = CodeBuildHook
    ui_color = "#d4e7c5"
    template_fields: Sequence[str] = aws_template_fields(
        "project_name", "repository_name", "record_bucket", "source_version", "image_tag_prefix",
        "environment_variables",
    )
    template_fields_renderers = {"environment_variables": "json"}
    operator_extra_links = (CodeBuildBuildLink(),)

    def __init__(
        self,
        *,
        project_name: str,
        repository_name: str,
        record_bucket: str,
        source_version: str | None = None,
        image_tag_prefix: str = "build-",
        record_prefix: str = "images/",
        environment_variables: dict[str, str] | None = None,
        waiter_delay: int = 30,
        waiter_max_attempts: int = 240,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.project_name = project_name
        self.repository_name = repository_name
        self.record_bucket = record_bucket
        self.source_version = source_version
        self.image_tag_prefix = image_tag_prefix
        self.record_prefix = record_prefix
        self.environment_variables = environment_variables
        self.waiter_delay = waiter_delay
        self.waiter_max_attempts = waiter_max_attempts
        self.build_id: str | None = None
        self.key_facts: dict[str, Any] = {}

    @property
    def ecr_hook(self) -> EcrImageHook:
        return EcrImageHook(**self._hook_parameters)

    @property
    def s3_client(self):
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        return S3Hook(**self._hook_parameters).get_conn()

    def _validate(self) -> None:
        for name in ("project_name", "repository_name", "record_bucket"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"CodeBuildImageOperator: {name} must be a non-empty string")

    # -- image records ------------------------------------------------------------------------------
    def _record_key(self, key: str) -> str:
        return f"{self.record_prefix}{self.repository_name}/{key}.json"

    def _read_record(self, key: str) -> dict[str, Any] | None:
        """The image record of ``key``, or None when there is none (or it names no ``sha256:`` digest).

        Looked up with ListObjectsV2 under the record's own key first, and read (GetObject) only when listed: the
        role may list the record prefix only, so a GetObject of a missing key answers 403 AccessDenied, not 404.
        """
        client = self.s3_client
        record_key = self._record_key(key)
        listed = client.list_objects_v2(Bucket=self.record_bucket, Prefix=record_key)
        if record_key not in {obj.get("Key") for obj in listed.get("Contents", [])}:
            return None
        try:
            body = client.get_object(Bucket=self.record_bucket, Key=record_key)["Body"].read()
        except client.exceptions.NoSuchKey:  # deleted since it was listed
            return None
        record = json.loads(body)
        return record if isinstance(record, dict) and str(record.get("image_digest", "")).startswith("sha256:") \
            else None

    def _write_record(self, key: str, record: dict[str, Any]) -> None:
        self.s3_client.put_object(Bucket=self.record_bucket, Key=self._record_key(key),
                                  Body=json.dumps(record, indent=2, sort_keys=True).encode(),
                                  ContentType="application/json")
        self.log.info("Recorded image key %s -> %s at s3://%s/%s", key, record["image_digest"], self.record_bucket,
                      self._record_key(key))

    def _persist_link(self, context: Context, build_id: str, account_id: str | None = None) -> None:
        CodeBuildBuildLink.persist(
            context=context,
            operator=self,
            region_name=self.hook.conn_region_name,
            aws_partition=self.hook.conn_partition,
            account_id=account_id,
            project_name=self.project_name,
            build_id=build_id,
        )

    def _env(self) -> dict[str, str]:
        return {**(self.environment_variables or {}), "IMAGE_REPO_NAME": self.repository_name}

    # -- flow -----------------------------------------------------------------------------------------
    def execute(self, context: Context) -> dict[str, Any]:
        self._validate()
        try:
            project = self.hook.get_project(self.project_name)
        except LookupError as err:
            raise AirflowFailException(f"{err}: set image_build.codebuild_project in the environment config") from err
        source = project.get("source") or {}
        commit, start_version, how = self.hook.resolve_source_commit(
            project, self.source_version, self.s3_client if source.get("type") == "S3" else None)
        env = self._env()
        context_sha = build_context_sha256(project, env)
        key = image_key(commit, context_sha) if commit else None
        self.key_facts = {"image_key": key, "source_commit": commit, "context_sha256": context_sha,
                          "source_version": self.source_version, "resolved_by": how}
        self.log.info("Source version %r: %s; build context sha256 %s; image key %s", self.source_version, how,
                      context_sha, key or "unknown before the build (it always runs)")
        if key:
            record = self._read_record(key)
            if record and self.ecr_hook.find_image_by_digest(self.repository_name, record["image_digest"]):
                self.log.info("Image key %s was built by %s: reusing %s (no build)", key, record.get("build_id"),
                              record["image_digest"])
                if record.get("build_id"):
                    self._persist_link(context, record["build_id"], record.get("account_id"))
                return self._output(record["image_digest"], record.get("image_tag"), record.get("build_id"), True)
            if record:
                self.log.warning("Image key %s records %s but ECR %s no longer has it: building again", key,
                                 record["image_digest"], self.repository_name)
        tag = f"{self.image_tag_prefix}{(key or uuid.uuid4().hex)[:40]}"
        self.key_facts["image_tag"] = tag
        build = self.hook.find_build(self.project_name, tag) if key else None
        if build and starts_afresh(context.get("ti"), self.retries):
            self._supersede(build, context)
            build = None
        if build:
            self.log.info("Reattaching to CodeBuild build %s of an earlier try (IMAGE_TAG %s)", build["id"], tag)
        else:
            build = self.hook.start_build(self.project_name, start_version, {**env, "IMAGE_TAG": tag})
            self.log.info("CodeBuild build %s started (project %s, source %s)", build["id"], self.project_name,
                          start_version or "the project's default")
        self.build_id = build["id"]
        self._persist_link(context, self.build_id, self.hook.build_account_id(build))

        current = self.hook.get_build(self.build_id)  # already over: finish here, no trigger to race
        if settle_now(codebuild_build_step, {"builds": [current]}, {"build_id": self.build_id}) is not None:
            self.log.info("CodeBuild build %s is already %s: not deferring", self.build_id, current["buildStatus"])
            return self._finish(current)

        defer_wait(self, CodeBuildBuildCompleteTrigger, method_name="execute_complete", kwargs={"key_facts": self.key_facts},
                   waiter_delay=self.waiter_delay, waiter_max_attempts=self.waiter_max_attempts, margin_seconds=60,
                   build_id=self.build_id)

    def _supersede(self, build: dict[str, Any], context: Context) -> None:
        """A fresh start (a cleared task's new try) does not reattach: the earlier try's build (IN_PROGRESS, as
        :meth:`CodeBuildHook.find_build` finds it) is stopped, and a new build is started."""
        try_number = getattr(context.get("ti"), "try_number", "?")
        self.log.warning("CodeBuild build %s of an earlier try is %s; try %s starts afresh (the task was cleared): "
                         "stopping it and starting a new build", build["id"], build.get("buildStatus"), try_number)
        self.hook.stop_build(build["id"])

    def _finish(self, build: dict[str, Any]) -> dict[str, Any]:
        """Result of a finished build: its digest recorded under the image key (raises on a failed build)."""
        status = build.get("buildStatus")
        if status != "SUCCEEDED":
            raise AirflowException(self._failure_message(build["id"], f"build status {status}"))
        tag = self.key_facts.get("image_tag") or self._tag_of(build)
        digest = self.hook.exported_variable(build, "IMAGE_DIGEST")
        if not digest:
            image = self.ecr_hook.find_image(self.repository_name, tag) if tag else None
            digest = image["imageDigest"] if image else None
        if not digest or not digest.startswith("sha256:"):
            raise AirflowException(
                f"CodeBuild build {build['id']} of project {self.project_name} SUCCEEDED but neither its exported "
                f"IMAGE_DIGEST nor ECR repository {self.repository_name} names the image it pushed as {tag!r}: the "
                "buildspec must push $IMAGE_REPO_NAME:$IMAGE_TAG and export IMAGE_DIGEST"
            )
        record = {"image_digest": digest, "image_tag": tag, "build_id": build["id"],
                  "account_id": self.hook.build_account_id(build), "repository": self.repository_name,
                  "source_version": self.key_facts.get("source_version"),
                  "context_sha256": self.key_facts.get("context_sha256"),
                  "resolved_source_version": build.get("resolvedSourceVersion"),
                  "recorded_at": datetime.now(timezone.utc).isoformat()}
        keys = {self.key_facts.get("image_key"): self.key_facts.get("source_commit")}
        resolved, commit = build.get("resolvedSourceVersion"), self.key_facts.get("source_commit")
        context_sha = self.key_facts.get("context_sha256")
        if resolved and context_sha and COMMIT_ID.match(resolved):
            if commit is None:  # not resolvable before the build: recorded under the commit CodeBuild built
                keys = {image_key(resolved, context_sha): resolved}
            elif COMMIT_ID.match(commit) and resolved != commit:
                self.log.warning("CodeBuild built %s, not the resolved commit %s: recording under the built one",
                                 resolved, commit)
                keys = {image_key(resolved, context_sha): resolved}
        for key, commit in keys.items():
            if key:
                self._write_record(key, {**record, "image_key": key, "source_commit": commit})
        return self._output(digest, tag, build["id"], False)

    @staticmethod
    def _tag_of(build: dict[str, Any]) -> str | None:
        env = {v.get("name"): v.get("value") for v in (build.get("environment") or {}).get("environmentVariables") or []}
        return env.get("IMAGE_TAG")

    def _output(self, digest: str, tag: str | None, build_id: str | None, skipped: bool) -> dict[str, Any]:
        uri = self.ecr_hook.image_uri(self.repository_name, digest)
        self.log.info("Image %s (key %s) -> %s", self.repository_name, self.key_facts.get("image_key"), uri)
        return {
            "image_uri": uri,
            "image_digest": digest,
            "image_tag": tag,
            "build_id": build_id,
            "skipped": skipped,
            "image_key": self.key_facts.get("image_key"),
            "source_commit": self.key_facts.get("source_commit"),
            "context_sha256": self.key_facts.get("context_sha256"),
        }

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None,
                         key_facts: dict[str, Any] | None = None) -> dict[str, Any]:
        status, message = event_outcome(event, f"CodeBuild build {self.build_id}")
        self.build_id = event.get("build_id") or self.build_id
        self.key_facts = dict(key_facts or {})
        if status != "success":
            raise AirflowException(self._failure_message(self.build_id, f"{status}: {message}"))
        build = self.hook.get_build(self.build_id)
        if not self.key_facts.get("context_sha256"):  # resumed without the deferral's kwargs
            self.key_facts = self._facts_from_build(build)
        return self._finish(build)

    def _facts_from_build(self, build: dict[str, Any]) -> dict[str, Any]:
        """The image key facts of a build this operator started, read back from the build itself: it was started
        on the resolved source version (a commit id, or an S3 object version) with ``IMAGE_TAG`` derived from
        the key; the key is dropped when that tag names another key."""
        project = self.hook.get_project(self.project_name)
        context_sha = build_context_sha256(project, self._env())
        version = build.get("sourceVersion") or ""
        source_type = (project.get("source") or {}).get("type")
        commit = version if COMMIT_ID.match(version) else (f"s3:{version}" if source_type == "S3" and version
                                                           else None)
        key = image_key(commit, context_sha) if commit else None
        tag = self._tag_of(build)
        if key and tag is not None and tag != f"{self.image_tag_prefix}{key[:40]}":
            key = commit = None  # started with another key (the project changed since): record nothing
        return {"image_key": key, "source_commit": commit, "context_sha256": context_sha,
                "source_version": self.source_version, "image_tag": tag, "resolved_by": "the build"}

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
        """Stop the build this task started (``StopBuild``) while the task runs in the worker (the deferred
        wait: the trigger's ``on_kill``)."""
        if self.build_id and operator_should_stop(self, f"CodeBuild build {self.build_id}"):
            self.hook.stop_build(self.build_id)
            self.log.info("CodeBuild build %s stopped (task killed)", self.build_id)
