"""Batch handlers: ``handle_batch`` gets many messages' items per call; each message still settles
on its own, so ``BatchFailed`` retries only the failed items, renewal covers the wait for a batch,
and a time limit releases each message of a stuck call."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from pydantic import ValidationError

from cloudqueue.listener import (
    BatchFailed,
    CallNext,
    CloudQueueListener,
    CloudQueueLocation,
    ConfigurationError,
    DeliveryPolicy,
    MessageCodec,
    MessageContext,
    Middleware,
    Publisher,
    QueueStorage,
)
from cloudqueue.listener.consumer.coroutines import LoopThread
from cloudqueue.listener.poison.queue import browse_poisoned
from cloudqueue.listener.poison.record import read_record
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.testing import ManualClock
from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost
from cloudqueue.workers.host.batch_handler import Batcher
from cloudqueue.workers.host.controls import controls_for
from cloudqueue.workers.testing import run_until_drained
from tests.support.polling import eventually


class Calls:
    """The items of every handle_batch call, thread-safe."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self._lock = threading.Lock()

    def add(self, items: list[int]) -> int:
        """Record a call; how many times each of its items was seen before, summed."""
        with self._lock:
            self.calls.append(list(items))
            return len(self.calls)

    def seen(self, item: int) -> int:
        with self._lock:
            return sum(call.count(item) for call in self.calls)

    def counts(self) -> collections.Counter[int]:
        with self._lock:
            return collections.Counter(item for call in self.calls for item in call)


def batch_worker(queue: str, calls: Calls, **batch: Any) -> type[QueueWorker[int]]:
    class Bulk(QueueWorker[int]):
        queue_name = queue
        settings: ClassVar[dict[str, dict[str, Any]]] = {"batch": batch}

        def handle_batch(self, items: list[int]) -> None:
            calls.add(items)

    return Bulk


def test_a_hundred_items_go_through_handle_batch_in_calls_of_two_to_ten(
    storage: QueueStorage, queue_name: str
) -> None:
    """Done-when, as ``cloudqueue run`` hosts it, on every store: 100 items with max_items = 10
    are each handled once, in calls of more than one item and at most ten."""
    calls = Calls()
    storage.create_queue(queue_name)
    Publisher(storage, queue_name, int).publish_many(range(100))
    worker = batch_worker(queue_name, calls, max_items=10, max_wait_s=5)
    host = WorkerHost([worker], CloudQueueSettings(shutdown_grace_s=5), storage=storage)
    host.start()
    try:
        eventually(lambda: sum(calls.counts().values()) == 100, timeout_s=60)
        eventually(lambda: storage.approximate_message_count(queue_name) == 0, timeout_s=30)
    finally:
        assert host.stop()
    assert calls.counts() == collections.Counter(range(100))
    assert all(1 < len(call) <= 10 for call in calls.calls), [len(c) for c in calls.calls]


class FailsSomeOnce(QueueWorker[int]):
    """Fails the items ending in 3 the first time it sees them, with BatchFailed."""

    queue_name = "bulk"
    settings: ClassVar[dict[str, dict[str, Any]]] = {"batch": {"max_items": 10}}
    calls: Calls

    def handle_batch(self, items: list[int]) -> None:
        first = [p for p, item in enumerate(items) if item % 10 == 3 and self.calls.seen(item) == 0]
        self.calls.add(items)
        if first:
            raise BatchFailed(first, "downstream refused them")


class AsyncFailsSomeOnce(FailsSomeOnce):
    async def handle_batch(self, items: list[int]) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        FailsSomeOnce.handle_batch(self, items)


@pytest.mark.parametrize("worker_type", [FailsSomeOnce, AsyncFailsSomeOnce])
def test_batch_failed_retries_only_the_failed_items(worker_type: type[FailsSomeOnce]) -> None:
    """Done-when, plain and async: the ten items BatchFailed named are handled again (twice in
    all), every other item once; all 100 end up handled, none poisoned."""
    worker = worker_type()
    worker.calls = Calls()
    result = run_until_drained(worker, range(100), fail_fast=False)
    counts = worker.calls.counts()
    assert {item for item, seen in counts.items() if seen == 2} == set(range(3, 100, 10))
    assert set(counts.values()) == {1, 2}
    assert sorted(result) == list(range(100))
    assert result.poisoned == []
    assert all(len(call) <= 10 for call in worker.calls.calls)


