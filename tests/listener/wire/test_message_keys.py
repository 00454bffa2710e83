"""A message's key: given by the publisher, it travels in the envelope; the consumer reads it as
``MessageContext.key`` (else the worker's ``key(item)``); it routes, survives a batch's retry,
and a handler's publishes can be made effect-once."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    DeliveryPolicy,
    InMemoryQueueStorage,
    MessageCodec,
    MessageContext,
    Middleware,
    Publisher,
    current_envelope,
    poison_queue_name,
)
from cloudqueue.listener.consumer.middleware import CallNext
from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.stores.partition_names import partition_for_key
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.wire.envelope import ENVELOPE_KEY, inline_envelope, parse_envelope
from cloudqueue.listener.wire.frames import pack
from cloudqueue.listener.wire.keys import MAX_KEY_CHARS
from cloudqueue.listener.wire.payload import open_message
from tests.support.polling import eventually

QUEUE = "orders"


@dataclass(frozen=True)
class Order:
    customer: str
    number: int


@pytest.fixture
def memory() -> InMemoryQueueStorage:
    storage = InMemoryQueueStorage()
    storage.create_queue(QUEUE)
    return storage


@pytest.fixture
def listeners() -> Iterator[list[CloudQueueListener[Any]]]:
    made: list[CloudQueueListener[Any]] = []
    yield made
    for listener in made:
        listener.stop(timeout_s=10)


class Keys(Middleware):
    """Records each deliverable message's key."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []
        self._lock = threading.Lock()

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> None:
        if context.deliverable:
            with self._lock:
                self.seen.append(context.key)
        call_next()


def listen(
    storage: QueueStorage,
    listeners: list[CloudQueueListener[Any]],
    *,
    handler: Any = None,
    key: Any = None,
    middleware: list[Middleware] | None = None,
) -> CloudQueueListener[dict[str, Any]]:
    listener: CloudQueueListener[dict[str, Any]] = CloudQueueListener(
        storage,
        CloudQueueLocation(QUEUE),
        dict,
        middleware=middleware or [],
        dequeue_interval_s=0.05,
        delivery=DeliveryPolicy(retry_delay_s=0),
        key=key,
    )
    listeners.append(listener)
    listener.subscribe(handler or (lambda item: None))
    listener.start_listener(1)
    return listener


def keys_on(storage: QueueStorage, queue: str = QUEUE) -> list[str | None]:
    found = []
    for message in storage.peek_messages(queue, max_messages=32):
        envelope = parse_envelope(message.content)
        found.append(None if envelope is None else envelope.key)
    return found


def test_a_keyed_item_travels_in_an_envelope_and_an_unkeyed_one_stays_plain(
    memory: InMemoryQueueStorage,
) -> None:
    """``publish(item, key=...)`` wraps the item in a one-item envelope carrying the key;
    the publisher's ``key`` field gives one otherwise; without a key the text is as before."""
    codec: MessageCodec[dict[str, Any]] = MessageCodec(dict)
    Publisher(memory, QUEUE, dict).publish({"n": 1})
    Publisher(memory, QUEUE, dict).publish({"n": 2}, key="invoice-2")
    Publisher(memory, QUEUE, dict, key="customer").publish({"customer": "acme", "n": 3})
    plain, *keyed = memory.peek_messages(QUEUE, max_messages=32)
    assert plain.content == codec.encode({"n": 1})
    assert keys_on(memory) == [None, "invoice-2", "acme"]
    assert [json.loads(m.content)[ENVELOPE_KEY]["kind"] for m in keyed] == ["gzip", "gzip"]


def test_a_bad_key_is_refused_before_anything_is_sent(memory: InMemoryQueueStorage) -> None:
    """An empty, overlong or control-character key, or an item without the key field, raises
    ValueError and puts nothing; key and partition_key together are refused."""
    publisher = Publisher(memory, QUEUE, dict, key="customer")
    for bad in ("", "x" * (MAX_KEY_CHARS + 1), "a\nb"):
        with pytest.raises(ValueError, match="key"):
            publisher.publish({"customer": "acme"}, key=bad)
    with pytest.raises(ValueError, match="customer"):
        publisher.publish({"n": 1})
    assert memory.approximate_message_count(QUEUE) == 0
    with pytest.raises(ConfigurationError, match="not both"):
        Publisher(memory, QUEUE, dict, key="a", partition_key="a")


