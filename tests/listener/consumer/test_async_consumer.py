"""The event-loop consumer: every message deleted, retried, poisoned with its reason, or left in
its queue, on each store (the Azure one through the aio SDK against Azurite)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener.consumer.current import current_envelope
from cloudqueue.listener.consumer.event_loop.consumer import AsyncConsumer
from cloudqueue.listener.consumer.middleware import CallNext, MessageContext, Middleware
from cloudqueue.listener.errors import PermanentFailure, TransientStorageError
from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.poison.record import parse_record
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.producer.publisher import Publisher
from cloudqueue.listener.scaling.scaler import ScalingPolicy
from cloudqueue.listener.stores.async_storage import (
    AsyncQueueStorage,
    DirectAsyncStorage,
    async_storage_for,
)
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.wire.codec import MessageCodec
from cloudqueue.listener.wire.limits import DEFAULT_LIMITS
from tests.conftest import BACKENDS, make_storage

CODEC = MessageCodec(int)
QUICK = ScalingPolicy(max_threads=4, max_idle_s=0.05, delta_backoff_s=0.01)
"""Short idle waits on real time, so a test's drain ends soon after the queue empties."""


@pytest.fixture(params=BACKENDS)
def stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[QueueStorage, Callable[[], AsyncQueueStorage]]]:
    """The store a producer and the test's checks use, and a maker of its async side (made
    inside the test's loop: an aio store belongs to the loop it is opened on)."""
    storage = make_storage(request.param, request, tmp_path)
    yield storage, lambda: async_storage_for(storage)
    storage.close()


async def consume(
    make: Callable[[], AsyncQueueStorage],
    queue: str,
    handler: Callable[[int], Awaitable[None]],
    until: Callable[[AsyncConsumer[int]], bool],
    **options: Any,
) -> AsyncConsumer[int]:
    """Run a consumer until ``until`` holds (polled on the loop), then stop it and drain."""
    aio = make()
    consumer = AsyncConsumer(aio, queue, handler, CODEC, **{"scaling": QUICK, **options})
    running = asyncio.create_task(consumer.run())
    async with asyncio.timeout(60):
        while not until(consumer):
            await asyncio.sleep(0.02)
        consumer.stop()
        await running
    await aio.aclose()
    return consumer


def put_all(storage: QueueStorage, queue: str, items: list[int]) -> None:
    storage.create_queue(queue)
    for item in items:
        storage.put_message(queue, CODEC.encode(item))


def poison_reasons(storage: QueueStorage, queue: str) -> list[str]:
    records = storage.get_messages(
        poison_queue_name(queue), max_messages=32, visibility_timeout_s=30
    )
    return sorted(parse_record(record.content).reason for record in records)


def test_every_message_is_handled_once_and_deleted(
    stores: tuple[QueueStorage, Callable[[], AsyncQueueStorage]], queue_name: str
) -> None:
    """A backlog of 60 is handled by tasks on one loop and leaves an empty queue; each handler
    reads the envelope of its own message."""
    storage, make = stores
    put_all(storage, queue_name, list(range(60)))
    seen: list[int] = []
    envelopes: set[tuple[str, str]] = set()

    async def handle(item: int) -> None:
        await asyncio.sleep(0.01)
        seen.append(item)
        envelope = current_envelope()  # after an await: still its own message's
        envelopes.add((envelope.queue_name, envelope.message_id))

    consumer = asyncio.run(consume(make, queue_name, handle, lambda c: c.counters.processed >= 60))
    assert sorted(seen) == list(range(60))
    assert len(envelopes) == 60
    assert {queue for queue, _ in envelopes} == {queue_name}
    assert storage.approximate_message_count(queue_name) == 0
    assert consumer.counters.in_flight == 0


