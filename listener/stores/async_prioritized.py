"""Several queues read as one on an event loop: the awaitable ``PrioritizedQueueStorage``.

A worker on the single event loop whose ``queue_name`` names several queues (highest priority
first) awaits its gets, counts, deletes and renewals through this, over the loop's storage. The
choosing is the threaded one's (``cloudqueue.listener.stores.prioritized.PriorityTurns``): on the
first queue's name a get asks the queues in the order ``listener.priority`` gives (strict or
weighted; only two of them while idle) and returns the first batch found, each id naming its
queue (``<id>@<queue>``); a count sums the queues; a delete or an update goes to the queue the id
names. Every other call, and every call on another name, is the physical queue's own.

Each dequeue *task* keeps its own turn (idle or not, whose turn among the lower queues), as each
dequeue thread does there: kept by task, and forgotten with it. (Not a context variable: a task
started by another would begin with its starter's turn, the same object.)
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence

from cloudqueue.listener.policies.priority import Priority
from cloudqueue.listener.stores.async_forwarding import AsyncForwardingStorage
from cloudqueue.listener.stores.async_storage import AsyncQueueStorage
from cloudqueue.listener.stores.prioritized import PollerTurn, PriorityTurns
from cloudqueue.listener.stores.storage import QueueMessage


class AsyncPrioritizedStorage(AsyncForwardingStorage):
    """An ``AsyncQueueStorage`` on which the first of ``queue_names`` stands for them all."""

    def __init__(
        self, inner: AsyncQueueStorage, queue_names: Sequence[str], priority: Priority
    ) -> None:
        super().__init__(inner)
        self.turns = PriorityTurns(queue_names, priority)
        self._task_turns: weakref.WeakKeyDictionary[asyncio.Task[object], PollerTurn] = (
            weakref.WeakKeyDictionary()
        )

    async def get_messages(
        self, queue_name: str, *, max_messages: int, visibility_timeout_s: int
    ) -> list[QueueMessage]:
        turns = self.turns
        if queue_name != turns.first:
            return await self.inner.get_messages(
                queue_name, max_messages=max_messages, visibility_timeout_s=visibility_timeout_s
            )
        turn = self._task_turn()
        for name in turns.asking(turn):
            got = await self.inner.get_messages(
                name, max_messages=max_messages, visibility_timeout_s=visibility_timeout_s
            )
            if got:
                return turns.found(turn, name, got)
        return turns.missed(turn)

    async def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        queue_name, message_id = self.turns.home(queue_name, message_id)
        return await self.inner.delete_message(queue_name, message_id, pop_receipt)

    async def update_visibility(
        self,
        queue_name: str,
        message_id: str,
        pop_receipt: str,
        visibility_timeout_s: int,
        *,
        content: str | None = None,
    ) -> str:
        queue_name, message_id = self.turns.home(queue_name, message_id)
        return await self.inner.update_visibility(
            queue_name, message_id, pop_receipt, visibility_timeout_s, content=content
        )

    async def approximate_message_count(self, queue_name: str) -> int:
        turns = self.turns
        if queue_name != turns.first:
            return await self.inner.approximate_message_count(queue_name)
        depths = {
            name: await self.inner.approximate_message_count(name) for name in turns.queue_names
        }
        turns.depths = depths
        return sum(depths.values())

    def _task_turn(self) -> PollerTurn:
        """The running task's turn (made at its first get)."""
        task = asyncio.current_task()
        if task is None:  # awaited outside a task (a test's run_until_complete): one turn
            return PollerTurn()
        turn = self._task_turns.get(task)
        if turn is None:
            turn = self._task_turns[task] = PollerTurn()
        return turn

    def __repr__(self) -> str:
        turns = self.turns
        return (
            f"AsyncPrioritizedStorage({self.inner!r}, queues={list(turns.queue_names)}, "
            f"priority={turns.priority.mode})"
        )


__all__ = ["AsyncPrioritizedStorage"]
