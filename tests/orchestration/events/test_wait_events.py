"""Wait events: envelope parsing of documented sample events, resource keys, describe-like responses (checked
against botocore's output shapes), settings, and the consumer's fan-out over a real moto SQS queue."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path

import pytest
from botocore.session import get_session

from sim2real.orchestration.events import consumer as consumer_mod
from sim2real.orchestration.events import envelope as ev
from sim2real.orchestration.events.consumer import EventDrivenResponses, subscribe
from sim2real.orchestration.events.envelope import EventEnvelope, EventParseError
from sim2real.orchestration.events.settings import EventSettings, settings_problems

sys.path.insert(0, str(Path(__file__).parent))
import wait_event_samples as samples  # noqa: E402
from tests.moto_server import moto_aws_default  # noqa: E402


def _output_members(service: str, operation: str, *path: str) -> set[str]:
    """Member names of an operation's output shape (following list/structure members along ``path``)."""
    shape = get_session().get_service_model(service).operation_model(operation).output_shape
    for name in path:
        shape = shape.members[name]
        if shape.type_name == "list":
            shape = shape.member
    return set(shape.members)


# -- envelope ---------------------------------------------------------------------------------------------------
def test_batch_event_is_a_describe_jobs_response() -> None:
    e = EventEnvelope.parse(json.dumps(samples.BATCH))
    assert e.resource_key() == ev.batch_job("4c7599ae-0a82-49aa-ba5a-4727fcce14a8")
    (job,) = e.describe_response()["jobs"]
    assert job["status"] == "RUNNABLE"
    assert set(job) <= _output_members("batch", "DescribeJobs", "jobs")


def test_codebuild_event_is_a_batch_get_builds_build() -> None:
    e = EventEnvelope.parse(samples.CODEBUILD)
    assert e.resource_key() == ev.codebuild_build("my-sample-project:8745a7a9-c340-456a-9166-edf953571bEX")
    assert ev.codebuild_build(samples.CODEBUILD["detail"]["build-id"]) == e.resource_key()
    (build,) = e.describe_response()["builds"]
    assert (build["id"], build["buildStatus"], build["currentPhase"], build["buildComplete"]) == (
        "my-sample-project:8745a7a9-c340-456a-9166-edf953571bEX", "FAILED", "COMPLETED", True)
    failed = [p for p in build["phases"] if p["phaseStatus"] == "FAILED"]
    assert failed[0]["phaseType"] == "BUILD"
    assert failed[0]["contexts"] == [{"statusCode": "COMMAND_EXECUTION_ERROR",
                                      "message": "Error while executing command: make. Reason: exit status 2"}]
    members = _output_members("codebuild", "BatchGetBuilds", "builds")
    assert set(build) <= members, set(build) - members
    assert set(build["phases"][0]) <= _output_members("codebuild", "BatchGetBuilds", "builds", "phases")
    assert build["logs"]["groupName"] == "/aws/codebuild/my-sample-project"


def test_ssm_event_is_a_get_command_invocation_subset() -> None:
    e = EventEnvelope.parse(samples.SSM)
    assert e.resource_key() == ev.ssm_invocation("e8d3c0e4-71f7-4491-898f-c9b35bee5f3b", "i-abcd1111")
    response = e.describe_response()
    assert response["Status"] == "Success" and response["DocumentName"] == "AWS-RunShellScript"
    assert set(response) <= _output_members("ssm", "GetCommandInvocation")


def test_pipeline_event_is_a_describe_pipeline_execution_subset() -> None:
    e = EventEnvelope.parse(samples.PIPELINE)
    arn = samples.PIPELINE["detail"]["pipelineExecutionArn"]
    assert e.resource_key() == ev.pipeline_execution(arn)
    response = e.describe_response()
    assert response["PipelineExecutionStatus"] == "Succeeded"
    assert response["PipelineArn"] == "arn:aws:sagemaker:us-east-1:123456789012:pipeline/mypipeline"
    assert set(response) <= _output_members("sagemaker", "DescribePipelineExecution")


def test_model_package_event_is_a_describe_model_package_response() -> None:
    e = EventEnvelope.parse(samples.MODEL_PACKAGE)
    assert e.resource_key() == ev.model_package(samples.MODEL_PACKAGE["detail"]["ModelPackageArn"])
    response = e.describe_response()
    assert response["ModelApprovalStatus"] == "Approved"
    assert set(response) <= _output_members("sagemaker", "DescribeModelPackage")


