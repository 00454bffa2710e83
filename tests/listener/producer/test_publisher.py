"""Publisher and listener together: batches, compressed and stored payloads, the retry unit.

In memory with a manual clock (no test waits for real time), plus SQLite with the payload folder.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from pydantic import BaseModel

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    FolderPayloadStore,
    InMemoryPayloadStore,
    InMemoryQueueStorage,
    MessageCodec,
    MessageTooLargeError,
    PayloadStore,
    PoisonRecord,
    Publisher,
    QueueNotFoundError,
    QueueStorage,
    SqliteQueueStorage,
    TransientStorageError,
    open_payload_store,
    poison_queue_name,
)
from cloudqueue.listener.errors import PermanentFailure
from cloudqueue.listener.poison.requeue import requeue_poisoned
from cloudqueue.listener.producer.publisher import PENDING_BYTES
from cloudqueue.listener.queue_limits import MAX_MESSAGE_BYTES
from cloudqueue.listener.stores.storage import QueueMessage
from cloudqueue.listener.testing import ManualClock
from cloudqueue.listener.wire.envelope import ENVELOPE_KEY, parse_envelope
from cloudqueue.listener.wire.packing import message_bytes
from tests.support.event_loop_consumer import KINDS, ONE_TASK, LoopConsumer
from tests.support.payloads import live_payloads
from tests.support.polling import eventually


class Order(BaseModel):
    order_id: int
    customer: str
    notes: str = ""


@pytest.fixture
def storage(manual_storage: InMemoryQueueStorage) -> InMemoryQueueStorage:
    """This module's store: in memory, on the manual clock (conftest's ``manual_storage``)."""
    return manual_storage


@pytest.fixture
def payloads() -> InMemoryPayloadStore:
    return InMemoryPayloadStore()


Listen = Callable[..., CloudQueueListener[Any]]


@pytest.fixture
def listen(clock: ManualClock, queue_name: str) -> Iterator[Listen]:
    """Starts a one-thread listener on a storage with a handler; always stops it."""
    made: list[CloudQueueListener[Any]] = []

    def make(
        storage: QueueStorage,
        handler: Callable[[Any], None],
        *more_handlers: Callable[[Any], None],
        item_type: type[Any] = Order,
        payload_store: PayloadStore | None = None,
        **options: Any,
    ) -> CloudQueueListener[Any]:
        listener: CloudQueueListener[Any] = CloudQueueListener(
            storage,
            CloudQueueLocation(queue_name, visibility_timeout_s=30),
            item_type,
            payload_store=payload_store,
            clock=clock,
            sleeper=clock,
            **options,
        )
        for observer in (handler, *more_handlers):
            listener.subscribe(observer)  # all before the start: none may miss a message
        listener.start_listener(1)
        made.append(listener)
        return listener

    yield make
    for listener in made:
        listener.stop(5)


class Consumer(Protocol):
    """What the tests of either kind read of a consumer."""

    @property
    def messages_processed(self) -> int: ...
    @property
    def messages_failed(self) -> int: ...
    @property
    def messages_poisoned(self) -> int: ...


ListenEither = Callable[..., Consumer]


@pytest.fixture(params=KINDS)
def listen_either(
    request: pytest.FixtureRequest, listen: Listen, queue_name: str, clock: ManualClock
) -> Iterator[ListenEither]:
    """``listen``, or the event-loop consumer of the handler made ``async def`` (one task, on
    the store's manual clock: ``waiting`` moves it on for a retry's back-off)."""
    if request.param == "threads":
        yield listen
        return
    made: list[LoopConsumer[Any]] = []

    def make(
        storage: QueueStorage,
        handler: Callable[[Any], None],
        *,
        item_type: type[Any] = Order,
        payload_store: PayloadStore | None = None,
    ) -> Consumer:
        async def handle(item: Any) -> None:
            handler(item)

        codec = MessageCodec(item_type)
        options = {"payload_store": payload_store, "scaling": ONE_TASK, "clock": clock}
        made.append(LoopConsumer(storage, queue_name, handle, codec, **options).start())
        return made[-1]

    yield make
    for consumer in made:
        consumer.stop(5)


def orders(count: int, *, notes: str = "") -> list[Order]:
    return [Order(order_id=n, customer=f"customer-{n % 37}", notes=notes) for n in range(count)]


def contents(storage: QueueStorage, queue_name: str) -> list[str]:
    """Every message's content, oldest first, left in the queue (peeked)."""
    return [m.content for m in storage.peek_messages(queue_name, max_messages=32)]


