"""Publisher and listener together: batches, compressed and stored payloads, the retry unit.

In memory in virtual time (listeners run with ``run_until_drained``: no test waits for real
time), plus SQLite with the payload folder.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from listener import (
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
from listener.errors import PermanentFailure
from listener.messages.packing import message_bytes
from listener.messages.payload import ENVELOPE_KEY, parse_envelope
from listener.messages.poison import requeue_poisoned
from listener.messages.publisher import PENDING_BYTES
from listener.stores.storage import MAX_MESSAGE_BYTES, QueueMessage
from listener.testing import VirtualClock
from workers.testing import run_until_drained


class Order(BaseModel):
    order_id: int
    customer: str
    notes: str = ""


@pytest.fixture
def storage(virtual_storage: InMemoryQueueStorage) -> InMemoryQueueStorage:
    """This module's store: in memory, in virtual time (conftest's ``virtual_storage``)."""
    return virtual_storage


@pytest.fixture
def payloads() -> InMemoryPayloadStore:
    return InMemoryPayloadStore()


Listen = Callable[..., CloudQueueListener[Any]]


@pytest.fixture
def listen(virtual_clock: VirtualClock, queue_name: str) -> Listen:
    """Runs a one-thread listener with the handler (and any ``observers``) until the queue is
    drained, and returns it stopped."""

    def run(
        storage: QueueStorage,
        handler: Callable[[Any], None],
        *,
        item_type: type[Any] = Order,
        payload_store: PayloadStore | None = None,
        observers: tuple[Callable[[Any], None], ...] = (),
        **options: Any,
    ) -> CloudQueueListener[Any]:
        listener: CloudQueueListener[Any] = CloudQueueListener(
            storage,
            CloudQueueLocation(queue_name, visibility_timeout_s=30),
            item_type,
            payload_store=payload_store,
            clock=virtual_clock,
            sleeper=virtual_clock,
            **options,
        )
        for observer in (handler, *observers):
            listener.subscribe(observer)
        run_until_drained(listener, fail_fast=False)
        return listener

    return run


def orders(count: int, *, notes: str = "") -> list[Order]:
    return [Order(order_id=n, customer=f"customer-{n % 37}", notes=notes) for n in range(count)]


def contents(storage: QueueStorage, queue_name: str) -> list[str]:
    """Every message's content, oldest first, left in the queue (peeked)."""
    return [m.content for m in storage.peek_messages(queue_name, max_messages=32)]


def poisoned(storage: QueueStorage, queue_name: str) -> list[PoisonRecord]:
    messages = storage.peek_messages(poison_queue_name(queue_name), max_messages=32)
    return [PoisonRecord.from_json(message.content) for message in messages]


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
    assert listener.messages_processed == sent
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
        observers=(lambda order: second.append(order.order_id),),
    )
    assert listener.messages_processed == 1
    assert first == second == list(range(100))


def test_one_failing_item_makes_the_whole_message_come_back_and_all_its_items_run_again(
    storage: InMemoryQueueStorage, queue_name: str, listen: Listen
) -> None:
    """The message is the retry unit: item 2 fails once, so items 0-4 are all delivered twice,
    then the message is deleted."""
    Publisher(storage, queue_name, Order, batch=True).publish_many(orders(5))
    seen: list[int] = []
    listener = listen(storage, failing_once_on(2, seen))
    assert listener.messages_processed == 1
    assert seen == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    assert listener.messages_failed == 1
    assert storage.approximate_message_count(queue_name) == 0


def test_a_permanent_failure_of_one_item_poisons_the_whole_batch_for_requeue(
    storage: InMemoryQueueStorage, queue_name: str, listen: Listen
) -> None:
    """The poison record holds the batch envelope; requeued, every item is delivered again."""
    Publisher(storage, queue_name, Order, batch=True).publish_many(orders(4))
    seen: list[int] = []

    def handle(order: Order) -> None:
        seen.append(order.order_id)
        if order.order_id == 1 and len(seen) <= 4:
            raise PermanentFailure("order 1 is broken until fixed")

    listener = listen(storage, handle)
    assert listener.messages_poisoned == 1
    [record] = poisoned(storage, queue_name)
    assert record.reason == "permanent_failure"
    assert json.loads(record.content)[ENVELOPE_KEY]["kind"] == "batch"
    assert requeue_poisoned(storage, queue_name) == 1
    assert listen(storage, handle).messages_processed == 1
    assert seen == [0, 1, 2, 3, 0, 1, 2, 3]


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
    assert listener.messages_poisoned == sent
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
    assert listener.messages_poisoned == 1
    [record] = poisoned(storage, queue_name)
    assert record.reason == "max_dequeue_count_exceeded"
    assert "codec bug" in record.error
    assert listener.peak_dequeue_tasks == 1  # one thread lived through all five failures


