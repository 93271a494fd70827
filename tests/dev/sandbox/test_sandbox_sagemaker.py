"""SageMaker responder: played pipeline registers the run's package; stop; UpdateCluster; metadata kept."""

from __future__ import annotations

import pytest
from sandbox_helpers import wait_until

from sim2real.dev.sandbox import Sandbox

# integration (not in make test-unit): one sandbox per module (tests/dev/sandbox/conftest.py)
pytestmark = pytest.mark.integration

PIPELINE, GROUP = "sim2real-groot-finetune", "sim2real-groot-models"


def _run(sb: Sandbox, run_key: str) -> str:
    return sb.client("sagemaker").start_pipeline_execution(
        PipelineName=PIPELINE, PipelineExecutionDisplayName=run_key,
        PipelineParameters=[{"Name": "RunKey", "Value": run_key}])["PipelineExecutionArn"]


def _final(sb: Sandbox, arn: str) -> dict:
    sm = sb.client("sagemaker")
    return wait_until(lambda: (d := sm.describe_pipeline_execution(PipelineExecutionArn=arn))[
        "PipelineExecutionStatus"] not in ("Executing", "Stopping") and d)


def _package_for(sb: Sandbox, run_key: str) -> dict | None:
    sm = sb.client("sagemaker")
    for s in sm.list_model_packages(ModelPackageGroupName=GROUP)["ModelPackageSummaryList"]:
        d = sm.describe_model_package(ModelPackageName=s["ModelPackageArn"])
        if (d.get("CustomerMetadataProperties") or {}).get("sim2real:run-key") == run_key:
            return d
    return None


def test_execution_registers_pending_package(sb: Sandbox) -> None:
    arn = _run(sb, "run-sm-1")
    sm = sb.client("sagemaker")
    assert sm.describe_pipeline_execution(PipelineExecutionArn=arn)["PipelineExecutionStatus"] == "Executing"
    assert _final(sb, arn)["PipelineExecutionStatus"] == "Succeeded"
    steps = sm.list_pipeline_execution_steps(PipelineExecutionArn=arn)["PipelineExecutionSteps"]
    assert [s["StepName"] for s in steps] == ["RegisterModel", "SmokeGate", "SmokeEval", "GR00TFinetune", "TransformDataset"]
    assert {s["StepStatus"] for s in steps} == {"Succeeded"}
    package = _package_for(sb, "run-sm-1")
    assert package is not None
    assert steps[0]["Metadata"]["RegisterModel"]["Arn"] == package["ModelPackageArn"]
    assert package["ModelApprovalStatus"] == "PendingManualApproval"
    assert package["CustomerMetadataProperties"]["sim2real:pipeline-execution-arn"] == arn
    url = package["InferenceSpecification"]["Containers"][0]["ModelDataUrl"]
    assert url == "s3://sim2real-artifacts-123456789012/runs/run-sm-1/vla/model.tar.gz"
    head = sb.client("s3").head_object(Bucket="sim2real-artifacts-123456789012", Key="runs/run-sm-1/vla/model.tar.gz")
    assert head["ContentLength"] > 0
    # UpdateModelPackage without metadata keeps it (moto alone wipes it)
    sm.update_model_package(ModelPackageArn=package["ModelPackageArn"], ModelApprovalStatus="Approved",
                            ApprovalDescription="ok")
    after = sm.describe_model_package(ModelPackageName=package["ModelPackageArn"])
    assert after["ModelApprovalStatus"] == "Approved"
    assert after["CustomerMetadataProperties"]["sim2real:run-key"] == "run-sm-1"


@pytest.mark.parametrize("status", ["Failed", "CompletedWithFailures"])
def test_pipeline_status_fault(sb: Sandbox, status: str) -> None:
    sb.faults["pipeline_status"] = status
    arn = _run(sb, f"run-fault-{status.lower()}")
    final = _final(sb, arn)
    assert final["PipelineExecutionStatus"] == status
    steps = sb.client("sagemaker").list_pipeline_execution_steps(PipelineExecutionArn=arn)["PipelineExecutionSteps"]
    failed = [s for s in steps if s["StepStatus"] == "Failed"]
    assert [s["StepName"] for s in failed] == ["GR00TFinetune"] and failed[0]["FailureReason"]
    assert _package_for(sb, f"run-fault-{status.lower()}") is None


