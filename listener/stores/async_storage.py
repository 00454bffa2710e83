"""The queue storage calls an event-loop consumer makes, awaitable, and the embedded stores' side.

A worker whose handler is ``async def`` can fetch, renew, settle and re-publish on its handlers'
own event loop; this protocol is what that loop awaits. It holds the message operations only
(the administration and inspection of ``QueueStorage`` stay synchronous: the command line and the
poison tools call them, never a consumer), with ``QueueStorage``'s semantics exactly: the same
arguments, the same return values, the same ``cloudqueue.listener.errors``.

Two kinds implement it: the Azure one on the SDK's aio clients
(``cloudqueue.listener.stores.azure_aio_storage``), and ``DirectAsyncStorage`` over a
synchronous embedded store. An embedded call is short (a dict under a lock, or one
SQLite transaction in WAL mode): it is made directly on the loop, as a thread hop would cost more
CPU than the call (``tests/benchmarks/bench_io.py`` measures a hop at about 93 us).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.stores.storage import QueueMessage, QueueStorage

__all__ = ["AsyncQueueStorage", "DirectAsyncStorage", "async_storage_for"]


@runtime_checkable
class AsyncQueueStorage(Protocol):
    """The message operations of one storage account (or embedded store), to be awaited.

    Used on one event loop only: the loop of its first call; ``aclose`` there too.
    """

    async def create_queue(self, queue_name: str) -> None:
        """Create the queue if it does not exist yet; do nothing if it does."""

    async def get_messages(
        self, queue_name: str, *, max_messages: int, visibility_timeout_s: int
    ) -> list[QueueMessage]:
        """Take up to ``max_messages`` (1..32) visible messages and hide them for the timeout."""

    async def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        """Delete a message; False (never an exception) when it is gone or the receipt is stale."""

    async def put_message(
        self,
        queue_name: str,
        content: str,
        *,
        time_to_live_s: int | None = None,
        visibility_delay_s: int = 0,
    ) -> QueueMessage:
        """Append a message, invisible for ``visibility_delay_s``; raises MessageTooLargeError."""

    async def update_visibility(
        self,
        queue_name: str,
        message_id: str,
        pop_receipt: str,
        visibility_timeout_s: int,
        *,
        content: str | None = None,
    ) -> str:
        """Hide the message for ``visibility_timeout_s`` from now (and, given ``content``,
        rewrite its text in the same call); return the new pop receipt."""

    async def approximate_message_count(self, queue_name: str) -> int:
        """The number of messages in the queue, visible or not (may lag a little on Azure)."""

    async def aclose(self) -> None:
        """Release connections (on the loop that used them); the storage is not used afterwards."""


class DirectAsyncStorage:
    """A synchronous store's message operations, called directly on the awaiting loop.

    For the embedded stores, whose calls return in microseconds: awaiting one never yields to the
    loop, exactly as a plain function call would not. ``aclose`` leaves the store open: it
    belongs to whoever opened it (the threaded side of the process may still use it).
    """

    def __init__(self, storage: QueueStorage) -> None:
        self.storage = storage

    async def create_queue(self, queue_name: str) -> None:
        self.storage.create_queue(queue_name)

    async def get_messages(
        self, queue_name: str, *, max_messages: int, visibility_timeout_s: int
    ) -> list[QueueMessage]:
        return self.storage.get_messages(
            queue_name, max_messages=max_messages, visibility_timeout_s=visibility_timeout_s
        )

    async def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        return self.storage.delete_message(queue_name, message_id, pop_receipt)

    async def put_message(
        self,
        queue_name: str,
        content: str,
        *,
        time_to_live_s: int | None = None,
        visibility_delay_s: int = 0,
    ) -> QueueMessage:
        return self.storage.put_message(
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
        return self.storage.update_visibility(
            queue_name, message_id, pop_receipt, visibility_timeout_s, content=content
        )

    async def approximate_message_count(self, queue_name: str) -> int:
        return self.storage.approximate_message_count(queue_name)

    async def aclose(self) -> None:
        """Nothing to release: the synchronous store stays open for its owner."""

    def __repr__(self) -> str:
        return f"DirectAsyncStorage({self.storage!r})"


def async_storage_for(storage: QueueStorage) -> AsyncQueueStorage:
    """The awaitable side of ``storage``: the aio clients of the same account for Azure (their
    own connection pool, opened on the first awaiting loop), direct calls for an embedded store.

    Any other store (partitioned, prioritized, metered: wrappers over one of these) is refused
    with ConfigurationError: called directly, a wrapper over Azure would block the loop on every
    HTTP request."""
    from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
    from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
    from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage

    if isinstance(storage, AzureQueueStorage):
        from cloudqueue.listener.stores.azure_aio_storage import AioAzureQueueStorage

        return AioAzureQueueStorage.beside(storage)
    if isinstance(storage, InMemoryQueueStorage | SqliteQueueStorage):
        return DirectAsyncStorage(storage)
    raise ConfigurationError(
        f"{type(storage).__name__} has no event-loop side yet: run this worker's async handler "
        "on dequeue threads (partitioned and prioritized queues are not on the event loop yet)"
    )
