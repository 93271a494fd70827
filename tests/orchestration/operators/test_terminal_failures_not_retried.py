"""Regression: a terminal failure of a pipeline execution or a Greengrass deployment is a verdict, not an
infrastructure error — AirflowFailException (no retry: a retry would start another GPU fine-tune or push
the same release to the robots again). A pipeline timeout stays retryable; a deployment timeout is the
run's one deployment bound and is not retried either."""

from __future__ import annotations

import pytest
from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from sim2real.orchestration.operators.greengrass import GreengrassDeploymentOperator
from sim2real.orchestration.operators.sagemaker_pipeline import PipelineExecutionOperator


def test_pipeline_terminal_failure_is_not_retried(aws_env):
    op = PipelineExecutionOperator(task_id="finetune", pipeline_name="p", display_name="run-1")
    with pytest.raises(AirflowFailException, match="CompletedWithFailures"):
        op.execute_complete({}, {"status": "failure", "pipeline_execution_arn": "arn:x",
                                 "message": "execution arn:x ended CompletedWithFailures"})
    with pytest.raises(AirflowException) as err:
        op.execute_complete({}, {"status": "timeout", "pipeline_execution_arn": "arn:x", "message": "still Executing"})
    assert not isinstance(err.value, AirflowFailException)


def test_deployment_device_failure_and_timeout_are_not_retried(aws_env, monkeypatch):
    """A deployment timeout is the run's one bound (deployment_timeout_minutes): a retry would create and cancel
    another deployment and multiply the bound, so it fails without retry like a device failure."""
    op = GreengrassDeploymentOperator(task_id="deploy", thing_group_name="g", deployment_name="d",
                                      components={"c": {"componentVersion": "1.0.0"}})
    monkeypatch.setattr(type(op.hook), "conn", property(lambda self: type("C", (), {
        "cancel_deployment": staticmethod(lambda **kw: {})})()))
    base = {"deployment_id": "dep-1", "iot_job_id": None, "target_arn": "arn:aws:iot:us-east-1:1:thinggroup/g"}
    reports = {"robot-1": {"status": "FAILED", "reason": "component BROKEN"}}
    with pytest.raises(AirflowFailException, match="failed"):
        op._finish({}, base, "failure", reports, "robot-1 FAILED")
    stuck = {"robot-1": {"status": "SUCCEEDED", "outcome": "success", "reason": None},
             "robot-2": {"status": "IN_PROGRESS", "outcome": "retry", "reason": None}}
    with pytest.raises(AirflowFailException) as err:
        op._finish({}, base, "timeout", stuck, "not finished after 120 polls 30 s apart")
    assert "thing group 'g'" in str(err.value) and "unfinished devices: robot-2: IN_PROGRESS" in str(err.value)


def test_evaluation_command_timeout_is_not_retried(aws_env, monkeypatch):
    from sim2real.orchestration.operators.ssm import WorkstationCommandOperator

    op = WorkstationCommandOperator(task_id="run_evaluation", workstation_tag_key="k", workstation_tag_value="v",
                                    commands=["true"], execution_timeout_seconds=60, output_s3_bucket="b",
                                    output_s3_key_prefix="p")
    monkeypatch.setattr(type(op.hook), "read_output", lambda self, *a, **k: "")
    with pytest.raises(AirflowFailException, match="TimedOut"):
        op.execute_complete({}, {"status": "failure", "command_id": "c-1", "instance_id": "i-1",
                                 "command_status": "TimedOut", "exit_code": -1})
