"""Wait for this run's model package in the SageMaker Model Registry to be approved.

Sources: Amazon SageMaker API Reference — ListModelPackages, DescribeModelPackage,
UpdateModelPackage (how a person approves: Studio or the CLI command in the timeout message).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.amazon.aws.sensors.base_aws import AwsBaseSensor
from airflow.providers.amazon.aws.utils.mixins import aws_template_fields
from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    PokeReturnValue,
)
from sim2real.orchestration.config import RUN_KEY_TAG, task_events_section
from sim2real.orchestration.hooks.model_registry import ModelRegistryHook, approve_command
from sim2real.orchestration.links.sagemaker import SageMakerModelPackageLink
from sim2real.orchestration.triggers.model_package import ModelPackageApprovalTrigger
from sim2real.orchestration.waits.core import event_outcome, settle_now
from sim2real.orchestration.waits.sagemaker import model_package_step

if TYPE_CHECKING:
    from airflow.sdk import Context


class ModelPackageApprovalSensor(AwsBaseSensor[ModelRegistryHook]):
    """Wait until the model package registered for ``run_key`` is Approved.

    The package is the newest one of ``model_package_group_name`` whose
    ``CustomerMetadataProperties["sim2real:run-key"]`` equals ``run_key`` (and, when
    ``pipeline_execution_arn`` is given and recorded on the package, whose execution matches).
    Approval states come from the custom waiter ``model_package_approved``: Approved → done;
    Rejected → :class:`AirflowFailException` with the ApprovalDescription (no retry);
    PendingManualApproval or not registered yet → keep waiting.

    :param model_package_group_name: the model package group.
    :param run_key: this DAG run's key.
    :param pipeline_execution_arn: optional execution that registered the package.
    :param poke_interval: seconds between polls (default 60).
    :param timeout: seconds to wait for an approval (default 24 h).
    :return: ``{"model_package_arn", "model_data_url" (InferenceSpecification.Containers[0].ModelDataUrl),
        "approval_status": "Approved", "approval_description"}``.
    :raises AirflowFailException: the package was Rejected.
    :raises AirflowSensorTimeout: no approval within ``timeout``; the message names the package
        and the command that approves it.
    """

    #: Always True: the wait runs in the triggerer (there is no blocking mode); read by the DAG checks.
    deferrable = True

    aws_hook_class = ModelRegistryHook
    template_fields: Sequence[str] = aws_template_fields(
        "model_package_group_name", "run_key", "pipeline_execution_arn"
    )
    operator_extra_links = (SageMakerModelPackageLink(),)

    def __init__(
        self,
        *,
        model_package_group_name: str,
        run_key: str,
        pipeline_execution_arn: str | None = None,
        poke_interval: float = 60,
        timeout: float | timedelta = 24 * 3600,
        **kwargs,
    ):
        super().__init__(poke_interval=poke_interval, timeout=timeout, **kwargs)
        self.model_package_group_name = model_package_group_name
        self.run_key = run_key
        self.pipeline_execution_arn = pipeline_execution_arn
        self._package_arn: str | None = None
        self._status: str | None = None
        self._link_persisted = False

    def _persist_link(self, context: Context, arn: str) -> None:
        if self._link_persisted:
            return
        SageMakerModelPackageLink.persist(
            context=context,
            operator=self,
            region_name=self.hook.conn_region_name,
            aws_partition=self.hook.conn_partition,
            group_name=self.model_package_group_name,
            version=arn.rsplit("/", 1)[-1],
        )
        self._link_persisted = True

    def poke(self, context: Context) -> bool | PokeReturnValue:
        if self._package_arn:
            package = self.hook.conn.describe_model_package(ModelPackageName=self._package_arn)
        else:
            package = self.hook.find_model_package(
                self.model_package_group_name, self.run_key, self.pipeline_execution_arn
            )
            if package is None:
                self.log.info(
                    "No model package with %s=%s in group %s yet",
                    RUN_KEY_TAG,
                    self.run_key,
                    self.model_package_group_name,
                )
                return False
            self._package_arn = package["ModelPackageArn"]
            self._persist_link(context, self._package_arn)
        self._status = package.get("ModelApprovalStatus")
        step = settle_now(model_package_step, package, {"model_package_group_name": self.model_package_group_name,
                                                        "run_key": self.run_key})
        if step is not None and step.outcome == "success":
            return PokeReturnValue(is_done=True, xcom_value=dict(step.payload))
        if step is not None:
            raise AirflowFailException(self._rejected_message(self._package_arn, package.get("ApprovalDescription")))
        self.log.info("Model package %s is %s", self._package_arn, self._status)
        return False

    def _rejected_message(self, arn: str | None, description: str | None) -> str:
        return (
            f"Model package {arn} (run {self.run_key}) was Rejected: "
            f"{description or 'no ApprovalDescription given'}. The release stops here; register a new "
            "model version to try again."
        )

    def _timeout_message(self, arn: str | None, status: str | None) -> str:
        if not arn:
            return (
                f"No model package with CustomerMetadataProperties {RUN_KEY_TAG}={self.run_key} appeared in "
                f"group {self.model_package_group_name} within {self.timeout:.0f} s. Check the pipeline's "
                "RegisterModel step of this run's execution."
            )
        return (
            f"Model package {arn} (group {self.model_package_group_name}, run {self.run_key}) is still "
            f"{status or 'PendingManualApproval'} after {self.timeout:.0f} s. Approve it in SageMaker Studio "
            f"(Models > Registered models > {self.model_package_group_name}) or run: {approve_command(arn)} "
            "— then clear this task."
        )

    def execute(self, context: Context) -> Any:
        """Check once (an Approved or Rejected package settles without deferring), then defer."""
        first = self.poke(context)
        if first:
            return first.xcom_value if isinstance(first, PokeReturnValue) else None
        attempts = max(1, int(self.timeout // max(1, self.poke_interval)))
        self.defer(
            trigger=ModelPackageApprovalTrigger(
                model_package_group_name=self.model_package_group_name,
                run_key=self.run_key,
                pipeline_execution_arn=self.pipeline_execution_arn,
                model_package_arn=self._package_arn,
                waiter_delay=int(self.poke_interval),
                waiter_max_attempts=attempts,
                aws_conn_id=self.aws_conn_id,
                region_name=self.region_name,
                verify=self.verify,
                botocore_config=self.botocore_config,
                events=task_events_section(self.log),
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout + self.poke_interval + 120),
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after the trigger: return the approval, or fail (rejected / timeout)."""
        status, message = event_outcome(event, f"the model package of run {self.run_key}")
        arn = event.get("model_package_arn")
        if arn:
            self._persist_link(context, arn)
        if status == "success":
            return {k: event.get(k) for k in ("model_package_arn", "model_data_url", "approval_status", "approval_description")}
        if status == "failure" and event.get("approval_status") == "Rejected":
            raise AirflowFailException(self._rejected_message(arn, event.get("approval_description")))
        if status == "timeout":
            raise AirflowSensorTimeout(self._timeout_message(arn, event.get("approval_status")))
        raise AirflowException(f"Model package approval wait failed: {message}")
