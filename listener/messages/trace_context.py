"""Where a message carries its W3C trace context, so that a consumer's span continues a
producer's trace (``listener.messages.tracing``).

Storage queues have no message properties: everything travels in the text. cloudqueue never
changes the text a foreign consumer decodes, so the context goes only where readers already
expect extra fields:

* **cloudqueue envelopes** (batches, compressed items, stored payloads): ``traceparent`` and
  ``tracestate`` keys beside ``v``, ``kind`` and ``count`` in the ``$cloudqueue`` object. Listeners
  of every version read envelope fields by name and ignore the others, so old consumers read
  these messages as before.
* **CloudEvents** (``azure.core.messaging.CloudEvent`` items, plain or base64): the ``traceparent``
  and ``tracestate`` extension attributes of the CloudEvents distributed-tracing extension, which
  Event Grid and the Azure SDKs write and read themselves. An event that already has them keeps
  its own (it names where the event was created).
* **any other single item** (the text Azure Functions and SDK consumers decode) travels exactly
  as before, without context -- unless the publisher asks to wrap it (``wrap_plain``): it is then
  sent as a one-item gzip envelope, which every cloudqueue listener reads and Functions does not.

A context that would push a message past the 64 KiB limit is left out rather than failing the put.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from listener.errors import DecodeError
from listener.messages import encodings
from listener.messages.packing import message_bytes
from listener.messages.payload import ENVELOPE_KEY, inline_envelope, is_reserved, pack
from listener.stores.storage import MAX_MESSAGE_BYTES

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
MAX_TRACESTATE_CHARS = 512
"""W3C asks vendors to pass on at least 512 characters; a longer state is left out."""

_BASE64_JSON_OBJECT = "eyJ"
"""How base64 of ``{"`` begins: the only base64 messages that can be CloudEvents."""

Carrier = dict[str, str]


def read_carrier(content: str) -> Carrier:
    """The trace context fields a message's text carries; empty when it carries none."""
    document = _envelope_fields(content)
    if document is None:
        document, _ = _cloud_event(content)
    if document is None:
        return {}
    return {
        key: value
        for key in (TRACEPARENT, TRACESTATE)
        if isinstance(value := document.get(key), str)
    }


def with_carrier(content: str, carrier: Carrier, *, wrap_plain: bool = False) -> str:
    """The message text carrying ``carrier`` where its readers allow (see the module docstring);
    the text unchanged when it has no place for it or the result would not fit."""
    fields = _kept(carrier)
    if not fields:
        return content
    stamped = _stamped(content, fields, wrap_plain=wrap_plain)
    return stamped if message_bytes(stamped) <= MAX_MESSAGE_BYTES else content


def _stamped(content: str, fields: Carrier, *, wrap_plain: bool) -> str:
    envelope = _envelope_fields(content)
    if envelope is not None:
        return _envelope_text({**envelope, **fields})
    event, was_base64 = _cloud_event(content)
    if event is not None:
        if TRACEPARENT in event:
            return content
        text = json.dumps({**event, **fields}, ensure_ascii=False)
        return base64.b64encode(text.encode("utf-8")).decode("ascii") if was_base64 else text
    if wrap_plain:
        return _stamped(inline_envelope(pack([content])), fields, wrap_plain=False)
    return content


def _kept(carrier: Carrier) -> Carrier:
    if not carrier.get(TRACEPARENT):
        return {}
    kept = {TRACEPARENT: carrier[TRACEPARENT]}
    state = carrier.get(TRACESTATE)
    if state and len(state) <= MAX_TRACESTATE_CHARS:
        kept[TRACESTATE] = state
    return kept


def _envelope_fields(content: str) -> dict[str, Any] | None:
    if not is_reserved(content):
        return None
    fields = json.loads(content)[ENVELOPE_KEY]
    return fields if isinstance(fields, dict) else None


def _envelope_text(fields: dict[str, Any]) -> str:
    return json.dumps({ENVELOPE_KEY: fields}, separators=(",", ":"))


def _cloud_event(content: str) -> tuple[dict[str, Any] | None, bool]:
    """The CloudEvents JSON document in a message, and whether it was base64; (None, False) for
    anything else. Cheap substring checks first: this runs on every message while tracing."""
    if content.startswith(_BASE64_JSON_OBJECT):
        try:
            raw = encodings.strict_base64(content)
        except DecodeError:
            return None, False
        return (_event_document(raw.decode("utf-8", "replace")), True)
    if content.lstrip().startswith("{"):
        return _event_document(content), False
    return None, False


def _event_document(text: str) -> dict[str, Any] | None:
    if '"specversion"' not in text:
        return None
    try:
        document = json.loads(text)
    except ValueError:
        return None
    if isinstance(document, dict) and "specversion" in document:
        return document
    return None


__all__ = ["TRACEPARENT", "TRACESTATE", "Carrier", "read_carrier", "with_carrier"]