def test_stop_pipeline_execution(sb: Sandbox) -> None:
    sb.sagemaker.step_seconds = 1.0
    try:
        arn = _run(sb, "run-stop")
        sb.client("sagemaker").stop_pipeline_execution(PipelineExecutionArn=arn, ClientRequestToken="stop-" + "0" * 32)
        assert sb.client("sagemaker").describe_pipeline_execution(
            PipelineExecutionArn=arn)["PipelineExecutionStatus"] in ("Stopping", "Stopped")
        assert _final(sb, arn)["PipelineExecutionStatus"] == "Stopped"
    finally:
        sb.sagemaker.step_seconds = sb.step_seconds


def test_update_cluster_replaces_instance_groups(sb: Sandbox) -> None:
    sm = sb.client("sagemaker")
    before = sm.describe_cluster(ClusterName="sim2real-hyperpod")
    groups = {g["InstanceGroupName"]: g for g in before["InstanceGroups"]}
    assert (groups["head"]["CurrentCount"], groups["gpu"]["CurrentCount"]) == (1, 0)

    def spec(name: str, count: int) -> dict:
        g = groups[name]
        return {"InstanceGroupName": name, "InstanceType": g["InstanceType"], "InstanceCount": count,
                "LifeCycleConfig": g["LifeCycleConfig"], "ExecutionRole": g["ExecutionRole"], "ThreadsPerCore": 1}

    sm.update_cluster(ClusterName="sim2real-hyperpod", InstanceGroups=[spec("head", 1), spec("gpu", 2)])
    wait_until(lambda: sm.describe_cluster(ClusterName="sim2real-hyperpod")["ClusterStatus"] == "InService")
    nodes = sm.list_cluster_nodes(ClusterName="sim2real-hyperpod")["ClusterNodeSummaries"]
    assert sorted((n["InstanceGroupName"], n["InstanceStatus"]["Status"]) for n in nodes) == [
        ("gpu", "Running"), ("gpu", "Running"), ("head", "Running")]
    # leaving a group out deletes it, like AWS
    sm.update_cluster(ClusterName="sim2real-hyperpod", InstanceGroups=[spec("gpu", 0)])
    wait_until(lambda: sm.describe_cluster(ClusterName="sim2real-hyperpod")["ClusterStatus"] == "InService")
    after = sm.describe_cluster(ClusterName="sim2real-hyperpod")
    assert [(g["InstanceGroupName"], g["CurrentCount"]) for g in after["InstanceGroups"]] == [("gpu", 0)]
    assert sm.list_cluster_nodes(ClusterName="sim2real-hyperpod")["ClusterNodeSummaries"] == []
    # restore for other tests
    sm.update_cluster(ClusterName="sim2real-hyperpod", InstanceGroups=[spec("head", 1), spec("gpu", 0)])
    wait_until(lambda: sm.describe_cluster(ClusterName="sim2real-hyperpod")["ClusterStatus"] == "InService")


def test_register_step_nested_in_the_condition_is_played(sb: Sandbox) -> None:
    """The project's real definition nests RegisterModel in SmokeGate's IfSteps (as SageMaker does);
    the played execution must still register the run's package."""
    import json

    from sim2real.orchestration.pipelines.groot import pipeline_definition

    sm = sb.client("sagemaker")
    definition = pipeline_definition(role_arn="arn:aws:iam::123456789012:role/sim2real-pipeline",
                                     model_package_group=GROUP, bucket="sim2real-artifacts-123456789012",
                                     images={"processing": "i", "training": "i", "smoke_eval": "i"})
    sm.create_pipeline(PipelineName="nested-def", PipelineDefinition=json.dumps(definition),
                       RoleArn="arn:aws:iam::123456789012:role/sim2real-pipeline")
    arn = sm.start_pipeline_execution(PipelineName="nested-def", PipelineExecutionDisplayName="run-nested",
                                      PipelineParameters=[{"Name": "RunKey", "Value": "run-nested"}])[
        "PipelineExecutionArn"]
    assert _final(sb, arn)["PipelineExecutionStatus"] == "Succeeded"
    steps = [s["StepName"] for s in sm.list_pipeline_execution_steps(PipelineExecutionArn=arn)["PipelineExecutionSteps"]]
    assert steps[0] == "RegisterModel" and "SmokeFailed" not in steps
    assert _package_for(sb, "run-nested") is not None


