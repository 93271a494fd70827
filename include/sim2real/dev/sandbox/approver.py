"""Approver: approves (or rejects) a run's model package the way a person in SageMaker Studio would.

It waits until (1) a model package for the run exists in the group and (2) someone outside the
sandbox — the DAG's approval sensor — has asked about it (a DescribeModelPackage or
ListModelPackages request reached the emulator after the package was registered), then calls
UpdateModelPackage with the decision. Everything it does is labelled emulated.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from sim2real.orchestration.config import RUN_KEY_TAG
from sim2real.dev.sandbox._core import PREFIX, log

if TYPE_CHECKING:
    from sim2real.dev.sandbox.server import Sandbox

POLL_ACTIONS = ("DescribeModelPackage", "ListModelPackages")


class Approver(threading.Thread):
    """Background approval of one run's model package.

    :param sandbox: the running Sandbox.
    :param model_package_group: group to watch.
    :param run_key: the run whose package (``CustomerMetadataProperties["sim2real:run-key"]``) to
        decide on; None = the first package that appears in PendingManualApproval.
    :param decision: "Approved" or "Rejected"; default "Approved", or "Rejected" when the sandbox
        fault ``reject_model_package`` is set.
    :param description: ApprovalDescription to write.
    :param timeout: seconds to wait before giving up (``result`` stays None).
    :param poll_seconds: how often to look.
    """

    def __init__(
        self,
        sandbox: Sandbox,
        model_package_group: str,
        run_key: str | None = None,
        decision: str | None = None,
        description: str | None = None,
        timeout: float = 3600.0,
        poll_seconds: float = 0.5,
    ) -> None:
        super().__init__(name=f"sandbox-approver-{run_key or 'any'}", daemon=True)
        if decision is None:
            decision = "Rejected" if sandbox.faults.get("reject_model_package") else "Approved"
        if decision not in ("Approved", "Rejected"):
            raise ValueError(f"decision must be 'Approved' or 'Rejected', got {decision!r}")
        self.sandbox = sandbox
        self.group = model_package_group
        self.run_key = run_key
        self.decision = decision
        self.description = description or (
            f"{decision} by the sandbox approver (emulating a reviewer in SageMaker Studio)")
        self.timeout = timeout
        self.poll_seconds = poll_seconds
        self.result: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def cancel(self) -> None:
        self._stop_event.set()

    def _find(self) -> dict[str, Any] | None:
        sm = self.sandbox.client("sagemaker", internal=True)
        packages = sm.list_model_packages(ModelPackageGroupName=self.group, SortBy="CreationTime",
                                          SortOrder="Descending").get("ModelPackageSummaryList", [])
        for summary in packages:
            desc = sm.describe_model_package(ModelPackageName=summary["ModelPackageArn"])
            meta = desc.get("CustomerMetadataProperties") or {}
            if self.run_key is None and desc.get("ModelApprovalStatus") == "PendingManualApproval":
                return desc
            if self.run_key is not None and meta.get(RUN_KEY_TAG) == self.run_key:
                return desc
        return None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - reported through .error
            self.error = exc
            log.exception("%s approver failed", PREFIX)

    def _run(self) -> None:
        deadline = time.monotonic() + self.timeout
        package = None
        found_at = 0.0
        while package is None:
            if self._stop_event.is_set() or time.monotonic() > deadline:
                return
            package = self._find()
            if package is None:
                self._stop_event.wait(self.poll_seconds)
        found_at = time.time()
        arn = package["ModelPackageArn"]
        self.sandbox.events.emit("approver", "waiting", f"package {arn} registered; waiting for the approval "
                                 "sensor to poll it before deciding", arn=arn)
        while not self._polled_since(found_at - 0.001):
            if self._stop_event.wait(self.poll_seconds) or time.monotonic() > deadline:
                return
        sm = self.sandbox.client("sagemaker", internal=True)
        sm.update_model_package(ModelPackageArn=arn, ModelApprovalStatus=self.decision,
                                ApprovalDescription=self.description)
        self.result = {"model_package_arn": arn, "decision": self.decision, "description": self.description}
        self.sandbox.events.emit("approver", "decision", f"{self.decision} {arn} (emulated reviewer): {self.description}",
                                 arn=arn, decision=self.decision)

    def _polled_since(self, t: float) -> bool:
        return any(r.service == "sagemaker" for a in POLL_ACTIONS for r in self.sandbox.requests.since(t, a))
