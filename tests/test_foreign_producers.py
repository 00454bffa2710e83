"""A worker with default settings reads what other producers put in its queue, plain or base64."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.storage.queue import QueueClient, TextBase64EncodePolicy
from pydantic import BaseModel

from listener import CloudQueueListener, CloudQueueLocation, Publisher, poison_queue_name
from listener.stores.azure_storage import AzureQueueStorage
from listener.stores.sqlite_storage import SqliteQueueStorage
from listener.stores.storage import QueueStorage
from tests.support.polling import eventually
from tests.support.producers import PRODUCERS


class Order(BaseModel):
    order_id: int
    customer: str


DOCUMENTS = [{"order_id": n, "customer": "Zoë Ñuñez 東京"} for n in range(3)]


def _drain(
    storage: QueueStorage, queue_name: str, item_type: type[Any], *, producers: int
) -> list[Any]:
    """Run a default listener until it has handled every document of every producer."""
    handled: list[Any] = []
    lock = threading.Lock()

    def record(item: Any) -> None:
        with lock:
            handled.append(item)

    listener: CloudQueueListener[Any] = CloudQueueListener(
        storage, CloudQueueLocation(queue_name), item_type, dequeue_interval_s=0.05
    )
    listener.subscribe(record)
    listener.start_listener(1)
    expected = len(DOCUMENTS) * producers
    try:
        eventually(lambda: listener.messages_processed == expected, timeout_s=60)
    finally:
        assert listener.stop(30)
    return handled


def _order_ids(items: list[Any]) -> list[int]:
    return sorted(i.order_id if isinstance(i, Order) else i["order_id"] for i in items)


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[SqliteQueueStorage]:
    storage = SqliteQueueStorage(tmp_path / "queues.db")
    yield storage
    storage.close()


@pytest.mark.parametrize("item_type", [dict, Order])
def test_every_producer_is_read_on_sqlite(
    sqlite: SqliteQueueStorage, queue_name: str, item_type: type[Any]
) -> None:
    """Plain and base64 JSON from other producers, and cloudqueue's own, are all handled."""
    sqlite.create_queue(queue_name)
    for produce in PRODUCERS.values():
        for document in DOCUMENTS:
            sqlite.put_message(queue_name, produce(document))
    publisher: Publisher[Any] = Publisher(sqlite, queue_name, item_type)
    for document in DOCUMENTS:
        publisher.publish(item_type(**document))
    handled = _drain(sqlite, queue_name, item_type, producers=len(PRODUCERS) + 1)
    assert _order_ids(handled) == sorted([0, 1, 2] * (len(PRODUCERS) + 1))
    assert sqlite.approximate_message_count(poison_queue_name(queue_name)) == 0


@pytest.mark.parametrize("item_type", [dict, Order])
def test_the_python_sdk_with_its_defaults_and_with_base64_is_read_on_azurite(
    azurite_connection_string: str, queue_name: str, item_type: type[Any]
) -> None:
    """send_message(json.dumps(...)) plain and base64, and cloudqueue's own, are all read."""
    storage = AzureQueueStorage.from_connection_string(azurite_connection_string)
    storage.create_queue(queue_name)
    plain = QueueClient.from_connection_string(azurite_connection_string, queue_name)
    encoded = QueueClient.from_connection_string(
        azurite_connection_string, queue_name, message_encode_policy=TextBase64EncodePolicy()
    )
    for document in DOCUMENTS:
        plain.send_message(PRODUCERS["sdk-plain"](document))
        encoded.send_message(PRODUCERS["sdk-plain"](document))  # the policy does the base64
    publisher: Publisher[Any] = Publisher(storage, queue_name, item_type)
    for document in DOCUMENTS:
        publisher.publish(item_type(**document))
    try:
        handled = _drain(storage, queue_name, item_type, producers=3)
        assert _order_ids(handled) == sorted([0, 1, 2] * 3)
        assert storage.approximate_message_count(poison_queue_name(queue_name)) == 0
    finally:
        plain.close()
        encoded.close()
        storage.close()
