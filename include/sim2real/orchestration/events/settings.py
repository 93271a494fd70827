"""How waits get their state: AWS events through the wait-event queue, or polling only.

Read from the environment config's optional ``events`` section (:mod:`sim2real.orchestration.config`)::

    "events": {
      "mode": "events",                       # "events" (default when queue_url is set) or "polling"
      "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/sim2real-wait-events",
      "reconcile_interval_seconds": 600,      # optional; a describe call this often even with events
      "wait_time_seconds": 20,                # optional; the consumer's SQS long poll, whole seconds 1..20:
                                              # an idle consumer makes 3600 / this receives an hour
      "visibility_timeout_seconds": 30,       # optional; a received message is hidden this long
      "release_visibility_seconds": 1         # optional; a message no local wait owns is visible again after
                                              # this, doubled per receive (see events.consumer)
    }

No section, no ``queue_url`` or ``mode: "polling"`` gives polling only (:attr:`EventSettings.enabled` False).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

MODES = ("events", "polling")
#: Keys SQS takes as whole seconds (``WaitTimeSeconds``, ``VisibilityTimeout``): botocore refuses a float.
WHOLE_SECONDS = ("wait_time_seconds", "visibility_timeout_seconds", "release_visibility_seconds")


@dataclass(frozen=True)
class EventSettings:
    """Wait-event settings (seconds throughout). :meth:`from_environment` validates them."""

    mode: str = "polling"
    queue_url: str = ""
    reconcile_interval_seconds: float = 600.0
    wait_time_seconds: int = 20
    visibility_timeout_seconds: int = 30
    release_visibility_seconds: int = 1

    @property
    def enabled(self) -> bool:
        """True when waits should consume events (mode ``events`` and a queue URL)."""
        return self.mode == "events" and bool(self.queue_url)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form (a trigger's serialized keyword)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> EventSettings:
        """Inverse of :meth:`to_dict`; ``None`` gives polling only.

        :raises ValueError: naming the bad key.
        """
        if not data:
            return cls()
        problems = settings_problems(data)
        if problems:
            raise ValueError("; ".join(problems))
        mode = data.get("mode") or ("events" if data.get("queue_url") else "polling")
        known = {k: data[k] for k in ("reconcile_interval_seconds", "wait_time_seconds", "visibility_timeout_seconds",
                                      "release_visibility_seconds") if data.get(k) is not None}
        return cls(mode=mode, queue_url=str(data.get("queue_url") or ""), **known)

    @classmethod
    def from_environment(cls, env: Mapping[str, Any]) -> EventSettings:
        """The ``events`` section of an environment config (see the module docstring)."""
        return cls.from_dict(env.get("events"))


def settings_problems(section: Any) -> list[str]:
    """Problems of an ``events`` section, each naming the key and the allowed values ([] when fine)."""
    if section is None:
        return []
    if not isinstance(section, Mapping):
        return [f"events must be an object, got {type(section).__name__}"]
    problems = []
    mode = section.get("mode")
    if mode is not None and mode not in MODES:
        problems.append(f"events.mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "events" and not section.get("queue_url"):
        problems.append("events.mode 'events' needs events.queue_url (the wait-event SQS queue URL)")
    url = section.get("queue_url")
    if url is not None and (not isinstance(url, str) or (url and not url.startswith(("https://", "http://")))):
        problems.append(f"events.queue_url must be an SQS queue URL (https://sqs.<region>.amazonaws.com/...), "
                        f"got {url!r}")
    bounds = {"reconcile_interval_seconds": (1, 86400), "wait_time_seconds": (1, 20),
              "visibility_timeout_seconds": (1, 43200), "release_visibility_seconds": (0, 43200)}
    for key, (low, high) in bounds.items():
        value = section.get(key)
        if value is None:
            continue
        whole = key in WHOLE_SECONDS
        if (isinstance(value, bool) or not isinstance(value, int if whole else (int, float))
                or not low <= value <= high):
            problems.append(f"events.{key} must be {'a whole number' if whole else 'a number'} in {low}..{high}, "
                            f"got {value!r}")
    return problems
