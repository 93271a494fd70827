"""pipeline_execution_step: DescribePipelineExecution responses (Amazon SageMaker API Reference) -> Step."""

from __future__ import annotations

import pytest

from sim2real.orchestration.waits.core import WaitState
from sim2real.orchestration.waits.sagemaker import STEPS_KEY, pipeline_execution_step

ARN = "arn:aws:sagemaker:us-east-1:123456789012:pipeline/p/execution/e1"
STATE = WaitState(params={"pipeline_execution_arn": ARN})


@pytest.mark.parametrize("status, outcome", [
    ("Succeeded", "success"), ("Failed", "failure"), ("Stopped", "failure"), ("CompletedWithFailures", "failure"),
    ("Executing", "retry"), ("Stopping", "retry"), ("Paused", "retry"),
])
def test_statuses(status, outcome):
    step = pipeline_execution_step({"PipelineExecutionArn": ARN, "PipelineExecutionStatus": status}, STATE)
    assert step.outcome == outcome
    assert step.payload == {"pipeline_execution_arn": ARN, "execution_status": status}


def test_failure_names_the_failing_step_when_listed():
    response = {"PipelineExecutionStatus": "Failed", "FailureReason": "step failed",
                STEPS_KEY: [{"StepName": "Train", "StepStatus": "Failed", "FailureReason": "OOM"},
                            {"StepName": "Prep", "StepStatus": "Succeeded"}]}
    step = pipeline_execution_step(response, STATE)
    assert "Train (Failed): OOM" in step.reason and "Prep" not in step.reason
    # a delivered event has no steps: the message is still whole
    assert "ended Failed" in pipeline_execution_step({"PipelineExecutionStatus": "Failed"}, STATE).reason


def test_api_errors():
    assert pipeline_execution_step({"Error": {"Code": "ThrottlingException"}}, STATE).outcome == "retry"
    step = pipeline_execution_step({"Error": {"Code": "ResourceNotFound", "Message": "gone"}}, STATE)
    assert step.outcome == "failure" and step.payload["error_code"] == "ResourceNotFound"
