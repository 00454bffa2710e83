"""An ``AsyncQueueStorage`` seen as a ``QueueStorage``, so the storage contract proves it too.

The message operations (get, delete, put, update, count, create) are awaited on one event loop on
a thread of its own (the listener's ``LoopThread``), so every one goes through the async store
under test; the administration and inspection the async protocol leaves out (peek, metadata,
list, clear, delete a queue) go to the synchronous store of the same account.
"""

from __future__ import annotations

from collections.abc import Mapping

from cloudqueue.listener.consumer.coroutines import LoopThread
from cloudqueue.listener.stores.async_storage import AsyncQueueStorage
from cloudqueue.listener.stores.storage import QueueMessage, QueueStorage


class BlockingAsyncStorage:
    """``QueueStorage`` whose message operations are the async store's, awaited on one loop."""

    def __init__(self, aio: AsyncQueueStorage, admin: QueueStorage) -> None:
        self.aio, self.admin = aio, admin
        self._loop = LoopThread("blocking-async-storage")

    def create_queue(self, queue_name: str) -> None:
        self._loop.run(self.aio.create_queue(queue_name))

    def get_messages(
        self, queue_name: str, *, max_messages: int, visibility_timeout_s: int
    ) -> list[QueueMessage]:
        return self._loop.run(
            self.aio.get_messages(
                queue_name, max_messages=max_messages, visibility_timeout_s=visibility_timeout_s
            )
        )

    def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        return self._loop.run(self.aio.delete_message(queue_name, message_id, pop_receipt))

    def put_message(
        self,
        queue_name: str,
        content: str,
        *,
        time_to_live_s: int | None = None,
        visibility_delay_s: int = 0,
    ) -> QueueMessage:
        return self._loop.run(
            self.aio.put_message(
                queue_name,
                content,
                time_to_live_s=time_to_live_s,
                visibility_delay_s=visibility_delay_s,
            )
        )

    def update_visibility(
        self,
        queue_name: str,
        message_id: str,
        pop_receipt: str,
        visibility_timeout_s: int,
        *,
        content: str | None = None,
    ) -> str:
        return self._loop.run(
            self.aio.update_visibility(
                queue_name, message_id, pop_receipt, visibility_timeout_s, content=content
            )
        )

    def approximate_message_count(self, queue_name: str) -> int:
        return self._loop.run(self.aio.approximate_message_count(queue_name))

    def peek_messages(self, queue_name: str, *, max_messages: int) -> list[QueueMessage]:
        return self.admin.peek_messages(queue_name, max_messages=max_messages)

    def get_queue_metadata(self, queue_name: str) -> dict[str, str]:
        return self.admin.get_queue_metadata(queue_name)

    def set_queue_metadata(self, queue_name: str, metadata: Mapping[str, str]) -> None:
        self.admin.set_queue_metadata(queue_name, metadata)

    def list_queues(self, prefix: str = "") -> list[str]:
        return self.admin.list_queues(prefix)

    def clear_queue(self, queue_name: str) -> None:
        self.admin.clear_queue(queue_name)

    def delete_queue(self, queue_name: str) -> None:
        self.admin.delete_queue(queue_name)

    def close(self) -> None:
        self._loop.run(self.aio.aclose())
        self._loop.close()
        self.admin.close()
