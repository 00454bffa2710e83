"""What a poison message says, for ``cloudqueue poison`` and the dashboard: rows, details, text.

A poison message is a record (``listener.poison.record``), the original content kept
unwrapped (wrapping would have exceeded 64 KiB), or whatever else someone wrote to the poison
queue. Every one is shown for what it is, and never trusted: a message that holds no valid record
has ``readable`` false, the ``problem`` and the start of its text. JSON keeps every value whole;
the text output shortens the listing's errors and escapes what a terminal would act on
(``printable``).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import asdict, fields
from datetime import datetime
from typing import Any

from listener.errors import DecodeError, UnreadableRecordError
from listener.poison.record import PoisonRecord, parse_record
from listener.stores.storage import QueueMessage
from listener.wire.payload import ENVELOPE_KEY, parse_envelope
from workers.logging import printable

ERROR_WIDTH = 80
"""The most characters of an error's first line that the text listing shows."""

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


def table_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The text listing: a header and one aligned line a row, errors cut to their first line."""
    table = [
        [
            printable(row["original_id"] or row["poison_id"]),
            printable(row["reason"] or "-"),
            "-" if row["dequeue_count"] is None else str(row["dequeue_count"]),
            printable(_seconds(row["poisoned_on"])),
            printable(_first_line(row["error"])),
        ]
        for row in rows
    ]
    header = ["ORIGINAL ID", "REASON", "DEQUEUES", "POISONED ON", "ERROR"]
    widths = [max(len(cells[column]) for cells in [header, *table]) for column in range(4)]
    aligned = [
        [*(cell.ljust(width) for cell, width in zip(cells, widths, strict=False)), cells[4]]
        for cells in [header, *table]
    ]
    return ["  ".join(cells) for cells in aligned]


def _first_line(error: str) -> str:
    first_line = error.strip().partition("\n")[0]
    if len(first_line) > ERROR_WIDTH:
        return first_line[: ERROR_WIDTH - 3] + "..."
    return first_line


def _seconds(timestamp: str | None) -> str:
    """An ISO time to the second (the record keeps microseconds); "-" when there is none."""
    if timestamp is None:
        return "-"
    try:
        return datetime.fromisoformat(timestamp).isoformat(sep=" ", timespec="seconds")
    except ValueError:
        return timestamp


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
        value = json.loads(base64.b64decode(content, validate=True).decode("utf-8"))
    except (binascii.Error, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
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
    if envelope.packed is not None:
        size = len(envelope.packed.data)
    else:
        size = json.loads(content)[ENVELOPE_KEY].get("bytes")
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


def render(shown: dict[str, Any]) -> str:
    """``show``'s text: one labelled line a field, multi-line values indented below their label,
    everything escaped for the terminal."""
    lines = [("poison id", shown["poison_id"])]
    if shown["wrapped"]:
        lines += [
            ("original id", shown["original_id"]),
            ("queue", shown["queue"]),
            ("reason", shown["reason"]),
            ("dequeue count", str(shown["dequeue_count"])),
            ("inserted on", shown["inserted_on"]),
            ("poisoned on", shown["poisoned_on"]),
            ("worker", shown["worker"]),
            ("first error", shown["first_error"]),
            ("last error", shown["error"]),
        ]
    else:
        lines.append(("record", f"{UNREADABLE}: {shown['problem']}"))
    lines.append(("content", _content_text(shown["content"], shown["content_view"])))
    return "\n".join(_labelled(label, printable(value, lines=True)) for label, value in lines)


def _content_text(content: str, view: dict[str, Any]) -> str:
    if view["format"] == "envelope":
        if "error" in view:
            return f"malformed cloudqueue envelope, {len(content)} characters: {view['error']}"
        where = f", stored as {view['blob']}" if view["blob"] else ""
        return (
            f"cloudqueue envelope: {view['kind']}, {view['count']} item(s), "
            f"{view['bytes']} bytes compressed ({view['inner']} items){where}"
        )
    if view["format"] == "base64-json":
        decoded = json.dumps(view["value"], indent=2, ensure_ascii=False)
        return f"base64 of JSON, decoded:\n{decoded}"
    note = f" ({view['note']})" if "note" in view else ""
    return "(empty)" if content == "" else f"raw text{note}:\n{content}"


def _labelled(label: str, value: str) -> str:
    first, *rest = value.splitlines() or [""]
    return "\n".join([f"{label + ':':<15} {first}", *(f"{'':16}{line}" for line in rest)])


__all__ = ["content_view", "details", "poison_summary", "render", "table_lines"]
