"""The event-loop consumer keeps the threaded path's guarantees: on every store (the Azure one
through the aio SDK against Azurite), a message delivered too often is poisoned before its handler
sees it again; on the embedded store, a database locked by another writer (its counterpart of a
503) is backed off from and loses nothing. (Which test covers each guarantee on the single loop:
docs/concepts/in-flight.md.)"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.poison.record import PoisonRecord, parse_record
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.producer.republish import remainder_content
from cloudqueue.listener.scaling.scaler import ScalingPolicy
from cloudqueue.listener.stores.async_storage import AsyncQueueStorage, DirectAsyncStorage
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from tests.listener.consumer.test_async_consumer import CODEC, consume, put_all, stores
from tests.support.event_loop_consumer import running_async_consumer
from tests.support.polling import eventually

__all__ = ["stores"]  # the fixture, parametrized over the stores


def deliver_unsettled(storage: QueueStorage, queue: str, times: int) -> None:
    """Take the queue's one message ``times`` times and settle it never, as workers killed while
    handling it would (each time made visible again at once, not after its timeout)."""
    for _ in range(times):
        [message] = storage.get_messages(queue, max_messages=1, visibility_timeout_s=30)
        storage.update_visibility(queue, message.id, message.pop_receipt, 0)


def poison_records(storage: QueueStorage, queue: str) -> list[PoisonRecord]:
    records = storage.get_messages(
        poison_queue_name(queue), max_messages=32, visibility_timeout_s=30
    )
    return [parse_record(record.content) for record in records]


def items_handled_until_settled(
    make: Callable[[], AsyncQueueStorage], queue: str, *, max_dequeue_count: int
) -> list[int]:
    """Consume ``queue`` until its one message is settled; the items its handler was given."""
    calls: list[int] = []

    async def handle(item: int) -> None:
        calls.append(item)

    delivery = DeliveryPolicy(max_dequeue_count=max_dequeue_count)
    asyncio.run(
        consume(
            make,
            queue,
            handle,
            lambda c: c.counters.poisoned + c.counters.processed == 1,
            delivery=delivery,
        )
    )
    return calls


def test_a_message_delivered_too_often_is_poisoned_without_its_handler(
    stores: tuple[QueueStorage, Callable[[], AsyncQueueStorage]], queue_name: str
) -> None:
    """A message whose workers died on it max_dequeue_count times (never settled) is not handed
    to the handler a fourth time: it is poisoned as max_dequeue_count_exceeded, its count kept,
    as the threaded path does -- no crash loop."""
    storage, make = stores
    put_all(storage, queue_name, [9])
    deliver_unsettled(storage, queue_name, 3)
    assert items_handled_until_settled(make, queue_name, max_dequeue_count=3) == []
    [record] = poison_records(storage, queue_name)
    assert (record.reason, record.dequeue_count) == ("max_dequeue_count_exceeded", 4)
    assert record.error == "delivered too often without success"
    assert storage.approximate_message_count(queue_name) == 0


def test_the_failed_items_of_a_batch_count_their_earlier_deliveries_toward_the_limit(
    queue_name: str,
) -> None:
    """Failed items re-published after 2 deliveries, then taken once by a worker that died: at
    their 4th delivery in all, past a limit of 3, they are poisoned unhandled, the record
    counting all 4 (as on threads), though this message was fetched only twice."""
    storage = InMemoryQueueStorage()
    storage.create_queue(queue_name)
    remainder = remainder_content([CODEC.encode(9)], attempts=2)
    assert remainder is not None
    storage.put_message(queue_name, remainder)
    deliver_unsettled(storage, queue_name, 1)
    make = partial(DirectAsyncStorage, storage)
    assert items_handled_until_settled(make, queue_name, max_dequeue_count=3) == []
    [record] = poison_records(storage, queue_name)
    assert (record.reason, record.dequeue_count) == ("max_dequeue_count_exceeded", 4)


def test_a_database_locked_by_another_writer_is_backed_off_from_and_loses_nothing(
    tmp_path: Path, queue_name: str
) -> None:
    """While another connection holds the embedded store's write lock, gets fail and are backed
    off from; held again as ten handled messages are deleted, their deletes fail (they are
    left, not lost): once the lock is gone each is delivered again and deleted; none poisoned."""
    path = tmp_path / "queues.db"
    storage = SqliteQueueStorage(path)
    put_all(storage, queue_name, [])
    gate, handled = threading.Event(), []
    other_writer = sqlite3.connect(path, isolation_level=None)

    async def handle(item: int) -> None:
        handled.append(item)
        # The handler's own work, until the test says: on the loop, not in to_thread's default
        # pool, whose few threads (cores + 4) ten blocked handlers would use up.
        while not gate.is_set():
            await asyncio.sleep(0.01)

    quick = SqliteQueueStorage(path, busy_timeout_s=0.01)  # a locked database fails at once
    one_task = ScalingPolicy(max_threads=1, max_idle_s=0.05)
    options = {
        "scaling": one_task,
        "concurrency": 16,
        "visibility_timeout_s": 1,
        "max_error_delay_s": 0.05,
    }
    with running_async_consumer(quick, queue_name, handle, CODEC, **options) as consumer:
        try:
            eventually(lambda: consumer.gets >= 1)
            with locked(other_writer):
                eventually(lambda: consumer.counters.dequeue_errors >= 2)
            put_all(storage, queue_name, list(range(10)))
            eventually(lambda: len(handled) == 10, timeout_s=30)
            with locked(other_writer):
                gate.set()
                eventually(lambda: consumer.counters.left >= 1, timeout_s=30)
        finally:
            gate.set()
        eventually(lambda: storage.approximate_message_count(queue_name) == 0, timeout_s=30)
    quick.close()
    other_writer.close()
    assert sorted(set(handled)) == list(range(10))
    assert len(handled) == 10 + consumer.counters.left  # each left one, delivered again
    assert storage.approximate_message_count(poison_queue_name(queue_name)) == 0
    storage.close()


@contextmanager
def locked(connection: sqlite3.Connection) -> Iterator[None]:
    """The database's write lock held by ``connection``'s transaction until the block ends."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        connection.execute("COMMIT")
