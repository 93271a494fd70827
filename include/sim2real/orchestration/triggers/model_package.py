"""Trigger waiting for this run's model package to be Approved or Rejected.

Locates the package by ``CustomerMetadataProperties["sim2real:run-key"]`` (ListModelPackages
newest first + DescribeModelPackage), then classifies DescribeModelPackage with the custom
waiter ``model_package_approved`` (``sim2real/orchestration/waiters/sagemaker_ext.json``).

With the environment config's ``events`` section enabled, a wait whose package ARN is known subscribes to the
package's ``SageMaker Model Package State Change`` events (source ``aws.sagemaker``; ``detail`` carries the
``DescribeModelPackage`` fields, ``ModelPackageArn``, ``ModelPackageGroupName``, ``ModelApprovalStatus``...;
``resources`` the package ARN: SageMaker Developer Guide, "Events that Amazon SageMaker AI sends to Amazon
EventBridge", model package state change; the EventBridge schema's fields as the CDK's generated
``SageMakerModelPackageStateChange`` pattern lists them). The event's detail is read as the DescribeModelPackage
response (:mod:`sim2real.orchestration.events.envelope`), so the same step function decides it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.triggers.base import TriggerEvent

from sim2real.orchestration.events import envelope
from sim2real.orchestration.events.consumer import WaitEvent, next_reconcile_at
from sim2real.orchestration.hooks.model_registry import ModelRegistryHook, package_matches
from sim2real.orchestration.triggers.base import REQUIRED, StepWaitTrigger
from sim2real.orchestration.waits.core import WaitState
from sim2real.orchestration.waits.sagemaker import AIRFLOW_RESPONSE_KEY, model_package_decision_step, model_package_step


class ModelPackageApprovalTrigger(StepWaitTrigger):
    """Poll the model registry until this run's package is Approved or Rejected
    (:func:`~sim2real.orchestration.waits.sagemaker.model_package_step`).

    :param model_package_group_name: the model package group.
    :param run_key: value of ``CustomerMetadataProperties["sim2real:run-key"]``.
    :param pipeline_execution_arn: optional cross-check (see ``package_matches``).
    :param model_package_arn: the package, when already located.
    :param waiter_delay: seconds between polls.
    :param waiter_max_attempts: polls before a ``timeout`` event (with events: the deadline is
        ``waiter_max_attempts`` x ``waiter_delay`` seconds).
    :param events: the environment config's ``events`` section (None: polling). Events are used only when the
        package ARN is known when the trigger starts (the package's state-change events are keyed by it); a wait
        that must still locate the package polls.

    One event: ``{"status": "success", "message", **approval_result}``; ``{"status": "failure",
    "message", "model_package_arn", "approval_status": "Rejected", "approval_description"}``;
    ``{"status": "timeout", "message", "model_package_arn" (None when never found), "approval_status"}``.
    """

    aws_hook_class = ModelRegistryHook

    fields = {"model_package_group_name": REQUIRED, "run_key": REQUIRED, "pipeline_execution_arn": None,
              "model_package_arn": None}
    default_waiter_delay, default_waiter_max_attempts = 60, 1440

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

    def event_keys(self) -> list[envelope.ResourceKey]:
        """``SageMaker Model Package State Change`` events of the package (keyed by its ARN, as the event's
        ``detail.ModelPackageArn`` carries it); none while the package is still to be located (polling)."""
        return [envelope.model_package(self.model_package_arn)] if self.model_package_arn else []

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


#: Seconds the decision trigger holds an event after it started (:class:`ModelPackageDecisionTrigger`).
SETTLE_SECONDS = 5.0


class ModelPackageDecisionTrigger(ModelPackageApprovalTrigger):
    """The approval step's wait: ends on whichever comes first, an answer to the task's human-in-the-loop
    request in Airflow or an approval / rejection of the package in the registry (SageMaker Studio, the CLI).

    Each round reads the task instance's human-in-the-loop detail (the provider's
    ``get_hitl_detail_content_detail``, through the Task Execution API, as the provider's ``HITLTrigger``
    does), then DescribeModelPackage (:class:`ModelPackageApprovalTrigger`), and decides with
    :func:`~sim2real.orchestration.waits.sagemaker.model_package_decision_step`. On Airflow 3.3+ an answer
    given through the Required Actions page or the REST API also resumes the deferred task at once (the
    API's ``update_hitl_detail`` submits the answer as the event); the read here covers an answer recorded
    any other way (e.g. ``dag.test()``).

    :param ti_id: the task instance whose human-in-the-loop detail to read.
    :param model_package_arn: the package (located before the step asks the reviewer).
    Other parameters: :class:`ModelPackageApprovalTrigger`.

    **With events** (``events`` enabled): the registry's side comes from the package's state-change events, with a
    DescribeModelPackage at the start, every ``reconcile_interval_seconds`` and at the deadline. The Airflow answer
    has no AWS event, so it is still read every ``waiter_delay`` seconds (:meth:`max_event_wait`); those rounds
    reuse the last DescribeModelPackage response instead of calling SageMaker again (an event would have ended
    the wait on a decision). While the queue is unreachable every round describes the package, as polling does.

    When the registry decided first, the trigger answers the Airflow request with that decision (the provider's
    ``update_hitl_detail_response``, as ``HITLTrigger`` records a timeout's default): the Required Actions page
    then shows it closed, and a later answer there is refused instead of being ignored.

    :param refused: lines naming answers the step refused (four-eyes, or a later contrary decision): the note
        that closes the request with the registry's decision repeats them, so their authors see them there.
    :param settle_seconds: the trigger yields its event no sooner than this many seconds after it started
        (default :data:`SETTLE_SECONDS`). A trigger firing right after its task deferred can meet Airflow 3.3's
        race between the deferral's executor event and the resume (the task is then failed from a stale state
        and retried); the answer or decision is only held, never lost.

    One event: ``{"status": "success", "via": "airflow", "model_package_arn", "hitl_response"}``; or
    :class:`ModelPackageApprovalTrigger`'s events with ``via: "sagemaker"`` (``timeout`` without ``via``).
    """

    fields = {**ModelPackageApprovalTrigger.fields, "model_package_arn": REQUIRED, "ti_id": REQUIRED, "refused": [],
              "settle_seconds": SETTLE_SECONDS}

    def __init__(self, **kwargs: Any) -> None:
        for key, cast in (("ti_id", str), ("settle_seconds", float), ("refused", lambda v: list(v or []))):
            if key in kwargs:
                kwargs[key] = cast(kwargs[key])
        super().__init__(**kwargs)
        self._unreadable_logged = False
        #: the last DescribeModelPackage response and when it was read (``time.time()``), for rounds on events
        self._package: dict[str, Any] | None = None
        self._package_read_at = 0.0
        #: DescribeModelPackage calls this trigger made (diagnostics, tests)
        self.package_describes = 0

    step_function = staticmethod(model_package_decision_step)

    def max_event_wait(self, state: WaitState, last_response: Mapping[str, Any] | None) -> float:
        """Every ``waiter_delay`` seconds: the Airflow answer is read on the polling interval, events or not."""
        return float(self.waiter_delay)

    def _package_due(self) -> bool:
        """Whether this round calls DescribeModelPackage: always when polling (or in the polling fallback); with
        events only first, at the deadline, and at the shared reconcile clock's next tick after the last read
        (:func:`~sim2real.orchestration.events.consumer.next_reconcile_at`, the ticks every event-driven wait
        reconciles at)."""
        if not self.events_flowing() or self._package is None:
            return True
        now = time.time()
        if self.event_deadline is not None and now >= self.event_deadline:
            return True
        return now >= next_reconcile_at(self._package_read_at, self.event_settings.reconcile_interval_seconds)

    async def _airflow_answer(self) -> dict[str, Any] | None:
        from uuid import UUID

        from asgiref.sync import sync_to_async

        from airflow.sdk.execution_time.hitl import get_hitl_detail_content_detail

        try:
            detail = await sync_to_async(get_hitl_detail_content_detail)(ti_id=UUID(self.ti_id))
        except Exception as err:  # noqa: BLE001 - e.g. no request for this try (404): the registry still decides
            if not self._unreadable_logged:
                self.log.warning("the Airflow request of task instance %s is not readable (%s): here only a "
                                 "decision in SageMaker (or Airflow's API resuming the task) ends the wait",
                                 self.ti_id, err)
                self._unreadable_logged = True
            return None
        if detail is None:  # a runner without the Task Execution API's HITL route (dag.test()'s in-process one)
            if not self._unreadable_logged:
                self.log.warning("this trigger runner cannot read the Airflow answer of task instance %s: here only "
                                 "a decision in SageMaker (or Airflow's API resuming the task) ends the wait",
                                 self.ti_id)
                self._unreadable_logged = True
            return None
        if not (detail.response_received and detail.chosen_options):
            return None
        user = detail.responded_by_user
        return {
            "chosen_options": list(detail.chosen_options),
            "params_input": dict(detail.params_input or {}),
            "responded_by_user": {"id": user.id, "name": user.name} if user is not None else None,
            "responded_at": detail.responded_at,
        }

    async def describe(self, client, state: WaitState) -> dict[str, Any]:
        """The package's DescribeModelPackage response, with the Airflow answer under
        :data:`~sim2real.orchestration.waits.sagemaker.AIRFLOW_RESPONSE_KEY` once one is recorded."""
        answer = await self._airflow_answer()
        if answer is not None:
            return {"ModelPackageArn": self.model_package_arn, AIRFLOW_RESPONSE_KEY: answer}
        if self._package_due():
            package = await super().describe(client, state)
            self.package_describes += 1
            self._package, self._package_read_at = dict(package), time.time()
        return dict(self._package or {})

    async def event_response(self, client, state: WaitState, event: WaitEvent) -> dict[str, Any]:
        """The Airflow answer when one is recorded (read first, as in :meth:`describe`), else the event's
        DescribeModelPackage-shaped detail."""
        answer = await self._airflow_answer()
        if answer is not None:
            return {"ModelPackageArn": self.model_package_arn, AIRFLOW_RESPONSE_KEY: answer}
        return dict(event.response)

    async def _close_request(self, event: dict[str, Any]) -> None:
        from uuid import UUID

        from asgiref.sync import sync_to_async

        from airflow.sdk.execution_time.hitl import update_hitl_detail_response

        status = event.get("approval_status")
        option = "Approve" if status == "Approved" else "Reject"
        note = (f"{status} in SageMaker (model package {event.get('model_package_arn')}): "
                f"{event.get('approval_description') or 'no ApprovalDescription'}")
        if self.refused:
            note += " | " + " | ".join(self.refused)
        try:
            await sync_to_async(update_hitl_detail_response)(ti_id=UUID(self.ti_id), chosen_options=[option],
                                                             params_input={"comment": note})
        except Exception as err:  # noqa: BLE001 - the registry holds the decision; the request is its view
            self.log.warning("could not answer the Airflow request of task instance %s with the SageMaker "
                             "decision: %s", self.ti_id, err)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        import asyncio

        started = time.monotonic()
        async for event in super().run():
            hold = self.settle_seconds - (time.monotonic() - started)
            if hold > 0:
                await asyncio.sleep(hold)
            payload = event.payload
            if payload.get("via") == "sagemaker" and payload.get("approval_status") in ("Approved", "Rejected"):
                # An Airflow answer given meanwhile goes to the step, which orders the two decisions by time.
                answer = await self._airflow_answer()
                if answer is not None:
                    yield TriggerEvent({"status": "success", "via": "airflow",
                                        "message": f"answered in Airflow; the registry is {payload['approval_status']}",
                                        "model_package_arn": payload.get("model_package_arn") or self.model_package_arn,
                                        "hitl_response": answer})
                    return
                await self._close_request(payload)
            yield event
