"""Describe calls shared by the waits of one triggerer: one call of a list API for every wait that asks at once.

With events, a wait describes its resource when it starts and at each tick of the shared reconcile clock
(:func:`~sim2real.orchestration.events.consumer.next_reconcile_at`), so the waits of a triggerer describe at the
same instants. Where the service describes many resources in one call (Batch ``DescribeJobs``: up to 100 job ids),
:class:`SharedDescribe` gathers the describes asked within :data:`GATHER_SECONDS` into one call and gives each
wait the part of the answer about its resource, as if it had made the call alone. At 50 waits that turns 50
reconcile calls per tick into one (the measured waiting-hour rows of ``sim2real.dev.bench_waits``).

Correctness is that of a call per wait: each wait gets a response made after it asked; an error of the shared call
(a ``ClientError``: throttling, access denied) is raised in every wait that shared it, which then handles it as
its own (:func:`~sim2real.orchestration.waits.core.drive`: retriable codes retry); a wait cancelled while it leads
a round (its client makes the call) hands the others back to a call of their own.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

#: Seconds a describe waits for others to join its call (describes due at one reconcile tick arrive within ms).
GATHER_SECONDS = 0.5

ListCall = Callable[[Any, list[str]], Awaitable[dict[str, dict[str, Any]]]]
"""``async (client, ids) -> {id: the response a call for that id alone would give}``."""


class _Alone:
    """Result given to the waits of a round whose leader was cancelled: describe with your own client."""


_ALONE = _Alone()


class _Round:
    def __init__(self) -> None:
        self.waiters: dict[str, list[asyncio.Future]] = {}
        self.closed = False


class SharedDescribe:
    """Gathers describes of one kind asked on one event loop into calls of up to ``max_ids`` ids.

    ``await shared(client, ident)``: the response about ``ident``. The first describe of a round leads it: it
    waits ``gather_seconds`` for others, then makes the call with its own client (open: it is awaiting) for every
    id asked meanwhile (up to ``max_ids``; later ones start the next round).

    :param call: the list call (:data:`ListCall`).
    :param gather_seconds: how long a round stays open (seconds, >= 0).
    :param max_ids: ids per call (the API's limit).
    """

    def __init__(self, call: ListCall, *, gather_seconds: float = GATHER_SECONDS, max_ids: int = 100) -> None:
        if max_ids < 1:
            raise ValueError(f"max_ids must be >= 1, got {max_ids!r}")
        self._call = call
        self.gather_seconds = gather_seconds
        self.max_ids = max_ids
        self._round: _Round | None = None
        #: calls made and describes answered (diagnostics, tests).
        self.calls = 0
        self.describes = 0

    async def __call__(self, client: Any, ident: str) -> dict[str, Any]:
        self.describes += 1
        current = self._round
        if current is not None and not current.closed and (ident in current.waiters
                                                           or len(current.waiters) < self.max_ids):
            future: asyncio.Future = asyncio.get_running_loop().create_future()
            current.waiters.setdefault(ident, []).append(future)
            result = await future
            if result is _ALONE:
                return await self._alone(client, ident)
            return result
        return await self._lead(client, ident)

    async def _alone(self, client: Any, ident: str) -> dict[str, Any]:
        self.calls += 1
        return (await self._call(client, [ident]))[ident]

    async def _lead(self, client: Any, ident: str) -> dict[str, Any]:
        current = self._round = _Round()
        current.waiters[ident] = []
        try:
            if self.gather_seconds > 0:
                await asyncio.sleep(self.gather_seconds)
        except BaseException:
            self._close(current, _ALONE)
            raise
        self._close(current, None)
        try:
            self.calls += 1
            answers = await self._call(client, list(current.waiters))
        except asyncio.CancelledError:
            self._settle(current, lambda _: _ALONE)
            raise
        except BaseException as err:
            self._settle(current, lambda _, e=err: e, error=True)
            raise
        self._settle(current, lambda key: answers[key])
        return answers[ident]

    def _close(self, current: _Round, result: Any) -> None:
        current.closed = True
        if self._round is current:
            self._round = None
        if result is not None:
            self._settle(current, lambda _: result)

    @staticmethod
    def _settle(current: _Round, result: Callable[[str], Any], error: bool = False) -> None:
        for key, futures in current.waiters.items():
            for future in futures:
                if not future.done():
                    if error:
                        future.set_exception(result(key))
                    else:
                        future.set_result(result(key))


_shared: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, SharedDescribe]] = (
    weakref.WeakKeyDictionary())


def shared_describe(key: Hashable, call: ListCall, **kwargs: Any) -> SharedDescribe:
    """The running loop's :class:`SharedDescribe` for ``key`` (the kind of describe and what makes clients
    alike: connection id, region, ...), created with ``call`` and ``kwargs`` on first use."""
    per_loop = _shared.setdefault(asyncio.get_running_loop(), {})
    found = per_loop.get(key)
    if found is None:
        found = per_loop[key] = SharedDescribe(call, **kwargs)
    return found
