"""Wait events in infra/: the EventBridge rules, the encrypted queue with its dead-letter queue, the queue policy,
the MWAA role's grant on it and the environment config's ``events`` section."""

from __future__ import annotations

import json

from sim2real.orchestration.events import envelope as ev
from sim2real.orchestration.events.settings import EventSettings
from sim2real_infra.wait_events import MAX_RECEIVE_COUNT

from .conftest import Synth, render, resources


def _template(synth: Synth) -> dict:
    return synth.templates[synth.stacks.wait_events.stack_name]


def test_one_encrypted_queue_with_a_dead_letter_queue(synth: Synth) -> None:
    queues = resources(_template(synth), "AWS::SQS::Queue")
    by_name = {q["Properties"]["QueueName"]: q["Properties"] for q in queues.values()}
    assert set(by_name) == {"sim2real-wait-events", "sim2real-wait-events-dlq"}
    assert all(p["SqsManagedSseEnabled"] is True for p in by_name.values())
    redrive = by_name["sim2real-wait-events"]["RedrivePolicy"]
    assert redrive["maxReceiveCount"] == MAX_RECEIVE_COUNT
    assert "Fn::GetAtt" in redrive["deadLetterTargetArn"]


def test_a_rule_per_detail_type_filtered_to_the_project(synth: Synth, synth_full: Synth) -> None:
    def patterns(which: Synth) -> dict[str, dict]:
        rules = resources(_template(which), "AWS::Events::Rule")
        return {render(r["Properties"]["EventPattern"])["detail-type"][0]: render(r["Properties"]["EventPattern"])
                for r in rules.values()}

    default = patterns(synth)
    assert set(default) == {ev.BATCH_JOB, ev.CODEBUILD_BUILD, ev.SSM_INVOCATION, ev.PIPELINE_EXECUTION,
                            ev.MODEL_PACKAGE, ev.GREENGRASS_DEPLOYMENT}
    assert default[ev.BATCH_JOB]["detail"] == {"jobQueue": ["arn:aws:batch:us-east-1:123456789012:job-queue/sim2real-gpu"]}
    assert default[ev.CODEBUILD_BUILD]["detail"] == {"project-name": ["sim2real-training-image"]}
    assert default[ev.SSM_INVOCATION]["detail"] == {"document-name": ["sim2real-evaluate", "AWS-RunShellScript"]}
    assert default[ev.PIPELINE_EXECUTION]["resources"] == [
        "arn:aws:sagemaker:us-east-1:123456789012:pipeline/sim2real-groot-finetune"]
    assert default[ev.MODEL_PACKAGE]["detail"] == {"ModelPackageGroupName": ["sim2real-groot-models"]}
    assert all(p["source"] == [ev.SOURCES[t]] for t, p in default.items())
    full = patterns(synth_full)
    assert full[ev.HYPERPOD_CLUSTER]["detail"] == {"ClusterName": ["sim2real-hyperpod"]}
    assert ev.HYPERPOD_NODE_HEALTH in full


def test_queue_policy_lets_only_these_rules_send(synth: Synth) -> None:
    template = _template(synth)
    rules = set(resources(template, "AWS::Events::Rule"))
    policies = resources(template, "AWS::SQS::QueuePolicy").values()
    # the queue, and the dead-letter queue (EventBridge moves an event it cannot deliver there)
    assert len(policies) == 2
    for policy in policies:
        allows = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"]
        senders = set()
        for st in allows:
            # the CDK target's grantSendMessages: SendMessage plus the two reads it comes with
            assert st["Principal"] == {"Service": "events.amazonaws.com"}
            actions = set(st["Action"]) if isinstance(st["Action"], list) else {st["Action"]}
            assert "sqs:SendMessage" in actions
            assert actions <= {"sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"}
            senders.add(st["Condition"]["ArnEquals"]["aws:SourceArn"]["Fn::GetAtt"][0])
        assert senders == rules
        denies = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
        assert any(s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in denies)
    for rule in resources(template, "AWS::Events::Rule").values():
        (target,) = rule["Properties"]["Targets"]
        assert "DeadLetterConfig" in target and target["RetryPolicy"]["MaximumRetryAttempts"] == 8


def test_mwaa_role_consumes_the_queue_and_nothing_more(synth: Synth) -> None:
    template = synth.templates[synth.stacks.mwaa.stack_name]
    statements = [(st, render(st.get("Resource", st.get("NotResource")))) for rtype in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
                  for p in resources(template, rtype).values() for st in p["Properties"]["PolicyDocument"]["Statement"]]
    on_queue = [(st, res) for st, res in statements if "wait-events" in json.dumps(res)]
    assert len(on_queue) == 1
    st, res = on_queue[0]
    assert sorted(st["Action"]) == ["sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes",
                                    "sqs:ReceiveMessage"]
    assert res == "arn:aws:sqs:us-east-1:123456789012:sim2real-wait-events"


def test_wait_events_template_passes_cfn_lint(synth: Synth) -> None:
    import subprocess
    import sys
    from pathlib import Path

    template = synth.outdir / f"{synth.stacks.wait_events.stack_name}.template.json"
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    proc = subprocess.run([str(cfn_lint), "--format", "parseable", str(template)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def test_environment_config_names_the_queue(synth: Synth) -> None:
    section = synth.stacks.config["events"]
    settings = EventSettings.from_dict({**section, "queue_url": "https://sqs.example/q"})
    # the triggers consume the queue: events, with the 10 min reconcile describe
    assert section["mode"] == "events" and settings.enabled and settings.reconcile_interval_seconds == 600
    url = render(synth.stacks.wait_events.resolve(section["queue_url"]))
    assert url == "https://sqs.us-east-1.amazonaws.com/123456789012/sim2real-wait-events"
