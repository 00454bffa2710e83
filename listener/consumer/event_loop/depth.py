"""The depth an event-loop consumer last knew of its queue, as a threaded listener knows it.

The same two free sources as on threads (``depth``): the count its scaling takes when work
appears (visible = the approximate count less the messages it holds), and an empty get while it
holds none (0). ``count`` is also what a refresher calls while work flows
(``cloudqueue.workers.host.depth_refresh``); the figures (``/metrics``) read ``known``.
"""

from __future__ import annotations

from cloudqueue.listener.clock import Clock
from cloudqueue.listener.consumer.depth import KnownDepth
from cloudqueue.listener.consumer.event_loop.leases import AsyncLeases
from cloudqueue.listener.stores.async_storage import AsyncQueueStorage


class AsyncDepth:
    """The known depth of one queue, fed by the consumer's counts and empty gets."""

    def __init__(
        self, storage: AsyncQueueStorage, queue_name: str, leases: AsyncLeases, clock: Clock
    ) -> None:
        self.storage, self.queue_name = storage, queue_name
        self.leases = leases
        self.known = KnownDepth(clock)

    async def count(self) -> int:
        """Count the queue (one storage call), remember the visible depth it implies, and
        return the count (visible and held messages of every consumer)."""
        depth = await self.storage.approximate_message_count(self.queue_name)
        self.known.counted(max(0, depth - len(self.leases)))
        return depth

    def empty_get(self) -> None:
        """A get found nothing: none waits, unless messages are held (work still flows, a
        count will come; on a partitioned queue the get read one partition only)."""
        if len(self.leases) == 0:
            self.known.emptied()


__all__ = ["AsyncDepth"]
