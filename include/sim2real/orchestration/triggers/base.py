"""The base of the project's AWS waiter triggers: the provider's ``AwsBaseWaiterTrigger`` with its hook built
from ``aws_hook_class``.

``AwsBaseWaiterTrigger.hook()`` is abstract in apache-airflow-providers-amazon up to 9.34.0, the version the
Amazon MWAA 3.3.1 image ships; later releases build the hook from ``aws_hook_class``. A trigger that only
sets ``aws_hook_class`` cannot be instantiated on 9.34.0 (``TypeError: Can't instantiate abstract class``), so
every deferred wait would fail there. This class implements ``hook()`` the way both versions expect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsGenericHook
from airflow.providers.amazon.aws.triggers.base import AwsBaseWaiterTrigger
from airflow.triggers.base import TriggerEvent

from sim2real.orchestration.waits.core import Action, Step, WaitState, drive


class AwsHookWaiterTrigger(AwsBaseWaiterTrigger):
    """``AwsBaseWaiterTrigger`` whose ``hook()`` is ``aws_hook_class`` built from the serialized connection
    parameters (connection id, region, SSL verification, botocore config).

    Subclasses set ``aws_hook_class`` to an ``AwsGenericHook`` subclass.

    :raises AttributeError: on use, when the subclass sets no ``aws_hook_class``.
    """

    aws_hook_class: type[AwsGenericHook]

    @property
    def _hook_parameters(self) -> dict[str, Any]:
        """The hook constructor's keywords from the serialized parameters (also for other hooks a trigger
        builds, e.g. CloudWatch Logs for progress lines). Provider 9.34.0 has no such property."""
        return {"aws_conn_id": self.aws_conn_id, "region_name": self.region_name,
                "verify": self.verify, "config": self.botocore_config}

    def hook(self) -> AwsGenericHook:
        """The hook of ``aws_hook_class`` for this trigger's connection, region, verify and botocore config."""
        hook_class = getattr(type(self), "aws_hook_class", None)
        if hook_class is None:
            raise AttributeError(f"{type(self).__name__}.aws_hook_class is not set")
        return hook_class(**self._hook_parameters)


class StepWaitTrigger(AwsHookWaiterTrigger):
    """A wait run by the wait core: ``step_function`` decides each response, :func:`~sim2real.orchestration.waits.core.drive`
    polls, and the trigger yields ONE event (``status``: ``success`` / ``failure`` / ``timeout``).

    Subclasses set ``aws_hook_class`` and ``step_function`` and implement :meth:`describe` (the hook
    call that returns the next response) and, when the step can ask for an action, :meth:`perform`.
    :meth:`step_params` (default: the serialized fields) is the step's ``WaitState.params``.
    """

    step_function: Callable[[Mapping[str, Any], WaitState], Step]

    def __init__(
        self,
        *,
        serialized_fields: dict[str, Any],
        waiter_delay: int,
        waiter_max_attempts: int,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict | None = None,
    ) -> None:
        """The provider's trigger with what a step wait uses: the subclass's ``serialized_fields``, the poll
        interval (s) and attempt limit, and the connection parameters. The provider's waiter-loop arguments
        (``waiter_name``, ``failure_message``, ``status_queries``, ``return_value``, ...) are left empty: the
        step function, not the provider's loop, decides each response."""
        super().__init__(
            serialized_fields=serialized_fields, waiter_name="", waiter_args={}, failure_message="",
            status_message="", status_queries=[], return_value=None, waiter_delay=waiter_delay,
            waiter_max_attempts=waiter_max_attempts, aws_conn_id=aws_conn_id, region_name=region_name,
            verify=verify, botocore_config=botocore_config,
        )

    def step_params(self) -> dict[str, Any]:
        """The fixed parameters the step function reads (ids, limits)."""
        return dict(self.serialize()[1])

    async def describe(self, client: Any, state: WaitState) -> Mapping[str, Any]:
        """The next response of the watched resource (one API round)."""
        raise NotImplementedError

    async def perform(self, client: Any, action: Action) -> str:
        """Do ``action`` (stop what was started); return "" or a sentence for the event's message."""
        raise NotImplementedError(f"{type(self).__name__} cannot perform {action.name}")

    async def run(self) -> AsyncIterator[TriggerEvent]:
        step_function = type(self).step_function
        async with await self.hook().get_async_conn() as client:
            event = await drive(
                step_function,
                lambda state: self.describe(client, state),
                WaitState(params=self.step_params(), poll_interval_s=float(self.waiter_delay)),
                max_attempts=int(self.attempts),
                perform=lambda action: self.perform(client, action),
                log=self.log,
            )
        yield TriggerEvent(event)
