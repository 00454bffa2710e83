"""Counting an event loop's storage calls on the tally of the threaded calls to the same store.

A worker on the single event loop awaits its gets, renewals and deletes on an
``AsyncQueueStorage`` beside the host's ``MeteredStorage``; they are billed the same, so they are
counted there, under the same operation names: the live cost (``cloudqueue status``) and the
process's transaction count then cover both paths. A count is one uncontended lock, taken on
the loop; nothing here waits.
"""

from __future__ import annotations

from cloudqueue.listener.stores.async_storage import AsyncQueueStorage
from cloudqueue.listener.stores.metered import MeteredStorage
from cloudqueue.listener.stores.storage import QueueMessage

__all__ = ["MeteredAsyncStorage"]


class MeteredAsyncStorage:
    """An ``AsyncQueueStorage`` whose calls ``meter`` counts (one call = one transaction)."""

    def __init__(self, inner: AsyncQueueStorage, meter: MeteredStorage) -> None:
        self.inner, self.meter = inner, meter

    async def create_queue(self, queue_name: str) -> None:
        self.meter.count(queue_name, "create_queue")
        await self.inner.create_queue(queue_name)

    async def get_messages(
        self, queue_name: str, *, max_messages: int, visibility_timeout_s: int
    ) -> list[QueueMessage]:
        self.meter.count(queue_name, "get_messages")
        return await self.inner.get_messages(
            queue_name, max_messages=max_messages, visibility_timeout_s=visibility_timeout_s
        )

    async def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        self.meter.count(queue_name, "delete_message")
        return await self.inner.delete_message(queue_name, message_id, pop_receipt)

    async def put_message(
        self,
        queue_name: str,
        content: str,
        *,
        time_to_live_s: int | None = None,
        visibility_delay_s: int = 0,
    ) -> QueueMessage:
        self.meter.count(queue_name, "put_message")
        return await self.inner.put_message(
            queue_name,
            content,
            time_to_live_s=time_to_live_s,
            visibility_delay_s=visibility_delay_s,
        )

    async def update_visibility(
        self,
        queue_name: str,
        message_id: str,
        pop_receipt: str,
        visibility_timeout_s: int,
        *,
        content: str | None = None,
    ) -> str:
        self.meter.count(queue_name, "update_visibility")
        return await self.inner.update_visibility(
            queue_name, message_id, pop_receipt, visibility_timeout_s, content=content
        )

    async def approximate_message_count(self, queue_name: str) -> int:
        self.meter.count(queue_name, "approximate_message_count")
        return await self.inner.approximate_message_count(queue_name)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __repr__(self) -> str:
        return f"MeteredAsyncStorage({self.inner!r})"