def test_greengrass_event_is_a_list_effective_deployments_item() -> None:
    e = EventEnvelope.parse(samples.GREENGRASS)
    assert e.resource_key() == ev.greengrass_deployment("4f38f1a7-3dd0-42a1-af48-EXAMPLE09681")
    response = e.describe_response()
    (item,) = response["effectiveDeployments"]
    assert item["coreDeviceExecutionStatus"] == "FAILED" and response["coreDeviceThingName"] == "MyGreengrassCore"
    assert set(item) <= _output_members("greengrassv2", "ListEffectiveDeployments", "effectiveDeployments")


def test_hyperpod_event_is_a_describe_cluster_response() -> None:
    e = EventEnvelope.parse(samples.HYPERPOD)
    assert e.resource_key() == ev.hyperpod_cluster("sample-cluster")
    response = e.describe_response()
    assert response["ClusterStatus"] == "InService"
    assert set(response) <= _output_members("sagemaker", "DescribeCluster")


@pytest.mark.parametrize("body, message", [
    ("not json", "not JSON"),
    ("[1]", "JSON list"),
    (json.dumps({"id": "1", "source": "aws.batch", "detail-type": "Batch Job State Change"}), "missing detail"),
    (json.dumps({**samples.BATCH, "detail-type": "EC2 Instance State-change Notification", "source": "aws.ec2"}),
     "unsupported detail-type"),
    (json.dumps({**samples.BATCH, "source": "custom.app"}), "comes from 'aws.batch'"),
])
def test_bad_messages_are_refused_with_the_reason(body: str, message: str) -> None:
    with pytest.raises(EventParseError, match=message):
        EventEnvelope.parse(body)


def test_an_event_without_its_identifying_field_is_refused() -> None:
    e = EventEnvelope.parse({**samples.BATCH, "detail": {"status": "RUNNING"}})
    with pytest.raises(EventParseError, match="jobId"):
        e.resource_key()


def test_settings_from_the_environment_config() -> None:
    assert not EventSettings.from_environment({}).enabled
    assert EventSettings.from_dict({"queue_url": "https://sqs.us-east-1.amazonaws.com/1/q"}).enabled
    assert not EventSettings.from_dict({"queue_url": "https://sqs.us-east-1.amazonaws.com/1/q",
                                        "mode": "polling"}).enabled
    problems = settings_problems({"mode": "push", "wait_time_seconds": 30, "queue_url": "sqs://x"})
    assert len(problems) == 3 and any("events.mode" in p for p in problems)
    with pytest.raises(ValueError, match="needs events.queue_url"):
        EventSettings.from_dict({"mode": "events"})
    round_trip = EventSettings(mode="events", queue_url="https://q", reconcile_interval_seconds=60)
    assert EventSettings.from_dict(round_trip.to_dict()) == round_trip


def test_environment_config_refuses_a_bad_events_section() -> None:
    from sim2real.orchestration.config import EnvironmentConfigError, validate_environment

    env = {"region": "us-east-1", "artifacts_bucket": "b",
           "image_build": {"codebuild_project": "p", "ecr_repository": "r", "source_version": "main"},
           "batch": {"job_queue": "q", "job_definition": "d", "compute_environment": "c", "instance_type": "t"},
           "evaluation": {"workstation_tag_key": "k", "workstation_tag_value": "v"},
           "sagemaker": {"pipeline_name": "p", "pipeline_role_arn": "a", "model_package_group": "g"},
           "greengrass": {"thing_group_name": "t", "components": {}}}
    validate_environment({**env, "events": {"queue_url": "https://sqs.us-east-1.amazonaws.com/1/q"}})
    with pytest.raises(EnvironmentConfigError, match="events.reconcile_interval_seconds"):
        validate_environment({**env, "events": {"reconcile_interval_seconds": 0}})


# -- the consumer over moto SQS -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def moto_sqs():
    import boto3

    with moto_aws_default() as endpoint:
        yield endpoint, boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1")


def _queue(sqs, name: str) -> str:
    dlq = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return sqs.create_queue(QueueName=name, Attributes={
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 10})})["QueueUrl"]


def _batch_event(job_id: str, status: str, event_id: str) -> str:
    detail = {**samples.BATCH["detail"], "jobId": job_id, "status": status}
    return json.dumps({**samples.BATCH, "id": event_id, "detail": detail})