def test_played_smoke_eval_uploads_smoke_json_where_the_review_reads_it(sb: Sandbox) -> None:
    """The played SmokeEval step writes ``smoke.json`` under its definition's ``smoke`` output (the
    ``Std:Join`` of OutputS3Uri and "smoke"), which is where the approval review looks for it."""
    import json

    from sim2real.orchestration.pipelines.groot import pipeline_definition
    from sim2real.orchestration.review import read_smoke_report

    sm, s3 = sb.client("sagemaker"), sb.client("s3")
    bucket = "sim2real-artifacts-123456789012"
    definition = pipeline_definition(role_arn="arn:aws:iam::123456789012:role/sim2real-pipeline",
                                     model_package_group=GROUP, bucket=bucket,
                                     images={"processing": "i", "training": "i", "smoke_eval": "i"})
    sm.create_pipeline(PipelineName="smoke-def", PipelineDefinition=json.dumps(definition),
                       RoleArn="arn:aws:iam::123456789012:role/sim2real-pipeline")
    output = f"s3://{bucket}/runs/run-smoke/vla/"
    arn = sm.start_pipeline_execution(PipelineName="smoke-def", PipelineExecutionDisplayName="run-smoke",
                                      PipelineParameters=[{"Name": "RunKey", "Value": "run-smoke"},
                                                          {"Name": "OutputS3Uri", "Value": output}])[
        "PipelineExecutionArn"]
    assert _final(sb, arn)["PipelineExecutionStatus"] == "Succeeded"

    class _Hook:  # the one S3Hook method read_smoke_report uses
        def read_key(self, key: str, bucket_name: str) -> str:
            return s3.get_object(Bucket=bucket_name, Key=key)["Body"].read().decode()

    report, uri, error = read_smoke_report({"vla": {"parameters": {"OutputS3Uri": output}}}, _Hook())
    assert error is None and uri == f"{output}smoke/smoke.json", error
    assert report["passed"] is True and report["emulated"] is True and "sandbox" in report["reason"]


def _queued_about(sb: Sandbox, queue_url: str, arn: str) -> list[dict]:
    """The model package events about ``arn`` still in ``queue_url`` (received with visibility 0: left there)."""
    import json

    sqs, found = sb.client("sqs"), {}
    for _ in range(3):
        for m in sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0,
                                     WaitTimeSeconds=0).get("Messages", []):
            body = json.loads(m["Body"])
            if (body.get("detail") or {}).get("ModelPackageArn") == arn:
                found[m["MessageId"]] = body
    return list(found.values())


def test_model_package_events_reach_the_wait_queue_and_resume_the_approval_wait(sb: Sandbox, monkeypatch) -> None:
    """CreateModelPackage and UpdateModelPackage, whoever calls them, publish ``SageMaker Model Package State
    Change``; the provisioned rule (infra/'s pattern: ``detail.ModelPackageGroupName``) routes them to the
    wait-event queue, where the approval step's trigger takes the decision from the event (consumed: deleted,
    not left for the dead-letter queue)."""
    import asyncio
    import time
    from uuid import uuid4

    from sim2real.orchestration.events import consumer as consumer_mod
    from sim2real.orchestration.triggers.model_package import ModelPackageDecisionTrigger

    for name, value in sb.airflow_env().items():
        monkeypatch.setenv(name, value)
    sm = sb.client("sagemaker")
    arn = sm.create_model_package(
        ModelPackageGroupName=GROUP, ModelApprovalStatus="PendingManualApproval",
        CustomerMetadataProperties={"sim2real:run-key": "run-evented"},
        InferenceSpecification={"Containers": [{"Image": "i", "ModelDataUrl": "s3://b/run-evented/model.tar.gz"}],
                                "SupportedContentTypes": ["application/json"],
                                "SupportedResponseMIMETypes": ["application/json"]})["ModelPackageArn"]
    created = wait_until(lambda: [p for p in sb.aws_events.published if p[1] == arn])
    assert created[0][0] == "SageMaker Model Package State Change"

    trigger = ModelPackageDecisionTrigger(ti_id=str(uuid4()), model_package_group_name=GROUP, run_key="run-evented",
                                          model_package_arn=arn, waiter_delay=1, waiter_max_attempts=600,
                                          events={**sb.config["events"], "wait_time_seconds": 1})

    async def no_airflow_answer() -> None:
        return None

    async def close_request(payload: dict) -> None:
        pass

    trigger._airflow_answer = no_airflow_answer  # type: ignore[method-assign]
    trigger._close_request = close_request       # type: ignore[method-assign]

    async def run() -> dict:
        async def first() -> dict:
            async for event in trigger.run():
                return event.payload
            raise AssertionError("the trigger yielded nothing")

        task = asyncio.create_task(first())
        end = time.monotonic() + 30
        while trigger.package_describes < 1:   # the first DescribeModelPackage: the wait is subscribed
            assert time.monotonic() < end and not task.done(), "the trigger never read the package"
            await asyncio.sleep(0.02)
        await asyncio.to_thread(sm.update_model_package, ModelPackageArn=arn, ModelApprovalStatus="Approved",
                                ApprovalDescription="approved in Studio")
        payload = await asyncio.wait_for(task, 60)
        for consumer in consumer_mod.active_consumers():
            await asyncio.wait_for(consumer.drained(), 30)
        return payload

    event = asyncio.run(run())
    assert (event["status"], event["via"], event["approval_description"]) == ("success", "sagemaker",
                                                                            "approved in Studio")
    # decided by the event: the package was described once, at the start (the reconcile interval is 600 s)
    assert trigger.package_describes == 1 and trigger.responses_seen["event"] >= 1
    assert sb.config["events"]["reconcile_interval_seconds"] == 600
    left = _queued_about(sb, sb.config["events"]["queue_url"], arn) + \
        _queued_about(sb, sb.wait_events_dead_letter_queue_url, arn)
    assert [e["detail"]["ModelApprovalStatus"] for e in left if e["detail"]["ModelApprovalStatus"] == "Approved"] == []


