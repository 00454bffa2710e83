"""The event-loop consumer keeps the threaded path's guarantees on every store (the Azure one
through the aio SDK against Azurite): a message delivered too often is poisoned before its handler
sees it again. (Which test covers each guarantee on the single loop: docs/concepts/in-flight.md.)"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.poison.record import PoisonRecord, parse_record
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.stores.async_storage import AsyncQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from tests.listener.consumer.test_async_consumer import consume, put_all, stores

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


def test_a_message_delivered_too_often_is_poisoned_without_its_handler(
    stores: tuple[QueueStorage, Callable[[], AsyncQueueStorage]], queue_name: str
) -> None:
    """A message whose workers died on it max_dequeue_count times (never settled) is not handed
    to the handler a fourth time: it is poisoned as max_dequeue_count_exceeded, its count kept,
    as the threaded path does -- no crash loop."""
    storage, make = stores
    put_all(storage, queue_name, [9])
    deliver_unsettled(storage, queue_name, 3)
    calls: list[int] = []

    async def handle(item: int) -> None:
        calls.append(item)

    asyncio.run(
        consume(
            make,
            queue_name,
            handle,
            lambda c: c.counters.poisoned + c.counters.processed == 1,
            delivery=DeliveryPolicy(max_dequeue_count=3),
        )
    )
    assert calls == []
    [record] = poison_records(storage, queue_name)
    assert (record.reason, record.dequeue_count) == ("max_dequeue_count_exceeded", 4)
    assert record.error == "delivered too often without success"
    assert storage.approximate_message_count(queue_name) == 0
