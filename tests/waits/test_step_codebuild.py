"""codebuild_build_step: BatchGetBuilds responses (AWS CodeBuild API Reference, Build.buildStatus) -> Step."""

from __future__ import annotations

import pytest

from sim2real.orchestration.waits.codebuild import codebuild_build_step
from sim2real.orchestration.waits.core import WaitState

STATE = WaitState(params={"build_id": "p:1"})


def _build(status, phase="BUILD"):
    return {"builds": [{"id": "p:1", "buildStatus": status, "currentPhase": phase}], "buildsNotFound": []}


@pytest.mark.parametrize("status, outcome", [
    ("SUCCEEDED", "success"), ("FAILED", "failure"), ("FAULT", "failure"), ("TIMED_OUT", "failure"),
    ("STOPPED", "failure"), ("IN_PROGRESS", "retry"), ("SOMETHING_NEW", "retry"),
])
def test_build_statuses(status, outcome):
    step = codebuild_build_step(_build(status), STATE)
    assert step.outcome == outcome
    assert step.payload == {"build_id": "p:1", "build_status": status, "current_phase": "BUILD"}


def test_failure_names_the_phase_and_missing_build_fails():
    assert "phase POST_BUILD" in codebuild_build_step(_build("FAILED", "POST_BUILD"), STATE).reason
    step = codebuild_build_step({"builds": [], "buildsNotFound": ["p:1"]}, STATE)
    assert step.outcome == "failure" and "not found" in step.reason


def test_api_errors():
    assert codebuild_build_step({"Error": {"Code": "ThrottlingException"}}, STATE).outcome == "retry"
    assert codebuild_build_step({"Error": {"Code": "InvalidInputException"}}, STATE).outcome == "failure"