def test_batches_pack_per_key_so_every_message_has_one_key(memory: InMemoryQueueStorage) -> None:
    """``publish_many`` in batch mode packs each key's items apart: each envelope's items all
    have the key it carries."""
    publisher = Publisher(memory, QUEUE, Order, batch=True, key="customer")
    publisher.publish_many(Order(c, n) for n in range(10) for c in ("a", "b", "c"))
    codec = MessageCodec(Order)
    messages = memory.peek_messages(QUEUE, max_messages=32)
    assert len(messages) == 3
    for message in messages:
        key = parse_envelope(message.content).key  # type: ignore[union-attr]
        items = [codec.decode(t) for t in open_message(message.content, None).texts]
        assert {item.customer for item in items} == {key}
        assert len(items) == 10


def test_a_key_routes_like_a_partition_key_but_only_a_key_travels() -> None:
    """On a partitioned queue both send one key to one partition; ``partition_key`` (routing
    only, as before keys meant more) leaves plain items plain."""
    storage = PartitionedQueueStorage([InMemoryQueueStorage()], {QUEUE: 4})
    storage.create_queue(QUEUE)
    Publisher(storage, QUEUE, Order, key="customer").publish(Order("alice", 1))
    Publisher(storage, QUEUE, Order, partition_key="customer").publish(Order("alice", 2))
    home = f"{QUEUE}-p{partition_for_key('alice', 4)}"
    assert storage.approximate_message_count(home) == 2
    assert sorted(keys_on(storage, home), key=str) == [None, "alice"]


def test_the_consumer_reads_the_carried_key_else_the_workers(
    memory: InMemoryQueueStorage, listeners: list[CloudQueueListener[Any]]
) -> None:
    """``context.key`` is the key a message carries, else the listener's key function of its
    item, and a handler sees it in ``current_envelope().key``."""
    Publisher(memory, QUEUE, dict).publish({"id": 1}, key="carried")
    Publisher(memory, QUEUE, dict).publish({"id": 2})
    seen, in_handler = Keys(), []
    listen(
        memory,
        listeners,
        handler=lambda item: in_handler.append(current_envelope().key),
        key=lambda item: f"id-{item['id']}",
        middleware=[seen],
    )
    eventually(lambda: len(in_handler) == 2)
    assert sorted(seen.seen, key=str) == ["carried", "id-2"]
    assert sorted(in_handler, key=str) == ["carried", "id-2"]


def test_a_key_function_that_raises_poisons_the_message_at_once(
    memory: InMemoryQueueStorage, listeners: list[CloudQueueListener[Any]]
) -> None:
    """A worker key that raises would raise on every delivery: the message is poisoned with
    reason key_failed, its handler never called."""
    Publisher(memory, QUEUE, dict).publish({"id": 1})
    handled: list[Any] = []

    def broken(item: dict[str, Any]) -> str:
        raise KeyError("tenant")

    listener = listen(memory, listeners, handler=handled.append, key=broken)
    eventually(lambda: listener.messages_poisoned == 1)
    record = json.loads(memory.peek_messages(poison_queue_name(QUEUE), max_messages=1)[0].content)
    assert record["reason"] == "key_failed"
    assert "KeyError" in record["error"]
    assert handled == []


def test_a_batch_whose_items_give_different_worker_keys_has_no_key(
    memory: InMemoryQueueStorage, listeners: list[CloudQueueListener[Any]]
) -> None:
    """A message's key is the one all its items share; a batch of mixed keys has none."""
    Publisher(memory, QUEUE, dict, batch=True).publish_many([{"id": 1}, {"id": 2}])
    Publisher(memory, QUEUE, dict, batch=True).publish_many([{"id": 3}, {"id": 3}])
    seen = Keys()
    listen(memory, listeners, key=lambda item: str(item["id"]), middleware=[seen])
    eventually(lambda: len(seen.seen) == 2)
    assert sorted(seen.seen, key=str) == ["3", None]


