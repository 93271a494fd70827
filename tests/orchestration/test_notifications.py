"""Notifications: the SNS notifier publishes to the environment config's topic (moto SNS → SQS), and
skips, without failing, when no topic is configured."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import boto3
import pytest
from moto import mock_aws

from sim2real.contract import task_ids as ids
from sim2real.orchestration import notifications as n
from sim2real.contract.run_key import make_run_key

from tests.orchestration.environments import MINIMAL_ENVIRONMENT

ENV = {**MINIMAL_ENVIRONMENT, "artifacts_bucket": "sim2real-artifacts-123456789012"}
RUN_ID = "manual__2026-11-29T23:59:50+00:00"


def _dag():
    from airflow.sdk import DAG

    return DAG(dag_id="sim_to_real", schedule=None)


@pytest.fixture
def topic(monkeypatch):
    """A moto SNS topic with an SQS queue subscribed; the environment config names the topic."""
    with mock_aws():
        sns, sqs = boto3.client("sns", region_name="us-east-1"), boto3.client("sqs", region_name="us-east-1")
        arn = sns.create_topic(Name="sim2real-notifications")["TopicArn"]
        queue = sqs.create_queue(QueueName="inbox")["QueueUrl"]
        qarn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint=qarn)
        monkeypatch.setenv("AIRFLOW_VAR_SIM2REAL_ENVIRONMENT",
                           json.dumps({**ENV, "notifications": {"sns_topic_arn": arn}}))

        def received() -> list[dict]:
            msgs = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])
            return [json.loads(m["Body"]) for m in msgs]

        yield SimpleNamespace(arn=arn, received=received)


def dag_failure_context(task_id=ids.BATCH_TRAIN_POLICY):
    ti = SimpleNamespace(task_id=task_id, try_number=3, dag_id="sim_to_real", run_id=RUN_ID,
                         xcom_pull=lambda **kw: None)
    return {"dag": _dag(), "run_id": RUN_ID, "reason": "task_failure", "ti": ti}


def test_dag_run_failure_publishes_to_the_configured_topic(topic):
    n.run_failed()(dag_failure_context())
    [msg] = topic.received()
    run_key = make_run_key("sim_to_real", RUN_ID)
    assert msg["TopicArn"] == topic.arn
    assert "run FAILED" in msg["Subject"] and len(msg["Subject"]) <= 100
    assert "Failed task: train.train_policy (try 3)" in msg["Message"]
    assert f"s3://sim2real-artifacts-123456789012/runs/{run_key}/lineage.json" in msg["Message"]
    assert msg["MessageAttributes"]["event"]["Value"] == "run_failed"
    assert msg["MessageAttributes"]["run_key"]["Value"] == run_key


def test_release_dag_failure_points_at_its_release_record(topic):
    # The release DAG writes runs/<run_key>/release.json, not lineage.json.
    ti = SimpleNamespace(task_id="resolve_model_package", try_number=1, dag_id="sim_to_real_release",
                         run_id=RUN_ID, xcom_pull=lambda **kw: None)
    n.run_failed()({"dag": SimpleNamespace(dag_id="sim_to_real_release"), "run_id": RUN_ID,
                    "reason": "task_failure", "ti": ti})
    [msg] = topic.received()
    run_key = make_run_key("sim_to_real_release", RUN_ID)
    assert f"Record: s3://sim2real-artifacts-123456789012/runs/{run_key}/release.json" in msg["Message"]
    assert "lineage.json" not in msg["Message"]


def test_gate_failure_carries_the_reason(topic):
    report = {"report_uri": "s3://b/runs/k/eval/report.json"}
    ti = SimpleNamespace(task_id="quality_gate", try_number=1, dag_id="sim_to_real", run_id=RUN_ID,
                         xcom_pull=lambda task_ids: report if task_ids == ids.READ_EVAL_REPORT else None)
    err = Exception("QUALITY GATE FAILED: success_rate 0.100 < threshold 0.150 (5/50 episodes succeeded)")
    n.gate_failed()({"dag": _dag(), "run_id": RUN_ID, "ti": ti, "exception": err})
    [msg] = topic.received()
    assert "quality gate FAILED" in msg["Subject"]
    assert "success_rate 0.100 < threshold 0.150" in msg["Message"]
    assert "s3://b/runs/k/eval/report.json" in msg["Message"]
    assert msg["MessageAttributes"]["event"]["Value"] == "gate_failed"


def test_a_gate_failure_says_whether_a_retraining_round_follows(topic):
    def plan_of(round_, max_rounds):
        plan = {"plan": {"rounds": {"round": round_, "max_rounds": max_rounds}}}
        return SimpleNamespace(task_id="quality_gate", try_number=1, dag_id="sim_to_real", run_id=RUN_ID,
                               xcom_pull=lambda task_ids: plan if task_ids == ids.PREPARE_RUN else None)

    err = Exception("QUALITY GATE FAILED: success_rate 0.100 < threshold 0.150")
    for ti in (plan_of(1, 3), plan_of(3, 3), plan_of(1, 1)):
        n.gate_failed()({"dag": _dag(), "run_id": RUN_ID, "ti": ti, "exception": err})
    following, last, single = (m["Message"] for m in topic.received())
    assert "this was round 1 of 3; round 2 follows as a new run of this DAG" in following
    assert "the last retraining round (3 of 3): the loop ends with the gate failed" in last
    assert "retraining" not in single.lower() and "round" not in single.lower()
    # The run's failure names the next round's run, which next_round triggered.
    ti = SimpleNamespace(task_id="run_outcome", try_number=1, dag_id="sim_to_real", run_id=RUN_ID,
                         xcom_pull=lambda task_ids, key=None: "manual__next" if (task_ids, key) == (
                             ids.NEXT_ROUND, "trigger_run_id") else None)
    n.run_failed()({"dag": _dag(), "run_id": RUN_ID, "reason": "task_failure", "ti": ti})
    [msg] = topic.received()
    assert "Retraining: the next round runs as manual__next" in msg["Message"]


def test_approval_needed_names_the_package_and_the_command(topic):
    sm = boto3.client("sagemaker", region_name="us-east-1")
    sm.create_model_package_group(ModelPackageGroupName="grp")
    run_key = make_run_key("sim_to_real", RUN_ID)
    arn = sm.create_model_package(
        ModelPackageGroupName="grp", ModelApprovalStatus="PendingManualApproval",
        CustomerMetadataProperties={"sim2real:run-key": run_key},
        InferenceSpecification={"Containers": [{"Image": "img", "ModelDataUrl": "s3://b/m.tar.gz"}],
                                "SupportedContentTypes": ["application/json"],
                                "SupportedResponseMIMETypes": ["application/json"]},
    )["ModelPackageArn"]
    task = SimpleNamespace(model_package_group_name="grp", run_key=run_key, pipeline_execution_arn=None,
                           aws_conn_id=None, region_name="us-east-1")
    ti = SimpleNamespace(task_id=ids.WAIT_FOR_APPROVAL, try_number=1, dag_id="sim_to_real", run_id=RUN_ID,
                         _ti_context_from_server=SimpleNamespace(next_method=None))
    ctx = {"dag": _dag(), "run_id": RUN_ID, "ti": ti, "task": task}
    n.approval_needed()(ctx)
    [msg] = topic.received()
    assert "approval needed" in msg["Subject"]
    assert arn in msg["Message"] and "--model-approval-status Approved" in msg["Message"]
    assert "Browse > Required Actions" in msg["Message"]  # deciding in Airflow ends the wait too
    # A sensor resuming after its deferral runs on_execute_callback again: no second message.
    ti._ti_context_from_server = SimpleNamespace(next_method="execute_complete")
    n.approval_needed()(ctx)
    assert topic.received() == []


def test_deployed_lists_the_devices(topic):
    result = {"deployment_id": "dep-1", "devices": {"robot-1": "SUCCEEDED", "robot-2": "SUCCEEDED"}}
    ti = SimpleNamespace(task_id=ids.DEPLOY_TO_ROBOTS, try_number=1, dag_id="sim_to_real", run_id=RUN_ID,
                         xcom_pull=lambda task_ids: result)
    n.deployed()({"dag": _dag(), "run_id": RUN_ID, "ti": ti,
                  "task": SimpleNamespace(thing_group_name="sim2real-robots")})
    [msg] = topic.received()
    assert "deployed" in msg["Subject"]
    assert "dep-1" in msg["Message"] and "robot-2: SUCCEEDED" in msg["Message"]
    assert "Thing group: sim2real-robots" in msg["Message"]


def test_no_topic_configured_logs_and_skips(monkeypatch, caplog):
    monkeypatch.setenv("AIRFLOW_VAR_SIM2REAL_ENVIRONMENT", json.dumps(ENV))  # no "notifications"
    notifier = n.run_failed()
    published = []
    monkeypatch.setattr(type(notifier), "hook", property(lambda self: published.append(1)))
    with caplog.at_level(logging.INFO, logger="sim2real.orchestration.notifications"):
        notifier(dag_failure_context())
    assert published == []
    assert "no notifications.sns_topic_arn" in caplog.text and "run FAILED" in caplog.text


def test_publish_error_never_raises(monkeypatch, caplog):
    monkeypatch.setenv("AIRFLOW_VAR_SIM2REAL_ENVIRONMENT", json.dumps(
        {**ENV, "notifications": {"sns_topic_arn": "arn:aws:sns:us-east-1:123456789012:missing"}}))
    with mock_aws(), caplog.at_level(logging.INFO, logger="sim2real.orchestration.notifications"):
        n.run_failed()(dag_failure_context())  # the topic does not exist: NotFound is logged
    assert "publishing run_failed" in caplog.text


def test_unknown_event_is_refused():
    with pytest.raises(ValueError, match="unknown notification event"):
        n.Sim2RealSnsNotifier(event="nope")


def test_the_notifier_is_the_providers_sns_notifier():
    from airflow.providers.amazon.aws.notifications.sns import SnsNotifier

    assert isinstance(n.run_failed(), SnsNotifier)


def test_dag_callback_context_without_a_jinja_environment(topic):
    """dag.test() hands DAG callbacks a serialized DAG (no get_template_env): nothing to render, still sent."""
    ctx = dag_failure_context()
    ctx["dag"] = SimpleNamespace(dag_id="sim_to_real")
    n.run_failed()(ctx)
    [msg] = topic.received()
    assert msg["Subject"].startswith("[sim2real] run FAILED: sim-to-real-manual-")
