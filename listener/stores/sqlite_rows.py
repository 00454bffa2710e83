"""Rows of the ``messages`` table and the ``QueueMessage`` values they hold.

Times are float epoch seconds; content is read back as bytes and decoded here, so that a row
written around the API with bytes that are not UTF-8 poisons its message instead of failing every
get of its queue.
"""

from __future__ import annotations

from datetime import UTC, datetime

import structlog

from cloudqueue.listener.stores._embedded import new_pop_receipt
from cloudqueue.listener.stores.storage import QueueMessage

__all__ = [
    "MESSAGE_COLUMNS",
    "SELECTED_COLUMNS",
    "UNEXPIRED",
    "Row",
    "StoredRow",
    "decoded",
    "taken",
    "to_message",
    "to_row",
]

log = structlog.get_logger(__name__)

MESSAGE_COLUMNS = (
    "id, pop_receipt, dequeue_count, inserted_on, expires_on, next_visible_on, content"
)

SELECTED_COLUMNS = MESSAGE_COLUMNS.replace("content", "CAST(content AS BLOB)")
"""Content is read as bytes and decoded here: a row written around the API with bytes that are
not UTF-8 would otherwise make sqlite3 fail every get of its queue."""

UNEXPIRED = "(expires_on IS NULL OR expires_on > :now)"


Row = tuple[str, str, int, float, float | None, float, str]
StoredRow = tuple[str, str, int, float, float | None, float, bytes]


def to_row(message: QueueMessage) -> Row:
    expires_on = message.expires_on.timestamp() if message.expires_on else None
    return (
        message.id,
        message.pop_receipt,
        message.dequeue_count,
        message.inserted_on.timestamp(),
        expires_on,
        message.next_visible_on.timestamp(),
        message.content,
    )


def to_message(row: Row) -> QueueMessage:
    message_id, pop_receipt, dequeue_count, inserted_on, expires_on, next_visible_on, content = row
    return QueueMessage(
        id=message_id,
        pop_receipt=pop_receipt,
        dequeue_count=dequeue_count,
        inserted_on=_to_datetime(inserted_on),
        expires_on=None if expires_on is None else _to_datetime(expires_on),
        next_visible_on=_to_datetime(next_visible_on),
        content=content,
    )


def decoded(row: StoredRow, queue_name: str) -> Row:
    """The row with its content as text: UTF-8, or -- written around the API -- with each invalid
    byte replaced by U+FFFD (a base64 or JSON codec then finds it undecodable and poisons it)."""
    content = row[6]
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as error:
        text = content.decode("utf-8", errors="replace")
        log.warning(
            "message_not_utf8", queue=queue_name, message_id=row[0], byte_offset=error.start
        )
    return (*row[:6], text)


def taken(row: Row, hidden_until: float) -> QueueMessage:
    """The message in ``row`` as a get hands it out: new receipt, one more dequeue, hidden."""
    message_id, _, dequeue_count, inserted_on, expires_on, _, content = row
    return to_message(
        (
            message_id,
            new_pop_receipt(),
            dequeue_count + 1,
            inserted_on,
            expires_on,
            hidden_until,
            content,
        )
    )


def _to_datetime(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, UTC)
