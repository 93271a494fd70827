"""One wait-event consumer per triggerer process, shared by every wait in it.

The consumer long-polls the wait-event SQS queue (``ReceiveMessage``, ``WaitTimeSeconds`` up to 20 s), parses each
message as an EventBridge envelope (:class:`~sim2real.orchestration.events.envelope.EventEnvelope`), finds the waits
registered in this process for the event's resource key and hands each of them the event with its describe-like
response. It is an asyncio task on the triggerer's event loop, started by the first :func:`subscribe`; when the
last subscription closes it finishes the receive in flight (at most ``wait_time_seconds``), releases what that
brought, and ends. (Cancelling it mid-receive would hide the messages SQS had just handed it for the whole
visibility timeout.)

Message ownership (several triggerers read the same queue):

* a message whose resource has a wait here is delivered to every such wait, then deleted;
* a message whose resource has no wait here is **released** (``ChangeMessageVisibility``) so another triggerer
  can take it: visible again after ``release_visibility_seconds * 2**(receives - 1)`` seconds (capped at
  :data:`MAX_RELEASE_SECONDS`; ``receives`` is SQS's ``ApproximateReceiveCount``). Each receive counts toward
  the queue's redrive ``maxReceiveCount``, so a message nobody owns ends in the dead-letter queue instead of
  circling forever; the backoff keeps a lone consumer from burning those receives in a tight loop (with
  ``maxReceiveCount`` 10 and a 1 s base, a message stays available for about four minutes);
* a message that is not a supported EventBridge event is released the same way (never deleted: nothing is lost);
* the same event delivered twice (EventBridge and SQS are at-least-once; Greengrass repeats events) reaches each
  wait once: every subscription remembers the event ids it has seen.

Events never decide an outcome alone: a wait starts from a describe call and reconciles with one at a slow
interval (:class:`EventDrivenResponses`), so a lost, late, duplicated or released-to-the-DLQ event only delays it.

When the queue cannot be reached (no queue configured, access denied, queue missing, network), the consumer logs
it, marks itself unavailable and wakes every subscription; waits then poll at their normal interval
(:attr:`EventSubscription.events_available`) until a later receive succeeds.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from .envelope import EventEnvelope, EventParseError, ResourceKey
from .settings import EventSettings

log = logging.getLogger(__name__)

#: Consecutive failed receives after which the queue counts as unreachable (waits fall back to polling).
FAILURES_BEFORE_FALLBACK = 2
#: Seconds between receive attempts while the queue is unreachable.
RETRY_SECONDS = 30.0
#: Longest time a released message stays hidden (seconds).
MAX_RELEASE_SECONDS = 60
#: A reconcile describe is due at the first tick of the shared reconcile clock at least this many seconds away
#: (so a describe that ends just before a tick is not followed by another at the tick).
RECONCILE_MARGIN_SECONDS = 0.5


def next_reconcile_at(now: float, interval: float, margin: float = RECONCILE_MARGIN_SECONDS) -> float:
    """When a wait that last heard of its resource at ``now`` describes it again if no event comes: the first
    multiple of ``interval`` seconds since the epoch later than ``now + margin``.

    Every wait of a process (of every triggerer, their clocks being the same to a few ms) therefore reconciles at
    the same instants, so waits that describe alike can share one call at each tick (the Batch trigger's
    DescribeJobs takes 100 jobs), instead of one call per wait at 600 s after its own last event. A wait still
    describes at most ``interval + margin`` seconds after its last event or describe.

    :param now: seconds since the epoch (``time.time()``).
    :param interval: the reconcile interval (seconds, > 0).
    :param margin: seconds (>= 0).
    :return: seconds since the epoch.
    """
    if interval <= 0:
        raise ValueError(f"the reconcile interval must be positive, got {interval!r}")
    return (math.floor((now + margin) / interval) + 1) * interval


@dataclass(frozen=True)
class WaitEvent:
    """An event delivered to one wait.

    :param envelope: the parsed EventBridge event.
    :param response: its describe-like response (:meth:`EventEnvelope.describe_response`).
    :param received_at: ``time.time()`` when the consumer received the message (seconds since the epoch).
    :param sent_at: SQS ``SentTimestamp`` of the message (seconds since the epoch; None when SQS gave none).
    """

    envelope: EventEnvelope
    response: dict[str, Any]
    received_at: float
    sent_at: float | None = None


class EventSubscription:
    """One wait's registration for one or more resource keys (e.g. an SSM command's invocation on each of its
    instances), with one inbox. Get events with :meth:`next_event`; :meth:`close` when done."""

    def __init__(self, consumer: EventConsumer, keys: tuple[ResourceKey, ...], remember: int = 512) -> None:
        if not keys:
            raise ValueError("a subscription needs at least one resource key")
        self.consumer = consumer
        self.keys = keys
        self._queue: asyncio.Queue[WaitEvent | None] = asyncio.Queue()
        self._seen: deque[str] = deque(maxlen=remember)
        self._seen_set: set[str] = set()
        self.closed = False
        self.duplicates = 0

    @property
    def key(self) -> ResourceKey:
        """The first (for most waits the only) resource key."""
        return self.keys[0]

    @property
    def events_available(self) -> bool:
        """False while the queue is unreachable: the wait should poll at its normal interval."""
        return self.consumer.available and not self.closed

    def _offer(self, event: WaitEvent) -> bool:
        """Queue ``event`` unless this subscription already had its id (True when queued)."""
        if event.envelope.id in self._seen_set:
            self.duplicates += 1
            return False
        if len(self._seen) == self._seen.maxlen:
            self._seen_set.discard(self._seen[0])
        self._seen.append(event.envelope.id)
        self._seen_set.add(event.envelope.id)
        self._queue.put_nowait(event)
        return True

    def _wake(self) -> None:
        self._queue.put_nowait(None)

    async def next_event(self, wait_s: float | None) -> WaitEvent | None:
        """The next event for this key, or None after ``wait_s`` seconds or when event availability changed
        (the caller should then describe the resource)."""
        try:
            return await asyncio.wait_for(self._queue.get(), wait_s)
        except asyncio.TimeoutError:
            return None

    def close(self) -> None:
        """Leave the consumer (the last subscription to leave stops it). Idempotent."""
        if not self.closed:
            self.closed = True
            self.consumer._unsubscribe(self)

    async def __aenter__(self) -> EventSubscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


ClientFactory = Callable[[], Awaitable[Any]]
"""``async () -> aiobotocore SQS client context manager`` (e.g. ``SqsHook(...).get_async_conn``)."""


class EventConsumer:
    """Reads the wait-event queue for the waits of this process (see the module docstring).

    :param settings: queue URL and timings (:class:`EventSettings`; must be ``enabled``).
    :param client_factory: coroutine function returning an aiobotocore SQS client context manager.
    :param on_stop: called once the consumer's task ended after its last subscription left.
    """

    def __init__(self, settings: EventSettings, client_factory: ClientFactory,
                 on_stop: Callable[[EventConsumer], None] | None = None) -> None:
        if not settings.queue_url:
            raise ValueError("EventConsumer needs settings.queue_url (the wait-event SQS queue URL)")
        self.settings = settings
        self._client_factory = client_factory
        self._on_stop = on_stop
        self._subs: dict[ResourceKey, list[EventSubscription]] = {}
        self._task: asyncio.Task | None = None
        self.available = True
        self.unavailable_reason = ""
        #: API calls and message outcomes: ReceiveMessage, DeleteMessageBatch, ChangeMessageVisibilityBatch (calls);
        #: messages, delivered, released, malformed, duplicates (messages).
        self.stats: Counter[str] = Counter()
        self._failures = 0

    # -- registration ----------------------------------------------------------------------------------------
    def subscribe(self, key: ResourceKey | tuple[ResourceKey, ...] | list[ResourceKey]) -> EventSubscription:
        """Register a wait for ``key`` (or each of several keys, one inbox) (call on the running event loop;
        starts the consumer's task)."""
        keys = (key,) if isinstance(key, ResourceKey) else tuple(dict.fromkeys(key))
        sub = EventSubscription(self, keys)
        for k in keys:
            self._subs.setdefault(k, []).append(sub)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sim2real-wait-events")
        return sub

    def _unsubscribe(self, sub: EventSubscription) -> None:
        for key in sub.keys:
            subs = self._subs.get(key, [])
            if sub in subs:
                subs.remove(sub)
            if not subs:
                self._subs.pop(key, None)
        # the task sees no subscription after its current receive and ends by itself

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the consumer's task runs on (None before the first subscription)."""
        return self._task.get_loop() if self._task is not None else None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def drained(self) -> None:
        """Wait until the task has ended (after the last subscription left)."""
        if self._task is not None:
            try:
                await asyncio.shield(self._task)
            except asyncio.CancelledError:
                pass

    @property
    def subscriptions(self) -> int:
        """Waits registered (a wait with several keys counts once)."""
        return len({id(sub) for subs in self._subs.values() for sub in subs})

    async def stop(self) -> None:
        """Cancel the task and wait for it (tests, shutdown)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    # -- the loop ----------------------------------------------------------------------------------------
    def _set_available(self, available: bool, reason: str = "") -> None:
        if available == self.available:
            return
        self.available, self.unavailable_reason = available, reason
        if available:
            log.info("wait-event queue %s reachable again: waits resume on events", self.settings.queue_url)
        else:
            log.warning("wait-event queue %s unreachable (%s): waits fall back to polling at their normal "
                        "interval until it answers", self.settings.queue_url, reason)
        for sub in {id(s): s for subs in self._subs.values() for s in subs}.values():
            sub._wake()

    async def _run(self) -> None:
        try:
            while self._subs:
                try:
                    async with await self._client_factory() as client:
                        while self._subs:
                            await self.poll_once(client)
                            self._failures = 0
                            self._set_available(True)
                except asyncio.CancelledError:
                    raise
                except Exception as err:  # noqa: BLE001 - any failure means: fall back, retry later
                    self._failures += 1
                    reason = f"{type(err).__name__}: {err}"
                    log.debug("wait-event receive failed (%d in a row): %s", self._failures, reason)
                    if self._failures >= FAILURES_BEFORE_FALLBACK:
                        self._set_available(False, reason)
                        await asyncio.sleep(RETRY_SECONDS)
                    else:
                        await asyncio.sleep(1.0)
        finally:
            if not self._subs and self._on_stop is not None:
                self._on_stop(self)

    async def poll_once(self, client: Any) -> int:
        """One long-poll receive and the handling of what it returned; the number of messages received."""
        s = self.settings
        self.stats["ReceiveMessage"] += 1
        reply = await client.receive_message(
            QueueUrl=s.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=s.wait_time_seconds,
            VisibilityTimeout=s.visibility_timeout_seconds, MessageSystemAttributeNames=["SentTimestamp",
                                                                                        "ApproximateReceiveCount"])
        messages = reply.get("Messages") or []
        received_at = time.time()
        delete, release = [], []
        for n, message in enumerate(messages):
            outcome = self._dispatch(message, received_at)
            self.stats["messages"] += 1
            self.stats[outcome] += 1
            if outcome == "delivered":
                delete.append({"Id": str(n), "ReceiptHandle": message["ReceiptHandle"]})
            else:
                release.append({"Id": str(n), "ReceiptHandle": message["ReceiptHandle"],
                                "VisibilityTimeout": release_seconds(s, message)})
        # one batch call each (up to 10 entries, as many as one receive returns)
        if delete:
            self.stats["DeleteMessageBatch"] += 1
            reply = await client.delete_message_batch(QueueUrl=s.queue_url, Entries=delete)
            _log_failed(reply, "delete")
        if release:
            self.stats["ChangeMessageVisibilityBatch"] += 1
            reply = await client.change_message_visibility_batch(QueueUrl=s.queue_url, Entries=release)
            _log_failed(reply, "release")
        return len(messages)

    def _dispatch(self, message: dict[str, Any], received_at: float) -> Literal["delivered", "released", "malformed"]:
        try:
            envelope = EventEnvelope.parse(message.get("Body", ""))
            key = envelope.resource_key()
        except EventParseError as err:
            log.warning("wait-event message %s is not a supported event (%s); released for the dead-letter "
                        "queue", message.get("MessageId"), err)
            return "malformed"
        subs = self._subs.get(key)
        if not subs:
            return "released"
        sent = (message.get("Attributes") or {}).get("SentTimestamp")
        event = WaitEvent(envelope, envelope.describe_response(), received_at,
                          int(sent) / 1000.0 if sent else None)
        for sub in list(subs):
            if not sub._offer(event):
                self.stats["duplicates"] += 1
        return "delivered"


def _log_failed(reply: dict[str, Any], what: str) -> None:
    """Entries SQS could not delete/release: they come back after the visibility timeout (a duplicate at worst)."""
    for failure in reply.get("Failed") or []:
        log.warning("wait-event %s of message entry %s failed: %s %s", what, failure.get("Id"), failure.get("Code"),
                    failure.get("Message"))


def release_seconds(settings: EventSettings, message: dict[str, Any]) -> int:
    """Visibility timeout of a released message: the base doubled per receive so far, at most
    :data:`MAX_RELEASE_SECONDS`."""
    try:
        receives = max(int((message.get("Attributes") or {}).get("ApproximateReceiveCount", 1)), 1)
    except (TypeError, ValueError):
        receives = 1
    return int(min(settings.release_visibility_seconds * 2 ** min(receives - 1, 16), MAX_RELEASE_SECONDS))


# -- the per-process registry ---------------------------------------------------------------------------------
_consumers: dict[tuple[Any, ...], EventConsumer] = {}


def sqs_client_factory(aws_conn_id: str | None, region_name: str | None) -> ClientFactory:
    """``get_async_conn`` of the Amazon provider's ``SqsHook`` (aiobotocore; the connection's credentials,
    region and endpoint)."""
    from airflow.providers.amazon.aws.hooks.sqs import SqsHook

    hook = SqsHook(aws_conn_id=aws_conn_id, region_name=region_name)
    return hook.get_async_conn


def subscribe(key: ResourceKey | tuple[ResourceKey, ...] | list[ResourceKey], settings: EventSettings, *,
              aws_conn_id: str | None = "aws_default",
              region_name: str | None = None,
              client_factory: ClientFactory | None = None) -> EventSubscription | None:
    """Register a wait for ``key`` (or several keys sharing one inbox) with this process's consumer of
    ``settings.queue_url`` (created on first use).

    :return: the subscription, or None when events are off (polling only: no queue configured or mode
        ``polling``); the caller then polls.
    """
    if not settings.enabled:
        idents = key.ident if isinstance(key, ResourceKey) else ", ".join(k.ident for k in key)
        log.info("wait events off (%s): %s is waited on by polling",
                 "no queue configured" if not settings.queue_url else "mode polling", idents)
        return None
    loop = asyncio.get_running_loop()
    ident = (id(loop), settings.queue_url, aws_conn_id, region_name)
    consumer = _consumers.get(ident)
    if consumer is None:
        consumer = EventConsumer(settings, client_factory or sqs_client_factory(aws_conn_id, region_name),
                                 on_stop=lambda c: _consumers.pop(ident, None) if _consumers.get(ident) is c else None)
        _consumers[ident] = consumer
    return consumer.subscribe(key)


def active_consumers() -> list[EventConsumer]:
    """The consumers running in this process (diagnostics, tests)."""
    return list(_consumers.values())


# -- the adapter for a step-function wait driver ---------------------------------------------------------------
@dataclass(frozen=True)
class Observation:
    """One response for a wait's step function. ``origin``: "describe" (a service call) or "event"."""

    response: dict[str, Any]
    origin: Literal["describe", "event"]
    event: WaitEvent | None = None


