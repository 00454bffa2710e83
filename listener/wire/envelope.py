"""cloudqueue's envelope: a JSON object whose only key is ``$cloudqueue``, carrying items that
are compressed, batched, or kept in the payload store (``cloudqueue.listener.wire.payload`` says
which and how they are read). Parsing is bounded by the JSON depth limit; fields are read by name,
so a listener ignores fields it does not know (``attempts``, the trace context, ``due``, ``key``)
and merely does less with them.

``key`` (optional) is the message's key (``cloudqueue.listener.wire.keys``): every item of the
message shares it, since a publisher packs items per key. A plain item that has a key travels in a
one-item envelope to carry it.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from cloudqueue.listener.errors import DecodeError, LimitExceededError
from cloudqueue.listener.stores.payload_store import validate_payload_name
from cloudqueue.listener.wire import bounded_json
from cloudqueue.listener.wire.encodings import strict_base64
from cloudqueue.listener.wire.frames import Inner, Packed
from cloudqueue.listener.wire.keys import check_key
from cloudqueue.listener.wire.limits import DEFAULT_LIMITS

ENVELOPE_KEY = "$cloudqueue"
VERSION = 1
TRACE_FIELDS = ("traceparent", "tracestate")

Kind = Literal["gzip", "batch", "blob"]

_MAX_TIME_CHARS = 40
"""Longer than any ISO 8601 time: a longer ``due`` is not parsed at all."""

_RESERVED = re.compile(r'^\s*\{\s*"\$cloudqueue"\s*:')
_NOT_RESERVED = object()


@dataclass(frozen=True, slots=True)
class Envelope:
    """A parsed envelope: the items inline (``packed``) or a reference to a stored payload."""

    kind: Kind
    inner: Inner
    count: int
    packed: Packed | None = None
    payload_name: str | None = None
    attempts: int = 0
    carrier: dict[str, str] = field(default_factory=dict, compare=False)
    """The trace context text fields it carries, as written (``trace_context`` validates them)."""
    key: str | None = None
    """The key its items share, when the publisher gave one (``cloudqueue.listener.wire.keys``)."""
    fields: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """Every field as parsed, those this listener does not know included: what is shown or
    rewritten of it is read from here, never by parsing the text again."""
    due: datetime | None = None
    """When a message delayed beyond 7 days may be handled (``cloudqueue.listener.wire.due``)."""
    hops: int = 0
    """How often a listener hid it again because it was not due yet."""


def inline_envelope(packed: Packed, *, attempts: int = 0, key: str | None = None) -> str:
    """The message text carrying packed items inline (kind ``gzip`` for one, ``batch`` for more),
    ``attempts`` earlier deliveries recorded when there were any, and their ``key`` if any."""
    kind: Kind = "gzip" if packed.count == 1 else "batch"
    data = base64.b64encode(packed.data).decode("ascii")
    tried = {"attempts": attempts} if attempts else {}
    return _dump({**_header(kind, packed, key), **tried, "data": data})


def blob_envelope(payload_name: str, packed: Packed, *, key: str | None = None) -> str:
    """The message text referring to packed items stored under ``payload_name``."""
    validate_payload_name(payload_name)
    header = _header("blob", packed, key)
    return _dump({**header, "blob": payload_name, "bytes": len(packed.data)})


def is_reserved(text: str) -> bool:
    """True when the text is a JSON object whose only key is ``$cloudqueue``: the listener would
    read it as an envelope, so a publisher must not send it bare. Text that starts like one but
    nests too deep to tell counts as one: wrapped, it still round-trips."""
    try:
        return _reserved_value(text, DEFAULT_LIMITS.max_json_depth) is not _NOT_RESERVED
    except LimitExceededError:
        return True


def parse_envelope(
    content: str, *, max_json_depth: int = DEFAULT_LIMITS.max_json_depth
) -> Envelope | None:
    """The envelope in a message's text; None for a plain item; DecodeError if it is malformed
    (LimitExceededError if it nests deeper than ``max_json_depth``)."""
    value = _reserved_value(content, max_json_depth)
    if value is _NOT_RESERVED:
        return None
    if not isinstance(value, dict):
        raise DecodeError(f"malformed cloudqueue envelope: {ENVELOPE_KEY} is not an object")
    if value.get("v") != VERSION:
        raise DecodeError(
            f"cloudqueue envelope version {value.get('v')!r} is not supported (this listener "
            f"reads version {VERSION}): upgrade the listener, then requeue"
        )
    try:
        return _envelope(value)
    except (KeyError, TypeError, ValueError) as error:
        raise DecodeError(f"malformed cloudqueue envelope: {error}") from None


def envelope_text(fields: dict[str, Any]) -> str:
    """The message text of an envelope with these fields (read from ``Envelope.fields``, some
    changed): the payload (``data``) goes last, so what a person looks for reads first."""
    data = {"data": fields["data"]} if "data" in fields else {}
    return _dump({**{k: v for k, v in fields.items() if k != "data"}, **data})


def without_attempts(content: str) -> str:
    """The message text with its envelope's ``attempts`` removed, for a fresh start (requeue);
    any other text unchanged."""
    try:
        envelope = parse_envelope(content)
    except DecodeError:
        return content
    if envelope is None or not envelope.attempts:
        return content
    fields = dict(envelope.fields)
    del fields["attempts"]
    return _dump(fields)


def _reserved_value(text: str, max_json_depth: int) -> Any:
    if not _RESERVED.match(text):
        return _NOT_RESERVED  # the cheap test: most messages are not JSON objects at all
    try:
        value = bounded_json.loads(text, max_json_depth)
    except LimitExceededError:
        raise
    except ValueError:
        return _NOT_RESERVED
    if isinstance(value, dict) and list(value) == [ENVELOPE_KEY]:
        return value[ENVELOPE_KEY]
    return _NOT_RESERVED


def _header(kind: Kind, packed: Packed, key: str | None) -> dict[str, Any]:
    header = {"v": VERSION, "kind": kind, "count": packed.count, "inner": packed.inner}
    return header if key is None else {**header, "key": check_key(key)}


def _dump(fields: dict[str, Any]) -> str:
    return json.dumps({ENVELOPE_KEY: fields}, separators=(",", ":"))


def _envelope(fields: dict[str, Any]) -> Envelope:
    kind, inner, count = fields["kind"], fields["inner"], fields["count"]
    if kind not in ("gzip", "batch", "blob") or inner not in ("base64", "text"):
        raise ValueError(f"unknown kind {kind!r} or inner encoding {inner!r}")
    if not _is_count(count) or count < 1:
        raise ValueError(f"count must be a positive integer, got {count!r}")
    attempts = fields.get("attempts", 0)
    if not _is_count(attempts) or attempts < 0:
        raise ValueError(f"attempts must be a non-negative integer, got {attempts!r}")
    carrier = {name: value for name in TRACE_FIELDS if isinstance(value := fields.get(name), str)}
    key = fields.get("key")
    if key is not None:
        key = check_key(key)
    due, hops = _due(fields), fields.get("hops", 0)
    if not _is_count(hops) or hops < 0:
        raise ValueError(f"hops must be a non-negative integer, got {hops!r}")
    packed, name = None, None
    if kind == "blob":
        name = validate_payload_name(str(fields["blob"]))
    else:
        try:
            packed = Packed(inner, count, strict_base64(str(fields["data"])))
        except DecodeError as error:
            raise ValueError(f"data: {error}") from None
    return Envelope(
        kind,
        inner,
        count,
        packed=packed,
        payload_name=name,
        attempts=attempts,
        carrier=carrier,
        fields=fields,
        due=due,
        hops=hops,
        key=key,
    )


def _due(fields: dict[str, Any]) -> datetime | None:
    """The ``due`` field: an ISO 8601 time with its UTC offset (``2026-02-01T09:00:00Z``)."""
    text = fields.get("due")
    if text is None:
        return None
    if not isinstance(text, str) or len(text) > _MAX_TIME_CHARS:
        raise ValueError(f"due must be an ISO 8601 time, got {text!r:.40}")
    try:
        due = datetime.fromisoformat(text)
    except ValueError as error:
        raise ValueError(f"due: {error}") from None
    if due.tzinfo is None:
        raise ValueError(f"due must carry its UTC offset (Z), got {text!r}")
    return due


def _is_count(value: object) -> bool:
    """A whole number that is not a boolean (``True`` is an int in Python, but not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


__all__ = [
    "ENVELOPE_KEY",
    "Envelope",
    "Kind",
    "blob_envelope",
    "envelope_text",
    "inline_envelope",
    "is_reserved",
    "parse_envelope",
    "without_attempts",
]