def poisoned(storage: QueueStorage, queue_name: str) -> list[PoisonRecord]:
    messages = storage.peek_messages(poison_queue_name(queue_name), max_messages=32)
    return [PoisonRecord.from_json(message.content) for message in messages]


def waiting(clock: ManualClock, condition: Callable[[], bool]) -> Callable[[], bool]:
    """``condition``, for ``eventually``: each check that finds it false moves the store's clock
    a second on, so a retry's back-off ends for a consumer whose waits do not move it (the
    event loop's)."""

    def check() -> bool:
        if condition():
            return True
        clock.advance(1)
        return False

    return check


def failing_once_on(order_id: int, seen: list[int]) -> Callable[[Order], None]:
    """A handler recording each delivery that fails the first time it sees ``order_id``."""

    def handle(order: Order) -> None:
        seen.append(order.order_id)
        if order.order_id == order_id and seen.count(order_id) == 1:
            raise RuntimeError(f"order {order_id} failed")

    return handle


def noise(size: int, seed: int = 1) -> bytes:
    """Incompressible bytes: gzip cannot bring them under the message limit."""
    return random.Random(seed).randbytes(size)


# -- sending ---------------------------------------------------------------------------------


def test_by_default_each_item_is_one_message_exactly_as_the_codec_writes_it(
    storage: InMemoryQueueStorage, queue_name: str
) -> None:
    """No batching: one message per item, byte-for-byte Azure Functions' base64 JSON."""
    publisher = Publisher(storage, queue_name, Order)
    assert publisher.publish_many(orders(3)) == 3
    codec = MessageCodec(Order)
    assert contents(storage, queue_name) == [codec.encode(order) for order in orders(3)]


def test_batch_mode_packs_many_items_into_few_messages_each_under_the_limit(
    storage: InMemoryQueueStorage, queue_name: str
) -> None:
    """2,000 items go in a handful of messages, every one within 64 KiB."""
    publisher = Publisher(storage, queue_name, Order, batch=True)
    sent = publisher.publish_many(orders(2000))
    assert sent == storage.approximate_message_count(queue_name)
    assert 1 <= sent <= 3
    sizes = [message_bytes(content) for content in contents(storage, queue_name)]
    assert all(size <= MAX_MESSAGE_BYTES for size in sizes)
    assert publisher.items_sent == 2000


def test_publish_many_streams_an_input_longer_than_its_buffer(
    storage: InMemoryQueueStorage, queue_name: str, listen: Listen
) -> None:
    """A generator of several MiB is packed chunk by chunk, nearly as tightly, every item once."""
    count = 3 * PENDING_BYTES // 150
    publisher = Publisher(storage, queue_name, Order, batch=True)
    sent = publisher.publish_many(iter(orders(count)))
    received: list[int] = []
    listener = listen(storage, lambda order: received.append(order.order_id))
    eventually(lambda: listener.messages_processed == sent)
    assert sorted(received) == list(range(count))
    assert sent < count / 500


def test_a_batch_fans_out_its_items_one_by_one_in_order(
    storage: InMemoryQueueStorage, queue_name: str, listen: Listen
) -> None:
    """Every observer gets each item of a batch message in the published order."""
    Publisher(storage, queue_name, Order, batch=True).publish_many(orders(100))
    assert storage.approximate_message_count(queue_name) == 1
    first: list[int] = []
    second: list[int] = []
    listener = listen(
        storage,
        lambda order: first.append(order.order_id),
        lambda order: second.append(order.order_id),
    )
    eventually(lambda: listener.messages_processed == 1)
    assert first == second == list(range(100))


