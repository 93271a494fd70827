"""Trigger waiting for an AWS CodeBuild build (custom waiter ``build_complete`` on ``BatchGetBuilds``)."""

from __future__ import annotations

from typing import Any

from sim2real.orchestration.events import envelope
from sim2real.orchestration.hooks.codebuild import CodeBuildHook
from sim2real.orchestration.triggers.base import REQUIRED, StepWaitTrigger
from sim2real.orchestration.waits.codebuild import codebuild_build_step
from sim2real.orchestration.waits.core import WaitState


class CodeBuildBuildCompleteTrigger(StepWaitTrigger):
    """
    Poll a CodeBuild build (``BatchGetBuilds``) until
    :func:`~sim2real.orchestration.waits.codebuild.codebuild_build_step` (waiter ``build_complete``) ends it.

    One event: ``{"status": "success" | "failure" | "timeout", "message", "build_id", "build_status",
    "current_phase"}``. The operator's ``execute_complete`` then describes the build to name the
    failing phase.

    When a user marks the deferred task failed / success or clears it (Airflow 3.3+
    ``BaseTrigger.on_kill``), the build is stopped (``StopBuild``) if ``stop_on_kill``.

    :param build_id: the CodeBuild build id (``<project>:<uuid>``).
    :param waiter_delay: seconds between polls.
    :param waiter_max_attempts: polls before giving up.
    :param stop_on_kill: stop the build when the user kills the deferred task.
    :param aws_conn_id: Airflow AWS connection.
    :param region_name: AWS region.
    :param verify: SSL verification for the client.
    :param botocore_config: botocore client configuration dict.
    """

    aws_hook_class = CodeBuildHook

    fields = {"build_id": REQUIRED, "stop_on_kill": True}
    default_waiter_delay, default_waiter_max_attempts = 30, 240

    step_function = staticmethod(codebuild_build_step)

    def event_keys(self) -> list[envelope.ResourceKey]:
        """``CodeBuild Build State Change`` events of the build (read as its BatchGetBuilds build)."""
        return [envelope.codebuild_build(self.build_id)]

    async def describe(self, client, state: WaitState) -> dict[str, Any]:
        """``BatchGetBuilds`` of the build."""
        return await client.batch_get_builds(ids=[self.build_id])

    async def stop_resource(self) -> None:
        """Stop the build (``StopBuild``): a person stopped the deferred task (base ``on_kill``)."""
        if not (self.build_id and self.stop_on_kill):
            return
        self.log.info("Stopping CodeBuild build %s", self.build_id)
        async with await self.hook().get_async_conn() as client:
            await client.stop_build(id=self.build_id)
        self.log.info("CodeBuild build %s stopped", self.build_id)
