"""Batch handlers on the single event loop: an ``async def handle_batch(items)`` gets many
messages' items in one call, and each message still settles on its own.

The loop's counterpart of ``batch_handler``, with the same rules: each message is handled in its
own task and slot (renewed, under its time limit, settled by the delivery policy); its items join
the open batch, and its task awaits the batch's outcome for them -- deleted when they succeeded,
retried or poisoned when they failed. A batch closes when it holds ``[batch] max_items`` items
(the host gives the worker as many slots at least, so one fetch task can fill it) or
``max_wait_s`` after its first item, whichever comes first; then it is called in a task of its
own, so a message's time limit or a stop cancels that message's wait, never its neighbours'
call. A call longer than ``listener.time_limit_s`` is cancelled: its items fail as stopped.

What a call decides is ``batch_handler``'s: returning settles every item as done;
``BatchFailed([positions])`` fails only those items (``batch_partial`` is logged with their
messages' ids); any other exception fails them all. The items of a message of several (a
publisher's batch) join batches one after the other; when some of them fail, only those are
retried, in a message of their own (``event_loop.settling``), as on threads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from cloudqueue.listener.consumer.current import current_message
from cloudqueue.listener.errors import BatchFailed
from cloudqueue.listener.workflows.chains import ChainStep
from cloudqueue.listener.workflows.keep_results import KeepResults
from cloudqueue.workers.api.worker import QueueWorker
from cloudqueue.workers.host.batch_handler import BatchCalls, Results
from cloudqueue.workers.host.seam import returning_to
from cloudqueue.workers.settings import CloudQueueSettings

T = TypeVar("T")


@dataclass(eq=False)
class _Batch(Generic[T]):
    """Items gathered for one call, whose messages they came from, and who waits for them."""

    items: list[T] = field(default_factory=list)
    message_ids: list[str] = field(default_factory=list)
    waiters: list[asyncio.Future[Exception | None]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class AsyncBatcher(BatchCalls, Generic[T]):
    """Gathers the items handed to ``handle`` on one loop into calls of a batch handler."""

    def __init__(
        self,
        handler: Callable[[list[T]], Awaitable[None]],
        *,
        max_items: int,
        max_wait_s: float,
        time_limit_s: float = 0.0,
    ) -> None:
        super().__init__(max_items=max_items, max_wait_s=max_wait_s)
        self._handler = handler
        self.time_limit_s = time_limit_s
        self._open: _Batch[T] | None = None
        self._calls: set[asyncio.Task[None]] = set()

    async def handle(self, item: T) -> None:
        """Add ``item`` to the open batch and wait for the call; raise what failed it."""
        batch = self._open or self._start()
        waiter: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
        message = current_message()
        batch.items.append(item)
        batch.message_ids.append("" if message is None else message.id)
        batch.waiters.append(waiter)
        if len(batch.items) >= self.max_items:
            self._close(batch)
        failed = await waiter  # cancelled alone: its time limit, or a stop past the grace
        if failed is not None:
            raise failed

    def _start(self) -> _Batch[T]:
        batch: _Batch[T] = _Batch()
        batch.timer = asyncio.get_running_loop().call_later(self.max_wait_s, self._close, batch)
        self._open = batch
        return batch

    def _close(self, batch: _Batch[T]) -> None:
        """Close the batch (full, or its wait over) and call the handler in a task of its own."""
        if self._open is batch:
            self._open = None
        if batch.timer is not None:
            batch.timer.cancel()
        call = asyncio.get_running_loop().create_task(self._call(batch))
        self._calls.add(call)  # held: a task only the loop refers to may be collected
        call.add_done_callback(self._calls.discard)

    async def _call(self, batch: _Batch[T]) -> None:
        """Call the handler with the batch's items and tell every waiter its item's outcome."""
        count = len(batch.items)
        results: Results = [None] * count
        limit = asyncio.timeout(self.time_limit_s or None)
        try:
            async with limit:
                await self._handler(list(batch.items))
        except BatchFailed as failed:
            results = self._partly_failed(batch.message_ids, failed)
        except Exception as error:  # a handler's own TimeoutError is its failure, not the limit
            results = [_stopped(count, error) if limit.expired() else error] * count
        except BaseException as interrupt:  # cancelled: the loop ends past a stop's grace
            results = [_stopped(count, interrupt)] * count
            raise
        finally:
            self.calls += 1
            for waiter, result in zip(batch.waiters, results, strict=True):
                if not waiter.done():  # a wait its time limit cancelled is over already
                    waiter.set_result(result)


def loop_handler(
    worker: QueueWorker[Any],
    settings: CloudQueueSettings,
    results: KeepResults | None,
    chain: ChainStep | None,
) -> Callable[[Any], Awaitable[None]]:
    """What the consumer hands each item to: the worker's ``handle`` (its values set aside for
    results and chains), or a batcher of its ``handle_batch``."""
    if not type(worker).batches():
        return returning_to(worker.handle, results, chain)
    batcher: AsyncBatcher[Any] = AsyncBatcher(
        worker.handle_batch,  # type: ignore[arg-type]  # async def: checked by loop_checks
        max_items=settings.batch.max_items,
        max_wait_s=settings.batch.max_wait_s,
        time_limit_s=settings.listener.time_limit_s,
    )
    return batcher.handle


def _stopped(count: int, interrupt: BaseException) -> BatchFailed:
    stopped = BatchFailed(range(count), "the call was stopped at the time limit")
    stopped.__cause__ = interrupt
    return stopped


__all__ = ["AsyncBatcher", "loop_handler"]
