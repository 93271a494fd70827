"""Write down what a sandbox holds after its runs, as files a test can search (e.g. for a secret that must not leak).

:func:`write_records` dumps the requests that reached the emulator from outside (Airflow's hooks, triggers, jobs),
the emulation's event log, every SageMaker pipeline's definition and each execution's parameters and steps, the
model packages of the registry group, and every S3 object under ``runs/`` in the artifacts bucket.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim2real.dev.sandbox.server import Sandbox


def write_records(sandbox: Sandbox, env_config: dict[str, Any], folder: Path) -> list[Path]:
    """Write the sandbox's records under ``folder`` (created):

    - ``requests.jsonl``: one ``{"service", "action", "body"}`` per request from outside the sandbox (its
      :class:`~sim2real.dev.sandbox._core.RequestLog`; bodies as recorded, up to 4096 characters);
    - ``events.txt``: the event log's lines;
    - ``sagemaker.json``: per pipeline, ``PipelineDefinition`` (DescribePipeline) and per execution its
      parameters (ListPipelineParametersForExecution) and steps (ListPipelineExecutionSteps); the model packages of
      ``sagemaker.model_package_group`` (DescribeModelPackage);
    - ``s3/<key>``: every object under ``runs/`` in ``artifacts_bucket`` (GetObject; latest versions).

    :param sandbox: the running sandbox (after the runs, before it stops).
    :param env_config: its environment config (:func:`sim2real.dev.sandbox.provision.provision`).
    :param folder: where the files go.
    :return: the paths written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    requests = folder / "requests.jsonl"
    requests.write_text("".join(json.dumps({"service": r.service, "action": r.action, "body": r.body}) + "\n"
                                for r in sandbox.requests.since(0.0)))
    events = folder / "events.txt"
    events.write_text("".join(event.line() + "\n" for event in sandbox.events))
    sm = sandbox.client("sagemaker", internal=True)
    pipelines = {}
    for summary in sm.list_pipelines()["PipelineSummaries"]:
        name = summary["PipelineName"]
        executions = []
        for execution in sm.list_pipeline_executions(PipelineName=name)["PipelineExecutionSummaries"]:
            arn = execution["PipelineExecutionArn"]
            executions.append({
                "arn": arn,
                "parameters": sm.list_pipeline_parameters_for_execution(PipelineExecutionArn=arn)["PipelineParameters"],
                "steps": sm.list_pipeline_execution_steps(PipelineExecutionArn=arn)["PipelineExecutionSteps"]})
        pipelines[name] = {"definition": sm.describe_pipeline(PipelineName=name)["PipelineDefinition"],
                           "executions": executions}
    group = env_config["sagemaker"]["model_package_group"]
    packages = [sm.describe_model_package(ModelPackageName=p["ModelPackageArn"])
                for p in sm.list_model_packages(ModelPackageGroupName=group)["ModelPackageSummaryList"]]
    registry = folder / "sagemaker.json"
    registry.write_text(json.dumps({"pipelines": pipelines, "model_packages": packages}, default=str, indent=1))
    written = [requests, events, registry]
    s3, bucket = sandbox.client("s3", internal=True), env_config["artifacts_bucket"]
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="runs/"):
        for obj in page.get("Contents", []):
            path = folder / "s3" / obj["Key"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())
            written.append(path)
    return written