def test_fan_out_to_two_waits_leaves_foreign_messages_and_delivers_duplicates_once(moto_sqs) -> None:
    _, sqs = moto_sqs
    url = _queue(sqs, "fan-out")
    settings = EventSettings(mode="events", queue_url=url, wait_time_seconds=1, visibility_timeout_seconds=30,
                             release_visibility_seconds=1)

    async def scenario() -> dict:
        a = subscribe(ev.batch_job("job-a"), settings)
        a2 = subscribe(ev.batch_job("job-a"), settings)       # a second wait on the same job in this process
        b = subscribe(ev.batch_job("job-b"), settings)
        (consumer,) = consumer_mod.active_consumers()
        assert a.consumer is b.consumer is consumer and consumer.subscriptions == 3
        sqs.send_message(QueueUrl=url, MessageBody=_batch_event("job-a", "RUNNING", "event-1"))
        sqs.send_message(QueueUrl=url, MessageBody=_batch_event("job-a", "RUNNING", "event-1"))  # duplicate
        sqs.send_message(QueueUrl=url, MessageBody=_batch_event("job-b", "FAILED", "event-2"))
        sqs.send_message(QueueUrl=url, MessageBody=_batch_event("job-foreign", "RUNNING", "event-3"))
        got_a = await a.next_event(30)
        got_a2 = await a2.next_event(30)
        got_b = await b.next_event(30)
        again = await a.next_event(3)                           # the duplicate never arrives a second time
        stats = dict(consumer.stats)
        for sub in (a, a2, b):
            sub.close()
        await asyncio.wait_for(consumer.drained(), 5)    # ends after its receive in flight
        return {"a": got_a, "a2": got_a2, "b": got_b, "again": again, "stats": stats,
                "left": consumer_mod.active_consumers(), "running": consumer.running}

    result = asyncio.run(scenario())
    assert result["a"].response["jobs"][0]["status"] == "RUNNING" and result["a"].envelope.id == "event-1"
    assert result["a2"].envelope.id == "event-1"
    assert result["b"].response["jobs"][0]["status"] == "FAILED"
    assert result["again"] is None
    assert result["stats"]["delivered"] >= 2 and result["stats"]["released"] >= 1 and "DeleteMessageBatch" in result["stats"]
    assert result["left"] == [] and not result["running"]  # the last wait leaving stops the consumer
    # the foreign message was released, not deleted: it is still in the queue for its owner
    bodies = []
    for _ in range(80):
        for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                     VisibilityTimeout=0).get("Messages", []):
            bodies.append(json.loads(m["Body"])["detail"]["jobId"])
        if bodies:
            break
    assert set(bodies) == {"job-foreign"}


def test_no_queue_means_polling_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    calls = []

    async def describe() -> dict:
        calls.append(1)
        return {"jobs": [{"status": "RUNNING"}]}

    async def scenario() -> list:
        with caplog.at_level(logging.INFO, logger="sim2real.orchestration.events.consumer"):
            sub = subscribe(ev.batch_job("job-x"), EventSettings())
        assert sub is None
        source = EventDrivenResponses(sub, describe, poll_interval=0.01, settings=EventSettings())
        return [(await source()).origin for _ in range(3)]

    assert asyncio.run(scenario()) == ["describe"] * 3 and len(calls) == 3
    assert "no queue configured" in caplog.text


def test_unreachable_queue_falls_back_to_polling_and_logs(moto_sqs, monkeypatch, caplog) -> None:
    endpoint, _ = moto_sqs
    monkeypatch.setattr(consumer_mod, "RETRY_SECONDS", 0.2)
    settings = EventSettings(mode="events", queue_url=f"{endpoint}/123456789012/no-such-queue", wait_time_seconds=1,
                             reconcile_interval_seconds=60)
    describes = []

    async def describe() -> dict:
        describes.append(1)
        return {"jobs": [{"status": "RUNNING"}]}

    async def scenario() -> tuple:
        sub = subscribe(ev.batch_job("job-y"), settings)
        source = EventDrivenResponses(sub, describe, poll_interval=0.05, settings=settings)
        first = await source()
        second = await asyncio.wait_for(source(), 10)   # woken by the fallback, not after the 60 s reconcile
        available = sub.events_available
        source.close()
        return first.origin, second.origin, available

    with caplog.at_level(logging.WARNING, logger="sim2real.orchestration.events.consumer"):
        first, second, available = asyncio.run(scenario())
    assert (first, second, available) == ("describe", "describe", False)
    assert "unreachable" in caplog.text and "fall back to polling" in caplog.text


