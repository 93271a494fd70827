"""SageMaker Model Registry hook: find this run's model package and read its approval.

Sources: Amazon SageMaker API Reference — ListModelPackages (``ModelPackageGroupName``,
``SortBy=CreationTime``, ``SortOrder=Descending``), DescribeModelPackage
(``ModelApprovalStatus`` ∈ Approved | Rejected | PendingManualApproval,
``CustomerMetadataProperties``, ``MetadataProperties.GeneratedBy``,
``InferenceSpecification.Containers[].ModelDataUrl``, ``ApprovalDescription``, ``LastModifiedBy``
(``UserContext``: ``UserProfileName``, ``IamIdentity.Arn``), ``LastModifiedTime``), UpdateModelPackage
(``ModelApprovalStatus``, ``ApprovalDescription``: at most 1024 characters).

SageMaker has no conditional UpdateModelPackage (no version or ETag to compare against), so
:meth:`ModelRegistryHook.compare_and_set_approval` is a compare-and-set built from reads: it writes only while
the package still shows what the caller saw and re-reads after the write. What remains is the time between that
read and the write (one API round trip, milliseconds): a write landing exactly there is overwritten, and the
re-read cannot tell (the registry keeps no history of its approval status).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim2real.orchestration.config import RUN_KEY_TAG
from sim2real.orchestration.hooks.sagemaker_pipeline import SageMakerExtHook

#: CustomerMetadataProperties key the pipeline's RegisterModel step sets to the execution ARN.
PIPELINE_EXECUTION_KEY = "sim2real:pipeline-execution-arn"


def package_matches(package: dict[str, Any], run_key: str, pipeline_execution_arn: str | None) -> bool:
    """Whether a DescribeModelPackage response belongs to this run.

    The run key must equal ``CustomerMetadataProperties["sim2real:run-key"]``; when
    ``pipeline_execution_arn`` is given and the package records an execution (metadata key
    ``sim2real:pipeline-execution-arn`` or ``MetadataProperties.GeneratedBy``), it must match too.
    """
    meta = package.get("CustomerMetadataProperties") or {}
    if meta.get(RUN_KEY_TAG) != run_key:
        return False
    if pipeline_execution_arn:
        recorded = meta.get(PIPELINE_EXECUTION_KEY) or (package.get("MetadataProperties") or {}).get("GeneratedBy")
        if recorded and recorded != pipeline_execution_arn:
            return False
    return True


def approval_result(package: dict[str, Any]) -> dict[str, Any]:
    """The sensor's return value for an Approved package."""
    containers = (package.get("InferenceSpecification") or {}).get("Containers") or [{}]
    return {
        "model_package_arn": package["ModelPackageArn"],
        "model_data_url": containers[0].get("ModelDataUrl"),
        "approval_status": package.get("ModelApprovalStatus"),
        "approval_description": package.get("ApprovalDescription"),
    }


def approve_command(model_package_arn: str) -> str:
    """The CLI command that approves ``model_package_arn``."""
    return (
        f"aws sagemaker update-model-package --model-package-arn {model_package_arn} "
        "--model-approval-status Approved --approval-description '<why>'"
    )


def not_approved_message(package: Mapping[str, Any]) -> str:
    """Why a package is refused and how to approve it (names the ARN, its status and the command)."""
    arn = package.get("ModelPackageArn")
    status = package.get("ModelApprovalStatus") or "unknown"
    group = package.get("ModelPackageGroupName") or "?"
    why = f" (ApprovalDescription: {package['ApprovalDescription']})" if package.get("ApprovalDescription") else ""
    return (f"Model package {arn} is {status}{why}, not Approved: only an Approved package is released to the "
            f"robots. Approve it in SageMaker Studio (Models > Registered models > {group} > version "
            f"{package.get('ModelPackageVersion', '?')}) or run: {approve_command(arn)} — then trigger the release "
            "again (or give the ARN of an Approved version).")


#: Longest ``ApprovalDescription`` UpdateModelPackage accepts (botocore's SageMaker model: ``max`` 1024).
APPROVAL_DESCRIPTION_MAX = 1024
#: The registry's final approval states (UpdateModelPackage ``ModelApprovalStatus``).
DECIDED_STATUSES = ("Approved", "Rejected")


