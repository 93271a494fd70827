"""Trigger polling for a checkpoint ``manifest.json`` (S3 or a local / EFS path)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook
from airflow.triggers.base import BaseTrigger, TriggerEvent
from botocore.exceptions import ClientError

from sim2real.orchestration.waits.checkpoint import checkpoint_manifest_step
from sim2real.orchestration.waits.core import WaitState, drive


def manifest_path(uri: str, conn_id: str | None):
    """``ObjectStoragePath`` for ``s3://...`` (through the Airflow AWS connection), ``file://...`` or a plain path."""
    from airflow.sdk import ObjectStoragePath

    if "://" not in uri:
        import os

        uri = "file://" + os.path.abspath(uri)
    if uri.startswith("file://"):
        return ObjectStoragePath(uri)
    return ObjectStoragePath(uri, conn_id=conn_id)


def manifest_exists(uri: str, conn_id: str | None) -> bool:
    """True when the manifest object / file exists."""
    return manifest_path(uri, conn_id).exists()


class CheckpointManifestTrigger(BaseTrigger):
    """
    Poll until ``manifest_uri`` exists; fail early when ``batch_job_id`` is FAILED.

    One event (:func:`~sim2real.orchestration.waits.checkpoint.checkpoint_manifest_step`):
    ``{"status": "success", "message", "manifest_uri"}`` when the manifest exists; ``{"status": "failure",
    "message", "manifest_uri"}`` when the Batch job is FAILED (``DescribeJobs``) or the check raises a
    non-transient error (throttling / 5xx codes are retried). The defer ``timeout`` bounds the wait.

    :param manifest_uri: ``s3://bucket/runs/<run_key>/checkpoints/manifest.json`` or a local / EFS path.
    :param batch_job_id: the training job to watch, or None.
    :param poke_interval: seconds between polls.
    :param aws_conn_id: Airflow AWS connection (S3 and Batch).
    :param region_name: AWS region.
    :param verify: SSL verification.
    :param botocore_config: botocore client configuration dict.
    """

    def __init__(
        self,
        manifest_uri: str,
        batch_job_id: str | None = None,
        poke_interval: float = 60,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict | None = None,
    ) -> None:
        super().__init__()
        self.manifest_uri = manifest_uri
        self.batch_job_id = batch_job_id
        self.poke_interval = poke_interval
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.verify = verify
        self.botocore_config = botocore_config

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{self.__class__.__module__}.{self.__class__.__qualname__}",
            {
                "manifest_uri": self.manifest_uri,
                "batch_job_id": self.batch_job_id,
                "poke_interval": self.poke_interval,
                "aws_conn_id": self.aws_conn_id,
                "region_name": self.region_name,
                "verify": self.verify,
                "botocore_config": self.botocore_config,
            },
        )

    async def describe(self, state: WaitState) -> dict[str, Any]:
        """Whether the manifest exists (a thread: ``ObjectStoragePath.exists``), and, while it does not and a
        job is watched, the job's ``DescribeJobs.jobs``."""
        if await asyncio.to_thread(manifest_exists, self.manifest_uri, self.aws_conn_id):
            return {"manifest_exists": True}
        if not self.batch_job_id:
            return {"manifest_exists": False}
        hook = BatchClientHook(
            aws_conn_id=self.aws_conn_id, region_name=self.region_name, verify=self.verify, config=self.botocore_config
        )
        async with await hook.get_async_conn() as client:
            jobs = (await client.describe_jobs(jobs=[self.batch_job_id])).get("jobs") or []
        return {"manifest_exists": False, "jobs": jobs}

    async def _next(self, state: WaitState) -> dict[str, Any]:
        try:
            return await self.describe(state)
        except ClientError:
            raise  # the driver hands its error response to the step
        except Exception as err:  # noqa: BLE001 - reported to the task, which fails with it
            return {"Error": {"Code": type(err).__name__, "Message": f"checking {self.manifest_uri} failed: {err}"}}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        event = await drive(
            checkpoint_manifest_step,
            self._next,
            WaitState(params={"manifest_uri": self.manifest_uri, "batch_job_id": self.batch_job_id},
                      poll_interval_s=float(self.poke_interval)),
            max_attempts=None,
            log=self.log,
        )
        yield TriggerEvent(event)
