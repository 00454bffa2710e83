"""Where a message carries its W3C trace context, so that a consumer's span continues a
producer's trace (``cloudqueue.listener.tracing``).

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

Reading, a message's context is only a hint: anyone who may add messages writes it. So it is
checked strictly against the W3C Trace Context format (version ``00``, lower-case hex, ids not all
zero; a ``tracestate`` of at most 32 well-formed members in 512 characters), and what does not
match is ignored -- a malformed ``tracestate`` alone is dropped, the ``traceparent`` kept. Its
sampled flag is not obeyed either (``cloudqueue.listener.tracing``): a message cannot switch off
the consumer's tracing.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from cloudqueue.listener.errors import DecodeError
from cloudqueue.listener.stores.storage import MAX_MESSAGE_BYTES
from cloudqueue.listener.wire import bounded_json, encodings
from cloudqueue.listener.wire.envelope import (
    ENVELOPE_KEY,
    Envelope,
    inline_envelope,
    is_reserved,
    parse_envelope,
)
from cloudqueue.listener.wire.frames import pack
from cloudqueue.listener.wire.packing import message_bytes

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
MAX_TRACESTATE_CHARS = 512
"""W3C asks vendors to pass on at least 512 characters; a longer state is left out."""

MAX_TRACESTATE_MEMBERS = 32
"""W3C's limit on ``tracestate`` list members."""

_TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
_SIMPLE_KEY = r"[a-z0-9][_0-9a-z\-*/]{0,255}"
_TENANT_KEY = r"[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13}"
_VALUE = r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
_MEMBER = re.compile(rf"({_SIMPLE_KEY}|{_TENANT_KEY})=({_VALUE})")

_BASE64_JSON_OBJECT = "eyJ"
"""How base64 of ``{"`` begins: the only base64 messages that can be CloudEvents."""

Carrier = dict[str, str]


def read_carrier(content: str) -> Carrier:
    """The valid trace context a message's text carries; empty when it carries none. Never
    raises: a message that cannot be read carries no context."""
    try:
        envelope = parse_envelope(content)
    except DecodeError:
        return {}
    return carrier_of(content, envelope)


def carrier_of(content: str, envelope: Envelope | None) -> Carrier:
    """The valid trace context of a message whose envelope (None: a plain item) is parsed.

    A ``traceparent`` that is not W3C's version 00 form is ignored with its ``tracestate``; a
    malformed ``tracestate`` alone is dropped."""
    if envelope is not None:
        document: dict[str, Any] | None = envelope.carrier
    else:
        document, _ = _cloud_event(content)
    if document is None:
        return {}
    return valid_carrier(
        {
            key: value
            for key in (TRACEPARENT, TRACESTATE)
            if isinstance(value := document.get(key), str)
        }
    )


def valid_carrier(carrier: Carrier) -> Carrier:
    """The fields of ``carrier`` that are well-formed W3C trace context (see the module)."""
    parent = carrier.get(TRACEPARENT, "")
    if not _TRACEPARENT.fullmatch(parent):
        return {}
    state = carrier.get(TRACESTATE, "")
    return (
        {TRACEPARENT: parent, TRACESTATE: state}
        if valid_tracestate(state)
        else {TRACEPARENT: parent}
    )


def valid_tracestate(state: str) -> bool:
    """True for a non-empty W3C ``tracestate`` within this module's size limits."""
    if not state or len(state) > MAX_TRACESTATE_CHARS:
        return False
    members = [member.strip(" \t") for member in state.split(",")]
    present = [member for member in members if member]
    if not present or len(present) > MAX_TRACESTATE_MEMBERS:
        return False
    matches = [_MEMBER.fullmatch(member) for member in present]
    if not all(matches):
        return False
    keys = [match.group(1) for match in matches if match is not None]
    return len(set(keys)) == len(keys)


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
    return valid_carrier(carrier)


def _envelope_fields(content: str) -> dict[str, Any] | None:
    if not is_reserved(content):
        return None
    try:
        fields = bounded_json.loads(content)[ENVELOPE_KEY]
    except (ValueError, DecodeError, KeyError, TypeError):
        return None
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
        document = bounded_json.loads(text)
    except (ValueError, DecodeError):
        return None
    if isinstance(document, dict) and "specversion" in document:
        return document
    return None


__all__ = [
    "TRACEPARENT",
    "TRACESTATE",
    "Carrier",
    "carrier_of",
    "read_carrier",
    "valid_carrier",
    "valid_tracestate",
    "with_carrier",
]
