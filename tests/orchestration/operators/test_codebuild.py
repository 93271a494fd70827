"""CodeBuildImageOperator, its waiter and trigger against moto (mock_aws in-process; the trigger
against ThreadedMotoServer). moto cannot fail a build, so the build status is set by patching
moto's ``CodeBuildBackend.batch_get_builds`` (same process as the server thread)."""

from __future__ import annotations

import asyncio
import json

import boto3
import pytest
from airflow.providers.common.compat.sdk import AirflowException
from moto import mock_aws
from moto.codebuild.models import CodeBuildBackend
from moto.codebuild.responses import CodeBuildResponse
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ecr.models import ecr_backends
from sim2real.orchestration.operators.codebuild import CodeBuildImageOperator
from sim2real.orchestration.triggers.codebuild import CodeBuildBuildCompleteTrigger

from operator_helpers import first_event

REGION = "us-east-1"
PROJECT = "sim2real-training-image"
REPO = "sim2real-training"
TAG = "build-0123abcd"
MANIFEST = json.dumps(
    {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "digest": "sha256:" + "1" * 64,
            "size": 7,
            "mediaType": "application/vnd.docker.container.image.v1+json",
        },
        "layers": [],
    }
)


def _manifest(layer: str) -> str:
    """An image manifest whose digest (moto: sha256 of the layer digests) differs per ``layer`` character."""
    doc = json.loads(MANIFEST)
    doc["layers"] = [{"digest": "sha256:" + layer * 64, "size": 9,
                      "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip"}]
    return json.dumps(doc)


FAILED_PHASES = [
    {"phaseType": "SUBMITTED", "phaseStatus": "SUCCEEDED"},
    {"phaseType": "PRE_BUILD", "phaseStatus": "SUCCEEDED"},
    {
        "phaseType": "BUILD",
        "phaseStatus": "FAILED",
        "contexts": [
            {
                "statusCode": "COMMAND_EXECUTION_ERROR",
                "message": "Error while executing command: docker build . Reason: exit status 1",
            }
        ],
    },
]
TERMINAL = ["SUCCEEDED", "FAILED", "FAULT", "TIMED_OUT", "STOPPED"]


SOURCE_BUCKET, SOURCE_KEY, RECORDS = "sim2real-source", "source/sim2real.zip", "sim2real-artifacts"


def _create_project(cb, source=None):
    cb.create_project(
        name=PROJECT,
        source=source or {"type": "S3", "location": f"{SOURCE_BUCKET}/{SOURCE_KEY}"},
        artifacts={"type": "NO_ARTIFACTS"},
        environment={
            "type": "LINUX_CONTAINER",
            "image": "aws/codebuild/standard:7.0",
            "computeType": "BUILD_GENERAL1_SMALL",
        },
        serviceRole=f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/codebuild",
    )


def _put_source(body: bytes = b"build context v1") -> str:
    return boto3.client("s3", region_name=REGION).put_object(Bucket=SOURCE_BUCKET, Key=SOURCE_KEY, Body=body)[
        "VersionId"]


def _setup(source=None):
    _create_project(boto3.client("codebuild", region_name=REGION), source)
    boto3.client("ecr", region_name=REGION).create_repository(repositoryName=REPO)
    s3 = boto3.client("s3", region_name=REGION)
    for bucket in (SOURCE_BUCKET, RECORDS):
        s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=SOURCE_BUCKET, VersioningConfiguration={"Status": "Enabled"})
    return _put_source()


def _push_image(tag: str = TAG, manifest: str = MANIFEST) -> str:
    backend = ecr_backends[DEFAULT_ACCOUNT_ID][REGION]
    images = [img for img in backend.repositories[REPO].images if tag in (img.image_tags or [])]
    if not images:
        backend.put_image(REPO, manifest, tag)
        images = [img for img in backend.repositories[REPO].images if tag in (img.image_tags or [])]
    return images[0].image_digest


def _builds() -> list[str]:
    return boto3.client("codebuild", region_name=REGION).list_builds()["ids"]


