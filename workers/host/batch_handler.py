"""Batch handlers: a worker's ``handle_batch(items)`` gets many messages' items in one call.

Each message is still handled in its own in-flight slot, as any other: its items join the open
batch and its thread waits for the batch's results, then the message settles on its own --
deleted when all its items succeeded, retried (its failed items only, for a message of several)
or poisoned as usual. So renewal, time limits, retries and the poison queue work per message
inside a batch. A batch closes when it holds ``[batch] max_items`` items, or ``max_wait_s`` after
its first item arrived, whichever comes first; the thread that fills it (or the first to see its
wait end) calls the handler, and many batches may be in progress at once.

What a call decides: returning settles every item as done; ``BatchFailed([positions])`` fails
only the items at those positions (``batch_partial`` is logged with their messages' ids); any
other exception fails them all. A coroutine (``async def handle_batch``) runs on the worker's
event loop, as ``async def handle`` does.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import inspect
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import structlog

from cloudqueue.listener.clock import EVENT_SLEEPER, SYSTEM_CLOCK, Clock, Sleeper
from cloudqueue.listener.consumer.coroutines import LoopThread
from cloudqueue.listener.consumer.time_limits import wait_within_limit
from cloudqueue.listener.errors import BatchFailed

T = TypeVar("T")

Results = list[Exception | None]
"""What each item of a batch failed with, or None: by position."""

log = structlog.get_logger(__name__)


@dataclass(eq=False)
class _Batch(Generic[T]):
    """Items gathered for one call, whose messages they came from, and who waits for them."""

    deadline: float
    items: list[T] = field(default_factory=list)
    message_ids: list[str] = field(default_factory=list)
    waiters: list[concurrent.futures.Future[Results]] = field(default_factory=list)
    closed: bool = False
    closing: threading.Event = field(default_factory=threading.Event)
    """Set when the batch closes: ends the waits for its deadline."""


class BatchCalls:
    """What both batchers (this one, and the single loop's ``async_batches``) count of their
    calls, and what a ``BatchFailed`` makes of a call's items."""

    def __init__(self, *, max_items: int, max_wait_s: float) -> None:
        if max_items < 1 or max_wait_s < 0:
            raise ValueError("need max_items >= 1 and max_wait_s >= 0")
        self.max_items = max_items
        self.max_wait_s = max_wait_s
        self.calls = 0
        """Handler calls made so far."""
        self.partial = 0
        """Calls that raised ``BatchFailed``: some items failed, the others were done."""

    def _partly_failed(self, message_ids: Sequence[str], failed: BatchFailed) -> Results:
        """Each item's outcome when a call raised ``failed`` (``batch_partial`` logged with the
        failed items' message ids); all failed, logged, when it names positions the batch does
        not have: which items failed is unknown then."""
        count = len(message_ids)
        unknown = [position for position in failed.failed if not 0 <= position < count]
        if unknown:
            log.error("batch_failed_unknown_positions", positions=unknown, items=count)
            return [failed] * count
        self.partial += 1
        positions = set(failed.failed)
        log.warning(
            "batch_partial",
            items=count,
            failed=len(positions),
            message_ids=sorted({message_ids[p] for p in positions}),
            error=str(failed),
        )
        return [failed if position in positions else None for position in range(count)]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_items={self.max_items}, max_wait_s={self.max_wait_s}, "
            f"calls={self.calls}, partial={self.partial})"
        )