class EventDrivenResponses:
    """The "get next response" of a wait: describe first, then events, with a describe every reconcile interval.

    ``await source(max_wait=None)`` returns the next :class:`Observation`:

    1. the first call describes the resource (the truth at registration: events sent before it are not needed);
    2. later calls return the next event for the key, or describe at the next tick of the shared reconcile clock
       (:func:`next_reconcile_at`: every ``settings.reconcile_interval_seconds`` on the epoch, the same instants
       for every wait, so their describes can share calls) when no event came before it (a lost event costs at
       most one interval);
    3. without a subscription (events off) or while the queue is unreachable, they sleep ``poll_interval``
       seconds and describe (polling). An availability change wakes a waiting call, which then describes.

    ``max_wait`` (seconds) caps how long this call waits before it describes: a wait's deadline, or a time-based
    check of its step function (a RUNNABLE budget running out, a cost limit) that no state change would announce.

    :param subscription: from :func:`subscribe` (None: polling only).
    :param describe: ``async () -> dict``: the service's describe call for the resource.
    :param poll_interval: seconds between describes when polling.
    :param settings: for the reconcile interval.
    :param log: where a switch between events and the polling fallback is logged (default: this module's).
    :param resource: names the resource in those lines.
    """

    def __init__(self, subscription: EventSubscription | None, describe: Callable[[], Awaitable[dict[str, Any]]],
                 *, poll_interval: float, settings: EventSettings, log: Any = None, resource: str = "") -> None:
        self.subscription = subscription
        self.describe = describe
        self.poll_interval = poll_interval
        self.reconcile_interval = settings.reconcile_interval_seconds
        self.describes = 0
        self.events = 0
        self._started = False
        self._log = log if log is not None else logging.getLogger(__name__)
        self._resource = resource or (subscription.key.ident if subscription is not None else "the resource")
        self._polling_fallback = False

    async def _describe(self) -> Observation:
        self.describes += 1
        return Observation(await self.describe(), "describe")

    def _note_availability(self, available: bool) -> None:
        if available == (not self._polling_fallback):
            return
        self._polling_fallback = not available
        if available:
            self._log.info("wait-event queue answers again: waiting on %s by events (reconcile describe every "
                           "%.0f s)", self._resource, self.reconcile_interval)
        else:
            reason = self.subscription.consumer.unavailable_reason if self.subscription is not None else ""
            self._log.warning("wait-event queue unreachable (%s): polling %s every %.0f s until it answers",
                              reason or "no answer", self._resource, self.poll_interval)

    async def __call__(self, max_wait: float | None = None) -> Observation:
        if not self._started:
            self._started = True
            return await self._describe()
        cap = None if max_wait is None else max(float(max_wait), 0.0)
        sub = self.subscription
        if sub is None or not sub.events_available:
            if sub is not None:
                self._note_availability(False)
            await asyncio.sleep(self.poll_interval if cap is None else min(self.poll_interval, cap))
            return await self._describe()
        self._note_availability(True)
        now = time.time()
        until_reconcile = next_reconcile_at(now, self.reconcile_interval) - now
        event = await sub.next_event(until_reconcile if cap is None else min(until_reconcile, cap))
        if event is None:
            return await self._describe()
        self.events += 1
        return Observation(event.response, "event", event)

    def close(self) -> None:
        if self.subscription is not None:
            self.subscription.close()