@pytest.fixture
def build_status(monkeypatch):
    """Make BatchGetBuilds report ``holder["status"]``; SUCCEEDED also 'pushes' the image and exports its digest
    like the buildspec (``env.exported-variables: [IMAGE_DIGEST]``)."""
    holder = {"status": "SUCCEEDED", "stopped": [], "manifest": MANIFEST}
    original = CodeBuildBackend.batch_get_builds
    original_stop = CodeBuildBackend.stop_build

    def batch_get_builds(self, ids):
        builds = original(self, ids)
        for build in builds:
            build["buildStatus"] = holder["status"]
            if holder["status"] == "SUCCEEDED":
                digest = _push_image(f"pushed-{build['id'][-8:]}", holder["manifest"])
                build["exportedEnvironmentVariables"] = [{"name": "IMAGE_DIGEST", "value": digest}]
            else:
                build["phases"] = FAILED_PHASES
                build["currentPhase"] = "BUILD" if holder["status"] == "IN_PROGRESS" else "COMPLETED"
        return builds

    def stop_build(self, build_id):
        holder["stopped"].append(build_id)
        return original_stop(self, build_id)

    def start_build(self):
        """moto drops ``environmentVariablesOverride``; CodeBuild lists the build's variables, overrides included,
        in its ``environment.environmentVariables`` (``BatchGetBuilds``), which a retry's lookup reads."""
        result = original_start(self)
        build = self.codebuild_backend.build_metadata[self._get_param("projectName")].build_metadata
        build["environment"]["environmentVariables"] = [
            *build["environment"].get("environmentVariables", []),
            *({"type": "PLAINTEXT", **v} for v in self._get_param("environmentVariablesOverride") or [])]
        return result

    original_start = CodeBuildResponse.start_build
    monkeypatch.setattr(CodeBuildBackend, "batch_get_builds", batch_get_builds)
    monkeypatch.setattr(CodeBuildBackend, "stop_build", stop_build)
    monkeypatch.setattr(CodeBuildResponse, "start_build", start_build)
    return holder


def _op(**kw):
    return CodeBuildImageOperator(
        task_id="build_image",
        project_name=PROJECT,
        repository_name=REPO,
        record_bucket=RECORDS,
        source_version="main",
        waiter_delay=0,
        waiter_max_attempts=1,
        **kw,
    )


@mock_aws
def test_builds_once_then_reuses_the_digest_recorded_for_the_same_content(aws_env, build_status):
    version = _setup()
    first = _op().execute({})
    assert first["skipped"] is False and first["build_id"].startswith(PROJECT + ":")
    assert first["source_commit"] == f"s3:{version}" and len(first["image_key"]) == 64
    assert first["image_tag"] == "build-" + first["image_key"][:40]
    record = json.loads(boto3.client("s3", region_name=REGION).get_object(
        Bucket=RECORDS, Key=f"images/{REPO}/{first['image_key']}.json")["Body"].read())
    assert record["image_digest"] == first["image_digest"] and record["build_id"] == first["build_id"]
    again = _op().execute({})
    assert again["skipped"] is True and again["image_digest"] == first["image_digest"]
    assert again["build_id"] == first["build_id"]  # the build that produced it (its link is kept)
    assert again["image_uri"] == f"{DEFAULT_ACCOUNT_ID}.dkr.ecr.{REGION}.amazonaws.com/{REPO}@{first['image_digest']}"
    assert len(_builds()) == 1


