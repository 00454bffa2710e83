"""Large payloads in Azure Blob Storage, against Azurite's queue and blob services: the real SDK,
real HTTP. Each test starts its own Azurite with the blob service (so the container starts absent).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    PayloadNotFoundError,
    PoisonRecord,
    Publisher,
    open_payload_store,
    poison_queue_name,
)
from cloudqueue.listener.errors import PermanentFailure
from cloudqueue.listener.poison.requeue import requeue_poisoned
from cloudqueue.listener.stores.azure_payloads import DEFAULT_CONTAINER, AzureBlobPayloadStore
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.stores.payload_store import new_payload_name
from cloudqueue.listener.wire.envelope import parse_envelope
from tests.support.azurite import AzuriteFactory
from tests.support.payloads import live_payloads
from tests.support.polling import eventually


@dataclass
class Azure:
    queues: AzureQueueStorage
    blobs: AzureBlobPayloadStore


@pytest.fixture
def azure(azurite_factory: AzuriteFactory, queue_name: str) -> Iterator[Azure]:
    """Queue and blob backends opened from one connection string, as the worker opens them."""
    connection_string = azurite_factory(blob=True).connection_string
    queues = AzureQueueStorage.from_connection_string(connection_string)
    blobs = open_payload_store(connection_string)
    assert isinstance(blobs, AzureBlobPayloadStore)
    queues.create_queue(queue_name)
    yield Azure(queues, blobs)
    blobs.close()
    queues.close()


@pytest.fixture
def listen(azure: Azure, queue_name: str) -> Iterator[Callable[..., CloudQueueListener[bytes]]]:
    made: list[CloudQueueListener[bytes]] = []

    def make(handler: Callable[[bytes], Any]) -> CloudQueueListener[bytes]:
        listener: CloudQueueListener[bytes] = CloudQueueListener(
            azure.queues,
            CloudQueueLocation(queue_name),
            bytes,
            payload_store=azure.blobs,
            dequeue_interval_s=0.05,
        )
        listener.subscribe(handler)
        listener.start_listener(1)
        made.append(listener)
        return listener

    yield make
    for listener in made:
        assert listener.stop(30)


def noise(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def poisoned(azure: Azure, queue_name: str) -> list[PoisonRecord]:
    found = azure.queues.peek_messages(poison_queue_name(queue_name), max_messages=32)
    return [PoisonRecord.from_json(message.content) for message in found]


def test_the_blob_store_creates_its_container_and_keeps_bytes_until_deleted(azure: Azure) -> None:
    """First put creates the container; get returns the bytes (a bounded get one byte past its
    bound, and a tombstone, which has no range to read, as empty); missing blobs are not found."""
    name = new_payload_name("orders")
    assert azure.blobs.names() == []  # no container yet
    azure.blobs.put(name, b"payload")
    assert azure.blobs.container_name == DEFAULT_CONTAINER
    assert azure.blobs.get(name) == b"payload"
    assert azure.blobs.get(name, max_bytes=3) == b"payl"
    tombstone = new_payload_name("orders")
    azure.blobs.put(tombstone, b"")
    assert azure.blobs.get(tombstone, max_bytes=3) == b""
    azure.blobs.delete(tombstone)
    assert azure.blobs.names() == [name]
    azure.blobs.delete(name)
    azure.blobs.delete(name)  # already gone: not an error
    with pytest.raises(PayloadNotFoundError):
        azure.blobs.get(name)


@pytest.mark.parametrize("size", [1 << 20, 10 << 20], ids=["1MiB", "10MiB"])
def test_big_items_round_trip_through_blob_storage_and_leave_only_tombstones(
    azure: Azure, queue_name: str, listen: Callable[..., CloudQueueListener[bytes]], size: int
) -> None:
    """1 MiB and 10 MiB items travel as blob references and arrive intact; once their messages
    are deleted, each blob is an empty tombstone."""
    items = [noise(size, seed=1), noise(size, seed=2)]
    publisher = Publisher(azure.queues, queue_name, bytes, payload_store=azure.blobs)
    assert publisher.publish_many(items) == 2
    assert len(azure.blobs.names()) == 2
    assert all(len(m.content) < 300 for m in azure.queues.peek_messages(queue_name, max_messages=2))
    received: list[bytes] = []
    listener = listen(received.append)
    eventually(lambda: listener.messages_processed == 2, timeout_s=60)
    assert sorted(received) == sorted(items)
    eventually(lambda: live_payloads(azure.blobs) == [])
    assert azure.queues.approximate_message_count(queue_name) == 0


def test_a_poisoned_blob_message_keeps_its_blob_and_requeue_handles_it(
    azure: Azure, queue_name: str, listen: Callable[..., CloudQueueListener[bytes]]
) -> None:
    """The poison record refers to the blob, which stays; after requeue it is handled, then
    retired."""
    item = noise(1 << 20, seed=3)
    Publisher(azure.queues, queue_name, bytes, payload_store=azure.blobs).publish(item)
    received: list[bytes] = []

    def handle(data: bytes) -> None:
        received.append(data)
        if len(received) == 1:
            raise PermanentFailure("rejected the first time")

    listener = listen(handle)
    eventually(lambda: listener.messages_poisoned == 1, timeout_s=30)
    [record] = poisoned(azure, queue_name)
    envelope = parse_envelope(record.content)
    assert envelope is not None
    assert azure.blobs.names() == [envelope.payload_name]
    assert requeue_poisoned(azure.queues, queue_name) == 1
    eventually(lambda: listener.messages_processed == 1, timeout_s=30)
    assert received == [item, item]
    eventually(lambda: live_payloads(azure.blobs) == [])


def test_a_missing_blob_is_poisoned_as_payload_missing(
    azure: Azure, queue_name: str, listen: Callable[..., CloudQueueListener[bytes]]
) -> None:
    """A reference whose blob was deleted goes to the poison queue on its first delivery."""
    Publisher(azure.queues, queue_name, bytes, payload_store=azure.blobs).publish(noise(1 << 17, 4))
    for name in azure.blobs.names():
        azure.blobs.delete(name)
    listener = listen(lambda _: None)
    eventually(lambda: listener.messages_poisoned == 1, timeout_s=30)
    [record] = poisoned(azure, queue_name)
    assert record.reason == "payload_missing"
    assert record.dequeue_count == 1
    assert listener.messages_processed == 0


def test_a_claim_check_forged_onto_another_queue_is_foreign_and_the_blob_stays_for_its_own(
    azure: Azure, queue_name: str, listen: Callable[..., CloudQueueListener[bytes]]
) -> None:
    """beta's blob reference put on alpha (the test's queue) is poisoned there as
    ``payload_foreign`` and the blob is neither read nor tombstoned; beta's own message is then
    handled once, with its data."""
    beta = f"{queue_name}-beta"
    azure.queues.create_queue(beta)
    item = noise(200_000, seed=4)
    Publisher(azure.queues, beta, bytes, payload_store=azure.blobs).publish(item)
    [rightful] = azure.queues.peek_messages(beta, max_messages=1)
    azure.queues.put_message(queue_name, rightful.content)
    [name] = azure.blobs.names()
    stored = azure.blobs.get(name)

    alpha_received: list[bytes] = []
    alpha = listen(alpha_received.append)
    eventually(lambda: alpha.messages_poisoned == 1, timeout_s=30)
    [record] = poisoned(azure, queue_name)
    assert record.reason == "payload_foreign"
    assert alpha_received == []
    assert azure.blobs.get(name) == stored

    beta_received: list[bytes] = []
    beta_listener: CloudQueueListener[bytes] = CloudQueueListener(
        azure.queues, CloudQueueLocation(beta), bytes, payload_store=azure.blobs
    )
    beta_listener.subscribe(beta_received.append)
    beta_listener.start_listener(1)
    try:
        eventually(lambda: beta_listener.messages_processed == 1, timeout_s=30)
    finally:
        assert beta_listener.stop(30)
    assert beta_received == [item]
    assert beta_listener.messages_poisoned == 0
