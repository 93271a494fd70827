"""Wait events: EventBridge rules for the state changes the DAG waits on, delivering to one encrypted SQS queue.

The rules' patterns come from :mod:`sim2real.orchestration.events.patterns` (the local sandbox uses the same ones).
The queue is encrypted with SQS-managed keys (SSE-SQS: EventBridge needs no KMS grant, the MWAA role no
``kms:Decrypt``), refuses non-TLS requests, and its resource policy lets EventBridge send only from these rules
(``aws:SourceArn``). Messages no wait takes end in the dead-letter queue after :data:`MAX_RECEIVE_COUNT` receives
(the consumer releases a message it has no wait for, so that count also bounds how often triggerers pass it on).
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sim2real.orchestration.events.patterns import ProjectResources, rule_patterns

from .settings import Settings

#: Receives of one message before SQS moves it to the dead-letter queue.
MAX_RECEIVE_COUNT = 10
#: Seconds a received message stays hidden (the consumer deletes or releases it at once).
VISIBILITY_TIMEOUT_SECONDS = 30


class WaitEventsStack(cdk.Stack):
    """``<prefix>-wait-events`` (+ ``-dlq``) and one rule per detail-type (:func:`rule_patterns`).

    :param resources: the names/ARNs the rules filter on (job queue ARN, CodeBuild project, SSM documents,
        pipeline ARN, model package group, HyperPod cluster).
    """

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, resources: ProjectResources,
                 **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.queue_name = settings.name("wait-events")
        self.dead_letter_queue = sqs.Queue(
            self, "DeadLetterQueue", queue_name=f"{self.queue_name}-dlq", encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True, retention_period=cdk.Duration.days(14))
        self.queue = sqs.Queue(
            self, "Queue", queue_name=self.queue_name, encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True,
            visibility_timeout=cdk.Duration.seconds(VISIBILITY_TIMEOUT_SECONDS),
            retention_period=cdk.Duration.days(4),
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dead_letter_queue, max_receive_count=MAX_RECEIVE_COUNT))
        self.rules: dict[str, events.Rule] = {}
        for rule_id, pattern in rule_patterns(resources).items():
            rule = events.Rule(self, rule_id, description=f"sim2real waits: {pattern['detail-type'][0]}",
                               event_pattern=_pattern(pattern))
            # The target adds a queue-policy statement for events.amazonaws.com with aws:SourceArn = this rule.
            rule.add_target(targets.SqsQueue(self.queue, retry_attempts=8, max_event_age=cdk.Duration.hours(2),
                                             dead_letter_queue=self.dead_letter_queue))
            self.rules[rule_id] = rule
        self.queue_arn = self.queue.queue_arn
        self.queue_url = (f"https://sqs.{cdk.Aws.REGION}.{cdk.Aws.URL_SUFFIX}/{cdk.Aws.ACCOUNT_ID}/"
                          f"{self.queue_name}")

    @staticmethod
    def queue_arn_for(settings: Settings) -> str:
        """The queue's ARN from its physical name (for the MWAA role, without a cross-stack reference)."""
        return f"arn:{cdk.Aws.PARTITION}:sqs:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}:{settings.name('wait-events')}"


def _pattern(p: dict) -> events.EventPattern:
    """A :func:`rule_patterns` dict as the CDK ``EventPattern`` (detail and resources passed through)."""
    return events.EventPattern(source=p["source"], detail_type=p["detail-type"], detail=p.get("detail"),
                               resources=p.get("resources"))

