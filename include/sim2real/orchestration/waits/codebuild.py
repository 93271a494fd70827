"""Step function of a CodeBuild build wait (``BatchGetBuilds`` responses), decided by the waiter
``build_complete`` of ``waiters/codebuild.json``. Source: AWS CodeBuild API Reference, BatchGetBuilds
(``builds[].buildStatus``, ``currentPhase``, ``phases[]``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim2real.orchestration.hooks.codebuild import WAITERS_DIR
from sim2real.orchestration.hooks.waiter_rounds import classify_response
from sim2real.orchestration.waits.core import Step, WaitState, api_error_step

WAITER_PATH = WAITERS_DIR / "codebuild.json"
WAITER_NAME = "build_complete"


def codebuild_build_step(response: Mapping[str, Any], state: WaitState) -> Step:
    """Decide one ``BatchGetBuilds`` response of ``state.params["build_id"]``.

    :return: ``success`` (SUCCEEDED); ``failure`` (FAILED / FAULT / TIMED_OUT / STOPPED, the build
        not found, a non-retriable API error); ``retry`` (IN_PROGRESS, an unknown status, throttling).
        Payload: ``build_id``, ``build_status``, ``current_phase``.
    """
    build_id = state.params["build_id"]
    resource = f"CodeBuild build {build_id}"
    error = api_error_step(response, resource, "BatchGetBuilds")
    if error is not None:
        return error
    builds = response.get("builds") or []
    if not builds:
        return Step("failure", f"{resource} not found (BatchGetBuilds: buildsNotFound): check the build id and "
                               "the region", {"build_id": build_id, "build_status": None, "current_phase": None})
    build = builds[0]
    status, phase = build.get("buildStatus"), build.get("currentPhase")
    payload = {"build_id": build_id, "build_status": status, "current_phase": phase}
    outcome = classify_response(str(WAITER_PATH), WAITER_NAME, response)
    if outcome == "success":
        return Step("success", f"{resource} SUCCEEDED", payload)
    if outcome == "failure":
        return Step("failure", f"{resource} ended {status} in phase {phase}", payload)
    return Step("retry", f"{resource} is {status} (phase {phase})", payload)
