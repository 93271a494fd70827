"""Event-driven waits: AWS state-change events (EventBridge -> one SQS queue) consumed by the waits of a triggerer.

* :mod:`.envelope`: the supported detail-types, resource keys, describe-like responses of events.
* :mod:`.patterns`: the EventBridge rule patterns (infra/ and the sandbox use the same ones).
* :mod:`.settings`: the environment config's ``events`` section (events or polling only).
* :mod:`.consumer`: the per-process consumer, its subscriptions, and :class:`~.consumer.EventDrivenResponses`,
  the "get next response" a step-function wait driver calls.
"""

from .consumer import EventConsumer, EventDrivenResponses, EventSubscription, Observation, WaitEvent, subscribe
from .envelope import EventEnvelope, EventParseError, ResourceKey
from .settings import EventSettings

__all__ = ["EventConsumer", "EventDrivenResponses", "EventEnvelope", "EventParseError", "EventSettings",
           "EventSubscription", "Observation", "ResourceKey", "WaitEvent", "subscribe"]