class SlowToSettle(Middleware):
    """Holds item 7's message for a moment of real time after its batch call returned, as a
    loaded machine may, before it is settled."""

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> None:
        call_next()
        if 7 in context.items:
            time.sleep(0.3)  # slow work, not a wait for a condition: virtual time must hold


def test_virtual_time_waits_for_a_batch_message_still_being_settled() -> None:
    """While a message of a finished batch is not yet settled, run_until_drained does not move
    virtual time past its visibility timeout, though every other thread waits on the clock (a
    failing item's retries call for 31 s of it): each item is handled once."""

    class Rows(QueueWorker[int]):
        queue_name = "rows"
        middleware: ClassVar[list[Any]] = [SlowToSettle]
        settings: ClassVar[dict[str, Any]] = {
            "batch": {"max_items": 10, "max_wait_s": 0.5},
            "listener": {"visibility_timeout_s": 5},
        }
        seen: ClassVar[list[int]] = []

        def handle_batch(self, items: list[int]) -> None:
            self.seen.extend(items)
            refused = [position for position, item in enumerate(items) if item < 0]
            if refused:
                raise BatchFailed(refused, "negative")

    result = run_until_drained(Rows, [*range(10), -1], fail_fast=False)
    assert sorted(item for item in Rows.seen if item >= 0) == list(range(10))
    assert [poisoned.item for poisoned in result.poisoned] == [-1]


def test_any_other_exception_retries_every_item_of_the_call() -> None:
    """A call that raises something else fails all its items: each is handled again, once."""

    class FirstCallFails(QueueWorker[int]):
        queue_name = "bulk"
        calls = Calls()

        def handle_batch(self, items: list[int]) -> None:
            if self.calls.add(items) == 1:
                raise RuntimeError("the bulk API is down")

    result = run_until_drained(FirstCallFails(), range(20), fail_fast=False)
    first = FirstCallFails.calls.calls[0]
    counts = FirstCallFails.calls.counts()
    assert all(counts[item] == 2 for item in first)
    assert all(counts[item] == 1 for item in range(20) if item not in first)
    assert sorted(result) == list(range(20))


def test_a_publishers_batch_message_keeps_its_done_items_when_one_fails(
    queue_name: str,
) -> None:
    """A message of five items (a Publisher batch): BatchFailed naming one of them puts that one
    alone in a new message; the other four are not handled again."""
    calls = Calls()
    storage = InMemoryQueueStorage()
    storage.create_queue(queue_name)

    def handle_batch(items: list[int]) -> None:
        failed = [p for p, item in enumerate(items) if item == 2 and calls.seen(2) == 0]
        calls.add(items)
        if failed:
            raise BatchFailed(failed)

    loop = LoopThread("test-batches")
    listener: CloudQueueListener[int] = CloudQueueListener(
        storage,
        CloudQueueLocation(queue_name),
        int,
        dequeue_interval_s=0.02,
        delivery=DeliveryPolicy(retry_delay_s=0),
        concurrency=10,
        adaptive_slots=False,
    )
    listener.subscribe_batches(Batcher(handle_batch, max_items=10, max_wait_s=0.2, loop=loop))
    Publisher(storage, queue_name, int, batch=True).publish_many(range(5))
    listener.start_listener(1)
    try:
        eventually(lambda: calls.counts()[2] == 2)
        eventually(lambda: storage.approximate_message_count(queue_name) == 0)
    finally:
        listener.stop(10)
        loop.close()
    assert calls.calls[0] == [0, 1, 2, 3, 4]
    assert calls.counts() == collections.Counter([0, 1, 2, 2, 3, 4])


def test_messages_waiting_for_their_batch_keep_their_visibility(queue_name: str) -> None:
    """With a 1 s visibility timeout and a batch that waits 2.5 s to fill, renewal keeps both
    messages hidden meanwhile: each is handled once, in one call."""
    calls = Calls()
    storage = InMemoryQueueStorage()
    storage.create_queue(queue_name)
    worker = batch_worker(queue_name, calls, max_items=10, max_wait_s=2.5)
    worker.settings = {**worker.settings, "listener": {"visibility_timeout_s": 1}}
    host = WorkerHost([worker], CloudQueueSettings(shutdown_grace_s=5), storage=storage)
    Publisher(storage, queue_name, int).publish_many([1, 2])
    host.start()
    try:
        eventually(lambda: storage.approximate_message_count(queue_name) == 0)
    finally:
        assert host.stop()
    assert [sorted(call) for call in calls.calls] == [[1, 2]]
    assert host.listeners[0].visibility_renewals > 0