def test_the_failed_items_of_a_keyed_batch_come_back_with_the_key(
    memory: InMemoryQueueStorage, listeners: list[CloudQueueListener[Any]]
) -> None:
    """A batch item that fails is re-published alone, and its new message carries the key."""
    Publisher(memory, QUEUE, dict, batch=True, key="k").publish_many(
        [{"k": "acme", "n": 1}, {"k": "acme", "n": 2}]
    )
    tried: list[int] = []

    def handle(item: dict[str, Any]) -> None:
        tried.append(item["n"])
        if item["n"] == 2 and tried.count(2) == 1:
            raise RuntimeError("once")

    seen = Keys()
    listen(memory, listeners, handler=handle, middleware=[seen])
    eventually(lambda: tried.count(2) == 2)
    assert seen.seen == ["acme", "acme"]


def test_a_malformed_key_in_an_envelope_is_undecodable() -> None:
    """An envelope whose key is not valid text is malformed: poisoned as undecodable."""
    fields = json.loads(inline_envelope(pack(["x"])))[ENVELOPE_KEY]
    for bad in (17, "", "a\x00b"):
        content = json.dumps({ENVELOPE_KEY: {**fields, "key": bad}})
        with pytest.raises(Exception, match="malformed"):
            parse_envelope(content)


def test_a_handlers_publish_is_effect_once_across_its_retries(
    memory: InMemoryQueueStorage, listeners: list[CloudQueueListener[Any]]
) -> None:
    """A handler that publishes and then fails is retried: with effect_once_s, the next queue
    gets the message once; another content is put."""
    memory.create_queue("emails")
    outbox = Publisher(memory, "emails", dict, key="to", effect_once_s=3600)
    attempts: list[int] = []

    def handle(item: dict[str, Any]) -> None:
        attempts.append(item["n"])
        outbox.publish({"to": "ada@example.com", "about": item["n"]})
        if len(attempts) < 3:
            raise RuntimeError("downstream hiccup")

    Publisher(memory, QUEUE, dict).publish({"n": 1})
    with capture_logs() as logs:
        listen(memory, listeners, handler=handle)
        eventually(lambda: len(attempts) == 3 and memory.approximate_message_count(QUEUE) == 0)
    assert memory.approximate_message_count("emails") == 1
    assert [e["event"] for e in logs].count("publish_skipped") == 2
    outbox.publish({"to": "ada@example.com", "about": 2})
    assert memory.approximate_message_count("emails") == 2


def test_effect_once_batches_skip_what_was_put(memory: InMemoryQueueStorage) -> None:
    """``publish_many`` of the same items again puts nothing; the count says so."""
    publisher = Publisher(memory, QUEUE, dict, batch=True, key="k", effect_once_s=60)
    items = [{"k": "a", "n": n} for n in range(5)]
    assert publisher.publish_many(items) == 1
    assert publisher.publish_many(items) == 0
    assert memory.approximate_message_count(QUEUE) == 1


def test_a_publisher_without_a_ledger_to_find_refuses_effect_once_and_cancel(
    memory: InMemoryQueueStorage,
) -> None:
    """Only the embedded stores' ledgers are found; other storage (Azure's) needs ``ledger=``."""
    opaque: Any = _Opaque(memory)
    with pytest.raises(ConfigurationError, match="open_key_ledger"):
        Publisher(opaque, QUEUE, dict).cancel("a")
    with pytest.raises(ConfigurationError, match="open_key_ledger"):
        Publisher(opaque, QUEUE, dict, effect_once_s=60)


class _Opaque:
    """A storage the ledger lookup cannot see into, as it cannot into an Azure storage."""

    def __init__(self, inner: QueueStorage) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
