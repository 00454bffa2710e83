"""An ``AsyncQueueStorage`` that passes every call on to another: the base of its decorators.

The awaitable side's counterpart of ``forwarding``: the forwarding -- every operation of the
protocol, with its arguments -- is written once here; a decorator overrides ``_call`` (which sees
the queue, the operation's name and the awaitable call), or the operations it changes.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from cloudqueue.listener.stores.async_storage import AsyncQueueStorage
from cloudqueue.listener.stores.storage import QueueMessage

R = TypeVar("R")


class AsyncForwardingStorage:
    """Awaits each call of ``inner`` through ``_call`` (which, here, only awaits it)."""

    def __init__(self, inner: AsyncQueueStorage) -> None:
        self.inner = inner

    async def _call(self, queue_name: str, operation: str, call: Awaitable[R]) -> R:
        """Await ``call``, the ``operation`` on ``queue_name``."""
        return await call

    async def create_queue(self, queue_name: str) -> None:
        await self._call(queue_name, "create_queue", self.inner.create_queue(queue_name))

    async def get_messages(
        self, queue_name: str, *, max_messages: int, visibility_timeout_s: int
    ) -> list[QueueMessage]:
        got = self.inner.get_messages(
            queue_name, max_messages=max_messages, visibility_timeout_s=visibility_timeout_s
        )
        return await self._call(queue_name, "get_messages", got)

    async def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        deleted = self.inner.delete_message(queue_name, message_id, pop_receipt)
        return await self._call(queue_name, "delete_message", deleted)

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
        return await self._call(queue_name, "put_message", put)

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
        return await self._call(queue_name, "update_visibility", update)

    async def approximate_message_count(self, queue_name: str) -> int:
        count = self.inner.approximate_message_count(queue_name)
        return await self._call(queue_name, "approximate_message_count", count)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"


__all__ = ["AsyncForwardingStorage"]