def test_one_failing_item_comes_back_alone_and_its_neighbours_are_not_run_again(
    storage: InMemoryQueueStorage, queue_name: str, listen_either: ListenEither, clock: ManualClock
) -> None:
    """Item 2 fails once: it is re-published in a message of its own and the batch deleted, so
    items 0, 1, 3, 4 run once and item 2 twice, on threads and on the event loop (details in
    tests/listener/consumer/test_partial_batch.py)."""
    Publisher(storage, queue_name, Order, batch=True).publish_many(orders(5))
    seen: list[int] = []
    listener = listen_either(storage, failing_once_on(2, seen))
    eventually(waiting(clock, lambda: listener.messages_processed == 1))
    assert seen == [0, 1, 2, 3, 4, 2]
    assert listener.messages_failed == 1
    assert storage.approximate_message_count(queue_name) == 0


def test_a_permanent_failure_of_one_item_poisons_that_item_alone_for_requeue(
    storage: InMemoryQueueStorage, queue_name: str, listen_either: ListenEither
) -> None:
    """The poison record holds an envelope of the failed item only; requeued, only it runs (on
    threads and on the event loop)."""
    Publisher(storage, queue_name, Order, batch=True).publish_many(orders(4))
    seen: list[int] = []

    def handle(order: Order) -> None:
        seen.append(order.order_id)
        if order.order_id == 1 and len(seen) <= 4:
            raise PermanentFailure("order 1 is broken until fixed")

    listener = listen_either(storage, handle)
    eventually(lambda: listener.messages_poisoned == 1)
    [record] = poisoned(storage, queue_name)
    assert record.reason == "permanent_failure"
    assert json.loads(record.content)[ENVELOPE_KEY]["count"] == 1
    assert requeue_poisoned(storage, queue_name) == 1
    eventually(lambda: listener.messages_processed == 1)
    assert seen == [0, 1, 2, 3, 1]


def test_a_full_batch_that_is_poisoned_keeps_its_poison_details(
    storage: InMemoryQueueStorage, queue_name: str, listen: Listen
) -> None:
    """Envelopes leave room under 64 KiB, so a full batch's poison record still fits with its
    reason and errors (a plain near-limit message would be kept bare)."""
    rng = random.Random(5)
    varied = [Order(order_id=n, customer="c", notes=rng.randbytes(20).hex()) for n in range(3000)]
    Publisher(storage, queue_name, Order, batch=True).publish_many(varied)
    [first, *_] = contents(storage, queue_name)
    assert message_bytes(first) > 55_000

    def reject(order: Order) -> None:
        raise PermanentFailure(f"order {order.order_id} rejected")

    sent = storage.approximate_message_count(queue_name)
    listener = listen(storage, reject)
    eventually(lambda: listener.messages_poisoned == sent)
    records = poisoned(storage, queue_name)
    assert len(records) == sent
    assert {record.reason for record in records} == {"permanent_failure"}
    assert first in {record.content for record in records}


def test_a_codec_bug_is_retried_then_poisoned_and_the_listener_lives_on(
    storage: InMemoryQueueStorage, queue_name: str, listen: Listen
) -> None:
    """An unexpected exception while opening a message never ends the dequeue thread."""

    class BrokenCodec(MessageCodec[Order]):
        def decode(self, content: str) -> Order:
            raise RuntimeError("codec bug")

    Publisher(storage, queue_name, Order).publish(orders(1)[0])
    listener = listen(storage, lambda _: None, codec=BrokenCodec(Order))
    eventually(lambda: listener.messages_poisoned == 1)
    [record] = poisoned(storage, queue_name)
    assert record.reason == "max_dequeue_count_exceeded"
    assert "codec bug" in record.error
    assert listener.active_dequeue_tasks == 1


def test_a_plain_text_queue_keeps_items_that_look_like_envelopes_intact(
    storage: InMemoryQueueStorage, queue_name: str, listen: Listen
) -> None:
    """A str item that is itself a cloudqueue envelope arrives as the very same text."""
    tricky = json.dumps({ENVELOPE_KEY: {"v": 1, "kind": "gzip", "count": 1}})
    codec = MessageCodec(str, base64=False)
    Publisher(storage, queue_name, str, codec=codec).publish_many([tricky, "plain"])
    received: list[str] = []
    listener = listen(storage, received.append, item_type=str, codec=codec)
    eventually(lambda: listener.messages_processed == 2)
    assert received == [tricky, "plain"]


