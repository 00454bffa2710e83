"""Event Grid and CloudEvents as item types: what an Event Grid subscription puts in a queue.

An Event Grid subscription with a storage-queue endpoint writes one event per message, in the
Event Grid schema or the CloudEvents 1.0 schema (JSON, plain or base64). Two item types read
either schema, so a worker need not know which one the subscription was created with:

* ``azure.core.messaging.CloudEvent`` (installed with the Azure SDK). An Event Grid schema event
  becomes a CloudEvent as Microsoft maps them: ``source`` = topic, ``type`` = eventType,
  ``subject``, ``id``, ``time`` = eventTime, ``data``, and the ``dataversion`` extension.
* ``EventGridEvent`` below, a pydantic model of the Event Grid schema; a CloudEvents schema event
  maps the other way round.

Published events are written in the item type's own schema. The Azure SDK is imported only when
a CloudEvent is read: every codec asks ``is_cloud_event_type``, and a command that never meets
one (``cloudqueue enqueue``) should not pay for the SDK.
"""

from __future__ import annotations

import base64
import json
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any, get_origin

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from cloudqueue.listener.errors import DecodeError

if TYPE_CHECKING:
    from azure.core.messaging import CloudEvent

__all__ = ["CloudEventAdapter", "EventGridEvent", "cloud_event_to_dict", "is_cloud_event_type"]

_CLOUD_EVENT_ATTRIBUTES = (
    "specversion",
    "id",
    "source",
    "type",
    "subject",
    "datacontenttype",
    "dataschema",
)


class EventGridEvent(BaseModel):
    """An event in the Event Grid schema (also read from a CloudEvents schema document)."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    id: str
    subject: str = ""
    event_type: str = Field(alias="eventType")
    event_time: datetime = Field(alias="eventTime")
    data: Any = None
    data_version: str = Field(default="", alias="dataVersion")
    topic: str | None = None
    metadata_version: str | None = Field(
        default=None, validation_alias=AliasChoices("metadataVersion", "metadata_version")
    )

    @model_validator(mode="before")
    @classmethod
    def _from_cloud_event_schema(cls, document: Any) -> Any:
        if not isinstance(document, dict) or "specversion" not in document:
            return document
        return {
            "id": document.get("id"),
            "topic": document.get("source"),
            "subject": document.get("subject") or "",
            "eventType": document.get("type"),
            "eventTime": document.get("time"),
            "data": document.get("data"),
            "dataVersion": document.get("dataversion") or "",
        }


def is_cloud_event_type(item_type: object) -> bool:
    """True for ``CloudEvent`` and ``CloudEvent[...]``.

    Nothing is imported: a type can only be ``CloudEvent`` once its module has been imported.
    """
    messaging = sys.modules.get("azure.core.messaging")
    if messaging is None:
        return False
    return item_type is messaging.CloudEvent or get_origin(item_type) is messaging.CloudEvent


def _from_event_grid_schema(document: dict[str, Any]) -> dict[str, Any]:
    converted = {
        "specversion": "1.0",
        "id": document.get("id"),
        "source": document.get("topic") or "/",
        "type": document.get("eventType"),
        "subject": document.get("subject"),
        "time": document.get("eventTime"),
        "data": document.get("data"),
    }
    if document.get("dataVersion"):
        converted["dataversion"] = document["dataVersion"]
    return {key: value for key, value in converted.items() if value is not None}


def cloud_event_to_dict(event: CloudEvent[Any]) -> dict[str, Any]:
    """The CloudEvents 1.0 JSON form of an event (structured mode)."""
    document: dict[str, Any] = {
        name: getattr(event, name)
        for name in _CLOUD_EVENT_ATTRIBUTES
        if getattr(event, name, None) is not None
    }
    if event.time is not None:
        document["time"] = event.time.isoformat()
    if isinstance(event.data, bytes):
        document["data_base64"] = base64.b64encode(event.data).decode("ascii")
    elif event.data is not None:
        document["data"] = event.data
    document.update(event.extensions or {})
    return document


class CloudEventAdapter:
    """Reads CloudEvent items from JSON in either schema and writes them as CloudEvents JSON;
    the same two methods as the ``pydantic.TypeAdapter`` the codec uses for other types."""

    def validate_json(self, text: str | bytes) -> CloudEvent[Any]:
        try:
            document = json.loads(text)
        except ValueError as error:
            raise DecodeError(f"Invalid JSON: {error}") from None
        if not isinstance(document, dict):
            raise DecodeError(f"an event is a JSON object, not {type(document).__name__}")
        if "specversion" not in document and "eventType" in document:
            document = _from_event_grid_schema(document)
        from azure.core.messaging import CloudEvent  # imported already: the item type is one

        try:
            return CloudEvent.from_dict(document)
        except (ValueError, KeyError, TypeError) as error:
            raise DecodeError(f"not a CloudEvent or Event Grid event: {error}") from None

    def dump_json(self, item: CloudEvent[Any]) -> bytes:
        return json.dumps(cloud_event_to_dict(item), ensure_ascii=False).encode("utf-8")
