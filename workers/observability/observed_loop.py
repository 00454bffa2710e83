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

from cloudqueue.listener.stores.async_storage import AsyncQueueStorage
from cloudqueue.listener.stores.storage import QueueMessage
from cloudqueue.workers.observability.health import Heartbeats, Reachability
from cloudqueue.workers.observability.observed import WatchedCalls

R = TypeVar("R")

BEATS_PER_STALL = 4
"""Signs of life the loop shows within ``stall_after_s`` while nothing blocks it."""


class ObservedAsyncStorage:
    """An ``AsyncQueueStorage`` showing a sign of life as each call starts and ends, and
    tracking whether storage answers; it counts nothing (the host's meter does)."""

    def __init__(
        self, inner: AsyncQueueStorage, heartbeats: Heartbeats, reachability: Reachability
    ) -> None:
        self.inner = inner
        self._watched = WatchedCalls(heartbeats, reachability)

    async def _observed(self, call: Awaitable[R]) -> R:
        with self._watched:
            return await call

    async def create_queue(self, queue_name: str) -> None:
        await self._observed(self.inner.create_queue(queue_name))

    async def get_messages(
        self, queue_name: str, *, max_messages: int, visibility_timeout_s: int
    ) -> list[QueueMessage]:
        return await self._observed(
            self.inner.get_messages(
                queue_name, max_messages=max_messages, visibility_timeout_s=visibility_timeout_s
            )
        )

    async def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        return await self._observed(self.inner.delete_message(queue_name, message_id, pop_receipt))

    async def put_message(
        self,
        queue_name: str,
        content: str,
        *,
        time_to_live_s: int | None = None,
        visibility_delay_s: int = 0,
    ) -> QueueMessage:
        put = self.inner.put_message(
            queue_name,
            content,
            time_to_live_s=time_to_live_s,
            visibility_delay_s=visibility_delay_s,
        )
        return await self._observed(put)

    async def update_visibility(
        self,
        queue_name: str,
        message_id: str,
        pop_receipt: str,
        visibility_timeout_s: int,
        *,
        content: str | None = None,
    ) -> str:
        update = self.inner.update_visibility(
            queue_name, message_id, pop_receipt, visibility_timeout_s, content=content
        )
        return await self._observed(update)

    async def approximate_message_count(self, queue_name: str) -> int:
        return await self._observed(self.inner.approximate_message_count(queue_name))

    async def aclose(self) -> None:
        await self.inner.aclose()

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
