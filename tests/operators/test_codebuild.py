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
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ecr.models import ecr_backends
from sim2real.operators.codebuild import CodeBuildImageOperator
from sim2real.triggers.codebuild import CodeBuildBuildCompleteTrigger

from operator_helpers import first_event

REGION = "us-east-1"
PROJECT = "sim2real-training-image"
REPO = "sim2real-training"
TAG = "src-0123abcd"
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


def _create_project(cb):
    cb.create_project(
        name=PROJECT,
        source={"type": "S3", "location": "bucket/source.zip"},
        artifacts={"type": "NO_ARTIFACTS"},
        environment={
            "type": "LINUX_CONTAINER",
            "image": "aws/codebuild/standard:7.0",
            "computeType": "BUILD_GENERAL1_SMALL",
        },
        serviceRole=f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/codebuild",
    )


def _setup():
    _create_project(boto3.client("codebuild", region_name=REGION))
    boto3.client("ecr", region_name=REGION).create_repository(repositoryName=REPO)


def _push_image():
    backend = ecr_backends[DEFAULT_ACCOUNT_ID][REGION]
    if not any(TAG in (img.image_tags or []) for img in backend.repositories[REPO].images):
        backend.put_image(REPO, MANIFEST, TAG)


@pytest.fixture
def build_status(monkeypatch):
    """Make BatchGetBuilds report ``holder["status"]``; SUCCEEDED also 'pushes' the image like a buildspec."""
    holder = {"status": "SUCCEEDED", "stopped": []}
    original = CodeBuildBackend.batch_get_builds
    original_stop = CodeBuildBackend.stop_build

    def batch_get_builds(self, ids):
        builds = original(self, ids)
        for build in builds:
            build["buildStatus"] = holder["status"]
            if holder["status"] == "SUCCEEDED":
                _push_image()
            else:
                build["phases"] = FAILED_PHASES
                build["currentPhase"] = "BUILD" if holder["status"] == "IN_PROGRESS" else "COMPLETED"
        return builds

    def stop_build(self, build_id):
        holder["stopped"].append(build_id)
        return original_stop(self, build_id)

    monkeypatch.setattr(CodeBuildBackend, "batch_get_builds", batch_get_builds)
    monkeypatch.setattr(CodeBuildBackend, "stop_build", stop_build)
    return holder


def _op(**kw):
    return CodeBuildImageOperator(
        task_id="build_image",
        project_name=PROJECT,
        repository_name=REPO,
        image_tag=TAG,
        waiter_delay=0,
        waiter_max_attempts=1,
        **kw,
    )


@mock_aws
def test_skips_build_when_tag_exists(aws_env, build_status):
    _setup()
    _push_image()
    result = _op(deferrable=False).execute({})
    digest = boto3.client("ecr", region_name=REGION).describe_images(repositoryName=REPO)["imageDetails"][0][
        "imageDigest"
    ]
    assert result == {
        "image_uri": f"{DEFAULT_ACCOUNT_ID}.dkr.ecr.{REGION}.amazonaws.com/{REPO}@{digest}",
        "image_digest": digest,
        "image_tag": TAG,
        "build_id": None,
        "skipped": True,
    }
    assert boto3.client("codebuild", region_name=REGION).list_builds()["ids"] == []


@pytest.mark.parametrize("status", TERMINAL + ["IN_PROGRESS"])
@mock_aws
def test_sync_terminal_statuses(aws_env, build_status, status):
    _setup()
    build_status["status"] = status
    op = _op(deferrable=False)
    if status == "SUCCEEDED":
        result = op.execute({})
        assert result["skipped"] is False and result["build_id"].startswith(PROJECT + ":")
        assert result["image_uri"].endswith("@" + result["image_digest"]) and result["image_digest"].startswith(
            "sha256:"
        )
        return
    with pytest.raises(AirflowException) as err:
        op.execute({})
    message = str(err.value)
    assert op.build_id in message and f"ended {status}" in message
    assert "phase BUILD FAILED: COMMAND_EXECUTION_ERROR" in message
    if status == "IN_PROGRESS":
        assert "max attempts" in message


@mock_aws
def test_deferrable_defers_with_trigger_and_on_kill_stops(aws_env, build_status):
    from airflow.providers.common.compat.sdk import TaskDeferred

    _setup()
    op = _op(deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, CodeBuildBuildCompleteTrigger)
    path, kwargs = trigger.serialize()
    assert path == "sim2real.triggers.codebuild.CodeBuildBuildCompleteTrigger"
    assert CodeBuildBuildCompleteTrigger(**kwargs).serialize() == (path, kwargs)
    # resumed with a failure event: message names the phase
    build_status["status"] = "FAILED"
    with pytest.raises(AirflowException, match="phase BUILD FAILED"):
        op.execute_complete({}, {"status": "error", "message": "failed", "build_id": op.build_id})
    build_status["status"] = "SUCCEEDED"
    _push_image()  # what the build's buildspec does
    assert op.execute_complete({}, {"status": "success", "build_id": op.build_id})["build_id"] == op.build_id
    op.on_kill()
    assert build_status["stopped"] == [op.build_id]


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
    assert event["status"] == ("success" if status == "SUCCEEDED" else "error")
    if status not in ("SUCCEEDED", "IN_PROGRESS"):
        assert status in event["message"]


def test_trigger_on_kill_stops_build(moto_server, build_status):
    cb = boto3.client("codebuild", region_name=REGION, endpoint_url=moto_server)
    _create_project(cb)
    build_id = cb.start_build(projectName=PROJECT)["build"]["id"]
    asyncio.run(CodeBuildBuildCompleteTrigger(build_id=build_id).on_kill())
    assert build_status["stopped"] == [build_id]
