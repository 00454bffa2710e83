"""The event-loop consumer's stored payloads and worker keys, as on threads: a large item's
payload fetched and retired on a worker thread (an inline message makes no hop), a payload store
out of reach retried, a stored payload decoded within the JSON values limit, the worker's
``key(item)`` for a message that carries no key.

The large-payload and duplicate tests shared with threads are parametrized over both consumers
in tests/listener/producer/test_publisher.py and test_duplicates.py; these are the loop's own.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest

from cloudqueue.listener.consumer.middleware import MessageContext, Middleware
from cloudqueue.listener.errors import TransientStorageError
from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.poison.record import parse_record
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.producer.publisher import Publisher
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.stores.payload_store import InMemoryPayloadStore
from cloudqueue.listener.wire.codec import MessageCodec
from cloudqueue.listener.wire.limits import DecodingLimits
from tests.support.event_loop_consumer import ONE_TASK, running_async_consumer
from tests.support.payloads import live_payloads
from tests.support.polling import eventually

LARGE = random.Random(3).randbytes(100 * 1024)
"""Incompressible: a Publisher with a payload store keeps it there."""


async def noted(seen: list[Any], item: Any) -> None:
    seen.append(item)


def test_a_stored_payload_makes_two_thread_hops_and_an_inline_message_none(
    queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Of three messages, only the large one leaves the loop: to fetch its payload and to retire
    it after the delete."""
    storage, payloads = InMemoryQueueStorage(), InMemoryPayloadStore()
    storage.create_queue(queue_name)
    publisher = Publisher(storage, queue_name, bytes, payload_store=payloads)
    publisher.publish_many([b"small-1", LARGE, b"small-2"])
    hops: list[str] = []
    to_thread = asyncio.to_thread

    async def counted(call: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(call, "func", call).__name__)  # a partial: the function it calls
        return await to_thread(call, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    seen: list[bytes] = []
    handler = lambda item: noted(seen, item)  # noqa: E731
    options: dict[str, Any] = {"payload_store": payloads, "scaling": ONE_TASK}
    with running_async_consumer(storage, queue_name, handler, MessageCodec(bytes), **options) as c:
        eventually(lambda: c.counters.processed == 3)
    assert sorted(seen) == sorted([b"small-1", LARGE, b"small-2"])
    assert hops == ["_fetch", "retire"]
    assert live_payloads(payloads) == []


def test_a_stored_payload_is_decoded_within_the_json_values_limit(queue_name: str) -> None:
    """A large item's JSON values count against ``max_json_values_per_message`` as on threads:
    past it the message is poisoned ``over_limit``, the next one handled."""
    storage, payloads = InMemoryQueueStorage(), InMemoryPayloadStore()
    storage.create_queue(queue_name)
    noise = random.Random(5)
    many = {"parts": [noise.randbytes(50).hex() for _ in range(2_000)]}  # stored: incompressible
    publisher = Publisher(storage, queue_name, dict, payload_store=payloads)
    publisher.publish_many([many, {"parts": []}])
    assert live_payloads(payloads) != []
    seen: list[dict[str, Any]] = []
    handler = lambda item: noted(seen, item)  # noqa: E731
    limits = DecodingLimits(max_json_values_per_message=1_000)
    options: dict[str, Any] = {"payload_store": payloads, "scaling": ONE_TASK, "limits": limits}
    with running_async_consumer(storage, queue_name, handler, MessageCodec(dict), **options) as c:
        eventually(lambda: c.counters.processed == 1 and c.counters.poisoned == 1)
    assert seen == [{"parts": []}]
    [record] = storage.peek_messages(poison_queue_name(queue_name), max_messages=1)
    assert parse_record(record.content).reason == "over_limit"


class _OutOfReachOnce(InMemoryPayloadStore):
    """A payload store whose first read fails as an unreachable blob service does."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def get(self, name: str, *, max_bytes: int | None = None) -> bytes:
        self.reads += 1
        if self.reads == 1:
            raise TransientStorageError("blob service unreachable")
        return super().get(name, max_bytes=max_bytes)


def test_a_payload_store_out_of_reach_retries_the_message_instead_of_poisoning_it(
    queue_name: str,
) -> None:
    """As on threads: the read failed, not the message; the next delivery handles it."""
    storage, payloads = InMemoryQueueStorage(), _OutOfReachOnce()
    storage.create_queue(queue_name)
    Publisher(storage, queue_name, bytes, payload_store=payloads).publish(LARGE)
    seen: list[bytes] = []
    delivery = DeliveryPolicy(retry_delay_s=0, max_retry_delay_s=0)
    options: dict[str, Any] = {"payload_store": payloads, "scaling": ONE_TASK}
    handler = lambda item: noted(seen, item)  # noqa: E731
    codec = MessageCodec(bytes)
    with running_async_consumer(
        storage, queue_name, handler, codec, delivery=delivery, **options
    ) as consumer:
        eventually(lambda: consumer.counters.processed == 1)
    assert (consumer.counters.retried, consumer.counters.poisoned) == (1, 0)
    assert seen == [LARGE]


class _Keys(Middleware):
    """Notes each settled message's key by its item."""

    def __init__(self) -> None:
        self.keys: dict[int, str | None] = {}

    def after_settle(self, context: MessageContext[Any]) -> None:
        for item in context.items:
            self.keys[item] = context.key


def test_the_workers_key_keys_a_message_that_carries_none_and_a_failing_one_is_poisoned(
    queue_name: str,
) -> None:
    """``key=`` gives plain items their key; a key the message carries wins; a key function that
    raises poisons its message as ``key_failed`` (it would raise on every delivery)."""
    storage = InMemoryQueueStorage()
    storage.create_queue(queue_name)
    publisher = Publisher(storage, queue_name, int)
    publisher.publish_many([1, 2, 13])
    publisher.publish(3, key="carried")

    def key(item: int) -> str:
        if item > 10:
            raise ValueError("no key past 10")
        return f"k{item}"

    keys = _Keys()
    seen: list[int] = []
    handler = lambda item: noted(seen, item)  # noqa: E731
    options: dict[str, Any] = {"key": key, "middleware": [keys], "scaling": ONE_TASK}
    with running_async_consumer(storage, queue_name, handler, MessageCodec(int), **options) as c:
        eventually(lambda: c.counters.processed == 3 and c.counters.poisoned == 1)
    assert keys.keys == {1: "k1", 2: "k2", 3: "carried", 13: None}
    assert sorted(seen) == [1, 2, 3]
    [record] = storage.peek_messages(poison_queue_name(queue_name), max_messages=1)
    assert parse_record(record.content).reason == "key_failed"
