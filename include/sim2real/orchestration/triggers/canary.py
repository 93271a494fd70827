"""Trigger waiting for the field episodes the canary robots upload (S3 ListObjectsV2 under the field prefix)."""

from __future__ import annotations

from typing import Any

from airflow.providers.amazon.aws.hooks.s3 import S3Hook

from sim2real.contract.field import episodes_prefix
from sim2real.orchestration.triggers.base import REQUIRED, StepWaitTrigger
from sim2real.orchestration.waits.canary import canary_episodes_step
from sim2real.orchestration.waits.core import WaitState


class CanaryFieldEpisodesTrigger(StepWaitTrigger):
    """Count the canary robots' episode objects every ``waiter_delay`` seconds until there are enough to judge the
    canary, or its window is over (:func:`~sim2real.orchestration.waits.canary.canary_episodes_step`).

    The trigger only waits: it neither reads nor checks an episode (the task does, when it resumes). Each poll
    is one ``ListObjectsV2`` per canary robot and page of 1000 keys (prefix ``<prefix>field/episodes/<thing>/``),
    so a wait makes at most ``3600 / waiter_delay`` x robots x pages S3 calls an hour (default 300 s: 12 per robot
    an hour). No AWS event answers it (S3 event notifications are not routed to the wait queue): it polls.
    Needs ``s3:ListBucket`` on the prefix. Source: Amazon S3 API Reference, ListObjectsV2 (``Contents[].LastModified``,
    ``IsTruncated``, ``NextContinuationToken``).

    :param bucket: the artifacts bucket; ``prefix``: the robots' key prefix (``""`` or ending in ``/``).
    :param thing_names: the canary thing group's robots.
    :param min_episodes: episode objects needed before the task reads them.
    :param window_start: the canary window's start, epoch seconds: only objects uploaded since (``LastModified``)
        count, so that a robot's episodes of earlier releases do not end the wait (0: every object).
    :param window_end: the canary window's end, epoch seconds (UTC).
    :param keys_read: objects the task already read and found too few (the wait ends again on a new one).
    :param waiter_delay: seconds between polls; ``waiter_max_attempts``: polls before a ``timeout`` event (the
        operator sets it to reach past ``window_end``).

    One event: ``{"status": "success" | "failure" | "timeout", "message", "listed": {thing: objects},
    "window_over"}``. ``on_kill`` stops nothing: the wait started nothing.
    """

    aws_hook_class = S3Hook

    fields = {"bucket": REQUIRED, "prefix": "", "thing_names": REQUIRED, "min_episodes": REQUIRED,
              "window_start": 0.0, "window_end": REQUIRED, "keys_read": 0}
    default_waiter_delay, default_waiter_max_attempts = 300, 12

    step_function = staticmethod(canary_episodes_step)

    async def describe(self, client, state: WaitState) -> dict[str, Any]:
        """``ListObjectsV2`` of each canary robot's episode folder (every page): ``{"listed": {thing: objects uploaded
        since window_start}}``."""
        listed: dict[str, int] = {}
        for thing in sorted(self.thing_names):
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": episodes_prefix(self.prefix, thing)}
            listed[thing] = 0
            while True:
                page = await client.list_objects_v2(**kwargs)
                listed[thing] += sum(1 for obj in page.get("Contents") or []
                                     if obj["LastModified"].timestamp() >= float(self.window_start))
                if not page.get("IsTruncated"):
                    break
                kwargs["ContinuationToken"] = page["NextContinuationToken"]
        return {"listed": listed}