def _publish_field_dataset(sb: Sandbox, body: bytes) -> tuple[str, str]:
    """A field dataset version (one episode whose data file is ``body``) in the artifacts bucket; (URI, data key)."""
    import hashlib
    import json

    from sim2real.contract import field

    bucket = "sim2real-artifacts-123456789012"
    data_key = field.data_key("", "robot-1", "ep-1")
    sb.client("s3").put_object(Bucket=bucket, Key=data_key, Body=body)
    entry = {"thing_name": "robot-1", "episode_id": "ep-1", "summary_key": field.episode_key("", "robot-1", "ep-1"),
             "data_key": data_key, "sha256": hashlib.sha256(body).hexdigest(), "size_bytes": len(body), "frames": 5,
             "fps": 10, "task": "pick", "success": True, "model_version": "1", "ended_at": "2026-12-04T06:00:00Z"}
    version = field.dataset_version([entry])
    manifest = {"schema_version": 1, "dataset_version": version, "created_at": "2026-12-04T07:00:00Z",
                "bucket": bucket, "prefix": "", "parent_version": None, "codebase_version": "v2.1",
                "episodes": [entry], "totals": {"episodes": 1, "frames": 5, "successes": 1, "things": ["robot-1"],
                                                "new_episodes": 1}, "refused": {}}
    sb.client("s3").put_object(Bucket=bucket, Key=field.manifest_key("", version), Body=json.dumps(manifest).encode())
    return f"s3://{bucket}/{field.manifest_key('', version)}", data_key


def _run_with_field(sb: Sandbox, run_key: str, manifest_uri: str) -> str:
    return sb.client("sagemaker").start_pipeline_execution(
        PipelineName=PIPELINE, PipelineExecutionDisplayName=run_key,
        PipelineParameters=[{"Name": "RunKey", "Value": run_key},
                            {"Name": "FieldDatasetManifestS3Uri", "Value": manifest_uri}])["PipelineExecutionArn"]


def test_transform_step_checks_the_field_datasets_sha256(sb: Sandbox) -> None:
    uri, data_key = _publish_field_dataset(sb, b"PAR1 field episode PAR1")
    good = _run_with_field(sb, "run-field-ok", uri)
    assert _final(sb, good)["PipelineExecutionStatus"] == "Succeeded"
    sb.client("s3").put_object(Bucket="sim2real-artifacts-123456789012", Key=data_key, Body=b"PAR1 changed PAR1")
    bad = _run_with_field(sb, "run-field-bad", uri)
    final = _final(sb, bad)
    assert final["PipelineExecutionStatus"] == "Failed"
    steps = sb.client("sagemaker").list_pipeline_execution_steps(PipelineExecutionArn=bad)["PipelineExecutionSteps"]
    assert [(s["StepName"], s["StepStatus"]) for s in steps] == [("TransformDataset", "Failed")]
    assert f"{data_key}: sha256 " in steps[0]["FailureReason"] and "is not the manifest's" in steps[0]["FailureReason"]
    assert final["FailureReason"] == steps[0]["FailureReason"]
    assert _package_for(sb, "run-field-bad") is None
