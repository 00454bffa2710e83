"""The other direction: what cloudqueue publishes, other clients read with their defaults.

With the default encoding a consumer with Azure Functions' defaults (base64 text, then JSON) reads
it; with ``encoding = "plain"`` a plain SDK consumer reads it. The consumers are Microsoft's
JavaScript SDK from npm (``@azure/storage-queue``) and the Python SDK, on Azurite; the items hold
non-ASCII text.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from azure.storage.queue import QueueClient

from cloudqueue.listener import MessageCodec, Publisher
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.wire.codec import Encoding
from tests.support.js_sdk import JsQueueClient

ITEMS: list[dict[str, Any]] = [
    {"order_id": 1, "customer": "Zoë Ñuñez", "note": "東京へ 🚚"},
    {"order_id": 2, "customer": "Ærøskøbing", "lines": [{"sku": "ß-1", "qty": 3}]},
]


@pytest.fixture
def queue(azurite_connection_string: str) -> Iterator[tuple[AzureQueueStorage, str]]:
    storage = AzureQueueStorage.from_connection_string(azurite_connection_string)
    name = f"contract-{uuid.uuid4().hex[:12]}"
    storage.create_queue(name)
    yield storage, name
    storage.delete_queue(name)
    storage.close()


def _publish(storage: AzureQueueStorage, queue_name: str, encoding: Encoding) -> None:
    codec: MessageCodec[dict[str, Any]] = MessageCodec(dict, encoding=encoding)
    publisher: Publisher[dict[str, Any]] = Publisher(storage, queue_name, dict, codec=codec)
    for item in ITEMS:
        publisher.publish(item)


@pytest.mark.parametrize(("encoding", "reads_as"), [("auto", "base64"), ("plain", "plain")])
def test_the_javascript_sdk_reads_what_cloudqueue_publishes(
    azurite_connection_string: str,
    queue: tuple[AzureQueueStorage, str],
    encoding: Encoding,
    reads_as: str,
) -> None:
    """By default as base64 then JSON (Functions' way); with encoding plain as JSON text."""
    storage, name = queue
    _publish(storage, name, encoding)
    received = JsQueueClient(azurite_connection_string).receive(name, reads_as, len(ITEMS))
    assert sorted(received, key=lambda d: d["order_id"]) == ITEMS


def test_a_plain_python_sdk_consumer_reads_what_cloudqueue_publishes_in_plain(
    azurite_connection_string: str, queue: tuple[AzureQueueStorage, str]
) -> None:
    """QueueClient with its defaults gets JSON text it can json.loads."""
    storage, name = queue
    _publish(storage, name, "plain")
    with QueueClient.from_connection_string(azurite_connection_string, name) as client:
        contents = [message.content for message in client.receive_messages(max_messages=32)]
    assert sorted((json.loads(c) for c in contents), key=lambda d: d["order_id"]) == ITEMS


@pytest.mark.parametrize("encoding", ["plain", "base64"])
def test_cloudqueue_reads_what_the_javascript_sdk_sends(
    azurite_connection_string: str, queue: tuple[AzureQueueStorage, str], encoding: str
) -> None:
    """The JavaScript SDK's plain and base64 messages decode, with default settings, as sent."""
    storage, name = queue
    JsQueueClient(azurite_connection_string).send(name, encoding, ITEMS)
    codec: MessageCodec[dict[str, Any]] = MessageCodec(dict)
    messages = storage.get_messages(name, max_messages=32, visibility_timeout_s=30)
    decoded = [codec.decode(message.content) for message in messages]
    assert sorted(decoded, key=lambda d: d["order_id"]) == ITEMS
