"""Trigger polling for a checkpoint ``manifest.json`` (S3 or a local / EFS path)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook
from airflow.providers.amazon.aws.utils.waiter_with_logging import RETRIABLE_ERROR_CODES
from airflow.triggers.base import BaseTrigger, TriggerEvent
from botocore.exceptions import ClientError


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

    Events: ``{"status": "success", "manifest_uri"}`` when the manifest exists;
    ``{"status": "failure", "manifest_uri", "message"}`` when the Batch job is FAILED (``DescribeJobs``)
    or the check raises a non-transient error (throttling / 5xx codes are retried). The defer
    ``timeout`` bounds the wait.

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

    def _event(self, status: str, **fields: Any) -> TriggerEvent:
        return TriggerEvent({"status": status, "manifest_uri": self.manifest_uri, **fields})

    async def _job_failed(self) -> str | None:
        hook = BatchClientHook(
            aws_conn_id=self.aws_conn_id, region_name=self.region_name, verify=self.verify, config=self.botocore_config
        )
        async with await hook.get_async_conn() as client:
            jobs = (await client.describe_jobs(jobs=[self.batch_job_id])).get("jobs") or []
        if jobs and jobs[0].get("status") == "FAILED":
            return (
                f"AWS Batch job {self.batch_job_id} is FAILED ({jobs[0].get('statusReason')}) before "
                f"{self.manifest_uri} was written"
            )
        return None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                if await asyncio.to_thread(manifest_exists, self.manifest_uri, self.aws_conn_id):
                    yield self._event("success")
                    return
                if self.batch_job_id:
                    failed = await self._job_failed()
                    if failed:
                        yield self._event("failure", message=failed)
                        return
            except ClientError as err:
                code = err.response.get("Error", {}).get("Code")
                if code not in RETRIABLE_ERROR_CODES:
                    yield self._event("failure", message=f"checking {self.manifest_uri} failed: {err}")
                    return
                self.log.info("Retriable error %s while checking %s; retrying", code, self.manifest_uri)
            except Exception as err:  # noqa: BLE001 - reported to the task, which fails with it
                yield self._event("failure", message=f"checking {self.manifest_uri} failed: {err}")
                return
            self.log.info("Checkpoint manifest %s not there yet", self.manifest_uri)
            await asyncio.sleep(self.poke_interval)