def test_a_plain_text_queue_keeps_items_that_look_like_envelopes_intact(
    storage: InMemoryQueueStorage, queue_name: str, listen: Listen
) -> None:
    """A str item that is itself a cloudqueue envelope arrives as the very same text."""
    tricky = json.dumps({ENVELOPE_KEY: {"v": 1, "kind": "gzip", "count": 1}})
    codec = MessageCodec(str, base64=False)
    Publisher(storage, queue_name, str, codec=codec).publish_many([tricky, "plain"])
    received: list[str] = []
    listener = listen(storage, received.append, item_type=str, codec=codec)
    assert listener.messages_processed == 2
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
    assert listener.messages_processed == 1
    assert received == [big]


def test_an_incompressible_large_item_is_stored_and_its_payload_deleted_after_handling(
    storage: InMemoryQueueStorage, queue_name: str, payloads: InMemoryPayloadStore, listen: Listen
) -> None:
    """The queue holds a small reference; the listener resolves it, then deletes the payload."""
    data = noise(200 * 1024)
    Publisher(storage, queue_name, bytes, payload_store=payloads).publish(data)
    [content] = contents(storage, queue_name)
    assert len(content) < 300
    assert len(payloads.names()) == 1
    received: list[bytes] = []
    listener = listen(storage, received.append, item_type=bytes, payload_store=payloads)
    assert listener.messages_processed == 1
    assert received == [data]
    assert payloads.names() == []


def test_large_items_in_batch_mode_travel_alone_through_the_payload_store(
    storage: InMemoryQueueStorage, queue_name: str, payloads: InMemoryPayloadStore, listen: Listen
) -> None:
    """Small items are batched around a large one, which is stored; all arrive."""
    items = [b"small-1", b"small-2", noise(100 * 1024), b"small-3"]
    publisher = Publisher(storage, queue_name, bytes, payload_store=payloads, batch=True)
    assert publisher.publish_many(items) == 3
    assert publisher.payloads_stored == 1
    received: list[bytes] = []
    listener = listen(storage, received.append, item_type=bytes, payload_store=payloads)
    assert listener.messages_processed == 3
    assert sorted(received) == sorted(items)
    assert payloads.names() == []


def test_without_a_payload_store_an_item_too_large_even_compressed_is_refused(
    storage: InMemoryQueueStorage, queue_name: str
) -> None:
    """MessageTooLargeError names the cure; nothing is sent."""
    with pytest.raises(MessageTooLargeError, match="payload_store"):
        Publisher(storage, queue_name, bytes).publish(noise(100 * 1024))
    assert storage.approximate_message_count(queue_name) == 0


def test_a_poisoned_stored_payload_is_kept_so_that_requeue_works(
    storage: InMemoryQueueStorage, queue_name: str, payloads: InMemoryPayloadStore, listen: Listen
) -> None:
    """The poison record's content is the reference; after requeue it is handled and deleted."""
    Publisher(storage, queue_name, bytes, payload_store=payloads).publish(noise(100 * 1024))
    outcomes = iter([PermanentFailure("not yet"), None])

    def handle(_: bytes) -> None:
        failure = next(outcomes)
        if failure is not None:
            raise failure

    listener = listen(storage, handle, item_type=bytes, payload_store=payloads)
    assert listener.messages_poisoned == 1
    [record] = poisoned(storage, queue_name)
    envelope = parse_envelope(record.content)
    assert envelope is not None
    assert payloads.names() == [envelope.payload_name]
    requeue_poisoned(storage, queue_name)
    again = listen(storage, handle, item_type=bytes, payload_store=payloads)
    assert again.messages_processed == 1
    assert payloads.names() == []


def test_a_missing_payload_is_poisoned_as_payload_missing_and_the_listener_goes_on(
    storage: InMemoryQueueStorage, queue_name: str, payloads: InMemoryPayloadStore, listen: Listen
) -> None:
    """A reference to a deleted payload is poisoned at once, never retried in a loop."""
    publisher = Publisher(storage, queue_name, bytes, payload_store=payloads)
    publisher.publish(noise(100 * 1024))
    for name in payloads.names():
        payloads.delete(name)
    publisher.publish(b"next")
    received: list[bytes] = []
    listener = listen(storage, received.append, item_type=bytes, payload_store=payloads)
    assert listener.messages_poisoned == 1
    assert listener.messages_processed == 1
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
    assert listener.messages_poisoned == 1
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
    tmp_path: Path, queue_name: str, virtual_clock: VirtualClock, listen: Listen, size: int
) -> None:
    """1 MiB and 10 MiB items go through the folder beside the database; none is left behind."""
    connection = f"sqlite:///{tmp_path}/queues.db"
    storage = SqliteQueueStorage(tmp_path / "queues.db", clock=virtual_clock)
    storage.create_queue(queue_name)
    folder = open_payload_store(connection)
    assert isinstance(folder, FolderPayloadStore)
    items = [noise(size, seed=1), noise(size, seed=2)]
    Publisher(storage, queue_name, bytes, payload_store=folder).publish_many(items)
    assert len(folder.names()) == 2
    received: list[bytes] = []
    listener = listen(storage, received.append, item_type=bytes, payload_store=folder)
    assert listener.messages_processed == 2
    assert sorted(received) == sorted(items)
    assert folder.names() == []
    assert list((tmp_path / "payloads").rglob("*.*")) == []  # no temporary files either
    storage.close()