def test_a_failing_message_is_retried_then_poisoned_with_the_reason(
    stores: tuple[QueueStorage, Callable[[], AsyncQueueStorage]], queue_name: str
) -> None:
    """A handler that always raises sees the message max_dequeue_count times (each retry logged
    at warning, as on threads: a fault to look into); then it sits in the poison queue as
    max_dequeue_count_exceeded, and nothing is left in the queue."""
    storage, make = stores
    put_all(storage, queue_name, [7])
    calls: list[int] = []

    async def handle(item: int) -> None:
        calls.append(item)
        raise ValueError("no")

    delivery = DeliveryPolicy(max_dequeue_count=3, retry_delay_s=0, max_retry_delay_s=0)
    with capture_logs() as logs:
        consumer = asyncio.run(
            consume(make, queue_name, handle, lambda c: c.counters.poisoned == 1, delivery=delivery)
        )
    assert calls == [7, 7, 7]
    assert consumer.counters.retried == 2
    retries = [log["log_level"] for log in logs if log["event"] == "message_retry_scheduled"]
    assert retries == ["warning", "warning"]
    assert poison_reasons(storage, queue_name) == ["max_dequeue_count_exceeded"]
    assert storage.approximate_message_count(queue_name) == 0


@pytest.mark.parametrize(
    ("content", "raised", "reason"),
    [
        ("not json at all", None, "undecodable"),
        (CODEC.encode(1), PermanentFailure("hopeless"), "permanent_failure"),
    ],
)
def test_undecodable_and_hopeless_messages_are_poisoned_at_once(
    stores: tuple[QueueStorage, Callable[[], AsyncQueueStorage]],
    queue_name: str,
    content: str,
    raised: Exception | None,
    reason: str,
) -> None:
    """Bad input or a PermanentFailure goes to the poison queue on its first delivery."""
    storage, make = stores
    storage.create_queue(queue_name)
    storage.put_message(queue_name, content)

    async def handle(item: int) -> None:
        if raised is not None:
            raise raised

    asyncio.run(consume(make, queue_name, handle, lambda c: c.counters.poisoned == 1))
    assert poison_reasons(storage, queue_name) == [reason]


def test_a_handler_past_its_time_limit_is_cancelled_retried_then_poisoned_as_time_limit(
    stores: tuple[QueueStorage, Callable[[], AsyncQueueStorage]], queue_name: str
) -> None:
    """A handler still awaiting at the limit is cancelled: its first delivery is retried, its
    last poisoned with reason time_limit; nothing is left in the queue."""
    storage, make = stores
    put_all(storage, queue_name, [1])
    cancelled: list[int] = []

    async def handle(item: int) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(item)
            raise

    consumer = asyncio.run(
        consume(
            make,
            queue_name,
            handle,
            lambda c: c.counters.poisoned == 1,
            time_limit_s=0.1,
            delivery=DeliveryPolicy(max_dequeue_count=2, retry_delay_s=0, max_retry_delay_s=0),
        )
    )
    assert cancelled == [1, 1]
    assert consumer.counters.retried == 1
    assert poison_reasons(storage, queue_name) == ["time_limit"]
    assert storage.approximate_message_count(queue_name) == 0


def test_stop_finishes_started_handlers_and_releases_the_rest_at_once(
    stores: tuple[QueueStorage, Callable[[], AsyncQueueStorage]], queue_name: str
) -> None:
    """On stop a running handler completes and its message is deleted; the fetched messages not
    started are visible again at once, not after their visibility timeout."""
    storage, make = stores
    put_all(storage, queue_name, list(range(5)))
    started = asyncio.Event
    gate: dict[str, asyncio.Event] = {}

    async def handle(item: int) -> None:
        gate["started"].set()
        await gate["finish"].wait()

    async def scenario() -> AsyncConsumer[int]:
        gate["started"], gate["finish"] = started(), started()
        aio = make()
        one_slot = ScalingPolicy(min_threads=1, max_threads=1, max_idle_s=0.05)
        consumer = AsyncConsumer(
            aio, queue_name, handle, CODEC, scaling=one_slot, concurrency=1, visibility_timeout_s=60
        )
        running = asyncio.create_task(consumer.run())
        async with asyncio.timeout(30):
            await gate["started"].wait()
            consumer.stop()
            await asyncio.sleep(0.05)
            gate["finish"].set()
            await running
        await aio.aclose()
        return consumer

    consumer = asyncio.run(scenario())
    assert consumer.counters.processed == 1
    left = storage.get_messages(queue_name, max_messages=32, visibility_timeout_s=30)
    assert len(left) == 4


class PlainPass(Middleware):
    """A plain around_handle: on the event loop it runs on a worker thread."""

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> None:
        call_next()


