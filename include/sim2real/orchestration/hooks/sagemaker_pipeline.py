"""SageMaker Pipelines hook with our waiter file and the calls the pipeline operators need.

Sources: Amazon SageMaker API Reference — CreatePipeline, DescribePipeline, UpdatePipeline,
StartPipelineExecution, DescribePipelineExecution (``PipelineExecutionStatus`` ∈ Executing,
Stopping, Stopped, Failed, Succeeded, CompletedWithFailures), ListPipelineExecutions,
ListPipelineExecutionSteps, StopPipelineExecution.
"""

from __future__ import annotations

import json
import uuid
from functools import cached_property
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
from airflow.providers.amazon.aws.hooks.sagemaker import SageMakerHook

SAGEMAKER_EXT_WAITERS = Path(__file__).resolve().parents[1] / "waiters" / "sagemaker_ext.json"

PIPELINE_SUCCESS_STATES = frozenset({"Succeeded"})
#: Executions a retry may reattach to instead of starting a second one.
PIPELINE_REATTACH_STATES = frozenset({"Executing", "Succeeded"})


def canonical_definition(definition: dict | str) -> str:
    """Canonical JSON text of a pipeline definition (sorted keys, no whitespace).

    :raises ValueError: ``definition`` is a string that is not a JSON object.
    """
    if isinstance(definition, str):
        try:
            definition = json.loads(definition)
        except json.JSONDecodeError as error:
            raise ValueError(f"pipeline definition is not valid JSON: {error}") from error
    if not isinstance(definition, dict):
        raise ValueError(f"pipeline definition must be a JSON object, got {type(definition).__name__}")
    return json.dumps(definition, sort_keys=True, separators=(",", ":"))


class SageMakerExtHook(AwsBaseHook):
    """Thin SageMaker hook (``client_type="sagemaker"``) whose custom waiters come from
    ``sim2real/orchestration/waiters/sagemaker_ext.json``; base of the HyperPod and Model Registry hooks."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["client_type"] = "sagemaker"
        super().__init__(*args, **kwargs)

    @cached_property
    def waiter_path(self):
        return SAGEMAKER_EXT_WAITERS


class SageMakerPipelineHook(SageMakerHook):
    """``SageMakerHook`` whose custom waiters come from ``sim2real/orchestration/waiters/sagemaker_ext.json``."""

    @cached_property
    def waiter_path(self):
        return SAGEMAKER_EXT_WAITERS

    def upsert_pipeline(self, pipeline_name: str, definition: dict | str, role_arn: str) -> tuple[str, str]:
        """Create the pipeline, or update it only when its definition differs.

        :return: ``(pipeline_arn, action)`` with action ``created``, ``updated`` or ``unchanged``.
        """
        wanted = canonical_definition(definition)
        try:
            current = self.conn.describe_pipeline(PipelineName=pipeline_name)
        except ClientError as error:
            code = error.response["Error"]["Code"]
            message = error.response["Error"].get("Message", "")
            if code not in ("ResourceNotFound", "ValidationException") or (
                code == "ValidationException" and "not" not in message.lower()
            ):
                raise
            arn = self.conn.create_pipeline(
                PipelineName=pipeline_name,
                PipelineDefinition=wanted,
                RoleArn=role_arn,
                ClientRequestToken=str(uuid.uuid4()),
            )["PipelineArn"]
            return arn, "created"
        arn = current["PipelineArn"]
        have = current.get("PipelineDefinition")
        try:
            same = have is not None and canonical_definition(have) == wanted
        except ValueError:
            same = False
        if same and current.get("RoleArn") in (None, role_arn):
            return arn, "unchanged"
        arn = self.conn.update_pipeline(PipelineName=pipeline_name, PipelineDefinition=wanted, RoleArn=role_arn)[
            "PipelineArn"
        ]
        return arn, "updated"

    def find_execution(self, pipeline_name: str, display_name: str) -> dict[str, Any] | None:
        """Newest execution of ``pipeline_name`` with this display name in Executing/Succeeded.

        :return: the ListPipelineExecutions summary (``PipelineExecutionArn``,
            ``PipelineExecutionStatus``, ...) or ``None``.
        """
        kwargs: dict[str, Any] = {"PipelineName": pipeline_name, "SortBy": "CreationTime", "SortOrder": "Descending"}
        while True:
            page = self.conn.list_pipeline_executions(**kwargs)
            for summary in page.get("PipelineExecutionSummaries", []):
                if (
                    summary.get("PipelineExecutionDisplayName") == display_name
                    and summary.get("PipelineExecutionStatus") in PIPELINE_REATTACH_STATES
                ):
                    return summary
            if not page.get("NextToken"):
                return None
            kwargs["NextToken"] = page["NextToken"]

    @staticmethod
    def failing_steps_from(steps: list[dict[str, Any]]) -> str:
        """``"StepName (StepStatus): FailureReason"`` for every failed/stopped step, ``;``-joined."""
        bad = [
            f"{s.get('StepName')} ({s.get('StepStatus')}): {s.get('FailureReason') or 'no FailureReason'}"
            for s in steps
            if s.get("StepStatus") in ("Failed", "Stopped")
        ]
        return "; ".join(bad)

    def describe_failure(self, execution_arn: str) -> str:
        """Best-effort text naming the failing step(s) (ListPipelineExecutionSteps); ``""`` when unknown."""
        try:
            steps = self.conn.list_pipeline_execution_steps(PipelineExecutionArn=execution_arn).get(
                "PipelineExecutionSteps", []
            )
        except Exception as error:  # best effort, never changes the outcome
            self.log.warning("ListPipelineExecutionSteps failed for %s: %s", execution_arn, error)
            return ""
        return self.failing_steps_from(steps)


def pipeline_failure_message(execution_arn: str, status: str, reason: str | None, steps: str) -> str:
    """The failure message of a pipeline execution (operator and trigger share it)."""
    text = f"SageMaker pipeline execution {execution_arn} ended {status}"
    if reason:
        text += f": {reason}"
    if steps:
        text += f". Failing step(s): {steps}"
    text += ". Open the execution in SageMaker Studio (Pipelines) for step logs; retry the task to start a new execution."
    return text
