"""Trigger waiting for this run's model package to be Approved or Rejected.

Locates the package by ``CustomerMetadataProperties["sim2real:run-key"]`` (ListModelPackages
newest first + DescribeModelPackage), then classifies DescribeModelPackage with the custom
waiter ``model_package_approved`` (``sim2real/orchestration/waiters/sagemaker_ext.json``).
"""

from __future__ import annotations

from typing import Any

from sim2real.orchestration.hooks.model_registry import ModelRegistryHook, package_matches
from sim2real.orchestration.triggers.base import StepWaitTrigger
from sim2real.orchestration.waits.core import WaitState
from sim2real.orchestration.waits.sagemaker import model_package_step


class ModelPackageApprovalTrigger(StepWaitTrigger):
    """Poll the model registry until this run's package is Approved or Rejected
    (:func:`~sim2real.orchestration.waits.sagemaker.model_package_step`).

    :param model_package_group_name: the model package group.
    :param run_key: value of ``CustomerMetadataProperties["sim2real:run-key"]``.
    :param pipeline_execution_arn: optional cross-check (see ``package_matches``).
    :param model_package_arn: the package, when already located.
    :param waiter_delay: seconds between polls.
    :param waiter_max_attempts: polls before a ``timeout`` event.

    One event: ``{"status": "success", "message", **approval_result}``; ``{"status": "failure",
    "message", "model_package_arn", "approval_status": "Rejected", "approval_description"}``;
    ``{"status": "timeout", "message", "model_package_arn" (None when never found), "approval_status"}``.
    """

    aws_hook_class = ModelRegistryHook

    def __init__(
        self,
        *,
        model_package_group_name: str,
        run_key: str,
        pipeline_execution_arn: str | None = None,
        model_package_arn: str | None = None,
        waiter_delay: int = 60,
        waiter_max_attempts: int = 1440,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict | None = None,
    ) -> None:
        super().__init__(
            serialized_fields={
                "model_package_group_name": model_package_group_name,
                "run_key": run_key,
                "pipeline_execution_arn": pipeline_execution_arn,
                "model_package_arn": model_package_arn,
            },
            waiter_delay=waiter_delay,
            waiter_max_attempts=waiter_max_attempts,
            aws_conn_id=aws_conn_id,
            region_name=region_name,
            verify=verify,
            botocore_config=botocore_config,
        )
        self.model_package_group_name = model_package_group_name
        self.run_key = run_key
        self.pipeline_execution_arn = pipeline_execution_arn
        self.model_package_arn = model_package_arn

    async def _locate(self, client) -> dict[str, Any] | None:
        kwargs: dict[str, Any] = {
            "ModelPackageGroupName": self.model_package_group_name,
            "SortBy": "CreationTime",
            "SortOrder": "Descending",
        }
        while True:
            page = await client.list_model_packages(**kwargs)
            for summary in page.get("ModelPackageSummaryList", []):
                package = await client.describe_model_package(ModelPackageName=summary["ModelPackageArn"])
                if package_matches(package, self.run_key, self.pipeline_execution_arn):
                    return package
            if not page.get("NextToken"):
                return None
            kwargs["NextToken"] = page["NextToken"]

    step_function = staticmethod(model_package_step)

    async def describe(self, client, state: WaitState) -> dict[str, Any]:
        """DescribeModelPackage of the package, located first (ListModelPackages) while unknown;
        ``{}`` while this run's package is not registered yet."""
        if not self.model_package_arn:
            package = await self._locate(client)
            if package is None:
                return {}
            self.model_package_arn = package["ModelPackageArn"]
            self.log.info("Found model package %s for run %s", self.model_package_arn, self.run_key)
            return package
        return await client.describe_model_package(ModelPackageName=self.model_package_arn)
