"""Wait for the trainer's checkpoint manifest and verify the checkpoint it names."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook
from airflow.providers.amazon.aws.hooks.s3 import S3Hook
from airflow.providers.amazon.aws.sensors.base_aws import AwsBaseSensor
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.sdk import PokeReturnValue

from sim2real.orchestration.triggers.checkpoint import CheckpointManifestTrigger, manifest_path
from sim2real.orchestration.waits.checkpoint import checkpoint_manifest_step
from sim2real.orchestration.waits.core import Step, WaitState, event_outcome

if TYPE_CHECKING:
    from airflow.sdk import Context

CHUNK = 8 * 1024 * 1024


def sha256_of(uri: str, conn_id: str | None) -> str:
    """Hex sha256 of the object / file at ``uri``, streamed in 8 MiB chunks."""
    digest = hashlib.sha256()
    with manifest_path(uri, conn_id).open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def validate_manifest(manifest: Any, manifest_uri: str, expected_task: str | None = None) -> dict[str, Any]:
    """
    Check a manifest's shape (workload contract ``manifest.json``): a JSON object with
    ``checkpoint_uri`` and a 64-hex ``sha256``; ``task`` equal to ``expected_task`` when given.

    :raises AirflowFailException: naming the manifest and the problem.
    """
    if not isinstance(manifest, dict):
        raise AirflowFailException(f"checkpoint manifest {manifest_uri} is not a JSON object")
    sha = manifest.get("sha256")
    if not isinstance(sha, str) or len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha.lower()):
        raise AirflowFailException(f"checkpoint manifest {manifest_uri} has no valid sha256 (got {sha!r})")
    if not manifest.get("checkpoint_uri"):
        raise AirflowFailException(f"checkpoint manifest {manifest_uri} has no checkpoint_uri")
    if expected_task is not None and manifest.get("task") != expected_task:
        raise AirflowFailException(
            f"checkpoint manifest {manifest_uri} is for task {manifest.get('task')!r}, expected {expected_task!r}"
        )
    return manifest


class CheckpointManifestSensor(AwsBaseSensor[S3Hook]):
    """
    Wait for ``manifest.json`` (written last by the trainer), validate it and verify the checkpoint.

    Works on ``s3://`` (through the AWS connection) and on local / EFS paths (``file://`` or a plain
    path), via ``airflow.sdk.ObjectStoragePath`` (``s3://`` needs ``s3fs``). Always deferred:
    checks once, then defers to :class:`~sim2real.orchestration.triggers.checkpoint.CheckpointManifestTrigger`.

    :param manifest_uri: where the manifest appears (templated).
    :param expected_task: the task the manifest must name (``TASK``), or None (templated).
    :param batch_job_id: the training job; FAILED -> fail early instead of waiting (templated).
    :return: the manifest dict plus ``"verified_sha256": True``.
    :raises AirflowFailException: the Batch job is FAILED; the manifest is not a JSON object, lacks
        ``sha256`` / ``checkpoint_uri``, or names another task; the checkpoint's sha256 differs
        (message has both hashes).
    :raises AirflowSensorTimeout: the manifest did not appear within ``timeout``.
    """

    #: Always True: the wait runs in the triggerer (there is no blocking mode); read by the DAG checks.
    deferrable = True

    aws_hook_class = S3Hook
    template_fields: Sequence[str] = aws_template_fields("manifest_uri", "expected_task", "batch_job_id")
    ui_color = "#e8d8f0"

    def __init__(
        self,
        *,
        manifest_uri: str,
        expected_task: str | None = None,
        batch_job_id: str | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.manifest_uri = manifest_uri
        self.expected_task = expected_task
        self.batch_job_id = batch_job_id

    def _check(self) -> Step:
        """One check of the manifest (and of the job while it is missing), decided by the wait's step
        function (:func:`~sim2real.orchestration.waits.checkpoint.checkpoint_manifest_step`)."""
        response: dict[str, Any] = {"manifest_exists": manifest_path(self.manifest_uri, self.aws_conn_id).exists()}
        if not response["manifest_exists"] and self.batch_job_id:
            hook = BatchClientHook(**self._hook_parameters)
            response["jobs"] = [hook.get_job_description(self.batch_job_id)]
        return checkpoint_manifest_step(response, WaitState(params={"manifest_uri": self.manifest_uri,
                                                                    "batch_job_id": self.batch_job_id}))

    def verify_manifest(self) -> dict[str, Any]:
        """Read, validate and verify the manifest (it must exist); returns the manifest + ``verified_sha256``."""
        path = manifest_path(self.manifest_uri, self.aws_conn_id)
        try:
            manifest = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise AirflowFailException(f"checkpoint manifest {self.manifest_uri} is not valid JSON: {err}") from err
        manifest = validate_manifest(manifest, self.manifest_uri, self.expected_task)
        checkpoint_uri = manifest["checkpoint_uri"]
        try:
            actual = sha256_of(checkpoint_uri, self.aws_conn_id)
        except FileNotFoundError as err:
            raise AirflowFailException(
                f"checkpoint {checkpoint_uri} named by {self.manifest_uri} does not exist"
            ) from err
        if actual != manifest["sha256"].lower():
            raise AirflowFailException(
                f"checkpoint {checkpoint_uri} sha256 mismatch: manifest {self.manifest_uri} says "
                f"{manifest['sha256']}, the object hashes to {actual}"
            )
        self.log.info("Checkpoint %s verified (sha256 %s)", checkpoint_uri, actual)
        return {**manifest, "verified_sha256": True}

    def poke(self, context: Context) -> PokeReturnValue | bool:
        step = self._check()
        if step.outcome == "success":
            return PokeReturnValue(is_done=True, xcom_value=self.verify_manifest())
        if step.outcome == "failure":
            raise AirflowFailException(step.reason)
        self.log.info("%s", step.reason)
        return False

    def execute(self, context: Context) -> Any:
        """Check once (a manifest already there, or a FAILED job, settles without deferring), then defer."""
        result = self.poke(context)
        if isinstance(result, PokeReturnValue) and result.is_done:
            return result.xcom_value
        self.defer(
            timeout=timedelta(seconds=self.timeout),
            trigger=CheckpointManifestTrigger(
                manifest_uri=self.manifest_uri,
                batch_job_id=self.batch_job_id,
                poke_interval=self.poke_interval,
                aws_conn_id=self.aws_conn_id,
                region_name=self.region_name,
                verify=self.verify,
                botocore_config=self.botocore_config,
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        status, message = event_outcome(event, f"checkpoint manifest {self.manifest_uri}")
        if status != "success":
            raise AirflowFailException(message or f"waiting for {self.manifest_uri} failed ({status})")
        return self.verify_manifest()
