"""``RetryLater``: a handler says "bring this message back in N seconds"; the message is hidden
for that long (by visibility, on every store), the delivery counts toward poisoning, and a worker's
``Retry`` policy does not judge it."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import MutableMapping
from typing import Any, ClassVar

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener import (
    BatchFailed,
    CloudQueueListener,
    CloudQueueLocation,
    MessageContext,
    Middleware,
    QueueStorage,
    Retry,
    RetryLater,
)
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.testing import ManualClock
from cloudqueue.workers import QueueWorker
from cloudqueue.workers.testing import run_until_drained
from tests.support.polling import eventually


class Settled(Middleware):
    """Notes each settlement's outcome: the message's hiding is done by then."""

    def __init__(self) -> None:
        self.outcomes: list[Any] = []

    def after_settle(self, context: MessageContext[Any]) -> None:
        self.outcomes.append(context.outcome)


def later_once(delay_s: float) -> Any:
    """A handler that asks for ``delay_s`` on an item's first call, and is done on the second;
    ``calls`` counts calls by item."""
    calls: dict[int, int] = {}
    lock = threading.Lock()

    def handle(item: int) -> None:
        with lock:
            calls[item] = calls.get(item, 0) + 1
            first = calls[item] == 1
        if first:
            raise RetryLater(delay_s, "rate limited")

    handle.calls = calls  # type: ignore[attr-defined]
    return handle


def test_a_message_comes_back_after_the_delay_asked_on_an_injected_clock(queue_name: str) -> None:
    """Done-when, injected clock: RetryLater(2) hides the message 2 s (still hidden at 1.5 s),
    then it is delivered again; its outcome says retried, reason retry_later, in 2 s."""
    clock = ManualClock()
    storage = InMemoryQueueStorage(clock=clock)
    storage.create_queue(queue_name)
    settled = Settled()
    delivered: list[float] = []
    listener: CloudQueueListener[int] = CloudQueueListener(
        storage,
        CloudQueueLocation(queue_name),
        int,
        dequeue_interval_s=0.01,
        clock=clock,
        middleware=[settled],
    )

    def handle(item: int) -> None:
        delivered.append(clock.monotonic())
        if len(delivered) == 1:
            raise RetryLater(2, "rate limited")

    listener.subscribe(handle)
    storage.put_message(queue_name, "1")
    listener.start_listener(1)
    try:
        eventually(lambda: len(settled.outcomes) == 1)
        clock.advance(1.5)
        assert not storage.peek_messages(queue_name, max_messages=1)  # still hidden
        clock.advance(0.5)
        eventually(lambda: len(settled.outcomes) == 2)
    finally:
        listener.stop(10)
    (gap,) = [later - earlier for earlier, later in itertools.pairwise(delivered)]
    assert gap == 2
    retried, done = settled.outcomes
    assert (retried.kind, retried.reason, retried.retry_in_s) == ("retried", "retry_later", 2)
    assert retried.error == "RetryLater: retry in 2 s: rate limited"
    assert done.kind == "deleted"


def test_a_fraction_of_a_second_is_rounded_up_never_cut_short() -> None:
    """Visibility takes whole seconds: 0.2 s hides for 1 s, 2.5 s for 3 s."""
    assert [RetryLater(delay).visibility_s for delay in (0, 0.2, 2, 2.5)] == [0, 1, 2, 3]


@pytest.mark.parametrize("delay_s", [-1, 8 * 24 * 3600, float("nan"), "2", True])
def test_a_delay_it_cannot_keep_is_refused_where_it_is_raised(delay_s: Any) -> None:
    """A negative delay, one beyond 7 days (a message is hidden at most that long), or no
    number: ValueError naming the limit, in the handler (its message is then retried as for any
    exception)."""
    with pytest.raises(ValueError, match=r"RetryLater\(delay_s=\.\.\.\) takes seconds from 0"):
        RetryLater(delay_s)


class Sync(QueueWorker[int]):
    queue_name = "later"

    def __init__(self) -> None:
        self.handle_once = later_once(2)

    def handle(self, item: int) -> None:
        self.handle_once(item)


class Async(Sync):
    async def handle(self, item: int) -> None:  # type: ignore[override]
        self.handle_once(item)


class Batch(QueueWorker[int]):
    """The whole call comes back: every item of the batch raised it."""

    queue_name = "later"
    settings: ClassVar[dict[str, Any]] = {"batch": {"max_items": 3, "max_wait_s": 0.1}}

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def handle_batch(self, items: list[int]) -> None:
        self.calls.append(sorted(items))
        if len(self.calls) == 1:
            raise RetryLater(2, "rate limited")


class BatchPositions(Batch):
    """Only the items named come back: ``BatchFailed`` raised from a ``RetryLater``."""

    def handle_batch(self, items: list[int]) -> None:
        self.calls.append(sorted(items))
        if len(self.calls) == 1:
            raise BatchFailed([items.index(2)]) from RetryLater(2, "rate limited")


def retries_logged(records: list[MutableMapping[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (record["log_level"], record["reason"], record["retry_in_s"])
        for record in records
        if record["event"] == "message_retry_scheduled"
    ]


@pytest.mark.parametrize("worker_class", [Sync, Async])
def test_sync_and_async_handlers_retry_later_even_with_fail_fast(
    worker_class: type[Sync],
) -> None:
    """A plain and an ``async def`` handler: the item is handled on its second delivery, nothing
    is poisoned, ``fail_fast`` does not take it for a failure, and the retry is logged at info
    with the delay asked for."""
    worker = worker_class()
    with capture_logs() as records:
        result = run_until_drained(worker, [1])
    assert result == [1]
    assert result.poisoned == []
    assert worker.handle_once.calls == {1: 2}
    assert retries_logged(records) == [("info", "retry_later", 2)]


def test_a_batch_handler_brings_back_the_whole_call() -> None:
    """RetryLater from ``handle_batch``: each message of the call is hidden for the delay and
    comes back; all three items are handled in the second call."""
    worker = Batch()
    with capture_logs() as records:
        result = run_until_drained(worker, [1, 2, 3])
    assert worker.calls == [[1, 2, 3], [1, 2, 3]]
    assert sorted(result) == [1, 2, 3]
    assert retries_logged(records) == [("info", "retry_later", 2)] * 3


def test_a_batch_handler_brings_back_only_the_positions_it_names() -> None:
    """``raise BatchFailed([i]) from RetryLater(2)``: only that item comes back, after 2 s."""
    worker = BatchPositions()
    with capture_logs() as records:
        result = run_until_drained(worker, [1, 2, 3])
    assert worker.calls == [[1, 2, 3], [2]]
    assert sorted(result) == [1, 2, 3]
    assert retries_logged(records) == [("info", "retry_later", 2)]


class Forever(QueueWorker[int]):
    """Asks for later on every delivery, under a policy that gives up on anything else."""

    queue_name = "later"
    retry = Retry(retry_on=(ConnectionError,), max_deliveries=3)
    calls = 0

    def handle(self, item: int) -> None:
        Forever.calls += 1
        raise RetryLater(60, "still rate limited")


def test_asking_forever_ends_in_the_poison_queue_after_the_deliveries_allowed() -> None:
    """Each delivery counts: after max_deliveries (3) the message is poisoned with reason
    retry_later and the last request as its error. The policy's ``retry_on`` does not judge a
    RetryLater (it would give up at once)."""
    Forever.calls = 0
    result = run_until_drained(Forever(), [7], fail_fast=False)
    assert Forever.calls == 3
    assert [(p.item, p.reason, p.error) for p in result.poisoned] == [
        (7, "retry_later", "RetryLater: retry in 60 s: still rate limited")
    ]


def test_on_every_store_the_message_comes_back_after_two_seconds_of_real_time(
    storage: QueueStorage, queue_name: str
) -> None:
    """Done-when, real time, on memory, SQLite and Azurite: RetryLater(2) brings the message back
    2 s later, give or take 1 s (visibility is whole seconds; the poll is every 50 ms)."""
    storage.create_queue(queue_name)
    delivered: list[float] = []

    def handle(item: int) -> None:
        delivered.append(time.monotonic())
        if len(delivered) == 1:
            raise RetryLater(2)

    listener: CloudQueueListener[int] = CloudQueueListener(
        storage, CloudQueueLocation(queue_name), int, dequeue_interval_s=0.05
    )
    listener.subscribe(handle)
    storage.put_message(queue_name, "1")
    listener.start_listener(1)
    try:
        eventually(lambda: len(delivered) == 2)
        eventually(lambda: storage.approximate_message_count(queue_name) == 0)
    finally:
        listener.stop(10)
    gap = delivered[1] - delivered[0]
    assert 1 <= gap <= 3, gap