def test_events_then_reconcile_describe(moto_sqs) -> None:
    _, sqs = moto_sqs
    url = _queue(sqs, "reconcile")
    settings = EventSettings(mode="events", queue_url=url, wait_time_seconds=1, reconcile_interval_seconds=1.5)

    async def describe() -> dict:
        return {"jobs": [{"jobId": "job-r", "status": "RUNNING"}]}

    async def scenario() -> list:
        source = EventDrivenResponses(subscribe(ev.batch_job("job-r"), settings), describe, poll_interval=30,
                                      settings=settings)
        seen = [await source()]
        sqs.send_message(QueueUrl=url, MessageBody=_batch_event("job-r", "SUCCEEDED", "event-r"))
        seen.append(await source())
        seen.append(await source())       # no further event: the reconcile describe after 1.5 s
        source.close()
        return [(o.origin, o.response["jobs"][0]["status"]) for o in seen]

    assert asyncio.run(scenario()) == [("describe", "RUNNING"), ("event", "SUCCEEDED"), ("describe", "RUNNING")]


def test_long_poll_seconds_are_whole_seconds_in_what_sqs_allows() -> None:
    url = "https://sqs.us-east-1.amazonaws.com/1/q"
    for ok in (1, 20):
        assert settings_problems({"queue_url": url, "wait_time_seconds": ok}) == []
        assert EventSettings.from_dict({"queue_url": url, "wait_time_seconds": ok}).wait_time_seconds == ok
    for bad in (0, 21, 1.5, 20.0, True, "20"):
        (problem,) = settings_problems({"queue_url": url, "wait_time_seconds": bad})
        assert problem.startswith("events.wait_time_seconds must be a whole number in 1..20"), problem
    (problem,) = settings_problems({"queue_url": url, "visibility_timeout_seconds": 30.5})
    assert "events.visibility_timeout_seconds must be a whole number" in problem
    assert settings_problems({"queue_url": url, "reconcile_interval_seconds": 1.5}) == []   # not an SQS field


def test_reconcile_ticks_are_shared_multiples_of_the_interval() -> None:
    tick = consumer_mod.next_reconcile_at
    assert tick(1000.2, 600) == 1200
    assert tick(1199.4, 600) == 1200                  # 0.6 s away: still this tick
    assert tick(1199.6, 600) == 1800                  # within the margin: the next one
    assert tick(1200.0, 600) == 1800
    assert tick(10.0, 1.5, margin=0) == 10.5
    # every wait of a process, whenever it last heard of its resource, describes at the same instants
    assert {tick(t, 30) for t in (1201.0, 1207.3, 1228.9)} == {1230}
    for now in (0.0, 17.3, 1199.9, 5e9):
        assert 0.5 < tick(now, 600) - now <= 600.5
    with pytest.raises(ValueError, match="positive"):
        tick(1.0, 0)


def test_the_events_wait_describes_at_the_next_reconcile_tick(monkeypatch) -> None:
    """EventDrivenResponses waits for an event until the shared tick, not a full interval from now."""
    asked: list[float | None] = []

    class Subscription:
        events_available = True
        key = ev.batch_job("job-t")

        async def next_event(self, wait_s):
            asked.append(wait_s)
            return None

        def close(self) -> None:
            pass

    class Clock:
        now = 1000.25

        def time(self) -> float:
            return self.now

    monkeypatch.setattr(consumer_mod, "time", Clock())
    settings = EventSettings(mode="events", queue_url="https://q", reconcile_interval_seconds=600)

    async def describe() -> dict:
        return {"jobs": [{"jobId": "job-t", "status": "RUNNING"}]}

    async def scenario() -> list[str]:
        source = EventDrivenResponses(Subscription(), describe, poll_interval=30, settings=settings)
        origins = [(await source()).origin, (await source()).origin, (await source(max_wait=50)).origin]
        return origins

    assert asyncio.run(scenario()) == ["describe", "describe", "describe"]
    assert asked == [199.75, 50]                      # 1200 - 1000.25; then capped by max_wait