class _DeniesMissingKeys:
    """An S3 client that answers like AWS for a role whose ``s3:ListBucket`` is conditioned on ``s3:prefix``:
    a GetObject / HeadObject of a missing key is 403 AccessDenied, not 404 (moto does not enforce IAM)."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name):
        return getattr(self._client, name)

    def _denied_if_missing(self, operation: str, kwargs: dict) -> None:
        from botocore.exceptions import ClientError

        try:
            self._client.head_object(**kwargs)
        except ClientError as err:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"},
                               "ResponseMetadata": {"HTTPStatusCode": 403}}, operation) from err

    def get_object(self, **kwargs):
        self._denied_if_missing("GetObject", kwargs)
        return self._client.get_object(**kwargs)

    def head_object(self, **kwargs):
        self._denied_if_missing("HeadObject", kwargs)
        return self._client.head_object(**kwargs)


@mock_aws
def test_the_first_build_of_a_commit_does_not_read_a_record_that_is_not_listed(aws_env, build_status, monkeypatch):
    """No record yet and a GetObject of the missing key answering 403: the image is built and recorded (the
    record is looked up with ListObjectsV2 first), and the next run reuses it."""
    _setup()
    monkeypatch.setattr(CodeBuildImageOperator, "s3_client",
                        property(lambda self: _DeniesMissingKeys(boto3.client("s3", region_name=REGION))))
    first = _op().execute({})
    assert first["skipped"] is False and len(_builds()) == 1
    again = _op().execute({})
    assert again["skipped"] is True and again["image_digest"] == first["image_digest"] and len(_builds()) == 1


@mock_aws
def test_a_new_source_version_under_the_same_name_is_built(aws_env, build_status):
    """The old skip trusted the tag src-main: a new commit on main was never built."""
    _setup()
    first = _op().execute({})
    new_version = _put_source(b"build context v2")
    build_status["manifest"] = _manifest("2")
    second = _op().execute({})
    assert second["skipped"] is False and second["source_commit"] == f"s3:{new_version}"
    assert second["image_key"] != first["image_key"] and second["image_digest"] != first["image_digest"]
    assert len(_builds()) == 2


@mock_aws
def test_a_tag_re_pushed_to_another_image_is_not_trained_on(aws_env, build_status):
    _setup()
    first = _op().execute({})
    _push_image(first["image_tag"], _manifest("3"))  # someone pushes under the key's tag
    again = _op().execute({})
    assert again["skipped"] is True and again["image_digest"] == first["image_digest"]


@mock_aws
def test_a_recorded_image_that_ecr_lost_is_built_again(aws_env, build_status):
    _setup()
    first = _op().execute({})
    boto3.client("ecr", region_name=REGION).batch_delete_image(
        repositoryName=REPO, imageIds=[{"imageDigest": first["image_digest"]}])
    again = _op().execute({})
    assert again["skipped"] is False and len(_builds()) == 2


@mock_aws
def test_a_changed_build_context_is_another_key(aws_env, build_status):
    _setup()
    first = _op().execute({})
    other = _op(environment_variables={"DOCKERFILE": "containers/isaaclab/Dockerfile"}).execute({})
    assert other["source_commit"] == first["source_commit"] and other["context_sha256"] != first["context_sha256"]
    assert other["skipped"] is False


@mock_aws
def test_a_branch_that_cannot_be_resolved_is_built_and_recorded_under_the_built_commit(aws_env, build_status,
                                                                                       monkeypatch):
    """A private git repository (its refs not readable before the build): the build always runs, and its
    resolvedSourceVersion keys the record, so a later run pinned to that commit reuses the image."""
    from sim2real.orchestration.hooks import codebuild as hooks

    _setup(source={"type": "GITHUB", "location": "https://github.com/org/private.git"})
    built = "f" * 40
    original = CodeBuildBackend.batch_get_builds

    def with_resolved(self, ids):
        builds = original(self, ids)
        for build in builds:
            build["resolvedSourceVersion"] = built  # CodeBuild: the commit it checked out
        return builds

    monkeypatch.setattr(CodeBuildBackend, "batch_get_builds", with_resolved)

    def private(url, ref):
        raise OSError("HTTP Error 401: Unauthorized")

    monkeypatch.setattr(hooks, "git_ref_commit", private)
    first = _op().execute({})
    assert first["skipped"] is False and first["image_key"] is None and first["source_commit"] is None
    pinned = _op()
    pinned.source_version = built
    again = pinned.execute({})
    assert again["skipped"] is True and again["image_digest"] == first["image_digest"]
    assert again["image_key"] == hooks.image_key(built, first["context_sha256"])


@mock_aws
def test_a_missing_project_fails_without_retry(aws_env, build_status):
    from airflow.providers.common.compat.sdk import AirflowFailException

    _setup()
    with pytest.raises(AirflowFailException, match="project 'nope' not found"):
        CodeBuildImageOperator(task_id="b", project_name="nope", repository_name=REPO, record_bucket=RECORDS).execute({})


@pytest.mark.parametrize("status", ["SUCCEEDED", "FAILED"])
@mock_aws
def test_a_build_already_over_completes_without_deferring(aws_env, build_status, status):
    """No trigger race: a build that ended before the task would defer is finished in the task itself."""
    _setup()
    build_status["status"] = status
    op = _op()
    if status == "SUCCEEDED":
        assert op.execute({})["skipped"] is False  # no TaskDeferred
    else:
        with pytest.raises(AirflowException, match=f"ended {status}"):
            op.execute({})


@mock_aws
def test_deferrable_defers_with_trigger_and_on_kill_stops(aws_env, build_status):
    from airflow.providers.common.compat.sdk import TaskDeferred

    _setup()
    build_status["status"] = "IN_PROGRESS"
    op = _op()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, CodeBuildBuildCompleteTrigger)
    path, kwargs = trigger.serialize()
    assert path == "sim2real.orchestration.triggers.codebuild.CodeBuildBuildCompleteTrigger"
    assert CodeBuildBuildCompleteTrigger(**kwargs).serialize() == (path, kwargs)
    key_facts = deferred.value.kwargs["key_facts"]
    assert key_facts["image_key"] and key_facts["image_tag"].startswith("build-")
    # resumed with a failure event: message names the phase
    build_status["status"] = "FAILED"
    with pytest.raises(AirflowException, match="phase BUILD FAILED"):
        op.execute_complete({}, {"status": "failure", "message": "failed", "build_id": op.build_id}, key_facts)
    with pytest.raises(ValueError, match="unexpected trigger event"):  # one set of event names
        op.execute_complete({}, {"status": "error", "message": "failed", "build_id": op.build_id}, key_facts)
    build_status["status"] = "SUCCEEDED"
    resumed = _op()  # a fresh operator object, as after the triggerer
    out = resumed.execute_complete({}, {"status": "success", "build_id": op.build_id}, key_facts)
    assert out["build_id"] == op.build_id and out["image_key"] == key_facts["image_key"]
    assert _op().execute({})["skipped"] is True  # recorded by the resumed task
    # resumed without the deferral's kwargs: the key is read back from the build (its source version and tag)
    assert _op().execute_complete({}, {"status": "success", "build_id": op.build_id})[
        "image_key"] == key_facts["image_key"]
    op.on_kill()
    assert build_status["stopped"] == [op.build_id]



class _Try:
    """The running task instance's try counters, as Airflow sets them (``context["ti"]``)."""

    def __init__(self, try_number: int, max_tries: int):
        self.try_number, self.max_tries = try_number, max_tries


