"""The triggers resolve their waits from AWS state-change events: moto's EventBridge delivers each event through a
rule to moto's SQS queue, the real consumer reads it, and the trigger's step function decides it.

The services' describe calls are replaced per trigger by a scripted coroutine (their request shapes are tested
with moto and Stubber in tests/orchestration/operators); everything between the queue and the trigger event is
the production path.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sim2real.orchestration.events import consumer as consumer_mod
from sim2real.orchestration.triggers.base import StepWaitTrigger
from sim2real.orchestration.triggers.batch import BatchTrainingJobTrigger
from sim2real.orchestration.triggers.codebuild import CodeBuildBuildCompleteTrigger
from sim2real.orchestration.triggers.greengrass import GreengrassDeploymentTrigger
from sim2real.orchestration.triggers.hyperpod import HyperPodScaleTrigger
from sim2real.orchestration.triggers.sagemaker import PipelineExecutionTrigger
from sim2real.orchestration.triggers.ssm import WorkstationCommandTrigger

sys.path.insert(0, str(Path(__file__).parent))
import wait_event_samples as samples  # noqa: E402
from tests.moto_server import moto_aws_default  # noqa: E402
from tests.orchestration.environments import MINIMAL_ENVIRONMENT  # noqa: E402
from tests.orchestration.model_registry import register_model_package  # noqa: E402

REGION = "us-east-1"
ACCOUNT = "123456789012"


@pytest.fixture(scope="module")
def bus():
    """A moto server with one EventBridge rule (every source the waits read) delivering to an SQS queue."""
    import boto3

    with moto_aws_default() as endpoint:
        sqs = boto3.client("sqs", endpoint_url=endpoint, region_name=REGION)
        events = boto3.client("events", endpoint_url=endpoint, region_name=REGION)
        queue_url = sqs.create_queue(QueueName="trigger-wait-events")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name="waits", State="ENABLED", EventPattern=json.dumps(
            {"source": ["aws.batch", "aws.codebuild", "aws.ssm", "aws.sagemaker", "aws.greengrass"]}))
        events.put_targets(Rule="waits", Targets=[{"Id": "queue", "Arn": queue_arn}])
        yield {"endpoint": endpoint, "queue_url": queue_url, "events": events, "sqs": sqs}


def events_section(bus: dict, **overrides: Any) -> dict[str, Any]:
    return {"mode": "events", "queue_url": bus["queue_url"], "wait_time_seconds": 1,
            "reconcile_interval_seconds": 600, **overrides}


def put_event(bus: dict, sample: dict[str, Any], **detail: Any) -> None:
    """PutEvents of ``sample`` with ``detail`` changes (moto's rule delivers it to the queue)."""
    reply = bus["events"].put_events(Entries=[{
        "Source": sample["source"], "DetailType": sample["detail-type"], "Resources": sample["resources"],
        "Detail": json.dumps({**sample["detail"], **detail})}])
    assert reply["FailedEntryCount"] == 0


class Scripted:
    """A trigger's describe: the scripted responses in turn (the last one repeats); counts calls."""

    def __init__(self, *responses: dict[str, Any]) -> None:
        self.responses = list(responses)
        self.calls = 0
        self.first = asyncio.Event()

    async def __call__(self, client: Any, state: Any) -> dict[str, Any]:
        self.calls += 1
        self.first.set()
        return self.responses[min(self.calls, len(self.responses)) - 1]


async def run_wait(trigger: StepWaitTrigger, describe: Scripted, send=None, limit: float = 30) -> dict[str, Any]:
    """Run ``trigger`` with ``describe``; once it made its first describe (so it is subscribed), ``send()`` in a
    thread; the trigger's one event payload."""
    trigger.describe = describe  # type: ignore[method-assign]

    async def first_event() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger yielded nothing")

    task = asyncio.create_task(first_event())
    await asyncio.wait_for(describe.first.wait(), limit)
    if send is not None:
        await asyncio.to_thread(send)
    payload = await asyncio.wait_for(task, limit)
    for consumer in consumer_mod.active_consumers():
        await asyncio.wait_for(consumer.drained(), 10)
    return payload


def job(job_id: str, status: str) -> dict[str, Any]:
    return {"jobs": [{**samples.BATCH["detail"], "jobId": job_id, "status": status, "attempts": [],
                      "createdAt": int(time.time() * 1000)}]}


# -- one event-resolved wait per trigger type --------------------------------------------------------------------
def test_batch_wait_ends_on_its_state_change_event(bus) -> None:
    trigger = BatchTrainingJobTrigger(job_id="job-1", progress=False, waiter_delay=300, waiter_max_attempts=10,
                                      events=events_section(bus))
    describe = Scripted(job("job-1", "RUNNING"))
    started = time.monotonic()
    event = asyncio.run(run_wait(trigger, describe, lambda: (
        put_event(bus, samples.BATCH, jobId="job-other", status="SUCCEEDED"),   # another run's job: ignored
        put_event(bus, samples.BATCH, jobId="job-1", status="SUCCEEDED"))))
    assert event["status"] == "success" and event["job_id"] == "job-1" and event["job_status"] == "SUCCEEDED"
    assert describe.calls == 1 and time.monotonic() - started < 30   # one describe, not a 300 s poll


def test_codebuild_wait_ends_on_a_failed_build_event(bus) -> None:
    build_id = "sim2real-image:8745a7a9"
    arn = f"arn:aws:codebuild:{REGION}:{ACCOUNT}:build/{build_id}"
    trigger = CodeBuildBuildCompleteTrigger(build_id=build_id, waiter_delay=300, events=events_section(bus))
    describe = Scripted({"builds": [{"id": build_id, "buildStatus": "IN_PROGRESS", "currentPhase": "BUILD"}]})
    event = asyncio.run(run_wait(trigger, describe, lambda: put_event(
        bus, samples.CODEBUILD, **{"build-id": arn, "project-name": "sim2real-image"})))
    assert event["status"] == "failure" and event["build_status"] == "FAILED" and describe.calls == 1


def test_ssm_wait_needs_every_instance_event(bus) -> None:
    command_id = "e8d3c0e4-71f7-4491-898f-c9b35bee5f3b"
    trigger = WorkstationCommandTrigger(command_id=command_id, instance_ids=["i-1", "i-2"], waiter_delay=300,
                                        events=events_section(bus))
    describe = Scripted({"Invocations": [{"CommandId": command_id, "InstanceId": i, "Status": "InProgress"}
                                         for i in ("i-1", "i-2")]})

    def send() -> None:
        for instance in ("i-1", "i-2"):
            put_event(bus, samples.SSM, **{"command-id": command_id, "instance-id": instance, "status": "Success"})

    event = asyncio.run(run_wait(trigger, describe, send))
    # moto has no such command: GetCommandInvocation fails, so the exit code stays unknown (the event has none)
    assert event["status"] == "success" and set(event["invocations"]) == {"i-1", "i-2"}
    assert describe.calls == 1


def test_pipeline_wait_ends_on_its_execution_event(bus) -> None:
    arn = samples.PIPELINE["detail"]["pipelineExecutionArn"]
    trigger = PipelineExecutionTrigger(pipeline_execution_arn=arn, waiter_delay=300, events=events_section(bus))
    describe = Scripted({"PipelineExecutionArn": arn, "PipelineExecutionStatus": "Executing"})
    event = asyncio.run(run_wait(trigger, describe, lambda: put_event(bus, samples.PIPELINE)))
    assert event["status"] == "success" and event["execution_status"] == "Succeeded" and describe.calls == 1


def test_greengrass_wait_combines_device_events_with_the_first_describe(bus) -> None:
    deployment = "dep-1"
    trigger = GreengrassDeploymentTrigger(deployment_id=deployment, thing_group_arn="arn:aws:iot:us-east-1:1:thinggroup/r",
                                          waiter_delay=300, events=events_section(bus))
    running = {"effectiveDeployments": [{"deploymentId": deployment, "coreDeviceExecutionStatus": "IN_PROGRESS"}]}
    describe = Scripted({"devices": {"robot-1": running, "robot-2": running}})

    def send() -> None:
        put_event(bus, samples.GREENGRASS, deploymentId=deployment, coreDeviceThingName="robot-1",
                  coreDeviceExecutionStatus="SUCCEEDED", reason="", statusDetails={})
        put_event(bus, samples.GREENGRASS, deploymentId=deployment, coreDeviceThingName="robot-2",
                  coreDeviceExecutionStatus="SUCCEEDED", reason="", statusDetails={})

    event = asyncio.run(run_wait(trigger, describe, send))
    assert event["status"] == "success" and set(event["devices"]) == {"robot-1", "robot-2"}
    assert describe.calls == 1


def test_hyperpod_scale_wait_describes_on_a_cluster_event(bus) -> None:
    cluster = samples.HYPERPOD["detail"]["ClusterName"]
    trigger = HyperPodScaleTrigger(cluster_name=cluster, instance_group_name="gpu", target_count=1, waiter_delay=300,
                                   events=events_section(bus))
    group = {"InstanceGroupName": "gpu", "CurrentCount": 1, "TargetCount": 1, "Status": "InService"}
    describe = Scripted({"ClusterName": cluster, "ClusterStatus": "Updating", "InstanceGroups": [group]},
                        {"ClusterName": cluster, "ClusterStatus": "InService", "InstanceGroups": [group],
                         "ClusterNodeSummaries": [{"InstanceGroupName": "gpu", "InstanceId": "i-n1",
                                                   "InstanceStatus": {"Status": "Running"}}]})
    event = asyncio.run(run_wait(trigger, describe, lambda: put_event(bus, samples.HYPERPOD)))
    # the event woke the wait; its step read DescribeCluster + the nodes (the event lists no nodes)
    assert event["status"] == "success" and describe.calls == 2


# -- timing and failure modes ------------------------------------------------------------------------------------
def test_with_events_the_wait_ends_at_its_deadline_not_after_an_attempt_count(bus, monkeypatch) -> None:
    # 3 attempts x 1 s: a deadline 3 s after the start; with no event there are only the first describe and the one
    # at the deadline, which an attempt count of 3 would never reach in time. The shared reconcile clock ticks on
    # multiples of the interval since the epoch: a tick inside these 3 s (one run in 200) adds a third describe, so
    # the next tick is put one interval ahead here (the clock itself has its own tests).
    monkeypatch.setattr(consumer_mod, "next_reconcile_at", lambda now, interval, margin=0.0: now + interval)
    trigger = BatchTrainingJobTrigger(job_id="job-late", progress=False, waiter_delay=1, waiter_max_attempts=3,
                                      events=events_section(bus, reconcile_interval_seconds=600))
    describe = Scripted(job("job-late", "RUNNING"))
    started = time.monotonic()
    event = asyncio.run(run_wait(trigger, describe))
    elapsed = time.monotonic() - started
    assert event["status"] == "timeout" and "deadline" in event["message"]
    assert 2.5 <= elapsed < 20 and describe.calls == 2


def test_a_lost_event_is_made_up_by_the_reconcile_describe(bus) -> None:
    trigger = BatchTrainingJobTrigger(job_id="job-lost", progress=False, waiter_delay=300, waiter_max_attempts=10,
                                      events=events_section(bus, reconcile_interval_seconds=1))
    describe = Scripted(job("job-lost", "RUNNING"), job("job-lost", "SUCCEEDED"))   # no event ever sent
    event = asyncio.run(run_wait(trigger, describe))
    assert event["status"] == "success" and describe.calls == 2


def test_runnable_budget_is_checked_on_time_without_an_event(bus) -> None:
    trigger = BatchTrainingJobTrigger(job_id="job-stuck", progress=False, runnable_timeout_seconds=1,
                                      waiter_delay=300, waiter_max_attempts=10, events=events_section(bus))
    runnable = job("job-stuck", "RUNNABLE")
    # created 5 s from now: the first describe sees it inside its 1 s RUNNABLE budget even on a busy machine, so
    # the budget must end the wait at a later, timely describe (no event comes)
    runnable["jobs"][0]["createdAt"] += 5000
    describe = Scripted(runnable)

    class NoTerminate(Exception):
        pass

    async def perform(client: Any, action: Any) -> str:
        raise NoTerminate("moto has no such job")

    trigger.perform = perform  # type: ignore[method-assign]
    started = time.monotonic()
    event = asyncio.run(run_wait(trigger, describe))
    assert event["status"] == "failure" and event["reason"] == "runnable_timeout"
    assert time.monotonic() - started < 20 and describe.calls >= 2   # not the 600 s reconcile interval


def test_unreachable_queue_falls_back_to_polling_and_logs(bus, monkeypatch, caplog, capfd) -> None:
    monkeypatch.setattr(consumer_mod, "RETRY_SECONDS", 0.2)
    section = events_section(bus, queue_url=f"{bus['endpoint']}/{ACCOUNT}/no-such-queue")
    trigger = BatchTrainingJobTrigger(job_id="job-poll", progress=False, waiter_delay=1, waiter_max_attempts=60,
                                      events=section)
    describe = Scripted(job("job-poll", "RUNNING"), job("job-poll", "RUNNING"), job("job-poll", "SUCCEEDED"))
    with caplog.at_level(logging.INFO):
        event = asyncio.run(run_wait(trigger, describe))
    assert event["status"] == "success" and describe.calls == 3
    logged = caplog.text + capfd.readouterr().out   # the trigger logs through Airflow's structlog (stdout)
    assert "unreachable" in logged and "polling job-poll every 1 s" in logged


def test_polling_mode_and_no_section_poll_as_before(bus) -> None:
    for section in (None, {"mode": "polling", "queue_url": bus["queue_url"]}):
        trigger = BatchTrainingJobTrigger(job_id="job-p", progress=False, waiter_delay=0, waiter_max_attempts=2,
                                          events=section)
        describe = Scripted(job("job-p", "RUNNING"))
        event = asyncio.run(run_wait(trigger, describe))
        assert event["status"] == "timeout" and describe.calls == 2 and "2 polls" in event["message"]


def test_events_section_round_trips_and_stays_out_of_the_step_params(bus) -> None:
    trigger = BatchTrainingJobTrigger(job_id="job-s", events=events_section(bus))
    path, kwargs = trigger.serialize()
    assert kwargs["events"]["queue_url"] == bus["queue_url"]
    again = BatchTrainingJobTrigger(**kwargs)
    assert again.event_settings.enabled and "events" not in again.step_params()
    with pytest.raises(ValueError, match="events.mode"):
        BatchTrainingJobTrigger(job_id="job-s", events={"mode": "push"})


def test_the_operator_passes_the_environment_events_section(monkeypatch, bus) -> None:
    from sim2real.orchestration.config import task_events_section

    monkeypatch.delenv("SIM2REAL_ENVIRONMENT_FILE", raising=False)
    monkeypatch.delenv("AIRFLOW_VAR_SIM2REAL_ENVIRONMENT", raising=False)
    assert task_events_section() is None     # no environment config: the trigger polls
    monkeypatch.setenv("AIRFLOW_VAR_SIM2REAL_ENVIRONMENT", json.dumps(MINIMAL_ENVIRONMENT))
    assert task_events_section() is None     # a config without an events section: polling
    monkeypatch.setenv("AIRFLOW_VAR_SIM2REAL_ENVIRONMENT", json.dumps({**MINIMAL_ENVIRONMENT, "events": events_section(bus)}))
    assert task_events_section() == events_section(bus)


def test_queue_recovery_is_logged_and_the_wait_goes_back_to_events(bus, monkeypatch, caplog, capfd) -> None:
    monkeypatch.setattr(consumer_mod, "RETRY_SECONDS", 0.2)
    name = f"late-queue-{time.monotonic_ns()}"
    section = events_section(bus, queue_url=f"{bus['endpoint']}/{ACCOUNT}/{name}")
    trigger = BatchTrainingJobTrigger(job_id="job-back", progress=False, waiter_delay=1, waiter_max_attempts=60,
                                      events=section)
    describe = Scripted(job("job-back", "RUNNING"))

    def until(condition, limit: float = 20) -> None:
        end = time.monotonic() + limit
        while not condition():
            assert time.monotonic() < end, "condition not reached"
            time.sleep(0.05)

    def send() -> None:
        until(lambda: consumer_mod.active_consumers() and not consumer_mod.active_consumers()[0].available)
        url = bus["sqs"].create_queue(QueueName=name)["QueueUrl"]     # the queue is back
        until(lambda: consumer_mod.active_consumers()[0].available)
        body = {**samples.BATCH, "detail": {**samples.BATCH["detail"], "jobId": "job-back", "status": "SUCCEEDED"}}
        bus["sqs"].send_message(QueueUrl=url, MessageBody=json.dumps(body))

    with caplog.at_level(logging.INFO):
        event = asyncio.run(run_wait(trigger, describe, send))
    logged = caplog.text + capfd.readouterr().out
    assert event["status"] == "success" and event["job_status"] == "SUCCEEDED"
    assert "unreachable" in logged and "reachable again" in logged and "answers again" in logged


# -- the model package approval: the registry's side on events, the Airflow answer on the poll interval ----------
class Answers:
    """The Airflow answer reads of a ``ModelPackageDecisionTrigger``: the scripted answers in turn (the last one
    repeats; None: no answer yet); counts reads."""

    def __init__(self, *answers: dict[str, Any] | None) -> None:
        self.answers = list(answers) or [None]
        self.calls = 0

    async def __call__(self) -> dict[str, Any] | None:
        self.calls += 1
        return self.answers[min(self.calls, len(self.answers)) - 1]


def registry(bus: dict):
    import boto3

    return boto3.client("sagemaker", endpoint_url=bus["endpoint"], region_name=REGION)


def register_package(bus: dict, group: str) -> str:
    """A PendingManualApproval package in moto's registry (plain moto publishes no event for it)."""
    return register_model_package(registry(bus), group, run_key=group)


def package_event(arn: str, status: str, description: str | None = None) -> dict[str, Any]:
    """The documented ``SageMaker Model Package State Change`` of ``arn`` with ``status``."""
    detail = {**samples.MODEL_PACKAGE["detail"], "ModelPackageArn": arn, "ModelApprovalStatus": status,
              "ModelPackageGroupName": arn.rsplit("/", 2)[-2], "ModelPackageVersion": int(arn.rsplit("/", 1)[-1])}
    if description:
        detail["ApprovalDescription"] = description
    return {**samples.MODEL_PACKAGE, "resources": [arn], "detail": detail}


def decision_trigger(bus: dict, arn: str, answers: Answers, waiter_delay: int = 1, **events: Any):
    from uuid import uuid4

    from sim2real.orchestration.triggers.model_package import ModelPackageDecisionTrigger

    trigger = ModelPackageDecisionTrigger(ti_id=str(uuid4()), model_package_group_name=arn.rsplit("/", 2)[-2],
                                          run_key="run-1", model_package_arn=arn, waiter_delay=waiter_delay,
                                          waiter_max_attempts=600, settle_seconds=0,  # the hold: test_model_approval
                                          events=None if events.get("polling") else events_section(bus, **events))
    closed: list[dict[str, Any]] = []

    async def close_request(payload: dict[str, Any]) -> None:   # the Airflow request's answer (tested with comms
        closed.append(payload)                                   # in tests/orchestration/operators)

    trigger._airflow_answer = answers        # type: ignore[method-assign]
    trigger._close_request = close_request   # type: ignore[method-assign]
    return trigger, closed


async def run_decision(trigger: Any, send=None, limit: float = 30) -> dict[str, Any]:
    """Run ``trigger``; once it read the package (so it is subscribed), ``send()`` in a thread; its event."""
    async def first_event() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger yielded nothing")

    task = asyncio.create_task(first_event())
    end = time.monotonic() + limit
    while trigger.package_describes < 1:
        assert time.monotonic() < end and not task.done(), "the trigger never read the package"
        await asyncio.sleep(0.02)
    if send is not None:
        await asyncio.to_thread(send, task)
    payload = await asyncio.wait_for(task, limit)
    for consumer in consumer_mod.active_consumers():
        await asyncio.wait_for(consumer.drained(), 10)
    return payload


def test_model_package_decision_wait_ends_on_the_package_event(bus) -> None:
    arn = register_package(bus, "g-events")
    # the Airflow answer is read every 5 s (not 1 s): on 2 busy cores the event can take over a second to arrive,
    # and a round of reading the answer in between counts one more (reused) describe response
    trigger, closed = decision_trigger(bus, arn, Answers(None), waiter_delay=5)
    event = asyncio.run(run_decision(trigger, lambda task: put_event(bus, package_event(arn, "Approved", "in Studio"))))
    assert (event["status"], event["via"], event["model_package_arn"]) == ("success", "sagemaker", arn)
    assert event["approval_description"] == "in Studio"
    # the event decided: the registry was read once, at the start (moto still says PendingManualApproval)
    assert trigger.package_describes == 1 and trigger.responses_seen == {"describe": 1, "event": 1}
    assert registry(bus).describe_model_package(ModelPackageName=arn)["ModelApprovalStatus"] == "PendingManualApproval"
    assert [c["approval_status"] for c in closed] == ["Approved"]   # the Airflow request gets the decision


def test_a_duplicated_or_another_packages_event_changes_nothing(bus) -> None:
    arn = register_package(bus, "g-dup")
    other = register_package(bus, "g-dup")
    trigger, _ = decision_trigger(bus, arn, Answers(None))

    def send(task: Any) -> None:
        put_event(bus, package_event(other, "Rejected", "not this run's"))   # another package of the same group
        pending = {**package_event(arn, "PendingManualApproval"), "id": "a4f1c3de-5b1d-4f2e-9c1a-2b7d1d0e0f11"}
        for _ in range(2):                                                   # delivered twice, same id
            bus["sqs"].send_message(QueueUrl=bus["queue_url"], MessageBody=json.dumps(pending))
        end = time.monotonic() + 20
        while not (consumer_mod.active_consumers() and consumer_mod.active_consumers()[0].stats["duplicates"] >= 1
                   and consumer_mod.active_consumers()[0].stats["released"] >= 1):
            assert time.monotonic() < end, "the consumer did not see the duplicate and the other package's event"
            time.sleep(0.05)
        assert not task.done()                                               # nothing ended the wait
        put_event(bus, package_event(arn, "Approved"))

    event = asyncio.run(run_decision(trigger, send))
    assert (event["status"], event["via"], event["model_package_arn"]) == ("success", "sagemaker", arn)
    assert trigger.responses_seen["event"] == 2 and trigger.package_describes == 1   # pending once, then approved


def test_a_dropped_package_event_is_made_up_by_the_reconcile_describe(bus) -> None:
    arn = register_package(bus, "g-dropped")
    answers = Answers(None)
    trigger, _ = decision_trigger(bus, arn, answers, reconcile_interval_seconds=2)

    def approve_without_event(task: Any) -> None:   # plain moto publishes nothing: the event is lost
        registry(bus).update_model_package(ModelPackageArn=arn, ModelApprovalStatus="Approved",
                                           ApprovalDescription="approved, event lost")

    started = time.monotonic()
    event = asyncio.run(run_decision(trigger, approve_without_event))
    assert (event["status"], event["via"], event["approval_description"]) == ("success", "sagemaker",
                                                                            "approved, event lost")
    assert trigger.package_describes == 2 and trigger.responses_seen["event"] == 0
    assert answers.calls >= 2 and time.monotonic() - started < 15   # the answer was read in between, each second


def test_the_airflow_answer_is_still_read_every_poll_interval_on_events(bus) -> None:
    arn = register_package(bus, "g-airflow")
    answer = {"chosen_options": ["Approve"], "params_input": {"comment": "ok"},
              "responded_by_user": {"id": "7", "name": "alice"}, "responded_at": None}
    answers = Answers(None, None, answer)
    trigger, closed = decision_trigger(bus, arn, answers)
    started = time.monotonic()
    event = asyncio.run(run_decision(trigger))
    assert (event["status"], event["via"], event["hitl_response"]) == ("success", "airflow", answer)
    assert answers.calls == 3 and 1.5 <= time.monotonic() - started < 15   # every waiter_delay (1 s), not 600 s
    assert trigger.package_describes == 1 and closed == []                 # no DescribeModelPackage per read


def test_no_wait_event_queue_the_package_wait_polls(bus, monkeypatch, caplog, capfd) -> None:
    monkeypatch.setattr(consumer_mod, "RETRY_SECONDS", 0.2)
    arn = register_package(bus, "g-noqueue")
    trigger, _ = decision_trigger(bus, arn, Answers(None),
                                  queue_url=f"{bus['endpoint']}/{ACCOUNT}/no-such-package-queue")

    def approve_once_polling(task: Any) -> None:
        end = time.monotonic() + 20
        while not (consumer_mod.active_consumers() and not consumer_mod.active_consumers()[0].available):
            assert time.monotonic() < end, "the consumer never gave up on the queue"
            time.sleep(0.05)
        registry(bus).update_model_package(ModelPackageArn=arn, ModelApprovalStatus="Approved")

    with caplog.at_level(logging.INFO):
        event = asyncio.run(run_decision(trigger, approve_once_polling))
    assert (event["status"], event["via"]) == ("success", "sagemaker")
    assert trigger.package_describes >= 2 and trigger.responses_seen["event"] == 0   # DescribeModelPackage polled
    logged = caplog.text + capfd.readouterr().out
    assert "unreachable" in logged and f"polling {arn} every 1 s" in logged


def test_the_package_wait_without_events_polls_as_before(bus) -> None:
    arn = register_package(bus, "g-polling")
    trigger, _ = decision_trigger(bus, arn, Answers(None), polling=True)
    registry(bus).update_model_package(ModelPackageArn=arn, ModelApprovalStatus="Rejected", ApprovalDescription="no")
    event = asyncio.run(run_decision(trigger))
    assert (event["status"], event["via"], event["approval_status"]) == ("failure", "sagemaker", "Rejected")
    assert trigger.responses_seen == {} and trigger.package_describes == 1


def test_the_sensor_wait_subscribes_once_it_knows_the_package(bus) -> None:
    from sim2real.orchestration.events import envelope as ev
    from sim2real.orchestration.triggers.model_package import ModelPackageApprovalTrigger

    arn = "arn:aws:sagemaker:us-east-1:123456789012:model-package/g-sensor/1"
    unknown = ModelPackageApprovalTrigger(model_package_group_name="g-sensor", run_key="run-1",
                                          events=events_section(bus))
    assert unknown.event_keys() == []   # still to be located (ListModelPackages): polling
    trigger = ModelPackageApprovalTrigger(model_package_group_name="g-sensor", run_key="run-1", model_package_arn=arn,
                                          waiter_delay=300, waiter_max_attempts=10, events=events_section(bus))
    assert trigger.event_keys() == [ev.model_package(arn)]
    pending = package_event(arn, "PendingManualApproval")["detail"]
    event = asyncio.run(run_wait(trigger, Scripted(pending), lambda: put_event(bus, package_event(arn, "Approved"))))
    assert (event["status"], event["model_package_arn"], event["approval_status"]) == ("success", arn, "Approved")
    assert trigger.responses_seen == {"describe": 1, "event": 1}
