"""A partitioned queue read on an event loop: the awaitable side of ``PartitionedQueueStorage``.

A worker on the single event loop whose queue is partitioned (``listener.partitions``,
``drain_partitions``, further ``partition_accounts``) awaits its calls through this. The layout
and the routing are the threaded storage's own (``view``: which partitions, where a message id
belongs, where a put goes, the rotation); only the calls are awaited, each on the awaitable side
of the account that holds the partition (``sides``: the aio clients for Azure, direct calls for
the embedded stores). A get asks ONE partition, keeps draining the one that last gave messages
for at most ``sticky_gets`` gets in a row, and tries the next at once when its partition ran dry
-- each dequeue *task* with its own turn, as each dequeue thread there. A count sums the
partitions; a delete or an update goes to the partition the id names; a put on the logical name
goes round-robin. Any other name (``orders-poison``) is the physical queue on its account.

The layout is recorded by the host before any worker starts (``settle_layout``): a create here
makes the physical queues only.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from cloudqueue.listener.errors import MessageNotFoundError, QueueNotFoundError
from cloudqueue.listener.stores.async_storage import AsyncQueueStorage, async_storage_for
from cloudqueue.listener.stores.partitioned import (
    Partition,
    PartitionedQueueStorage,
    PartitionLayout,
    StickyTurn,
    as_put,
)
from cloudqueue.listener.stores.storage import QueueMessage, QueueStorage

R = TypeVar("R")


class AsyncPartitionedStorage:
    """An ``AsyncQueueStorage`` over the partitions ``view`` lays out (see the module)."""

    def __init__(
        self, view: PartitionedQueueStorage, sides: Mapping[int, AsyncQueueStorage]
    ) -> None:
        """``sides``: the awaitable side of each of ``view``'s accounts, by the account's
        ``id()``."""
        self.view = view
        self._sides = dict(sides)
        self._turns: weakref.WeakKeyDictionary[asyncio.Task[object], dict[str, StickyTurn]] = (
            weakref.WeakKeyDictionary()
        )

    @classmethod
    def beside(
        cls, view: PartitionedQueueStorage, first: AsyncQueueStorage
    ) -> AsyncPartitionedStorage:
        """Over ``view``'s partitions: ``first`` the awaitable side of its first account (a
        host's, counted on its meter), each further account's its own (aio clients for Azure)."""
        sides = {id(account): async_storage_for(account) for account in view.accounts[1:]}
        return cls(view, {**sides, id(view.accounts[0]): first})

    def side(self, account: QueueStorage) -> AsyncQueueStorage:
        return self._sides[id(account)]

    async def create_queue(self, queue_name: str) -> None:
        for partition in self.view.targets(queue_name, writable_only=True):
            await self.side(partition.storage).create_queue(partition.queue_name)

    async def get_messages(
        self, queue_name: str, *, max_messages: int, visibility_timeout_s: int
    ) -> list[QueueMessage]:
        layout = self.view.layout(queue_name)
        if layout is None:
            [plain] = self.view.targets(queue_name)
            return await self.side(plain.storage).get_messages(
                queue_name, max_messages=max_messages, visibility_timeout_s=visibility_timeout_s
            )
        sticky = self._sticky(queue_name)
        was_draining = sticky.partition is not None
        messages = await self._get_turn(layout, sticky, max_messages, visibility_timeout_s)
        if not messages and was_draining:  # its partition ran dry: the next may hold work
            messages = await self._get_turn(layout, sticky, max_messages, visibility_timeout_s)
        return messages

    async def _get_turn(
        self,
        layout: PartitionLayout,
        sticky: StickyTurn,
        max_messages: int,
        visibility_timeout_s: int,
    ) -> list[QueueMessage]:
        partition = sticky.take(layout)
        got = await self.side(partition.storage).get_messages(
            partition.queue_name,
            max_messages=max_messages,
            visibility_timeout_s=visibility_timeout_s,
        )
        return sticky.got(partition, got, self.view.sticky_gets)

    async def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        found = self.view.message_home(queue_name, message_id)
        if found is None:
            return False
        partition, own_id = found
        side = self.side(partition.storage)
        return await side.delete_message(partition.queue_name, own_id, pop_receipt)

    async def put_message(
        self,
        queue_name: str,
        content: str,
        *,
        time_to_live_s: int | None = None,
        visibility_delay_s: int = 0,
    ) -> QueueMessage:
        partition = self.view.write_target(queue_name)
        put = await self.side(partition.storage).put_message(
            partition.queue_name,
            content,
            time_to_live_s=time_to_live_s,
            visibility_delay_s=visibility_delay_s,
        )
        return as_put(queue_name, partition, put)

    async def update_visibility(
        self,
        queue_name: str,
        message_id: str,
        pop_receipt: str,
        visibility_timeout_s: int,
        *,
        content: str | None = None,
    ) -> str:
        found = self.view.message_home(queue_name, message_id)
        if found is None:
            raise MessageNotFoundError(f"message {message_id} is not in queue {queue_name}")
        partition, own_id = found
        side = self.side(partition.storage)
        return await side.update_visibility(
            partition.queue_name, own_id, pop_receipt, visibility_timeout_s, content=content
        )

    async def approximate_message_count(self, queue_name: str) -> int:
        counts = await self._each(
            queue_name, lambda p: self.side(p.storage).approximate_message_count(p.queue_name)
        )
        return sum(counts)

    async def _each(
        self, queue_name: str, operation: Callable[[Partition], Awaitable[R]]
    ) -> list[R]:
        """``operation`` on every partition; QueueNotFoundError only if all are missing (one
        not created yet holds nothing)."""
        results: list[R] = []
        missing: QueueNotFoundError | None = None
        for partition in self.view.targets(queue_name):
            try:
                results.append(await operation(partition))
            except QueueNotFoundError as error:
                missing = error
        if missing is not None and not results:
            raise missing
        return results

    async def aclose(self) -> None:
        """Close every account's awaitable side (on this loop)."""
        for side in self._sides.values():
            await side.aclose()

    def _sticky(self, queue_name: str) -> StickyTurn:
        """The running task's turn on ``queue_name`` (made at its first get)."""
        task = asyncio.current_task()
        if task is None:  # awaited outside a task: a turn of its own
            return StickyTurn()
        per_queue = self._turns.setdefault(task, {})
        return per_queue.setdefault(queue_name, StickyTurn())

    def __repr__(self) -> str:
        return f"AsyncPartitionedStorage({self.view!r})"


__all__ = ["AsyncPartitionedStorage"]
