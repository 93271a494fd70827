"""Hooks for building the training image: AWS CodeBuild and the ECR image lookup.

Sources: AWS CodeBuild API reference (``StartBuild``, ``BatchGetBuilds``, ``StopBuild``;
``Build.buildStatus`` = SUCCEEDED | FAILED | FAULT | TIMED_OUT | IN_PROGRESS | STOPPED,
``Build.phases[].phaseStatus`` / ``contexts[].message``) and Amazon ECR API reference
(``DescribeImages``, ``DescribeRepositories``).
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.request
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
from airflow.providers.amazon.aws.hooks.ecr import EcrHook

WAITERS_DIR = Path(__file__).resolve().parents[1] / "waiters"

#: A full git commit id (SHA-1, or SHA-256 for repositories in the sha256 object format).
COMMIT_ID = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
#: CodeBuild source types whose location is a git HTTPS URL (CodeBuild API reference, ``ProjectSource.type``).
GIT_SOURCE_TYPES = ("GITHUB", "GITHUB_ENTERPRISE", "BITBUCKET", "GITLAB", "GITLAB_SELF_MANAGED", "CODECOMMIT")


def git_ref_commit(repository_url: str, ref: str, timeout: float = 15.0) -> str | None:
    """The commit a branch or tag of a git repository points at, from its smart-HTTP ref advertisement.

    ``GET <url>/info/refs?service=git-upload-pack`` (git's HTTP protocol: pkt-lines ``<id> <refname>``),
    the same answer ``git ls-remote`` reads; an annotated tag resolves to the commit it peels to (``^{}``).

    :param repository_url: ``https://host/owner/repo(.git)``.
    :param ref: ``main``, ``refs/heads/main``, ``v1.2``, ``refs/tags/v1.2``, or ``HEAD`` (the repository's
        default branch, advertised under the bare name ``HEAD``).
    :return: the commit id, or None when the repository has no such ref.
    :raises OSError: the repository cannot be read (network, HTTP 401/403/404 for a private repository).
    """
    url = repository_url.rstrip("/")
    url = (url if url.endswith(".git") else url + ".git") + "/info/refs?service=git-upload-pack"
    request = urllib.request.Request(url, headers={"User-Agent": "git/2.43 (sim2real)", "Git-Protocol": "version=1"})
    with urllib.request.urlopen(request, timeout=timeout) as response:  # https URL of the CodeBuild project
        body = response.read()
    refs: dict[str, str] = {}
    pos = 0
    while pos + 4 <= len(body):
        size = int(body[pos:pos + 4], 16)
        if size == 0:
            pos += 4
            continue
        line = body[pos + 4:pos + size].decode("utf-8", "replace").rstrip("\n")
        pos += size
        oid, _, name = line.partition(" ")
        name = name.split("\0", 1)[0]
        if COMMIT_ID.match(oid) and name:
            refs[name] = oid
    if ref == "HEAD":
        return refs.get("HEAD")
    wanted = [ref] if ref.startswith("refs/") else [f"refs/heads/{ref}", f"refs/tags/{ref}"]
    for name in wanted:
        if f"{name}^{{}}" in refs:  # annotated tag: the commit it points at
            return refs[f"{name}^{{}}"]
        if name in refs:
            return refs[name]
    return None


def build_context_sha256(project: dict[str, Any], environment_variables: dict[str, str]) -> str:
    """sha256 of what, besides the source commit, decides the image a CodeBuild project builds.

    Canonical JSON of the project's ``source`` (type, location, ``buildspec``, clone depth, submodules),
    ``environment`` (build image, compute type, privileged mode, its environment variables),
    ``secondarySources`` / ``secondarySourceVersions`` and the build's ``environmentVariablesOverride``
    (here: ``environment_variables``, without ``IMAGE_TAG``, which is derived from this key). Same project and
    overrides: same hash; a changed buildspec, Dockerfile path, base build image or build argument: another.

    :param project: a ``BatchGetProjects`` ``projects[]`` entry.
    :param environment_variables: the overrides the build is started with.
    """
    source = project.get("source") or {}
    env = project.get("environment") or {}
    context = {
        "source": {k: source.get(k) for k in ("type", "location", "buildspec", "gitCloneDepth", "gitSubmodulesConfig",
                                              "insecureSsl", "reportBuildStatus")},
        "secondarySources": project.get("secondarySources") or [],
        "secondarySourceVersions": project.get("secondarySourceVersions") or [],
        "environment": {k: env.get(k) for k in ("type", "image", "computeType", "privilegedMode")},
        "environmentVariables": sorted((v.get("name"), v.get("value"), v.get("type"))
                                       for v in env.get("environmentVariables") or []
                                       if v.get("name") != "IMAGE_TAG"),
        "overrides": sorted((str(k), str(v)) for k, v in environment_variables.items() if k != "IMAGE_TAG"),
    }
    return hashlib.sha256(json.dumps(context, sort_keys=True, default=str).encode()).hexdigest()


def image_key(source_commit: str, context_sha256: str) -> str:
    """The content key of an image: sha256 of ``<source commit>\n<build context sha256>`` (hex)."""
    return hashlib.sha256(f"{source_commit}\n{context_sha256}".encode()).hexdigest()


class CodeBuildHook(AwsBaseHook):
    """
    Interact with AWS CodeBuild (thin hook, ``client_type="codebuild"``).

    Custom waiters come from ``sim2real/orchestration/waiters/codebuild.json`` (``build_complete``:
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

    def get_project(self, project_name: str) -> dict[str, Any]:
        """Describe one project (``BatchGetProjects``).

        :raises LookupError: when CodeBuild has no such project (``projectsNotFound``).
        """
        found = self.conn.batch_get_projects(names=[project_name])
        if not found.get("projects"):
            raise LookupError(f"CodeBuild project {project_name!r} not found")
        return found["projects"][0]

    def resolve_source_commit(self, project: dict[str, Any], source_version: str | None,
                              s3_client: Any = None) -> tuple[str | None, str | None, str]:
        """Resolve the version a build would build to an immutable source identity, before building.

        * a full commit id: itself;
        * a branch or tag of a git source (``GITHUB``, ``BITBUCKET``, ``GITLAB``...): the commit it points at now
          (:func:`git_ref_commit`); the build is then started on that commit, so what is built is what was keyed;
        * an ``S3`` source: the archive's ``VersionId`` (``HeadObject``; CodeBuild's ``sourceVersion`` for S3 is
          the object version), else its ``ETag`` (unversioned bucket).

        :param project: ``BatchGetProjects`` entry.
        :param source_version: the run's source version; None = the project's ``sourceVersion``.
        :param s3_client: boto3 S3 client for an S3 source.
        :return: ``(source identity, sourceVersion to start the build with, how it was resolved)``; the
            identity is None when it cannot be known before the build (the build then always runs).
        """
        version = source_version or project.get("sourceVersion") or ""
        source = project.get("source") or {}
        kind = source.get("type")
        if COMMIT_ID.match(version):
            return version, version, "a commit id"
        if kind in GIT_SOURCE_TYPES and str(source.get("location", "")).startswith("https://"):
            try:
                commit = git_ref_commit(source["location"], version or "HEAD")
            except (OSError, ValueError) as err:
                return None, version or None, f"ref {version!r} of {source['location']} could not be read ({err})"
            if commit is None:
                return None, version or None, f"{source['location']} has no branch or tag {version!r}"
            return commit, commit, f"{version or 'HEAD'} of {source['location']} -> {commit}"
        if kind == "S3" and s3_client is not None:
            bucket, _, key = str(source.get("location", "")).partition("/")
            kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key}
            if version and not version.startswith("refs/") and re.fullmatch(r"[A-Za-z0-9._-]{20,1024}", version):
                kwargs["VersionId"] = version
            try:
                head = s3_client.head_object(**kwargs)
            except Exception as err:  # noqa: BLE001 - ClientError (404/403): not resolvable
                return None, None, f"source archive s3://{bucket}/{key} could not be read ({err})"
            if head.get("VersionId") and head["VersionId"] != "null":
                return f"s3:{head['VersionId']}", head["VersionId"], f"s3://{bucket}/{key} version {head['VersionId']}"
            etag = str(head.get("ETag", "")).strip('"')
            return f"s3-etag:{etag}", None, f"s3://{bucket}/{key} (unversioned) ETag {etag}"
        return None, version or None, f"source type {kind} cannot be resolved before the build"

    def find_build(self, project_name: str, image_tag: str, statuses: tuple[str, ...] = ("IN_PROGRESS",),
                   limit: int = 25) -> dict[str, Any] | None:
        """The newest of the project's last ``limit`` builds started with ``IMAGE_TAG=image_tag`` whose status is in
        ``statuses`` (``ListBuildsForProject``, newest first, + ``BatchGetBuilds``), or None.

        Used on a retry to reattach to the build an earlier try started instead of starting a second one.
        """
        ids = (self.conn.list_builds_for_project(projectName=project_name, sortOrder="DESCENDING").get("ids")
               or [])[:limit]
        if not ids:
            return None
        for build in self.conn.batch_get_builds(ids=ids).get("builds") or []:
            env = {v.get("name"): v.get("value") for v in (build.get("environment") or {}).get("environmentVariables")
                   or []}
            if env.get("IMAGE_TAG") == image_tag and build.get("buildStatus") in statuses:
                return build
        return None

    @staticmethod
    def exported_variable(build: dict[str, Any], name: str) -> str | None:
        """A buildspec ``env.exported-variables`` value of a finished build (``exportedEnvironmentVariables``)."""
        for var in build.get("exportedEnvironmentVariables") or []:
            if var.get("name") == name:
                return var.get("value") or None
        return None

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

    def find_image_by_digest(self, repository_name: str, image_digest: str) -> dict[str, Any] | None:
        """The ``imageDetails`` entry of the image with ``image_digest``, or None when ECR no longer has it."""
        client = self.conn
        try:
            details = client.describe_images(repositoryName=repository_name,
                                             imageIds=[{"imageDigest": image_digest}]).get("imageDetails") or []
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