def _deferred_build(op, context) -> str:
    from airflow.providers.common.compat.sdk import TaskDeferred

    with pytest.raises(TaskDeferred):
        op.execute(context)
    return op.build_id


@mock_aws
def test_a_cleared_task_stops_the_earlier_tries_build_and_starts_a_new_one(aws_env, build_status):
    """Before: the first try after a person's clear reattached to the cleared try's build still IN_PROGRESS (the
    same image tag), so the clear silently continued the old build."""
    _setup()
    build_status["status"] = "IN_PROGRESS"
    old = _deferred_build(_op(retries=2), {"ti": _Try(1, 2)})
    # clear_task_instances: max_tries = try_number (1) + retries (2); the new try is try 2
    new = _deferred_build(_op(retries=2), {"ti": _Try(2, 3)})
    assert new != old and build_status["stopped"] == [old]
    assert sorted(_builds()) == sorted([old, new])


@mock_aws
def test_a_retry_reattaches_to_the_build_in_progress(aws_env, build_status):
    _setup()
    build_status["status"] = "IN_PROGRESS"
    old = _deferred_build(_op(retries=2), {"ti": _Try(1, 2)})
    assert _deferred_build(_op(retries=2), {"ti": _Try(2, 2)}) == old  # a retry: max_tries unchanged
    assert build_status["stopped"] == [] and _builds() == [old]


def test_git_ref_commit_reads_the_ref_advertisement(monkeypatch):
    """git's smart-HTTP answer (pkt-lines); an annotated tag resolves to its peeled commit."""
    import io
    import urllib.request

    from sim2real.orchestration.hooks.codebuild import git_ref_commit

    def pkt(text: str) -> bytes:
        data = text.encode()
        return f"{len(data) + 4:04x}".encode() + data

    main, tag, peeled = "a" * 40, "b" * 40, "c" * 40
    body = (pkt("# service=git-upload-pack\n") + b"0000" + pkt(f"{main} HEAD\0multi_ack symref=HEAD:refs/heads/main\n")
            + pkt(f"{main} refs/heads/main\n") + pkt(f"{tag} refs/tags/v1\n") + pkt(f"{peeled} refs/tags/v1^{{}}\n")
            + b"0000")
    seen = []

    def urlopen(request, timeout):
        seen.append(request.full_url)
        return io.BytesIO(body)

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    assert git_ref_commit("https://github.com/org/repo", "main") == main
    assert git_ref_commit("https://github.com/org/repo.git", "v1") == peeled
    assert git_ref_commit("https://github.com/org/repo", "refs/heads/main") == main
    assert git_ref_commit("https://github.com/org/repo", "nope") is None
    assert seen[0] == "https://github.com/org/repo.git/info/refs?service=git-upload-pack"


