"""Step functions of SageMaker waits: a pipeline execution (``DescribePipelineExecution``) and a
model package approval (``DescribeModelPackage``), decided by the waiters
``pipeline_execution_terminal`` and ``model_package_approved`` of ``waiters/sagemaker_ext.json``.
Source: Amazon SageMaker API Reference, DescribePipelineExecution (``PipelineExecutionStatus``,
``FailureReason``), ListPipelineExecutionSteps, DescribeModelPackage (``ModelApprovalStatus``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim2real.orchestration.hooks.model_registry import approval_result
from sim2real.orchestration.hooks.sagemaker_pipeline import (
    SAGEMAKER_EXT_WAITERS,
    SageMakerPipelineHook,
    pipeline_failure_message,
)
from sim2real.orchestration.hooks.waiter_rounds import classify_response
from sim2real.orchestration.waits.core import Step, WaitState, api_error_step

#: Key under which a describe round adds ``ListPipelineExecutionSteps.PipelineExecutionSteps``
#: to the execution's response (only for a failed execution; absent in a delivered event).
STEPS_KEY = "PipelineExecutionSteps"


def pipeline_execution_step(response: Mapping[str, Any], state: WaitState) -> Step:
    """Decide one ``DescribePipelineExecution`` response of ``params["pipeline_execution_arn"]``.

    :return: ``success`` (Succeeded); ``failure`` (Failed / Stopped / CompletedWithFailures, with the
        failing steps when the response carries :data:`STEPS_KEY`; a non-retriable API error);
        ``retry`` (Executing, Stopping, an unknown status, throttling). Payload:
        ``pipeline_execution_arn``, ``execution_status``.
    """
    arn = state.params["pipeline_execution_arn"]
    error = api_error_step(response, f"SageMaker pipeline execution {arn}", "DescribePipelineExecution")
    if error is not None:
        return error
    status = response.get("PipelineExecutionStatus", "unknown")
    payload = {"pipeline_execution_arn": arn, "execution_status": status}
    outcome = classify_response(str(SAGEMAKER_EXT_WAITERS), "pipeline_execution_terminal", dict(response))
    if outcome == "success":
        return Step("success", f"SageMaker pipeline execution {arn} Succeeded", payload)
    if outcome == "failure":
        steps = SageMakerPipelineHook.failing_steps_from(list(response.get(STEPS_KEY) or []))
        return Step("failure", pipeline_failure_message(arn, status, response.get("FailureReason"), steps), payload)
    return Step("retry", f"SageMaker pipeline execution {arn} is {status}", payload)


def model_package_step(response: Mapping[str, Any], state: WaitState) -> Step:
    """Decide one ``DescribeModelPackage`` response (or ``{}`` while this run's package is not
    registered yet) for ``params["run_key"]`` in ``params["model_package_group_name"]``.

    :return: ``success`` (Approved; payload :func:`~sim2real.orchestration.hooks.model_registry.approval_result`);
        ``failure`` (Rejected: payload ``model_package_arn``, ``approval_status``, ``approval_description``;
        a non-retriable API error); ``retry`` (PendingManualApproval, not registered yet, unknown status).
    """
    group, run_key = state.params["model_package_group_name"], state.params["run_key"]
    error = api_error_step(response, f"model package of run {run_key} in group {group}", "DescribeModelPackage")
    if error is not None:
        return error
    arn = response.get("ModelPackageArn")
    status = response.get("ModelApprovalStatus")
    payload = {"model_package_arn": arn, "approval_status": status}
    if not arn:
        return Step("retry", f"no model package for run {run_key} in group {group} yet", payload)
    outcome = classify_response(str(SAGEMAKER_EXT_WAITERS), "model_package_approved", dict(response))
    if outcome == "success":
        return Step("success", f"model package {arn} Approved", {**approval_result(dict(response))})
    if outcome == "failure":
        return Step("failure", f"model package {arn} {status}: {response.get('ApprovalDescription') or 'no description'}",
                    {**payload, "approval_description": response.get("ApprovalDescription")})
    return Step("retry", f"model package {arn} is {status}", payload)


#: Key under which a describe round of the approval step adds the Airflow reviewer's answer (the task's
#: human-in-the-loop detail, read through the Task Execution API) to the DescribeModelPackage response.
AIRFLOW_RESPONSE_KEY = "AirflowHITLResponse"


def model_package_decision_step(response: Mapping[str, Any], state: WaitState) -> Step:
    """Decide one round of the approval step: whichever came first of an answer in Airflow (the response
    carries :data:`AIRFLOW_RESPONSE_KEY`: ``{"chosen_options", "params_input", "responded_by_user",
    "responded_at"}``) and a decision in the registry (:func:`model_package_step`).

    :return: ``success`` with ``via: "airflow"`` and ``hitl_response`` (the answer, to be written to the
        registry by the operator) when Airflow answered; else :func:`model_package_step`'s step, its payload
        with ``via: "sagemaker"`` once terminal.
    """
    answer = response.get(AIRFLOW_RESPONSE_KEY) if isinstance(response, Mapping) else None
    if answer:
        user = answer.get("responded_by_user") or {}
        arn = response.get("ModelPackageArn") or state.params.get("model_package_arn")
        return Step("success", f"{user.get('name') or 'a reviewer'} answered {list(answer.get('chosen_options') or [])} "
                               f"in Airflow for model package {arn}",
                    {"via": "airflow", "model_package_arn": arn, "hitl_response": dict(answer)})
    step = model_package_step(response, state)
    if step.terminal and step.payload.get("model_package_arn"):
        return Step(step.outcome, step.reason, {**step.payload, "via": "sagemaker"}, step.action, step.memory)
    return step
