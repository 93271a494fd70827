"""The base of the project's AWS waiter triggers: the provider's ``AwsBaseWaiterTrigger`` with its hook built
from ``aws_hook_class``.

``AwsBaseWaiterTrigger.hook()`` is abstract in apache-airflow-providers-amazon up to 9.36.0 (the Amazon MWAA 3.3.1
image ships 9.34.0); from 9.37.0 on it builds the hook from ``aws_hook_class`` (apache/airflow#72171). A trigger
that only sets ``aws_hook_class`` cannot be instantiated on 9.34.0 (``TypeError: Can't instantiate abstract
class``), so every deferred wait would fail there. This class implements ``hook()`` the way both versions expect.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, ClassVar, NoReturn

from airflow.providers.amazon.aws.hooks.base_aws import AwsGenericHook
from airflow.providers.amazon.aws.triggers.base import AwsBaseWaiterTrigger
from airflow.triggers.base import TriggerEvent

from sim2real.orchestration.config import task_events_section
from sim2real.orchestration.events.consumer import EventDrivenResponses, WaitEvent, subscribe
from sim2real.orchestration.events.envelope import ResourceKey
from sim2real.orchestration.events.settings import EventSettings
from sim2real.orchestration.stop_rule import trigger_should_stop
from sim2real.orchestration.waits.core import Action, Step, WaitState, drive

#: The default of a wait field that has none: the trigger's constructor requires it (:attr:`StepWaitTrigger.fields`).
REQUIRED: Any = type("Required", (), {"__repr__": lambda self: "REQUIRED"})()

#: Seconds a stop on kill may take (below the triggerer's ``[triggerer] on_kill_timeout``, default 30).
STOP_ON_KILL_TIMEOUT_S = 25.0
#: The stops in progress: each runs as its own task, referenced here until it ends (the event loop keeps only weak
#: references to tasks), so that it outlives an ``on_kill`` that the triggerer cancels.
_STOPS_IN_PROGRESS: set[asyncio.Task] = set()


def _user_action_message() -> str:
    """The message Airflow's triggerer cancels a trigger with when it must call ``on_kill``
    (``airflow.jobs.triggerer_job_runner._USER_ACTION_CANCEL_MSG`` in 3.3.1)."""
    try:
        from airflow.jobs.triggerer_job_runner import _USER_ACTION_CANCEL_MSG
    except ImportError:  # pragma: no cover - the pinned Airflow has it
        return "__airflow_user_action__"
    return _USER_ACTION_CANCEL_MSG


async def _paced_by_source(_seconds: float) -> None:
    """The driver's pause between responses when :class:`EventDrivenResponses` paces the wait itself."""