# GET https://github.com/<owner>/<repo>.git/info/refs?service=git-upload-pack, byte for byte as git serves it:
# the default branch is advertised first under the bare name HEAD (with the capabilities after a NUL).
REF_ADVERTISEMENT = (
    b"001e# service=git-upload-pack\n0000"
    b"01539fceb02d0ae598e95dc970b74767f19372d61af8 HEAD\x00multi_ack thin-pack side-band side-band-64k ofs-delta"
    b" shallow deepen-since deepen-not deepen-relative no-progress include-tag multi_ack_detailed"
    b" allow-tip-sha1-in-want allow-reachable-sha1-in-want no-done symref=HEAD:refs/heads/main filter"
    b" object-format=sha1 agent=git/github-395dce4f6ecf\n"
    b"003ce83c5163316f89bfbde7d9ab23ca2e25604af290 refs/heads/dev\n"
    b"003d9fceb02d0ae598e95dc970b74767f19372d61af8 refs/heads/main\n"
    b"0000"
)


def test_no_source_version_resolves_the_default_branch_advertised_as_head(monkeypatch):
    """No source version on the run nor on the project: the build is keyed on (and started at) HEAD's commit,
    so a retry finds the same tag and reattaches instead of starting a second build."""
    import io
    import urllib.request

    from sim2real.orchestration.hooks import codebuild as hooks

    monkeypatch.setattr(urllib.request, "urlopen", lambda request, timeout: io.BytesIO(REF_ADVERTISEMENT))
    head, dev = "9fceb02d0ae598e95dc970b74767f19372d61af8", "e83c5163316f89bfbde7d9ab23ca2e25604af290"
    assert hooks.git_ref_commit("https://github.com/org/repo", "HEAD") == head
    assert hooks.git_ref_commit("https://github.com/org/repo", "dev") == dev
    assert hooks.git_ref_commit("https://github.com/org/repo", "refs/heads/HEAD") is None
    hook = hooks.CodeBuildHook.__new__(hooks.CodeBuildHook)
    project = {"source": {"type": "GITHUB", "location": "https://github.com/org/repo.git"}}
    commit, start, how = hook.resolve_source_commit(project, None)
    assert commit == start == head and "HEAD of https://github.com/org/repo.git" in how


def test_resolve_source_commit_for_a_commit_id_and_a_git_branch(monkeypatch):
    from sim2real.orchestration.hooks import codebuild as hooks

    hook = hooks.CodeBuildHook.__new__(hooks.CodeBuildHook)
    project = {"source": {"type": "GITHUB", "location": "https://github.com/org/repo.git"}, "sourceVersion": "main"}
    sha = "d" * 40
    assert hook.resolve_source_commit(project, sha)[:2] == (sha, sha)
    monkeypatch.setattr(hooks, "git_ref_commit", lambda url, ref: "e" * 40 if ref == "main" else None)
    commit, start, how = hook.resolve_source_commit(project, None)
    assert commit == start == "e" * 40 and "main of https://github.com/org/repo.git" in how
    assert hook.resolve_source_commit(project, "gone")[0] is None  # unknown before the build: it always builds

    def unreachable(url, ref):
        raise OSError("HTTP Error 401: Unauthorized")

    monkeypatch.setattr(hooks, "git_ref_commit", unreachable)
    commit, start, how = hook.resolve_source_commit(project, "main")
    assert commit is None and start == "main" and "401" in how


@pytest.mark.parametrize("status", TERMINAL + ["IN_PROGRESS"])
def test_trigger_terminal_statuses_in_one_poll(moto_server, build_status, status):
    cb = boto3.client("codebuild", region_name=REGION, endpoint_url=moto_server)
    _create_project(cb)
    boto3.client("ecr", region_name=REGION, endpoint_url=moto_server).create_repository(repositoryName=REPO)
    build_id = cb.start_build(projectName=PROJECT)["build"]["id"]
    build_status["status"] = status
    trigger = CodeBuildBuildCompleteTrigger(build_id=build_id, waiter_delay=0, waiter_max_attempts=1)
    event = first_event(trigger)
    assert event["build_id"] == build_id
    expected = {"SUCCEEDED": "success", "IN_PROGRESS": "timeout"}.get(status, "failure")
    assert event["status"] == expected and event["build_status"] == status
    if status not in ("SUCCEEDED", "IN_PROGRESS"):
        assert status in event["message"]


def test_trigger_on_kill_stops_build(moto_server, build_status):
    cb = boto3.client("codebuild", region_name=REGION, endpoint_url=moto_server)
    _create_project(cb)
    build_id = cb.start_build(projectName=PROJECT)["build"]["id"]
    asyncio.run(CodeBuildBuildCompleteTrigger(build_id=build_id).on_kill())
    assert build_status["stopped"] == [build_id]
