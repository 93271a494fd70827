"""Shared plumbing of the sandbox: the emulation event log, the request log, reversible patches.

Everything the sandbox does in place of AWS is recorded as a :class:`SandboxEvent` and logged
with the prefix ``[sandbox:emulated]`` (logger ``sim2real.dev.sandbox``), so output of the demo and
tests never passes emulation off as AWS.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

PREFIX = "[sandbox:emulated]"
#: Marker put in the User-Agent of the sandbox's own boto3 clients; their requests are not
#: counted in :class:`RequestLog` (so "the approval sensor polled" means someone else did).
INTERNAL_UA = "sim2real-sandbox-internal"

log = logging.getLogger("sim2real.dev.sandbox")


@dataclass(frozen=True)
class SandboxEvent:
    """One thing the emulation did. ``service``: e.g. "batch"; ``kind``: e.g. "job-status"."""

    time: float
    service: str
    kind: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        return f"{PREFIX} {self.service}: {self.message}"


class EventLog:
    """In-memory, thread-safe log of emulation events.

    :param echo: optional callable receiving each formatted line (e.g. ``print``) besides logging.
    """

    def __init__(self, echo: Callable[[str], None] | None = None) -> None:
        self._cond = threading.Condition()
        self._events: list[SandboxEvent] = []
        self._echo = echo

    def emit(self, service: str, kind: str, message: str, **data: Any) -> SandboxEvent:
        event = SandboxEvent(time.time(), service, kind, message, data)
        with self._cond:
            self._events.append(event)
            self._cond.notify_all()
        log.info("%s", event.line())
        if self._echo is not None:
            try:
                self._echo(event.line())
            except Exception:  # noqa: BLE001 - a broken echo must not break the emulation
                log.exception("sandbox echo failed")
        return event

    def __iter__(self) -> Iterator[SandboxEvent]:
        with self._cond:
            return iter(list(self._events))

    def __len__(self) -> int:
        with self._cond:
            return len(self._events)

    def find(self, service: str | None = None, kind: str | None = None, **data: Any) -> list[SandboxEvent]:
        """Events matching ``service``, ``kind`` and every ``data`` item given."""
        with self._cond:
            events = list(self._events)
        return [
            e
            for e in events
            if (service is None or e.service == service)
            and (kind is None or e.kind == kind)
            and all(e.data.get(k) == v for k, v in data.items())
        ]

    def wait_for(
        self, predicate: Callable[[SandboxEvent], bool], timeout: float = 30.0
    ) -> SandboxEvent | None:
        """Block until an event satisfying ``predicate`` exists; return it, or None on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for event in self._events:
                    if predicate(event):
                        return event
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)


@dataclass(frozen=True)
class RecordedRequest:
    time: float
    service: str
    action: str
    body: str


class RequestLog:
    """Requests that reached the emulator from outside the sandbox (its own clients excluded)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[RecordedRequest] = []
        self.counts: Counter[str] = Counter()

    def record(self, service: str, action: str, body: str = "") -> None:
        with self._lock:
            self._items.append(RecordedRequest(time.time(), service, action, body[:4096]))
            self.counts[action] += 1

    def since(self, t: float, action: str | None = None) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self._items if r.time >= t and (action is None or r.action == action)]

    def count(self, action: str) -> int:
        with self._lock:
            return self.counts[action]


_MISSING = object()


class Patcher:
    """Reversible attribute / mapping patches (undone in reverse order)."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def setattr(self, obj: Any, name: str, value: Any) -> None:
        old = obj.__dict__.get(name, _MISSING) if isinstance(obj, type) else getattr(obj, name, _MISSING)

        def undo() -> None:
            if old is _MISSING:
                try:
                    delattr(obj, name)
                except AttributeError:
                    pass
            else:
                setattr(obj, name, old)

        setattr(obj, name, value)
        self._undo.append(undo)

    def setitem(self, mapping: dict, key: Any, value: Any) -> None:
        old = mapping.get(key, _MISSING)

        def undo() -> None:
            if old is _MISSING:
                mapping.pop(key, None)
            else:
                mapping[key] = old

        mapping[key] = value
        self._undo.append(undo)

    def undo_all(self) -> None:
        while self._undo:
            try:
                self._undo.pop()()
            except Exception:  # noqa: BLE001
                log.exception("sandbox: undoing a patch failed")


_active_lock = threading.Lock()
_active: Any = None


def set_active(sandbox: Any) -> None:
    global _active
    with _active_lock:
        if sandbox is not None and _active is not None and _active is not sandbox:
            raise RuntimeError(
                "another Sandbox is already running in this process; moto's state is per process, "
                "so exit it first (one Sandbox at a time)"
            )
        _active = sandbox


def active() -> Any:
    """The running Sandbox (raises RuntimeError when none is)."""
    sandbox = _active
    if sandbox is None:
        raise RuntimeError("no Sandbox is running")
    return sandbox


def active_or_none() -> Any:
    return _active


def safe_thread(target: Callable[..., None], name: str, *args: Any) -> threading.Thread:
    """Start a daemon thread whose exceptions are logged, never propagated."""

    def run() -> None:
        try:
            target(*args)
        except Exception:  # noqa: BLE001
            log.exception("%s responder thread %s crashed", PREFIX, name)

    thread = threading.Thread(target=run, name=f"sandbox-{name}", daemon=True)
    thread.start()
    return thread


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the OS picks it): rendezvous ports of emulated training
    jobs, the local UI's log servers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