class AwsHookWaiterTrigger(AwsBaseWaiterTrigger):
    """``AwsBaseWaiterTrigger`` whose ``hook()`` is ``aws_hook_class`` built from the serialized connection
    parameters (connection id, region, SSL verification, botocore config).

    Subclasses set ``aws_hook_class`` to an ``AwsGenericHook`` subclass, or override :meth:`hook`; a base class
    for other triggers says so with the class keyword ``base=True`` (``class StepWaitTrigger(AwsHookWaiterTrigger,
    base=True)``).

    :raises AttributeError: when the class is created (the import of its module, so a DAG import error): a
        class that is not a base, with no ``aws_hook_class`` and no :meth:`hook` of its own, or an
        ``aws_hook_class`` that is not an ``AwsGenericHook`` subclass. The provider rejects such an
        ``AwsBaseWaiterTrigger`` subclass the same way from 9.37.0 on (apache/airflow#72171), but only one that
        leaves ``hook()`` as the provider's, and this class overrides it: without this check the error would come
        from :meth:`hook`, in the triggerer, after the task deferred.
    """

    aws_hook_class: type[AwsGenericHook]

    def __init_subclass__(cls, base: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        hook_class = getattr(cls, "aws_hook_class", None)
        if hook_class is not None and not (isinstance(hook_class, type) and issubclass(hook_class, AwsGenericHook)):
            raise AttributeError(f"{cls.__name__}.aws_hook_class is {hook_class!r}, not an AwsGenericHook subclass")
        if hook_class is None and not base and cls.hook is AwsHookWaiterTrigger.hook:
            raise AttributeError(f"{cls.__name__} sets no aws_hook_class and does not override hook(): the "
                                 "triggerer could not build its hook")

    @property
    def _hook_parameters(self) -> dict[str, Any]:
        """The hook constructor's keywords from the serialized parameters (also for other hooks a trigger
        builds, e.g. CloudWatch Logs for progress lines). The provider has the same property from 9.37.0 on."""
        return {"aws_conn_id": self.aws_conn_id, "region_name": self.region_name,
                "verify": self.verify, "config": self.botocore_config}

    def hook(self) -> AwsGenericHook:
        """The hook of ``aws_hook_class`` for this trigger's connection, region, verify and botocore config.

        :raises AttributeError: on an instance of a base class (``base=True``) that sets no ``aws_hook_class``.
        """
        hook_class = getattr(type(self), "aws_hook_class", None)
        if hook_class is None:
            raise AttributeError(f"{type(self).__name__}.aws_hook_class is not set")
        return hook_class(**self._hook_parameters)


class StepWaitTrigger(AwsHookWaiterTrigger, base=True):
    """A wait run by the wait core: ``step_function`` decides each response, :func:`~sim2real.orchestration.waits.core.drive`
    runs it, and the trigger yields ONE event (``status``: ``success`` / ``failure`` / ``timeout``).

    Subclasses set ``aws_hook_class`` and ``step_function`` and implement :meth:`describe` (the hook
    call that returns the next response) and, when the step can ask for an action, :meth:`perform`.
    :meth:`step_params` (default: the serialized fields) is the step's ``WaitState.params``.

    **Responses: polling or AWS events.** ``events`` is the environment config's ``events`` section
    (:class:`~sim2real.orchestration.events.settings.EventSettings`, serialized). When it is enabled and the
    subclass names its resource keys (:meth:`event_keys`), :meth:`run` subscribes to them and the step function
    reads the wait's :class:`~sim2real.orchestration.events.consumer.EventDrivenResponses`: one describe at
    the start, then each state-change event as the service's describe-like response (:meth:`event_response`),
    with a reconcile describe every ``reconcile_interval_seconds`` (or sooner, :meth:`max_event_wait`). The wait
    then ends at a deadline, ``waiter_max_attempts`` x ``waiter_delay`` seconds after it started (events give
    far fewer responses than polls, so the attempt count would not bound the time). Otherwise it polls:
    ``describe`` every ``waiter_delay`` seconds, at most ``waiter_max_attempts`` times, as before. While the
    queue is unreachable an event-driven wait polls every ``waiter_delay`` seconds (logged), and goes back to
    events when the queue answers again (logged).
    """

    step_function: Callable[[Mapping[str, Any], WaitState], Step]
    #: The wait's own fields, declared once: name -> default (:data:`REQUIRED`: none; a mutable default is copied).
    #: The constructor takes them as keywords, sets each as an attribute and serializes them (the triggerer
    #: rebuilds the trigger from them); the step function reads them as ``WaitState.params``.
    fields: ClassVar[Mapping[str, Any]] = {}
    #: Defaults of ``waiter_delay`` (seconds between polls) and ``waiter_max_attempts`` (polls before ``timeout``).
    default_waiter_delay: ClassVar[int] = 30
    default_waiter_max_attempts: ClassVar[int] = 120

    def __init__(
        self,
        *,
        waiter_delay: int | None = None,
        waiter_max_attempts: int | None = None,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict | None = None,
        events: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> None:
        """The provider's trigger with what a step wait uses: the subclass's :attr:`fields` (as keywords), the poll
        interval (s) and attempt limit, the connection parameters, and ``events`` (the environment config's
        ``events`` section; None: polling). The provider's waiter-loop arguments (``waiter_name``,
        ``failure_message``, ``status_queries``, ``return_value``, ...) are left empty: the step function, not
        the provider's loop, decides each response.

        :raises TypeError: a keyword that is not one of :attr:`fields`, or a required field missing.
        :raises ValueError: when ``events`` is not a valid ``events`` section (names the key).
        """
        serialized_fields = self._take_fields(fields)
        waiter_delay = self.default_waiter_delay if waiter_delay is None else waiter_delay
        waiter_max_attempts = self.default_waiter_max_attempts if waiter_max_attempts is None else waiter_max_attempts
        self.events = dict(events) if events else None
        #: after an event-driven run: how many responses came from describes and from events (diagnostics, bench)
        self.responses_seen: dict[str, int] = {}
        #: while an event-driven run is in progress: its responses and its deadline (``time.time()`` seconds)
        self._event_source: EventDrivenResponses | None = None
        self.event_deadline: float | None = None
        self.event_settings = EventSettings.from_dict(self.events)
        if self.events is not None:
            serialized_fields = {**serialized_fields, "events": self.events}
        super().__init__(
            serialized_fields=serialized_fields, waiter_name="", waiter_args={}, failure_message="",
            status_message="", status_queries=[], return_value=None, waiter_delay=waiter_delay,
            waiter_max_attempts=waiter_max_attempts, aws_conn_id=aws_conn_id, region_name=region_name,
            verify=verify, botocore_config=botocore_config,
        )

    def _take_fields(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The declared fields' values (defaults filled in), each also set as an attribute."""
        name = type(self).__name__
        unknown = sorted(set(given) - set(self.fields))
        if unknown:
            raise TypeError(f"{name}() got unexpected keyword argument(s) {unknown}; its fields: {sorted(self.fields)}")
        missing = sorted(k for k, default in self.fields.items() if default is REQUIRED and k not in given)
        if missing:
            raise TypeError(f"{name}() missing required keyword argument(s) {missing}")
        values = {k: given[k] if k in given else copy.copy(default) for k, default in self.fields.items()}
        for key, value in values.items():
            setattr(self, key, value)
        return values

    def step_params(self) -> dict[str, Any]:
        """The fixed parameters the step function reads (ids, limits)."""
        params = dict(self.serialize()[1])
        params.pop("events", None)
        return params

    def event_keys(self) -> list[ResourceKey]:
        """The resource keys whose AWS state-change events answer this wait ([]: no such event, polling only).
        Subclasses name them with the :mod:`~sim2real.orchestration.events.envelope` helpers."""
        return []

    async def event_response(self, client: Any, state: WaitState, event: WaitEvent) -> Mapping[str, Any]:
        """The step function's response for a delivered event (default: its describe-like response as is).
        A subclass whose step needs what the event lacks (an exit code, nodes) completes it here."""
        return event.response

    def max_event_wait(self, state: WaitState, last_response: Mapping[str, Any] | None) -> float | None:
        """Seconds until the step function must see a fresh describe even without an event (a time-based
        limit that no state change announces), or None (the reconcile interval). ``last_response``: what the
        last step decided on."""
        return None

    def events_flowing(self) -> bool:
        """True while this wait runs on AWS events: subscribed, and the queue answers. False when it polls (no
        keys, events off), during the polling fallback (queue unreachable) and outside :meth:`run`. A
        :meth:`describe` that reads more than the service's describe call (e.g. an answer with no AWS event) uses
        it to make the service call only when the events cannot stand in for it."""
        source = self._event_source
        return source is not None and source.subscription is not None and source.subscription.events_available

    async def describe(self, client: Any, state: WaitState) -> Mapping[str, Any]:
        """The next response of the watched resource (one API round)."""
        raise NotImplementedError

    async def perform(self, client: Any, action: Action) -> str:
        """Do ``action`` (stop what was started); return "" or a sentence for the event's message."""
        raise NotImplementedError(f"{type(self).__name__} cannot perform {action.name}")

    async def stop_resource(self) -> None:
        """Stop what this wait watches (TerminateJob, StopBuild, CancelCommand, ...), when the task was stopped by a
        person (:meth:`on_kill` decides). Subclasses that started something implement it; default: nothing."""

    async def on_kill(self) -> None:
        """Airflow 3.3+ calls this when the triggerer cancels the trigger "by user action". Stops the resource
        (:meth:`stop_resource`) only when the task really ended, and makes sure the stop is not lost.

        * **Only a stop**: the triggerer also cancels a trigger another triggerer took over (a restart, a late
          heartbeat, a second triggerer). :func:`sim2real.orchestration.stop_rule.trigger_should_stop` reads the
          task instance's state first: still ``deferred``, with this trigger's wait claim, is a hand-over and
          nothing is stopped.
        * **A stop that stops**: Airflow 3.3.1's triggerer sends the cancel again on every loop (about once a
          second) until the trigger has ended, which cancels an ``on_kill`` still waiting for AWS (before, the
          ``TerminateJob`` of a task marked failed was lost whenever AWS took longer than that to answer: the
          cancel arrived while the call was under way). The stop runs as its own task: a repeated cancel is
          absorbed while it runs, and any other cancellation (the triggerer shutting down, its
          ``on_kill_timeout``) leaves the stop running to its end. The stop is bounded by
          :data:`STOP_ON_KILL_TIMEOUT_S`.
        """
        stop = asyncio.ensure_future(self._stop_after_kill())
        _STOPS_IN_PROGRESS.add(stop)
        stop.add_done_callback(_STOPS_IN_PROGRESS.discard)
        repeated = _user_action_message()
        while True:
            try:
                await asyncio.shield(stop)
                return
            except asyncio.CancelledError as err:
                if stop.done() or not (err.args and err.args[0] == repeated):
                    raise
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()  # this cancel only repeats the one being handled

    async def _stop_after_kill(self) -> None:
        asked = time.monotonic()
        decision = await trigger_should_stop(self)
        took = time.monotonic() - asked
        if not decision.stop:
            self.log.warning("Trigger cancelled, but NOT stopping what it waits on: %s (state read in %.1f s)",
                             decision.why, took)
            return
        self.log.info("Task stopped (%s; state read in %.1f s): stopping what this wait watches", decision.why, took)
        try:
            await asyncio.wait_for(self.stop_resource(), timeout=STOP_ON_KILL_TIMEOUT_S)
        except Exception as err:  # noqa: BLE001 - logged for the person who stopped it
            self.log.error("Stopping what %s watches FAILED (%s: %s): stop it by hand; the orphan sweeper stops it "
                           "once the run is over", type(self).__name__, type(err).__name__, err)
            raise

    #: Whether this copy of the trigger has recorded its wait claim (:meth:`_claim_wait`); until it has, the stop
    #: rule does not look at claims (a deferred task then counts as a hand-over, as before claims).
    wait_claimed: bool = False

    async def _claim_wait(self) -> None:
        """Claim this wait for its try (:func:`sim2real.orchestration.stop_rule.claim_wait`), so that a cancel can
        tell a hand-over from a cleared task deferred again; sets :attr:`wait_claimed`. Outside a triggerer (no
        task instance): nothing. A failed write is logged and the wait goes on; the stop rule then takes a
        deferred task for a hand-over (it leaves the job alone)."""
        from asgiref.sync import sync_to_async

        from sim2real.orchestration.stop_rule import TRIGGER_STATE_READ_TIMEOUT_S, claim_wait

        ti = getattr(self, "task_instance", None)
        if ti is None or getattr(ti, "try_number", None) is None:
            return
        try:
            await asyncio.wait_for(sync_to_async(claim_wait, thread_sensitive=False)(ti),
                                   TRIGGER_STATE_READ_TIMEOUT_S)
        except Exception as err:  # noqa: BLE001 - the claim only sharpens the stop rule
            self.log.warning("Could not record this wait's claim (XCom sim2real_wait): %s: %s; while the task is "
                             "deferred, a cancel of this trigger leaves the job alone (as for a hand-over)",
                             type(err).__name__, err)
            return
        self.wait_claimed = True

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # In the background: the first Execution API call of a triggerer process can take tens of seconds on a
        # loaded host, and the wait must not start that late. Referenced on the trigger until it ends.
        self._claim = asyncio.ensure_future(self._claim_wait())
        step_function = type(self).step_function
        state = WaitState(params=self.step_params(), poll_interval_s=float(self.waiter_delay))
        keys = self.event_keys() if self.event_settings.enabled else []
        async with await self.hook().get_async_conn() as client:
            if keys:
                event = await self._drive_with_events(client, step_function, state, keys)
            else:
                event = await drive(
                    step_function,
                    lambda state: self.describe(client, state),
                    state,
                    max_attempts=int(self.attempts),
                    perform=lambda action: self.perform(client, action),
                    log=self.log,
                )
        yield TriggerEvent(event)

    async def _drive_with_events(self, client: Any, step_function: Callable[[Mapping[str, Any], WaitState], Step],
                                 initial: WaitState, keys: list[ResourceKey]) -> dict[str, Any]:
        """:func:`drive` over :class:`EventDrivenResponses` of ``keys``, bounded by the deadline."""
        settings = self.event_settings
        deadline = time.time() + float(self.waiter_delay) * int(self.attempts)
        current = {"state": initial, "response": None}
        subscription = subscribe(keys, settings, aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        resource = ", ".join(k.ident for k in keys)
        source = EventDrivenResponses(subscription, lambda: self.describe(client, current["state"]),
                                      poll_interval=float(self.waiter_delay), settings=settings, log=self.log,
                                      resource=resource)
        self._event_source, self.event_deadline = source, deadline
        self.log.info("Waiting on %s by AWS events (queue %s; reconcile describe every %.0f s; deadline in %.0f s)",
                      resource, settings.queue_url, settings.reconcile_interval_seconds, deadline - time.time())

        async def next_response(state: WaitState) -> Mapping[str, Any]:
            current["state"] = state
            wait = max(deadline - time.time(), 0.0)
            check = self.max_event_wait(state, current["response"])
            observation = await source(max_wait=wait if check is None else min(wait, max(check, 0.0)))
            if observation.event is not None:
                response = await self.event_response(client, state, observation.event)
            else:
                response = observation.response
            current["response"] = response
            return response

        try:
            return await drive(step_function, next_response, initial, max_attempts=None, deadline=deadline,
                               perform=lambda action: self.perform(client, action), log=self.log,
                               sleep=_paced_by_source)
        finally:
            source.close()
            self._event_source = None
            self.responses_seen = {"describe": source.describes, "event": source.events}
            self.log.info("Wait on %s: %d describe call(s), %d event(s)", resource, source.describes, source.events)


def defer_wait(task: Any, trigger_class: type[StepWaitTrigger], *, method_name: str, waiter_delay: int,
               waiter_max_attempts: int, kwargs: Mapping[str, Any] | None = None,
               timeout: dt.timedelta | None = None, margin_seconds: int = 120, **fields: Any) -> NoReturn:
    """Defer ``task`` (an operator or sensor on the Amazon provider's ``AwsBaseOperator`` / ``AwsBaseSensor``) to
    ``trigger_class`` built with the wait's ``fields``, the task's connection parameters (``aws_conn_id``,
    ``region_name``, ``verify``, ``botocore_config``) and the environment config's ``events`` section.

    :param method_name: the task's method that resumes with the event.
    :param waiter_delay: seconds between polls; ``waiter_max_attempts``: polls before the trigger's ``timeout`` event.
    :param kwargs: what the resume method gets besides the event.
    :param timeout: the deferral's timeout; default: the wait's own time (``waiter_delay`` × ``waiter_max_attempts``)
        plus ``margin_seconds``, so that the trigger's ``timeout`` event, which names the resource, comes first.
    :raises TaskDeferred: always (Airflow's ``BaseOperator.defer``).
    """
    trigger = trigger_class(waiter_delay=waiter_delay, waiter_max_attempts=waiter_max_attempts,
                            aws_conn_id=task.aws_conn_id, region_name=task.region_name, verify=task.verify,
                            botocore_config=task.botocore_config, events=task_events_section(task.log), **fields)
    if timeout is None:
        timeout = dt.timedelta(seconds=max(1, int(waiter_delay)) * int(waiter_max_attempts) + margin_seconds)
    task.defer(trigger=trigger, method_name=method_name, kwargs=dict(kwargs) if kwargs else None, timeout=timeout)
    raise AssertionError("defer() returned")  # pragma: no cover - defer always raises TaskDeferred