# -- large payloads --------------------------------------------------------------------------


def test_a_large_compressible_item_is_sent_gzipped_inline(
    storage: InMemoryQueueStorage, queue_name: str, payloads: InMemoryPayloadStore, listen: Listen
) -> None:
    """300 KiB of repetitive text fits in one message once compressed; no payload is stored."""
    big = Order(order_id=1, customer="acme", notes="all work and no play " * 15_000)
    Publisher(storage, queue_name, Order, payload_store=payloads).publish(big)
    [content] = contents(storage, queue_name)
    envelope = parse_envelope(content)
    assert envelope is not None
    assert envelope.kind == "gzip"
    assert payloads.names() == []
    received: list[Order] = []
    listener = listen(storage, received.append, payload_store=payloads)
    eventually(lambda: listener.messages_processed == 1)
    assert received == [big]


def test_an_incompressible_large_item_is_stored_and_its_payload_retired_after_handling(
    storage: InMemoryQueueStorage,
    queue_name: str,
    payloads: InMemoryPayloadStore,
    listen_either: ListenEither,
) -> None:
    """The queue holds a small reference; the listener resolves it, then leaves a tombstone."""
    data = noise(200 * 1024)
    Publisher(storage, queue_name, bytes, payload_store=payloads).publish(data)
    [content] = contents(storage, queue_name)
    assert len(content) < 300
    assert len(payloads.names()) == 1
    received: list[bytes] = []
    listener = listen_either(storage, received.append, item_type=bytes, payload_store=payloads)
    eventually(lambda: listener.messages_processed == 1)
    assert received == [data]
    assert live_payloads(payloads) == []


def test_large_items_in_batch_mode_travel_alone_through_the_payload_store(
    storage: InMemoryQueueStorage,
    queue_name: str,
    payloads: InMemoryPayloadStore,
    listen_either: ListenEither,
) -> None:
    """Small items are batched around a large one, which is stored; all arrive."""
    items = [b"small-1", b"small-2", noise(100 * 1024), b"small-3"]
    publisher = Publisher(storage, queue_name, bytes, payload_store=payloads, batch=True)
    assert publisher.publish_many(items) == 3
    assert publisher.payloads_stored == 1
    received: list[bytes] = []
    listener = listen_either(storage, received.append, item_type=bytes, payload_store=payloads)
    eventually(lambda: listener.messages_processed == 3)
    assert sorted(received) == sorted(items)
    assert live_payloads(payloads) == []


def test_without_a_payload_store_an_item_too_large_even_compressed_is_refused(
    storage: InMemoryQueueStorage, queue_name: str
) -> None:
    """MessageTooLargeError names the cure; nothing is sent."""
    with pytest.raises(MessageTooLargeError, match="payload_store"):
        Publisher(storage, queue_name, bytes).publish(noise(100 * 1024))
    assert storage.approximate_message_count(queue_name) == 0


def test_a_poisoned_stored_payload_is_kept_so_that_requeue_works(
    storage: InMemoryQueueStorage,
    queue_name: str,
    payloads: InMemoryPayloadStore,
    listen_either: ListenEither,
) -> None:
    """The poison record's content is the reference; after requeue it is handled and retired."""
    Publisher(storage, queue_name, bytes, payload_store=payloads).publish(noise(100 * 1024))
    outcomes = iter([PermanentFailure("not yet"), None])

    def handle(_: bytes) -> None:
        failure = next(outcomes)
        if failure is not None:
            raise failure

    listener = listen_either(storage, handle, item_type=bytes, payload_store=payloads)
    eventually(lambda: listener.messages_poisoned == 1)
    [record] = poisoned(storage, queue_name)
    envelope = parse_envelope(record.content)
    assert envelope is not None
    assert payloads.names() == [envelope.payload_name]
    requeue_poisoned(storage, queue_name)
    eventually(lambda: listener.messages_processed == 1)
    assert live_payloads(payloads) == []


