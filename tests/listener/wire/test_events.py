"""Event Grid deliveries: either schema, either encoding, read as CloudEvent or EventGridEvent.

The documents follow Microsoft's published schemas: a Blob Storage ``BlobCreated`` event and a
custom event, each in the Event Grid schema and in the CloudEvents 1.0 schema.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from azure.core.messaging import CloudEvent
from structlog.testing import capture_logs

from cloudqueue.listener import DecodeError, MessageCodec
from cloudqueue.listener.wire.cloud_events import EventGridEvent, is_cloud_event_type
from examples.uploaded_blobs import UploadedBlobWorker
from tests.support.events import (
    BLOB_CREATED_CLOUD_EVENT,
    BLOB_CREATED_EVENT_GRID,
    CUSTOM_CLOUD_EVENT,
    CUSTOM_EVENT_GRID,
)

DOCUMENTS = {
    "blob-created/event-grid": BLOB_CREATED_EVENT_GRID,
    "blob-created/cloudevents": BLOB_CREATED_CLOUD_EVENT,
    "custom/event-grid": CUSTOM_EVENT_GRID,
    "custom/cloudevents": CUSTOM_CLOUD_EVENT,
}


def _as_delivered(document: dict[str, Any], encoding: str) -> str:
    text = json.dumps(document)
    if encoding == "plain":
        return text
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize("encoding", ["plain", "base64"])
@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_a_cloud_event_worker_reads_either_schema_in_either_encoding(
    name: str, encoding: str
) -> None:
    """Type, subject, id, time and data come through whichever schema the subscription uses."""
    document = DOCUMENTS[name]
    event = MessageCodec(CloudEvent).decode(_as_delivered(document, encoding))
    assert event.type == document.get("type", document.get("eventType"))
    assert event.subject == document["subject"]
    assert event.id == document["id"]
    assert event.time is not None
    assert event.time.tzinfo is not None
    assert event.data == document["data"]


@pytest.mark.parametrize("encoding", ["plain", "base64"])
@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_an_event_grid_worker_reads_either_schema_in_either_encoding(
    name: str, encoding: str
) -> None:
    """The EventGridEvent model reads its own schema and maps CloudEvents onto it."""
    document = DOCUMENTS[name]
    event = MessageCodec(EventGridEvent).decode(_as_delivered(document, encoding))
    assert event.event_type == document.get("type", document.get("eventType"))
    assert event.subject == document["subject"]
    assert event.data == document["data"]


def test_a_blob_created_event_from_event_grid_names_the_blob_url() -> None:
    """The example's handler finds the uploaded blob's URL in data.url."""
    event = MessageCodec(CloudEvent).decode(_as_delivered(BLOB_CREATED_EVENT_GRID, "base64"))
    assert event.type == "Microsoft.Storage.BlobCreated"
    assert event.source == BLOB_CREATED_EVENT_GRID["topic"]
    assert isinstance(event.data, dict)
    assert event.data["url"].endswith("/photos/cat.jpg")
    assert not event.extensions  # an empty dataVersion adds no extension


def test_cloud_events_round_trip_through_cloudqueue() -> None:
    """A CloudEvent published by cloudqueue is read back with its attributes and data."""
    codec: MessageCodec[CloudEvent[Any]] = MessageCodec(CloudEvent)
    sent: CloudEvent[Any] = CloudEvent(
        source="/orders",
        type="com.example.order.placed",
        subject="orders/42",
        data={"customer": "Zoë"},
        time=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    )
    received = codec.decode(codec.encode(sent))
    assert (received.id, received.source, received.type) == (sent.id, sent.source, sent.type)
    assert (received.subject, received.data, received.time) == (sent.subject, sent.data, sent.time)


def test_event_grid_events_round_trip_in_their_own_schema() -> None:
    """An EventGridEvent is published with the schema's camelCase names."""
    codec: MessageCodec[EventGridEvent] = MessageCodec(EventGridEvent, encoding="plain")
    event = EventGridEvent.model_validate(CUSTOM_EVENT_GRID)
    text = codec.encode(event)
    assert json.loads(text)["eventType"] == CUSTOM_EVENT_GRID["eventType"]
    assert codec.decode(text) == event


@pytest.mark.parametrize(
    "content", ["[]", '{"hello": "world"}', base64.b64encode(b'[{"id": "1"}]').decode()]
)
def test_what_is_not_an_event_is_poisoned_with_a_reason(content: str) -> None:
    """Arrays (batches) and arbitrary JSON are not events: a DecodeError says so."""
    with pytest.raises(DecodeError, match=r"listener\.encoding"):
        MessageCodec(CloudEvent).decode(content)


def test_the_uploaded_blobs_example_reports_each_new_blob_and_skips_other_events() -> None:
    """The example logs a BlobCreated event's URL and size, and skips a custom event."""
    worker = UploadedBlobWorker()
    assert is_cloud_event_type(worker.item_type)
    codec: MessageCodec[CloudEvent[Any]] = MessageCodec(worker.item_type)
    with capture_logs() as logs:
        worker.handle(codec.decode(_as_delivered(BLOB_CREATED_EVENT_GRID, "base64")))
        worker.handle(codec.decode(_as_delivered(CUSTOM_CLOUD_EVENT, "plain")))
    assert [entry["event"] for entry in logs] == ["blob_uploaded", "event_skipped"]
    assert logs[0]["url"] == "https://photostore.blob.core.windows.net/photos/cat.jpg"
    assert logs[0]["bytes"] == 524288
