"""SageMaker Pipelines: idempotent definition upsert and a run-keyed, exhaustively-waited execution.

Sources: Amazon SageMaker API Reference (CreatePipeline, DescribePipeline, UpdatePipeline,
StartPipelineExecution — ``PipelineExecutionDisplayName`` pattern ``^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,81}``,
``PipelineParameters[].Value`` string; DescribePipelineExecution, ListPipelineExecutions,
ListPipelineExecutionSteps, StopPipelineExecution).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.operators.base_aws import AwsBaseOperator
from airflow.providers.amazon.aws.operators.sagemaker import SageMakerStartPipelineOperator
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from sim2real.orchestration.hooks.sagemaker_pipeline import (
    PIPELINE_SUCCESS_STATES,
    SageMakerPipelineHook,
    pipeline_failure_message,
)
from sim2real.orchestration.links.sagemaker import SageMakerPipelineExecutionLink
from sim2real.orchestration.stop_rule import operator_should_stop, starts_afresh
from sim2real.orchestration.triggers.base import defer_wait
from sim2real.orchestration.triggers.sagemaker import PipelineExecutionTrigger
from sim2real.orchestration.waits.core import WaitState, event_outcome, settle_now
from sim2real.orchestration.waits.sagemaker import pipeline_execution_step

if TYPE_CHECKING:
    from airflow.sdk import Context

DISPLAY_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,81}$")


def pipeline_param_value(value: Any) -> str:
    """Cast a typed parameter to the string SageMaker wants.

    ``bool`` → ``"true"``/``"false"`` (ParameterBoolean), ``dict``/``list`` → JSON,
    ``None`` → ``ValueError``, anything else → ``str(value)``.
    """
    if value is None:
        raise ValueError("pipeline parameter values cannot be None")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


class PipelineDefinitionUpsertOperator(AwsBaseOperator[SageMakerPipelineHook]):
    """Create the pipeline, or UpdatePipeline only when its definition changed.

    The current definition (DescribePipeline ``PipelineDefinition``) and ``definition`` are
    compared as canonical JSON (sorted keys, no whitespace), so formatting differences never
    cause an update.

    :param pipeline_name: SageMaker pipeline name.
    :param definition: the pipeline definition, dict or JSON text.
    :param role_arn: IAM role the pipeline runs as.
    :return: ``{"pipeline_arn": str, "action": "created" | "updated" | "unchanged"}``.
    :raises ValueError: ``definition`` is not a JSON object.
    """

    aws_hook_class = SageMakerPipelineHook
    template_fields: Sequence[str] = aws_template_fields("pipeline_name", "definition", "role_arn")
    template_fields_renderers = {"definition": "json"}

    def __init__(self, *, pipeline_name: str, definition: dict | str, role_arn: str, **kwargs):
        super().__init__(**kwargs)
        self.pipeline_name = pipeline_name
        self.definition = definition
        self.role_arn = role_arn

    def execute(self, context: Context) -> dict[str, str]:
        arn, action = self.hook.upsert_pipeline(self.pipeline_name, self.definition, self.role_arn)
        self.log.info("Pipeline %s %s (%s)", self.pipeline_name, action, arn)
        return {"pipeline_arn": arn, "action": action}


class PipelineExecutionOperator(SageMakerStartPipelineOperator):
    """Start (or reattach to) this run's pipeline execution and wait for a terminal status.

    ``display_name`` is the run key. Before starting, ListPipelineExecutions is searched for an
    execution of this pipeline with the same display name in Executing or Succeeded status; if
    one exists (a retried task) it is reused instead of starting a second one; the first try after a person
    cleared the task starts afresh instead (:func:`sim2real.orchestration.stop_rule.starts_afresh`): it stops that
    execution if it is Executing (StopPipelineExecution) and starts a new one.
    Statuses: Succeeded → success; Failed, Stopped, CompletedWithFailures → failure (message
    names the failing step and FailureReason from ListPipelineExecutionSteps, best effort);
    Executing, Stopping → keep waiting. ``on_kill`` (sync) and the trigger's ``on_kill``
    (deferred) call StopPipelineExecution.

    :param pipeline_name: pipeline to run.
    :param display_name: the run key; must match ``[a-zA-Z0-9](-*[a-zA-Z0-9]){0,81}``.
    :param pipeline_params: typed values, cast with :func:`pipeline_param_value`.
    :param check_interval: seconds between status polls.
    :param waiter_max_attempts: polls before failing (default 2880 × 30 s = 24 h).
    :param reattach: on a retry, reuse an Executing/Succeeded execution with this display name.
    :return: ``{"pipeline_execution_arn": str, "status": "Succeeded"}``.
    :raises ValueError: bad display name or parameter value.
    :raises AirflowException: the execution ended Failed/Stopped/CompletedWithFailures, or timed out.
    """

    aws_hook_class = SageMakerPipelineHook
    operator_extra_links = (SageMakerPipelineExecutionLink(),)

    def __init__(
        self,
        *,
        pipeline_name: str,
        display_name: str,
        pipeline_params: dict[str, Any] | None = None,
        check_interval: int = 30,
        waiter_max_attempts: int = 2880,
        reattach: bool = True,
        **kwargs,
    ):
        super().__init__(
            pipeline_name=pipeline_name,
            display_name=display_name,
            pipeline_params=pipeline_params,
            wait_for_completion=True,
            check_interval=check_interval,
            waiter_max_attempts=waiter_max_attempts,
            verbose=False,
            deferrable=True,  # the wait is always deferred (PipelineExecutionTrigger)
            **kwargs,
        )
        self.reattach = reattach
        self._execution_arn: str | None = None

    def _validated(self) -> dict[str, str] | None:
        if not isinstance(self.display_name, str) or not DISPLAY_NAME_PATTERN.match(self.display_name):
            raise ValueError(
                f"display_name {self.display_name!r} is not a valid PipelineExecutionDisplayName "
                "([a-zA-Z0-9](-*[a-zA-Z0-9]){0,81}); pass the run key (sim2real.contract.run_key.make_run_key)."
            )
        if not self.pipeline_params:
            return None
        return {str(k): pipeline_param_value(v) for k, v in self.pipeline_params.items()}

    def execute(self, context: Context) -> dict[str, str]:  # type: ignore[override]
        params = self._validated()
        existing = self.hook.find_execution(self.pipeline_name, self.display_name) if self.reattach else None
        if existing and starts_afresh(context.get("ti"), self.retries):
            self._supersede(existing, context)
            existing = None
        if existing:
            arn, status = existing["PipelineExecutionArn"], existing["PipelineExecutionStatus"]
            self.log.info("Reattaching to execution %s (%s) with display name %s", arn, status, self.display_name)
        else:
            arn = self.hook.start_pipeline(
                pipeline_name=self.pipeline_name, display_name=self.display_name, pipeline_params=params
            )
            status = "Executing"
            self.log.info("Started execution %s of pipeline %s", arn, self.pipeline_name)
        self._execution_arn = arn
        SageMakerPipelineExecutionLink.persist(
            context=context,
            operator=self,
            region_name=self.hook.conn_region_name,
            aws_partition=self.hook.conn_partition,
            pipeline_name=self.pipeline_name,
            execution_id=arn.rsplit("/", 1)[-1],
        )
        if status in PIPELINE_SUCCESS_STATES:
            return {"pipeline_execution_arn": arn, "status": status}
        # An execution that is already over (a reattached one, or one that failed at once) is settled here:
        # a trigger that fires at once would race the task's own state report.
        response = self.hook.conn.describe_pipeline_execution(PipelineExecutionArn=arn)
        if settle_now(pipeline_execution_step, response, {"pipeline_execution_arn": arn}) is not None:
            self.log.info("Pipeline execution %s is already %s: not deferring", arn,
                          response.get("PipelineExecutionStatus"))
            return self._settle(arn, response)
        defer_wait(self, PipelineExecutionTrigger, method_name="execute_complete", waiter_delay=self.check_interval,
                   waiter_max_attempts=self.waiter_max_attempts, pipeline_execution_arn=arn)

    def _supersede(self, execution: dict[str, Any], context: Context) -> None:
        """A fresh start (a cleared task's new try) does not reattach: the earlier try's execution is stopped when
        it is Executing, and a new execution is started."""
        try_number = getattr(context.get("ti"), "try_number", "?")
        arn, status = execution["PipelineExecutionArn"], execution["PipelineExecutionStatus"]
        if status in PIPELINE_SUCCESS_STATES:
            self.log.info("Pipeline execution %s of an earlier try ended %s; try %s starts afresh (the task was "
                          "cleared) and starts a new execution", arn, status, try_number)
            return
        self.log.warning("Pipeline execution %s of an earlier try is %s; try %s starts afresh (the task was "
                         "cleared): stopping it and starting a new execution", arn, status, try_number)
        self.hook.stop_pipeline(arn)

    def _settle(self, arn: str, response: dict[str, Any]) -> dict[str, str]:
        """The result of a terminal ``DescribePipelineExecution`` answer: success, or the failure raised."""
        status = response.get("PipelineExecutionStatus", "unknown")
        step = pipeline_execution_step(response, WaitState(params={"pipeline_execution_arn": arn}))
        if step.outcome == "success":
            return {"pipeline_execution_arn": arn, "status": status}
        # A terminal failure is a verdict on this execution: not retried (a retry would start
        # another GPU fine-tune). Infrastructure errors stay AirflowException (retried).
        raise AirflowFailException(
            pipeline_failure_message(arn, status, response.get("FailureReason"), self.hook.describe_failure(arn))
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, str]:  # type: ignore[override]
        status, message = event_outcome(event, f"SageMaker pipeline execution {self._execution_arn}")
        if status == "failure" and not event.get("error_code"):
            # terminal Failed / Stopped / CompletedWithFailures: not retried
            raise AirflowFailException(message or f"Pipeline execution failed: {event}")
        if status != "success":
            raise AirflowException(f"{message}; stop it in SageMaker Studio or raise waiter_max_attempts"
                                   if status == "timeout" else message or f"Pipeline execution failed: {event}")
        return {"pipeline_execution_arn": event["pipeline_execution_arn"], "status": event["execution_status"]}

    def on_kill(self) -> None:
        """StopPipelineExecution for the execution this try started or reattached to, while the task runs in
        the worker (deferred: the trigger's ``on_kill``)."""
        if self._execution_arn and operator_should_stop(self, f"pipeline execution {self._execution_arn}"):
            self.log.info("Stopping pipeline execution %s", self._execution_arn)
            self.hook.stop_pipeline(self._execution_arn)