def airflow_approval_description(status: str, user: str, comment: str | None, at: str) -> str:
    """The ``ApprovalDescription`` written for a decision made in Airflow: who, where, when and why.

    :param status: ``Approved`` or ``Rejected``.
    :param user: the Airflow user who answered (name, and id when it differs).
    :param comment: the reviewer's comment (``None`` / empty: "no comment").
    :param at: ISO 8601 time of the answer.
    :raises ValueError: an unknown status, or a description longer than :data:`APPROVAL_DESCRIPTION_MAX`
        (the comment is never cut: the form's comment field is limited to fit).
    """
    if status not in DECIDED_STATUSES:
        raise ValueError(f"ModelApprovalStatus must be one of {DECIDED_STATUSES}, got {status!r}")
    text = f"{status} in Airflow by {user} at {at}: {(comment or '').strip() or 'no comment'}"
    if len(text) > APPROVAL_DESCRIPTION_MAX:
        raise ValueError(f"ApprovalDescription would be {len(text)} characters; UpdateModelPackage accepts at "
                         f"most {APPROVAL_DESCRIPTION_MAX}: shorten the comment")
    return text


def sagemaker_decision(package: dict[str, Any]) -> dict[str, Any]:
    """Who decided a package outside Airflow (SageMaker Studio, the CLI or the API), from DescribeModelPackage.

    The decider is the identity SageMaker recorded, never what the ``ApprovalDescription`` says: a description
    written to look like this project's record of an Airflow answer ("Approved in Airflow by <user> ...") names
    nobody (anyone who may update the package can write it). The approval step's own write of an Airflow answer
    is recognised by the answer it keeps in the task's state store, not by this text.

    :return: ``{"decided_by", "via": "sagemaker", "at", "comment", "status"}``: ``decided_by`` is
        ``LastModifiedBy.UserProfileName`` (Studio), else ``LastModifiedBy.IamIdentity.Arn`` (CLI / API),
        else ``None`` (the response names nobody); ``at`` is ``LastModifiedTime`` (ISO 8601) or ``None``;
        ``comment`` is the ``ApprovalDescription``.
    """
    who = package.get("LastModifiedBy") or {}
    at = package.get("LastModifiedTime")
    return {
        "decided_by": who.get("UserProfileName") or (who.get("IamIdentity") or {}).get("Arn"),
        "via": "sagemaker",
        "at": at.isoformat() if hasattr(at, "isoformat") else (str(at) if at else None),
        "comment": package.get("ApprovalDescription"),
        "status": package.get("ModelApprovalStatus"),
    }


