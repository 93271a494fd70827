"""Trigger for a SageMaker pipeline execution with an exhaustive terminal-state table.

Waiter ``pipeline_execution_terminal`` (``sim2real/orchestration/waiters/sagemaker_ext.json``):
Succeeded → success; Failed, Stopped, CompletedWithFailures → failure; Executing, Stopping →
keep polling. Source: DescribePipelineExecution, ListPipelineExecutionSteps,
StopPipelineExecution (Amazon SageMaker API Reference).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from sim2real.orchestration.triggers.base import AwsHookWaiterTrigger
from airflow.triggers.base import TriggerEvent
from sim2real.orchestration.hooks.sagemaker_pipeline import SageMakerPipelineHook, pipeline_failure_message
from sim2real.orchestration.hooks.waiter_rounds import classify_response


class PipelineExecutionTrigger(AwsHookWaiterTrigger):
    """Poll DescribePipelineExecution until a terminal status.

    :param pipeline_execution_arn: the execution to watch.
    :param waiter_delay: seconds between polls.
    :param waiter_max_attempts: polls before a ``timeout`` event.
    :param stop_on_kill: StopPipelineExecution when the user kills the deferred task.

    Events: ``{"status": "success", "pipeline_execution_arn", "execution_status": "Succeeded"}``;
    ``{"status": "failure", "pipeline_execution_arn", "execution_status", "message"}`` (message
    names the failing step and its FailureReason when ListPipelineExecutionSteps answers);
    ``{"status": "timeout", "pipeline_execution_arn", "execution_status", "message"}``.
    """

    aws_hook_class = SageMakerPipelineHook

    def __init__(
        self,
        *,
        pipeline_execution_arn: str,
        waiter_delay: int = 30,
        waiter_max_attempts: int = 2880,
        stop_on_kill: bool = True,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict | None = None,
    ) -> None:
        super().__init__(
            serialized_fields={"pipeline_execution_arn": pipeline_execution_arn, "stop_on_kill": stop_on_kill},
            waiter_name="pipeline_execution_terminal",
            waiter_args={"PipelineExecutionArn": pipeline_execution_arn},
            failure_message="SageMaker pipeline execution failed",
            status_message="SageMaker pipeline execution status",
            status_queries=["PipelineExecutionStatus"],
            return_key="pipeline_execution_arn",
            return_value=pipeline_execution_arn,
            waiter_delay=waiter_delay,
            waiter_max_attempts=waiter_max_attempts,
            aws_conn_id=aws_conn_id,
            region_name=region_name,
            verify=verify,
            botocore_config=botocore_config,
        )
        self.pipeline_execution_arn = pipeline_execution_arn
        self.stop_on_kill = stop_on_kill

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self.hook()
        arn = self.pipeline_execution_arn
        status = "unknown"
        async with await hook.get_async_conn() as client:
            for attempt in range(self.attempts):
                if attempt:
                    await asyncio.sleep(self.waiter_delay)
                response = await client.describe_pipeline_execution(PipelineExecutionArn=arn)
                status = response.get("PipelineExecutionStatus", "unknown")
                outcome = classify_response(hook.waiter_path, self.waiter_name, response)
                if outcome == "success":
                    yield TriggerEvent({"status": "success", "pipeline_execution_arn": arn, "execution_status": status})
                    return
                if outcome == "failure":
                    steps = ""
                    try:
                        res = await client.list_pipeline_execution_steps(PipelineExecutionArn=arn)
                        steps = hook.failing_steps_from(res.get("PipelineExecutionSteps", []))
                    except Exception as error:  # best effort
                        self.log.warning("ListPipelineExecutionSteps failed for %s: %s", arn, error)
                    yield TriggerEvent(
                        {
                            "status": "failure",
                            "pipeline_execution_arn": arn,
                            "execution_status": status,
                            "message": pipeline_failure_message(arn, status, response.get("FailureReason"), steps),
                        }
                    )
                    return
                self.log.info("Pipeline execution %s is %s", arn, status)
        yield TriggerEvent(
            {
                "status": "timeout",
                "pipeline_execution_arn": arn,
                "execution_status": status,
                "message": f"pipeline execution {arn} still {status} after {self.attempts} polls {self.waiter_delay} s apart",
            }
        )

    async def on_kill(self) -> None:
        """StopPipelineExecution when the user kills the deferred task (Airflow 3.3+)."""
        if not self.stop_on_kill:
            return
        self.log.info("Stopping SageMaker pipeline execution %s", self.pipeline_execution_arn)
        async with await self.hook().get_async_conn() as client:
            await client.stop_pipeline_execution(PipelineExecutionArn=self.pipeline_execution_arn)
