"""Trigger for a SageMaker pipeline execution with an exhaustive terminal-state table.

Waiter ``pipeline_execution_terminal`` (``sim2real/orchestration/waiters/sagemaker_ext.json``):
Succeeded → success; Failed, Stopped, CompletedWithFailures → failure; Executing, Stopping →
keep polling. Source: DescribePipelineExecution, ListPipelineExecutionSteps,
StopPipelineExecution (Amazon SageMaker API Reference).
"""

from __future__ import annotations

from typing import Any

from sim2real.orchestration.events import envelope
from sim2real.orchestration.events.consumer import WaitEvent
from sim2real.orchestration.hooks.sagemaker_pipeline import SAGEMAKER_EXT_WAITERS, SageMakerPipelineHook
from sim2real.orchestration.hooks.waiter_rounds import classify_response
from sim2real.orchestration.triggers.base import REQUIRED, StepWaitTrigger
from sim2real.orchestration.waits.core import WaitState
from sim2real.orchestration.waits.sagemaker import STEPS_KEY, pipeline_execution_step

class PipelineExecutionTrigger(StepWaitTrigger):
    """Poll DescribePipelineExecution until :func:`~sim2real.orchestration.waits.sagemaker.pipeline_execution_step`
    ends the wait.

    :param pipeline_execution_arn: the execution to watch.
    :param waiter_delay: seconds between polls.
    :param waiter_max_attempts: polls before a ``timeout`` event.
    :param stop_on_kill: StopPipelineExecution when the user kills the deferred task.

    One event: ``{"status": "success" | "failure" | "timeout", "message", "pipeline_execution_arn",
    "execution_status"}`` (a failure's message names the failing step and its FailureReason when
    ListPipelineExecutionSteps answers).
    """

    aws_hook_class = SageMakerPipelineHook

    fields = {"pipeline_execution_arn": REQUIRED, "stop_on_kill": True}
    default_waiter_delay, default_waiter_max_attempts = 30, 2880

    step_function = staticmethod(pipeline_execution_step)

    def event_keys(self) -> list[envelope.ResourceKey]:
        """``SageMaker Model Building Pipeline Execution Status Change`` events of the execution."""
        return [envelope.pipeline_execution(self.pipeline_execution_arn)]

    async def event_response(self, client, state: WaitState, event: WaitEvent) -> dict[str, Any]:
        """The event's execution status; for a failed execution :meth:`describe` (the failing steps, which the
        event does not carry, name the failure), unless that still shows an earlier status."""
        response = dict(event.response)
        if classify_response(str(SAGEMAKER_EXT_WAITERS), "pipeline_execution_terminal", response) == "failure":
            described = await self.describe(client, state)
            if described.get("PipelineExecutionStatus") == response.get("PipelineExecutionStatus"):
                return described
        return response

    async def describe(self, client, state: WaitState) -> dict[str, Any]:
        """DescribePipelineExecution; for a failed execution also its steps (ListPipelineExecutionSteps,
        best effort) under :data:`~sim2real.orchestration.waits.sagemaker.STEPS_KEY`."""
        arn = self.pipeline_execution_arn
        response = await client.describe_pipeline_execution(PipelineExecutionArn=arn)
        # a failed execution (the waiter's failure acceptors) also gets its failing steps for the message
        if classify_response(str(SAGEMAKER_EXT_WAITERS), "pipeline_execution_terminal", dict(response)) == "failure":
            try:
                steps = await client.list_pipeline_execution_steps(PipelineExecutionArn=arn)
                response = {**response, STEPS_KEY: steps.get("PipelineExecutionSteps", [])}
            except Exception as error:  # noqa: BLE001 - best effort
                self.log.warning("ListPipelineExecutionSteps failed for %s: %s", arn, error)
        return response

    async def stop_resource(self) -> None:
        """StopPipelineExecution: a person stopped the deferred task (base ``on_kill``)."""
        if not self.stop_on_kill:
            return
        self.log.info("Stopping SageMaker pipeline execution %s", self.pipeline_execution_arn)
        async with await self.hook().get_async_conn() as client:
            await client.stop_pipeline_execution(PipelineExecutionArn=self.pipeline_execution_arn)
