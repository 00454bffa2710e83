"""What a poison message says, for ``cloudqueue poison`` and the dashboard: rows and details.

A poison message is a record (``cloudqueue.listener.poison.record``), the original content kept
unwrapped (wrapping would have exceeded 64 KiB), or whatever else someone wrote to the poison
queue. Every one is shown for what it is, and never trusted: a message that holds no valid record
has ``readable`` false, the ``problem`` and the start of its text. Every value is kept whole here
(as JSON shows it); the command line's text (``cloudqueue.workers.cli.poison_text``) shortens and
escapes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Any

from cloudqueue.listener.errors import DecodeError, UnreadableRecordError
from cloudqueue.listener.poison.record import PoisonRecord, parse_record
from cloudqueue.listener.stores.storage import QueueMessage
from cloudqueue.listener.wire.encodings import strict_base64
from cloudqueue.listener.wire.envelope import parse_envelope

START_CHARS = 80
"""How much of a message that holds no record its summary quotes."""

MAX_SHOWN_DEPTH = 100
"""Decoded JSON content nested deeper than this is shown raw (rendering it would recurse)."""

UNREADABLE = "not a readable poison record"
UNWRAPPED = "the original content kept as it is (wrapping it would have exceeded 64 KiB)"


def poison_summary(message: QueueMessage) -> dict[str, Any]:
    """One listing row: ids, reason, dequeue count, time and the whole last error (JSON keeps it
    whole); for a message that holds no record, why and the start of its text."""
    try:
        record = parse_record(message.content)
    except UnreadableRecordError as unreadable:
        start = message.content[:START_CHARS]
        return {
            "original_id": None,
            "poison_id": message.id,
            "readable": False,
            "problem": unreadable.problem,
            "reason": None,
            "dequeue_count": None,
            "poisoned_on": None,
            "error": f"{UNREADABLE} ({_kind(unreadable)}): starts {start!r}",
        }
    return {
        "original_id": record.original_id,
        "poison_id": message.id,
        "readable": True,
        "problem": None,
        "reason": record.reason,
        "dequeue_count": record.dequeue_count,
        "poisoned_on": record.poisoned_on,
        "error": record.error,
    }


def _kind(unreadable: UnreadableRecordError) -> str:
    if unreadable.claims_record:
        return unreadable.problem
    return f"{unreadable.problem}: {UNWRAPPED}, or written by something else"


def details(queue: str, message: QueueMessage) -> dict[str, Any]:
    """The whole record (fields None when there is none, and why) and a view of its content."""
    try:
        values: dict[str, Any] = asdict(parse_record(message.content))
        problem = None
    except UnreadableRecordError as unreadable:
        values = {field.name: None for field in fields(PoisonRecord)}
        values.update(queue=queue, content=message.content)
        problem = _kind(unreadable)
    return {
        "poison_id": message.id,
        "wrapped": problem is None,
        "problem": problem,
        **values,
        "content_view": content_view(values["content"]),
    }


def content_view(content: str) -> dict[str, Any]:
    """How to show a message's content: a cloudqueue envelope's header, decoded base64 JSON, or raw.

    ``{"format": "envelope", "kind", "count", "inner", "bytes", "blob"}`` (or ``"error"`` when the
    envelope is malformed), ``{"format": "base64-json", "value"}``, or ``{"format": "raw"}`` (with
    a ``"note"`` when it is JSON nested too deeply to show decoded).
    """
    try:
        view = _envelope_view(content)
    except RecursionError:
        return {"format": "raw", "note": "JSON nested too deeply to decode"}
    if view is not None:
        return view
    try:
        value = json.loads(strict_base64(content).decode("utf-8"))
    except (DecodeError, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return {"format": "raw"}
    except RecursionError:
        return {"format": "raw", "note": "base64 of JSON nested too deeply to decode"}
    if _deeper_than(value, MAX_SHOWN_DEPTH):
        return {"format": "raw", "note": f"base64 of JSON nested over {MAX_SHOWN_DEPTH} deep"}
    return {"format": "base64-json", "value": value}


def _envelope_view(content: str) -> dict[str, Any] | None:
    """A cloudqueue envelope's header (or why it is malformed); None for other content."""
    try:
        envelope = parse_envelope(content)
    except DecodeError as error:
        return {"format": "envelope", "error": str(error)}
    if envelope is None:
        return None
    size: object = envelope.fields.get("bytes")
    if envelope.packed is not None:
        size = len(envelope.packed.data)
    return {
        "format": "envelope",
        "kind": envelope.kind,
        "count": envelope.count,
        "inner": envelope.inner,
        "bytes": size,
        "blob": envelope.payload_name,
    }


def _deeper_than(value: Any, depth: int) -> bool:
    """Whether decoded JSON nests deeper than ``depth`` (walked without recursion)."""
    level: list[Any] = [value]
    for _ in range(depth):
        level = [
            child
            for item in level
            if isinstance(item, dict | list)
            for child in (item.values() if isinstance(item, dict) else item)
        ]
        if not level:
            return False
    return any(isinstance(item, dict | list) for item in level)


__all__ = ["content_view", "details", "poison_summary"]
