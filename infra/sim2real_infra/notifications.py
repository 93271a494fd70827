"""Notifications: the SNS topic the DAG's notifiers publish to (failure, approval needed, deployed)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from .settings import Settings


class NotificationsStack(cdk.Stack):
    """One SNS topic, ``<prefix>-notifications``, encrypted and SSL-only. Subscribe to it (email,
    chat bots) outside this app."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.key = kms.Key(self, "TopicKey", enable_key_rotation=True,
                           description="sim2real notifications topic encryption",
                           removal_policy=cdk.RemovalPolicy.DESTROY)
        self.topic = sns.Topic(self, "Topic", topic_name=settings.name("notifications"),
                               display_name="sim2real", master_key=self.key, enforce_ssl=True)