def test_a_missing_payload_is_poisoned_as_payload_missing_and_the_listener_goes_on(
    storage: InMemoryQueueStorage,
    queue_name: str,
    payloads: InMemoryPayloadStore,
    listen_either: ListenEither,
) -> None:
    """A reference to a deleted payload is poisoned at once, never retried in a loop."""
    publisher = Publisher(storage, queue_name, bytes, payload_store=payloads)
    publisher.publish(noise(100 * 1024))
    for name in payloads.names():
        payloads.delete(name)
    publisher.publish(b"next")
    received: list[bytes] = []
    listener = listen_either(storage, received.append, item_type=bytes, payload_store=payloads)
    eventually(lambda: listener.messages_poisoned == 1 and listener.messages_processed == 1)
    assert received == [b"next"]
    [record] = poisoned(storage, queue_name)
    assert record.reason == "payload_missing"
    assert record.dequeue_count == 1


def test_a_listener_without_a_payload_store_poisons_a_reference_as_undecodable(
    storage: InMemoryQueueStorage, queue_name: str, payloads: InMemoryPayloadStore, listen: Listen
) -> None:
    """Misconfiguration is visible in the poison queue, and the payload stays for a requeue."""
    Publisher(storage, queue_name, bytes, payload_store=payloads).publish(noise(100 * 1024))
    listener = listen(storage, lambda _: None, item_type=bytes)
    eventually(lambda: listener.messages_poisoned == 1)
    [record] = poisoned(storage, queue_name)
    assert record.reason == "undecodable"
    assert "payload_store" in record.error
    assert len(payloads.names()) == 1


class _PutTimesOut(InMemoryQueueStorage):
    """A store whose puts fail as a timed-out request does: they may or may not have happened."""

    def put_message(self, queue_name: str, content: str, **options: Any) -> QueueMessage:
        raise TransientStorageError("put_message timed out")


def test_a_failed_put_discards_the_stored_payload_unless_the_put_may_have_happened(
    queue_name: str, payloads: InMemoryPayloadStore
) -> None:
    """Queue missing (definite): the payload is deleted. Timeout (maybe sent): it is kept, so a
    message that did get through can still be handled."""
    missing = Publisher(InMemoryQueueStorage(), queue_name, bytes, payload_store=payloads)
    with pytest.raises(QueueNotFoundError):
        missing.publish(noise(100 * 1024))
    assert payloads.names() == []
    timing_out = _PutTimesOut()
    timing_out.create_queue(queue_name)
    maybe = Publisher(timing_out, queue_name, bytes, payload_store=payloads)
    with pytest.raises(TransientStorageError):
        maybe.publish(noise(100 * 1024))
    assert len(payloads.names()) == 1


@pytest.mark.parametrize("size", [1 << 20, 10 << 20], ids=["1MiB", "10MiB"])
def test_big_items_round_trip_through_sqlite_and_the_payload_folder(
    tmp_path: Path, queue_name: str, clock: ManualClock, listen: Listen, size: int
) -> None:
    """1 MiB and 10 MiB items go through the folder beside the database; only tombstones stay."""
    connection = f"sqlite:///{tmp_path}/queues.db"
    storage = SqliteQueueStorage(tmp_path / "queues.db", clock=clock)
    storage.create_queue(queue_name)
    folder = open_payload_store(connection)
    assert isinstance(folder, FolderPayloadStore)
    items = [noise(size, seed=1), noise(size, seed=2)]
    Publisher(storage, queue_name, bytes, payload_store=folder).publish_many(items)
    assert len(folder.names()) == 2
    received: list[bytes] = []
    listener = listen(storage, received.append, item_type=bytes, payload_store=folder)
    eventually(lambda: listener.messages_processed == 2, timeout_s=60)
    assert sorted(received) == sorted(items)
    eventually(lambda: live_payloads(folder) == [])
    assert list((tmp_path / "payloads").rglob("*.*")) == []  # no temporary files either
    assert listener.stop(5)
    storage.close()
