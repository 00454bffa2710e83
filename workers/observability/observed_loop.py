"""The metrics' and probes' view of a worker on the single event loop (``event_loop = "single"``).

No dequeue thread there to watch: the loop's own thread is watched instead (``health``:
``cloudqueue:<queue>:event-loop``). Its awaited storage calls show a sign of life as each starts
and ends and tell whether storage answers (``ObservedAsyncStorage``, the threaded
``ObservedStorage``'s counterpart), and ``loop_beat`` shows one every few seconds while nothing
blocks the loop: an idle loop, or one scaled to no task, is not silent, and a handler that blocks
the loop (a sync call that never returns) silences it, so liveness turns red naming it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from cloudqueue.listener.stores.async_forwarding import AsyncForwardingStorage
from cloudqueue.listener.stores.async_storage import AsyncQueueStorage
from cloudqueue.workers.observability.health import Heartbeats, Reachability
from cloudqueue.workers.observability.observed import WatchedCalls

R = TypeVar("R")

BEATS_PER_STALL = 4
"""Signs of life the loop shows within ``stall_after_s`` while nothing blocks it."""


class ObservedAsyncStorage(AsyncForwardingStorage):
    """An ``AsyncQueueStorage`` showing a sign of life as each call starts and ends, and
    tracking whether storage answers; it counts nothing (the host's meter does)."""

    def __init__(
        self, inner: AsyncQueueStorage, heartbeats: Heartbeats, reachability: Reachability
    ) -> None:
        super().__init__(inner)
        self._watched = WatchedCalls(heartbeats, reachability)

    async def _call(self, queue_name: str, operation: str, call: Awaitable[R]) -> R:
        with self._watched:
            return await call

    def __repr__(self) -> str:
        return f"ObservedAsyncStorage({self.inner!r}, outage={self._watched.reachability.outage})"


async def loop_beat(heartbeats: Heartbeats, stall_after_s: float) -> None:
    """Show a sign of life on the running loop's thread ``BEATS_PER_STALL`` times per
    ``stall_after_s``, until cancelled."""
    while True:
        heartbeats.enter()
        heartbeats.leave()
        await asyncio.sleep(stall_after_s / BEATS_PER_STALL)


__all__ = ["ObservedAsyncStorage", "loop_beat"]
