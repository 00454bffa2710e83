"""Sharing a queue: a worker with default settings reads every producer's messages, none poisoned.

Producers x item types on SQLite and Azurite. Producers: the Python SDK with its defaults (plain
text) and with ``TextBase64EncodePolicy``, an Event Grid subscription in the Event Grid schema and
in the CloudEvents schema (each plain and base64), and cloudqueue's own publisher; on Azurite also
Microsoft's JavaScript SDK from npm, plain and base64. Item types: a ``dict``, a pydantic model
(``EventGridEvent``) and ``azure.core.messaging.CloudEvent``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.messaging import CloudEvent
from azure.storage.queue import QueueClient, TextBase64EncodePolicy

from cloudqueue.listener import CloudQueueListener, CloudQueueLocation, Publisher, poison_queue_name
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.wire.cloud_events import EventGridEvent
from tests.support.events import CUSTOM_CLOUD_EVENT, CUSTOM_EVENT_GRID
from tests.support.js_sdk import JsQueueClient
from tests.support.polling import eventually
from tests.support.producers import sdk_base64, sdk_plain

ITEM_TYPES: list[type[Any]] = [dict, EventGridEvent, CloudEvent]
PER_PRODUCER = 2

# name -> (the event document it sends, how it writes the document as queue text)
FOREIGN_PRODUCERS: dict[str, tuple[dict[str, Any], Callable[[dict[str, Any]], str]]] = {
    "python-sdk-plain": (CUSTOM_CLOUD_EVENT, sdk_plain),
    "python-sdk-base64": (CUSTOM_CLOUD_EVENT, sdk_base64),
    "event-grid-schema-plain": (CUSTOM_EVENT_GRID, sdk_plain),
    "event-grid-schema-base64": (CUSTOM_EVENT_GRID, sdk_base64),
    "cloudevents-schema-plain": (CUSTOM_CLOUD_EVENT, sdk_plain),
    "cloudevents-schema-base64": (CUSTOM_CLOUD_EVENT, sdk_base64),
}

JS_PRODUCERS = {
    "javascript-sdk-plain": (CUSTOM_CLOUD_EVENT, sdk_plain),
    "javascript-sdk-base64": (CUSTOM_CLOUD_EVENT, sdk_base64),
}


def _document(template: dict[str, Any], event_id: str) -> dict[str, Any]:
    return {**template, "id": event_id}


def _as_item(item_type: type[Any], document: dict[str, Any]) -> Any:
    if item_type is CloudEvent:
        return CloudEvent.from_dict(document)
    return item_type(document) if item_type is dict else item_type.model_validate(document)


def _id_of(item: Any) -> str:
    return str(item["id"] if isinstance(item, dict) else item.id)


def _fill(
    storage: QueueStorage,
    queue_name: str,
    item_type: type[Any],
    put: Any,
    producers: dict[str, Any] = FOREIGN_PRODUCERS,
) -> set[str]:
    """Every producer's messages in the queue; returns the ids of the events they carry."""
    sent: set[str] = set()
    for name, (template, write) in producers.items():
        for n in range(PER_PRODUCER):
            document = _document(template, f"{name}-{n}")
            put(name, document, write)
            sent.add(document["id"])
    publisher: Publisher[Any] = Publisher(storage, queue_name, item_type)
    for n in range(PER_PRODUCER):
        document = _document(CUSTOM_CLOUD_EVENT, f"cloudqueue-{n}")
        publisher.publish(_as_item(item_type, document))
        sent.add(document["id"])
    return sent


def _drain(storage: QueueStorage, queue_name: str, item_type: type[Any], count: int) -> set[str]:
    """Run a listener with default settings until it has handled ``count`` items."""
    handled: list[str] = []
    lock = threading.Lock()

    def record(item: Any) -> None:
        assert isinstance(item, item_type)
        with lock:
            handled.append(_id_of(item))

    listener: CloudQueueListener[Any] = CloudQueueListener(
        storage, CloudQueueLocation(queue_name), item_type, dequeue_interval_s=0.05
    )
    listener.subscribe(record)
    listener.start_listener(1)
    try:
        eventually(lambda: len(handled) == count, timeout_s=60)
    finally:
        assert listener.stop(30)
    assert len(handled) == len(set(handled))
    return set(handled)


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[SqliteQueueStorage]:
    storage = SqliteQueueStorage(tmp_path / "queues.db")
    yield storage
    storage.close()


@pytest.mark.parametrize("item_type", ITEM_TYPES, ids=lambda t: t.__name__)
def test_every_producer_is_read_on_sqlite(
    sqlite: SqliteQueueStorage, queue_name: str, item_type: type[Any]
) -> None:
    """Plain and base64, Event Grid and CloudEvents schema, and cloudqueue's own: all handled."""
    sqlite.create_queue(queue_name)

    def put(name: str, document: dict[str, Any], write: Callable[[dict[str, Any]], str]) -> None:
        sqlite.put_message(queue_name, write(document))

    sent = _fill(sqlite, queue_name, item_type, put)
    assert _drain(sqlite, queue_name, item_type, len(sent)) == sent
    assert sqlite.approximate_message_count(poison_queue_name(queue_name)) == 0


@pytest.mark.parametrize("item_type", ITEM_TYPES, ids=lambda t: t.__name__)
def test_every_producer_is_read_on_azurite(
    azurite_connection_string: str, item_type: type[Any]
) -> None:
    """The Python and JavaScript SDKs themselves, plain and base64, Event Grid's text, ours."""
    queue_name = f"shared-{uuid.uuid4().hex[:12]}"
    storage = AzureQueueStorage.from_connection_string(azurite_connection_string)
    storage.create_queue(queue_name)
    plain = QueueClient.from_connection_string(azurite_connection_string, queue_name)
    encoded = QueueClient.from_connection_string(
        azurite_connection_string, queue_name, message_encode_policy=TextBase64EncodePolicy()
    )

    from_javascript: dict[str, list[dict[str, Any]]] = {"plain": [], "base64": []}

    def put(name: str, document: dict[str, Any], write: Callable[[dict[str, Any]], str]) -> None:
        if name.startswith("javascript-sdk-"):
            from_javascript[name.removeprefix("javascript-sdk-")].append(document)
        elif name == "python-sdk-plain":
            plain.send_message(sdk_plain(document))
        elif name == "python-sdk-base64":
            encoded.send_message(sdk_plain(document))  # the policy does the base64
        else:
            storage.put_message(queue_name, write(document))

    try:
        sent = _fill(storage, queue_name, item_type, put, {**FOREIGN_PRODUCERS, **JS_PRODUCERS})
        for encoding, documents in from_javascript.items():
            JsQueueClient(azurite_connection_string).send(queue_name, encoding, documents)
        assert _drain(storage, queue_name, item_type, len(sent)) == sent
        assert storage.approximate_message_count(poison_queue_name(queue_name)) == 0
    finally:
        plain.close()
        encoded.close()
        storage.close()