class Batcher(BatchCalls, Generic[T]):
    """Gathers the items of a listener's messages into calls of a batch handler."""

    def __init__(
        self,
        handler: Callable[[list[T]], Awaitable[None] | None],
        *,
        max_items: int,
        max_wait_s: float,
        loop: LoopThread,
        clock: Clock = SYSTEM_CLOCK,
        sleeper: Sleeper = EVENT_SLEEPER,
    ) -> None:
        super().__init__(max_items=max_items, max_wait_s=max_wait_s)
        self._handler = handler
        self.loop = loop
        self.clock, self.sleeper = clock, sleeper
        self._lock = threading.Lock()
        self._open: _Batch[T] | None = None
        self.waiting = 0
        """Threads waiting for a batch to fill (a test's virtual clock tells them from idle)."""

    @property
    def open_messages(self) -> int:
        """Messages with items in the batch still open: each waits for it to close."""
        with self._lock:
            return 0 if self._open is None else len(set(self._open.message_ids))

    def deliver(self, items: Sequence[T], message_id: str) -> list[Exception | None]:
        """Add one message's items to batches, wait for their results, return each item's."""
        joined: list[tuple[_Batch[T], int, concurrent.futures.Future[Results]]] = []
        filled: list[_Batch[T]] = []
        waiter: concurrent.futures.Future[Results] = concurrent.futures.Future()
        with self._lock:
            for item in items:
                batch = self._open or self._start()
                if not joined or joined[-1][0] is not batch:  # one waiter per batch joined
                    waiter = concurrent.futures.Future()
                    batch.waiters.append(waiter)
                batch.items.append(item)
                batch.message_ids.append(message_id)
                joined.append((batch, len(batch.items) - 1, waiter))
                if len(batch.items) >= self.max_items:
                    batch.closed, self._open = True, None
                    batch.closing.set()
                    filled.append(batch)
        for batch in filled:  # the thread that filled a batch makes its call
            self._call(batch)
        results: dict[int, Results] = {}
        for batch, _, waiter in joined:
            if id(batch) not in results:
                results[id(batch)] = self._await(batch, waiter)
        return [results[id(batch)][position] for batch, position, _ in joined]

    def close(self) -> None:
        """Nothing to do: a batch still open is called by its waiting threads."""

    def _start(self) -> _Batch[T]:
        self._open = _Batch(self.clock.monotonic() + self.max_wait_s)
        return self._open

    def _await(self, batch: _Batch[T], waiter: concurrent.futures.Future[Results]) -> Results:
        """The batch's results. Its first waiter watches its deadline and, if it is still open
        then, makes its call; the others only wait (one wake-up each, not two)."""
        if waiter is not batch.waiters[0]:
            return wait_within_limit(waiter)
        while not batch.closed:
            remaining_s = batch.deadline - self.clock.monotonic()
            if remaining_s <= 0:
                break
            with self._lock:
                self.waiting += 1
            try:
                self.sleeper.wait(batch.closing, remaining_s)
            finally:
                with self._lock:
                    self.waiting -= 1
        if self._close(batch):
            self._call(batch)
        return wait_within_limit(waiter)

    def _close(self, batch: _Batch[T]) -> bool:
        """Close the batch if it is still open; True when this thread closed it."""
        with self._lock:
            if batch.closed:
                return False
            batch.closed = True
            batch.closing.set()
            if self._open is batch:
                self._open = None
            return True

    def _call(self, batch: _Batch[T]) -> None:
        """Call the handler with the batch's items and tell every waiter the results."""
        count = len(batch.items)
        results: Results = [None] * count
        try:
            result = self._handler(list(batch.items))
            if inspect.isawaitable(result):
                wait_within_limit(self.loop.submit(result))
        except BatchFailed as failed:
            results = self._partly_failed(batch.message_ids, failed)
        except Exception as error:
            results = [error] * count
        except BaseException as interrupt:  # the time limit stopped the call
            stopped = BatchFailed(range(count), "the call was stopped at the time limit")
            stopped.__cause__ = interrupt
            results = [stopped] * count
            raise
        finally:
            self.calls += 1
            for waiter in batch.waiters:
                _tell(waiter, results)


def _tell(waiter: concurrent.futures.Future[Results], results: Results) -> None:
    # A wait its time limit cancelled is over: that message was settled already.
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        waiter.set_result(results)


__all__ = ["BatchCalls", "Batcher", "Results"]
