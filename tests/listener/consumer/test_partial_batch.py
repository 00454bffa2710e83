"""A batch with one bad item: only the failed items are retried, in a message of their own.

On each storage backend (memory, SQLite, Azure on Azurite), real time, no retry back-off; on
threads, and once on the single event loop (the aio SDK on Azurite).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    MessageCodec,
    PoisonRecord,
    Publisher,
    QueueStorage,
    TransientStorageError,
    poison_queue_name,
)
from cloudqueue.listener.errors import PermanentFailure
from cloudqueue.listener.poison.requeue import requeue_poisoned
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.wire.payload import open_message
from tests.support.event_loop_consumer import ONE_TASK, running_async_consumer
from tests.support.polling import eventually

Listen = Callable[..., CloudQueueListener[str]]


@pytest.fixture
def queue(storage: QueueStorage, queue_name: str) -> str:
    storage.create_queue(queue_name)
    storage.create_queue(poison_queue_name(queue_name))
    return queue_name


@pytest.fixture
def listen(storage: QueueStorage, queue: str) -> Iterator[Listen]:
    """Starts one-thread listeners that retry at once (no back-off); always stops them."""
    made: list[CloudQueueListener[str]] = []

    def make(handler: Callable[[str], None], **location: Any) -> CloudQueueListener[str]:
        listener: CloudQueueListener[str] = CloudQueueListener(
            storage,
            CloudQueueLocation(queue, **location),
            str,
            delivery=DeliveryPolicy(max_dequeue_count=5, retry_delay_s=0, max_retry_delay_s=0),
            dequeue_interval_s=0.05,
        )
        listener.subscribe(handler)
        listener.start_listener(1)
        made.append(listener)
        return listener

    yield make
    for listener in made:
        assert listener.stop(10)


def failing_on(bad: str, seen: Counter[str]) -> Callable[[str], None]:
    """A handler counting deliveries that always fails on ``bad``."""

    def handle(item: str) -> None:
        seen[item] += 1
        if item == bad:
            raise ValueError(f"{item} has no customer")

    return handle


def poisoned(storage: QueueStorage, queue: str) -> list[PoisonRecord]:
    found = storage.peek_messages(poison_queue_name(queue), max_messages=32)
    return [PoisonRecord.from_json(message.content) for message in found]


def publish_batch(storage: QueueStorage, queue: str, *items: str) -> None:
    assert Publisher(storage, queue, str, batch=True).publish_many(items) == 1


def drained(storage: QueueStorage, queue: str) -> bool:
    return storage.approximate_message_count(queue) == 0


def test_good_items_run_once_and_the_bad_one_is_poisoned_alone_after_five_attempts(
    storage: QueueStorage, queue: str, listen: Listen
) -> None:
    """b1 and b3 are handled once; b2 five times, then its poison record holds only b2 and
    names it with its error."""
    publish_batch(storage, queue, "b1", "b2", "b3")
    seen: Counter[str] = Counter()
    listener = listen(failing_on("b2", seen))
    eventually(lambda: listener.messages_poisoned == 1 and drained(storage, queue), timeout_s=30)
    assert seen == {"b1": 1, "b2": 5, "b3": 1}
    [record] = poisoned(storage, queue)
    assert (record.reason, record.dequeue_count) == ("max_dequeue_count_exceeded", 5)
    assert record.error == "item 1 of 1 ('b2'): ValueError: b2 has no customer"
    assert open_message(record.content, None).texts == [MessageCodec(str).encode("b2")]


def test_on_the_event_loop_the_good_items_run_once_and_the_failed_one_is_retried_alone(
    storage: QueueStorage, queue: str
) -> None:
    """b2 fails once on the single loop: b1 and b3 are handled once, b2 comes back alone in a
    message of its own and is handled; nothing is left or poisoned."""
    publish_batch(storage, queue, "b1", "b2", "b3")
    seen: Counter[str] = Counter()

    async def handle(item: str) -> None:
        seen[item] += 1
        if item == "b2" and seen[item] == 1:
            raise ValueError("b2 failed once")

    instantly = DeliveryPolicy(max_dequeue_count=5, retry_delay_s=0, max_retry_delay_s=0)
    options = {"scaling": ONE_TASK, "delivery": instantly}
    with running_async_consumer(storage, queue, handle, MessageCodec(str), **options) as consumer:
        eventually(lambda: consumer.counters.processed == 1 and drained(storage, queue))
    assert seen == {"b1": 1, "b2": 2, "b3": 1}
    assert (consumer.counters.retried, consumer.counters.poisoned) == (1, 0)
    assert poisoned(storage, queue) == []


def test_a_permanent_failure_poisons_only_the_failed_item_and_requeue_gives_it_fresh_attempts(
    storage: QueueStorage, queue: str, listen: Listen
) -> None:
    """b2 raises PermanentFailure once: only b2 is poisoned; requeued, only b2 runs again."""
    publish_batch(storage, queue, "b1", "b2", "b3")
    seen: Counter[str] = Counter()

    def handle(item: str) -> None:
        seen[item] += 1
        if item == "b2" and seen[item] == 1:
            raise PermanentFailure("b2 is broken until fixed")

    listener = listen(handle)
    eventually(lambda: listener.messages_poisoned == 1 and drained(storage, queue), timeout_s=30)
    [record] = poisoned(storage, queue)
    assert record.reason == "permanent_failure"
    assert "item 2 of 3 ('b2'): PermanentFailure: b2 is broken until fixed" in record.error
    assert requeue_poisoned(storage, queue) == 1
    eventually(lambda: listener.messages_processed == 1 and drained(storage, queue), timeout_s=30)
    assert seen == {"b1": 1, "b2": 2, "b3": 1}


def test_a_crash_between_republish_and_delete_duplicates_items_but_loses_none(
    storage: QueueStorage, queue: str, listen: Listen, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The original's delete fails once after the failed item was re-published: the whole batch
    comes back (b1 and b3 run twice), and every copy of b2 still ends in the poison queue."""
    publish_batch(storage, queue, "b1", "b2", "b3")
    delete_message = storage.delete_message
    crashed: list[str] = []

    def crash_once(queue_name: str, message_id: str, pop_receipt: str) -> bool:
        if queue_name == queue and not crashed:
            crashed.append(message_id)
            raise TransientStorageError("the worker died before the delete")
        return delete_message(queue_name, message_id, pop_receipt)

    monkeypatch.setattr(storage, "delete_message", crash_once)
    seen: Counter[str] = Counter()
    listener = listen(failing_on("b2", seen), visibility_timeout_s=1)
    eventually(lambda: listener.messages_poisoned == 2 and drained(storage, queue), timeout_s=60)
    assert crashed
    assert seen["b1"] == seen["b3"] == 2
    records = poisoned(storage, queue)
    assert [open_message(r.content, None).texts for r in records] == [
        [MessageCodec(str).encode("b2")]
    ] * 2
    assert {record.dequeue_count for record in records} == {5}


def test_when_the_republish_fails_the_whole_batch_comes_back(
    storage: QueueStorage, queue: str, listen: Listen, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put that fails leaves the original to be retried as a whole, as before this rule."""
    publish_batch(storage, queue, "b1", "b2", "b3")
    put_message = storage.put_message
    refused: list[str] = []

    def refuse_once(queue_name: str, content: str, **options: Any) -> Any:
        if queue_name == queue and not refused:
            refused.append(content)
            raise TransientStorageError("put_message timed out")
        return put_message(queue_name, content, **options)

    monkeypatch.setattr(storage, "put_message", refuse_once)
    seen: Counter[str] = Counter()

    def fail_b2_once(item: str) -> None:
        seen[item] += 1
        if item == "b2" and seen[item] == 1:
            raise ValueError("b2 failed once")

    listener = listen(fail_b2_once)
    eventually(lambda: listener.messages_processed == 1 and drained(storage, queue), timeout_s=30)
    assert refused
    assert seen == {"b1": 2, "b2": 2, "b3": 2}
    assert poisoned(storage, queue) == []