@pytest.fixture
def blocked() -> Iterator[threading.Event]:
    release = threading.Event()
    yield release
    release.set()


def test_a_stuck_call_releases_each_of_its_messages_at_the_time_limit(
    clock: ManualClock,
    manual_storage: InMemoryQueueStorage,
    queue_name: str,
    blocked: threading.Event,
) -> None:
    """Three messages in one call that never returns: at the limit each is poisoned as
    time_limit (max_dequeue_count = 1) on its own; the threads waiting for the call are freed at
    once, and only the one making it is stuck."""
    entered = threading.Event()

    def handle_batch(items: list[int]) -> None:
        entered.set()
        blocked.wait()

    loop = LoopThread("test-batches")
    listener: CloudQueueListener[int] = CloudQueueListener(
        manual_storage,
        CloudQueueLocation(queue_name),
        int,
        dequeue_interval_s=0.02,
        delivery=DeliveryPolicy(max_dequeue_count=1),
        concurrency=3,
        adaptive_slots=False,
        clock=clock,
        time_limit_s=2,
    )
    batcher = Batcher(handle_batch, max_items=3, max_wait_s=1, loop=loop, clock=clock)
    listener.subscribe_batches(batcher)
    Publisher(manual_storage, queue_name, int).publish_many([1, 2, 3])
    listener.start_listener(1)
    try:
        eventually(entered.is_set)
        clock.advance(2.1)
        eventually(lambda: len(list(browse_poisoned(manual_storage, queue_name, limit=5))) == 3)
        poisoned = browse_poisoned(manual_storage, queue_name, limit=5)
        records = [read_record(message.content) for message in poisoned]
        assert {r.reason for r in records if r is not None} == {"time_limit"}
        eventually(lambda: listener.stuck_threads == 1)
        blocked.set()
        eventually(lambda: listener.stuck_threads == 0)
        assert manual_storage.approximate_message_count(queue_name) == 0
    finally:
        listener.stop(10)
        loop.close()


def test_unknown_positions_in_batch_failed_fail_the_whole_call() -> None:
    """BatchFailed naming a position the call did not have cannot say which items failed: all
    of them are retried."""
    calls = Calls()

    def handle_batch(items: list[int]) -> None:
        calls.add(items)
        raise BatchFailed([len(items)])

    loop = LoopThread("test-batches")
    try:
        batcher = Batcher(handle_batch, max_items=2, max_wait_s=0, loop=loop)
        results = batcher.deliver([1, 2], "m1")
    finally:
        loop.close()
    assert all(isinstance(error, BatchFailed) for error in results)


@pytest.mark.parametrize("positions", ["12", 3, [1.5], [True]])
def test_batch_failed_takes_int_positions_only(positions: Any) -> None:
    """A string, a bare int, floats or bools are a handler's bug, said at once."""
    with pytest.raises(TypeError, match="positions"):
        BatchFailed(positions)


def test_the_batch_settings_are_bounded_and_checked_against_the_time_limit() -> None:
    """max_items over 256 is refused; so is a batch wait not shorter than the time limit, and a
    worker with both handle and handle_batch."""
    with pytest.raises(ValidationError, match="max_items"):
        CloudQueueSettings.model_validate({"batch": {"max_items": 257}})
    worker = batch_worker("bulk", Calls())
    settings = CloudQueueSettings.model_validate(
        {"listener": {"time_limit_s": 1}, "batch": {"max_wait_s": 1}}
    )
    with pytest.raises(ConfigurationError, match=r"max_wait_s .* less than .*time_limit_s"):
        controls_for(worker, settings)

    class Both(QueueWorker[int]):
        queue_name = "bulk"

        def handle(self, item: int) -> None: ...

        def handle_batch(self, items: list[int]) -> None: ...

    with pytest.raises(ConfigurationError, match="both handle and handle_batch"):
        Both.check()


def test_a_batch_worker_keeps_a_whole_batch_in_flight_per_thread() -> None:
    """Its threads hold at least max_items slots each, and never fewer for fast handlers."""
    worker = batch_worker("bulk", Calls(), max_items=64)
    controls = controls_for(worker, CloudQueueSettings().for_worker(worker.settings))
    assert (controls.concurrency, controls.adaptive_slots) == (64, False)
    assert MessageCodec(int).decode("5") == 5  # the codec the batch's items are read with
