"""What the embedded stores (in-memory and SQLite) share: Azure's argument limits and new envelopes.

The limit checks mirror what the Queue service answers with 400 or 413, so code that runs against
an embedded store in development fails the same way it would against Azure. They run before any
state changes. The Azure backend may call them too, to fail before a request is sent.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta

from cloudqueue.listener.errors import MessageTooLargeError, QueueNotFoundError
from cloudqueue.listener.stores.storage import (
    MAX_BATCH_SIZE,
    MAX_MESSAGE_BYTES,
    MAX_VISIBILITY_TIMEOUT_S,
    QueueMessage,
    check_put_times,
)


def check_max_messages(max_messages: int) -> None:
    """Raise ValueError unless 1 <= max_messages <= 32 (the most one get or peek returns)."""
    if not 1 <= max_messages <= MAX_BATCH_SIZE:
        raise ValueError(f"max_messages must be 1..{MAX_BATCH_SIZE}, got {max_messages}")


def check_get_arguments(max_messages: int, visibility_timeout_s: int) -> None:
    """Raise ValueError unless 1 <= max_messages <= 32 and 1 s <= timeout <= 7 days."""
    check_max_messages(max_messages)
    if not 1 <= visibility_timeout_s <= MAX_VISIBILITY_TIMEOUT_S:
        raise ValueError(
            f"visibility_timeout_s must be 1..{MAX_VISIBILITY_TIMEOUT_S} on get, "
            f"got {visibility_timeout_s}"
        )


def check_update_arguments(visibility_timeout_s: int, content: str | None = None) -> None:
    """Raise ValueError unless 0 <= timeout <= 7 days (0 makes the message visible at once), and
    MessageTooLargeError for new ``content`` over the limit, as a put does."""
    if not 0 <= visibility_timeout_s <= MAX_VISIBILITY_TIMEOUT_S:
        raise ValueError(
            f"visibility_timeout_s must be 0..{MAX_VISIBILITY_TIMEOUT_S} on update, "
            f"got {visibility_timeout_s}"
        )
    if content is not None:
        check_message_size(content)


def check_put_arguments(
    content: str, time_to_live_s: int | None, visibility_delay_s: int
) -> int | None:
    """Validate a put; return the effective time-to-live in seconds, None when it never expires."""
    check_message_size(content)
    return check_put_times(time_to_live_s, visibility_delay_s)


def check_message_size(content: str) -> None:
    """Raise MessageTooLargeError for text over the 64 KiB a message holds."""
    size = len(content.encode("utf-8"))
    if size > MAX_MESSAGE_BYTES:
        raise MessageTooLargeError(
            f"message of {size} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit"
        )


_METADATA_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


def check_metadata(metadata: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``metadata``; ValueError unless every name is a lowercase identifier (Azure
    takes C# identifiers, case-insensitively) and every value a string."""
    for name, value in metadata.items():
        if not isinstance(name, str) or not _METADATA_NAME.match(name):
            raise ValueError(f"metadata name {name!r} is not a lowercase identifier")
        if not isinstance(value, str):
            raise ValueError(f"metadata value of {name!r} must be a string, got {value!r}")
    return dict(metadata)


def new_pop_receipt() -> str:
    """An opaque receipt that only the latest get (or update) of a message holds."""
    return uuid.uuid4().hex


def new_message(
    content: str, *, now: datetime, time_to_live_s: int | None, visibility_delay_s: int
) -> QueueMessage:
    """The envelope of a freshly put message; ``time_to_live_s`` None means it never expires.

    Like Azure's Put Message, it carries a pop receipt that can delete or update the message until
    a get takes it, and a dequeue count of 0.
    """
    return QueueMessage(
        id=str(uuid.uuid4()),
        pop_receipt=new_pop_receipt(),
        dequeue_count=0,
        inserted_on=now,
        expires_on=None if time_to_live_s is None else now + timedelta(seconds=time_to_live_s),
        next_visible_on=now + timedelta(seconds=visibility_delay_s),
        content=content,
    )


def peeked(message: QueueMessage) -> QueueMessage:
    """The message as a peek shows it: everything but a pop receipt, which only a get hands out."""
    return replace(message, pop_receipt="")


def queue_not_found(queue_name: str) -> QueueNotFoundError:
    """The error both embedded stores raise for a queue that does not exist."""
    return QueueNotFoundError(f"queue {queue_name} does not exist")