class ModelRegistryHook(SageMakerExtHook):
    """SageMaker Model Registry calls (thin SageMaker hook with waiters from ``sagemaker_ext.json``)."""

    def find_model_package(
        self, group_name: str, run_key: str, pipeline_execution_arn: str | None = None
    ) -> dict[str, Any] | None:
        """Newest package of the group registered for ``run_key`` (DescribeModelPackage response).

        Lists the group newest first and describes each package until one matches
        :func:`package_matches`; ``None`` when none does.
        """
        kwargs: dict[str, Any] = {
            "ModelPackageGroupName": group_name,
            "SortBy": "CreationTime",
            "SortOrder": "Descending",
        }
        while True:
            page = self.conn.list_model_packages(**kwargs)
            for summary in page.get("ModelPackageSummaryList", []):
                package = self.conn.describe_model_package(ModelPackageName=summary["ModelPackageArn"])
                if package_matches(package, run_key, pipeline_execution_arn):
                    return package
            if not page.get("NextToken"):
                return None
            kwargs["NextToken"] = page["NextToken"]

    def describe_model_package(self, model_package_name: str) -> dict[str, Any]:
        """DescribeModelPackage of one package (ARN or name).

        :param model_package_name: the model package ARN (``.../model-package/<group>/<version>``) or name.
        :return: the DescribeModelPackage response (``ModelPackageArn``, ``ModelPackageGroupName``,
            ``ModelPackageVersion``, ``ModelApprovalStatus``, ``InferenceSpecification``, ``CreationTime``, ...).
        :raises botocore.exceptions.ClientError: the package does not exist (``ValidationException``)
            or the call is refused.
        """
        return self.conn.describe_model_package(ModelPackageName=model_package_name)

    def latest_approved_model_package(self, group_name: str) -> dict[str, Any] | None:
        """The newest **Approved** package of ``group_name`` (DescribeModelPackage response), or ``None``.

        Lists the group with ``ModelApprovalStatus=Approved``, ``SortBy=CreationTime``,
        ``SortOrder=Descending`` (every page), keeps the summary with the latest ``CreationTime``
        (ties: the higher ``ModelPackageVersion``) and describes it; the description's status is the
        one the caller checks (a package may change between the two calls).

        :raises botocore.exceptions.ClientError: the group does not exist or the call is refused.
        """
        kwargs: dict[str, Any] = {
            "ModelPackageGroupName": group_name,
            "ModelApprovalStatus": "Approved",
            "SortBy": "CreationTime",
            "SortOrder": "Descending",
        }
        summaries: list[dict[str, Any]] = []
        while True:
            page = self.conn.list_model_packages(**kwargs)
            summaries += [s for s in page.get("ModelPackageSummaryList", []) if s.get("ModelApprovalStatus") == "Approved"]
            if not page.get("NextToken"):
                break
            kwargs["NextToken"] = page["NextToken"]
        if not summaries:
            return None
        newest = max(summaries, key=lambda s: (s.get("CreationTime"), s.get("ModelPackageVersion") or 0))
        return self.describe_model_package(newest["ModelPackageArn"])

    def update_approval(self, model_package_arn: str, status: str, description: str) -> dict[str, Any]:
        """UpdateModelPackage with ``ModelApprovalStatus`` and ``ApprovalDescription``; returns the
        DescribeModelPackage response after the update.

        :param model_package_arn: the package version's ARN.
        :param status: ``Approved`` or ``Rejected``.
        :param description: the ``ApprovalDescription`` (:func:`airflow_approval_description`).
        :raises ValueError: an unknown status.
        :raises botocore.exceptions.ClientError: the package does not exist or the call is refused
            (``sagemaker:UpdateModelPackage`` missing from the role).
        """
        if status not in DECIDED_STATUSES:
            raise ValueError(f"ModelApprovalStatus must be one of {DECIDED_STATUSES}, got {status!r}")
        self.conn.update_model_package(ModelPackageArn=model_package_arn, ModelApprovalStatus=status,
                                       ApprovalDescription=description)
        return self.describe_model_package(model_package_arn)

    def compare_and_set_approval(self, model_package_arn: str, status: str, description: str, *,
                                 expected: dict[str, Any] | None = None) -> tuple[bool, dict[str, Any]]:
        """Compare-and-set of the package's approval: UpdateModelPackage only while the package still shows
        ``expected``, then DescribeModelPackage again to see whose decision stands.

        :param model_package_arn: the package version's ARN.
        :param status: ``Approved``, ``Rejected`` or ``PendingManualApproval`` (undoing a refused decision).
        :param description: the ``ApprovalDescription`` to write (at most :data:`APPROVAL_DESCRIPTION_MAX`).
        :param expected: the DescribeModelPackage response the write is conditional on (its
            ``ModelApprovalStatus`` and ``ApprovalDescription`` must still be the package's); ``None``: the
            package must still be ``PendingManualApproval`` (any description).
        :return: ``(written, package)``: ``written`` is True when this call's status and description are the
            package's after the write; False when the package no longer matched ``expected`` (nothing written)
            or another write replaced this one right after it (the re-read shows it). ``package`` is the last
            DescribeModelPackage response.
        :raises ValueError: an unknown status or a description over the limit.
        :raises botocore.exceptions.ClientError: the package does not exist or a call is refused.
        """
        if status not in (*DECIDED_STATUSES, "PendingManualApproval"):
            raise ValueError(f"ModelApprovalStatus must be one of {DECIDED_STATUSES} or PendingManualApproval, "
                             f"got {status!r}")
        if len(description) > APPROVAL_DESCRIPTION_MAX:
            raise ValueError(f"ApprovalDescription of {len(description)} characters; at most {APPROVAL_DESCRIPTION_MAX}")
        now = self.describe_model_package(model_package_arn)
        if expected is None:
            matches = now.get("ModelApprovalStatus") == "PendingManualApproval"
        else:
            matches = all(now.get(k) == expected.get(k) for k in ("ModelApprovalStatus", "ApprovalDescription"))
        if not matches:
            return False, now
        self.conn.update_model_package(ModelPackageArn=model_package_arn, ModelApprovalStatus=status,
                                       ApprovalDescription=description)
        after = self.describe_model_package(model_package_arn)
        return (after.get("ModelApprovalStatus"), after.get("ApprovalDescription")) == (status, description), after
