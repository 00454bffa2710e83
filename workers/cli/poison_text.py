"""How ``cloudqueue poison`` reads on a terminal: the listing's table and ``show``'s record.

The rows and details come from ``cloudqueue.workers.views.poison``, every value whole; here the
listing's errors are cut to their first line and everything is escaped for the terminal
(``printable``), which would otherwise act on control characters someone wrote into a poison record.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from cloudqueue.workers.logging import printable
from cloudqueue.workers.views.poison import UNREADABLE

ERROR_WIDTH = 80
"""The most characters of an error's first line that the text listing shows."""


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