def test_a_stop_past_its_grace_cancels_a_handler_under_a_plain_middleware(
    queue_name: str,
) -> None:
    """The handler runs on the loop, its plain middleware on a worker thread: a stop past
    ``grace_s`` cancels the handler all the same, before ``run`` returns; its message stays."""
    storage = InMemoryQueueStorage()
    put_all(storage, queue_name, [1])
    cancelled: list[int] = []

    async def handle(item: int) -> None:
        try:
            await asyncio.Event().wait()  # never set: only a cancellation ends it
        except asyncio.CancelledError:
            cancelled.append(item)
            raise

    async def scenario() -> list[int]:
        await consume(
            lambda: DirectAsyncStorage(storage),
            queue_name,
            handle,
            lambda c: c.handlers_running == 1,
            grace_s=0.05,
            middleware=[PlainPass()],
        )
        return list(cancelled)  # before asyncio.run cancels what is left at its end

    assert asyncio.run(scenario()) == [1]
    assert storage.approximate_message_count(queue_name) == 1


def test_a_poison_queue_deleted_while_running_is_created_again(queue_name: str) -> None:
    """A message given up on after its poison queue was deleted still gets its record: the
    queue is created again, not the message left to fail for ever."""
    storage = InMemoryQueueStorage()
    put_all(storage, queue_name, [])

    async def handle(item: int) -> None:
        raise PermanentFailure("hopeless")

    async def scenario() -> AsyncConsumer[int]:
        consumer = AsyncConsumer(
            DirectAsyncStorage(storage), queue_name, handle, CODEC, scaling=QUICK
        )
        running = asyncio.create_task(consumer.run())
        async with asyncio.timeout(30):
            while not storage.list_queues(poison_queue_name(queue_name)):
                await asyncio.sleep(0.01)
            storage.delete_queue(poison_queue_name(queue_name))
            storage.put_message(queue_name, CODEC.encode(3))
            while consumer.counters.poisoned + consumer.counters.left == 0:
                await asyncio.sleep(0.01)
            consumer.stop()
            await running
        return consumer

    consumer = asyncio.run(scenario())
    assert consumer.counters.poisoned == 1
    assert poison_reasons(storage, queue_name) == ["permanent_failure"]


def test_a_publishers_batch_is_opened_into_its_items_and_a_bloated_one_poisoned(
    queue_name: str,
) -> None:
    """Items a Publisher packed into one message are each handled, in order, and the message
    deleted; a message announcing more items than the decoding limit is poisoned as over_limit."""
    storage = InMemoryQueueStorage()
    put_all(storage, queue_name, [])
    assert Publisher(storage, queue_name, int, batch=True).publish_many([4, 5, 6]) == 1
    Publisher(storage, queue_name, int, batch=True).publish_many(list(range(2000)))
    seen: list[int] = []

    async def handle(item: int) -> None:
        seen.append(item)

    limits = replace(DEFAULT_LIMITS, max_items_per_message=1000)
    asyncio.run(
        consume(
            lambda: DirectAsyncStorage(storage),
            queue_name,
            handle,
            lambda c: c.counters.processed + c.counters.poisoned == 2,
            limits=limits,
        )
    )
    assert seen == [4, 5, 6]
    assert poison_reasons(storage, queue_name) == ["over_limit"]
    assert storage.approximate_message_count(queue_name) == 0


class DownAtStart(DirectAsyncStorage):
    """A store whose first ``failures`` queue creations fail, as when storage is down at start."""

    def __init__(self, storage: QueueStorage, failures: int) -> None:
        super().__init__(storage)
        self.failures = failures

    async def create_queue(self, queue_name: str) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise TransientStorageError("create_queue failed: connection refused")
        await super().create_queue(queue_name)


def test_storage_down_at_start_is_waited_out_not_fatal(queue_name: str) -> None:
    """Creating the queues fails twice: the consumer backs off and tries again, then handles
    what is queued, as a failed get is backed off from; it never ends on its own."""
    storage = InMemoryQueueStorage()
    put_all(storage, queue_name, [1, 2, 3])
    down = DownAtStart(storage, failures=2)
    consumer = asyncio.run(
        consume(lambda: down, queue_name, _nothing, lambda c: c.counters.processed == 3)
    )
    assert down.failures == 0
    assert consumer.counters.processed == 3


async def _nothing(item: int) -> None:
    pass