# -- delayed and expiring work ---------------------------------------------------------------


def test_a_delayed_item_stays_invisible_until_its_delay_has_passed(
    storage: InMemoryQueueStorage, queue_name: str, virtual_clock: VirtualClock, listen: Listen
) -> None:
    """publish(delay_s=90): counted in the queue at once, handed out 90 s later."""
    Publisher(storage, queue_name, Order).publish(orders(1)[0], delay_s=90)
    assert storage.approximate_message_count(queue_name) == 1
    assert contents(storage, queue_name) == []
    handled_at: list[float] = []
    start = virtual_clock.monotonic()
    listen(storage, lambda _: handled_at.append(virtual_clock.monotonic() - start))
    assert len(handled_at) == 1
    assert 90 <= handled_at[0] <= 92  # the next poll after the delay (polls every second)


def test_the_delay_applies_to_every_message_of_publish_many_batched_or_not(
    storage: InMemoryQueueStorage, queue_name: str
) -> None:
    """Single and batch mode alike: no message of the call is visible before its delay."""
    assert Publisher(storage, queue_name, Order).publish_many(orders(3), delay_s=30) == 3
    assert Publisher(storage, queue_name, Order, batch=True).publish_many(orders(50), delay_s=30)
    assert contents(storage, queue_name) == []
    assert storage.approximate_message_count(queue_name) == 4


def test_an_item_not_handled_within_its_time_to_live_expires_unhandled(
    storage: InMemoryQueueStorage, queue_name: str, virtual_clock: VirtualClock, listen: Listen
) -> None:
    """publish(time_to_live_s=60) overrides the publisher's TTL; past it the item is gone."""
    publisher = Publisher(storage, queue_name, Order, time_to_live_s=3600)
    publisher.publish(Order(order_id=1, customer="a"), time_to_live_s=60)
    publisher.publish(Order(order_id=2, customer="b"))
    virtual_clock.advance(61)
    received: list[int] = []
    listen(storage, lambda order: received.append(order.order_id))
    assert received == [2]


def test_a_never_expiring_item_has_no_expiry(
    storage: InMemoryQueueStorage, queue_name: str
) -> None:
    """NEVER_EXPIRES (-1) on publish, as Azure's -1."""
    Publisher(storage, queue_name, Order).publish(orders(1)[0], time_to_live_s=-1)
    [message] = storage.peek_messages(queue_name, max_messages=1)
    assert message.expires_on is None


@pytest.mark.parametrize(
    ("delay_s", "time_to_live_s", "complaint"),
    [
        (-1, None, "visibility_delay_s must be 0..604800"),
        (7 * 24 * 3600 + 1, -1, "visibility_delay_s must be 0..604800"),
        (60, 60, "must be less than time_to_live_s"),
        (0, 0, "time_to_live_s must be >= 1"),
        (1.5, None, "whole number of seconds"),
    ],
)
def test_an_out_of_range_delay_or_time_to_live_is_refused_before_anything_is_sent(
    storage: InMemoryQueueStorage,
    queue_name: str,
    payloads: InMemoryPayloadStore,
    delay_s: Any,
    time_to_live_s: int | None,
    complaint: str,
) -> None:
    """A clear ValueError; no message is put, and no large item's payload is stored."""
    publisher = Publisher(storage, queue_name, bytes, payload_store=payloads)
    with pytest.raises(ValueError, match=complaint):
        publisher.publish(noise(100 * 1024), delay_s=delay_s, time_to_live_s=time_to_live_s)
    with pytest.raises(ValueError, match=complaint):
        publisher.publish_many([b"x"], delay_s=delay_s, time_to_live_s=time_to_live_s)
    assert storage.approximate_message_count(queue_name) == 0
    assert payloads.names() == []


def test_a_publisher_with_an_invalid_time_to_live_is_refused_at_construction(
    storage: InMemoryQueueStorage, queue_name: str
) -> None:
    """The publisher-wide TTL is checked when the publisher is made, not at the first put."""
    with pytest.raises(ValueError, match="time_to_live_s"):
        Publisher(storage, queue_name, Order, time_to_live_s=0)
