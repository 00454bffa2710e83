"""Re-publishing the failed items of a batch as a message of their own (see
``cloudqueue.listener.consumer.processing``).

The new message carries how often its items were tried (the envelope's ``attempts``), keeps the
original's remaining time-to-live, and becomes visible after the retry back-off, as the original
would have. It is put *before* the original is deleted: a crash in between leaves the whole batch
to be handled again (duplicates), never a lost item.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from cloudqueue.listener.stores.storage import NEVER_EXPIRES, QueueMessage, QueueStorage
from cloudqueue.listener.wire.envelope import inline_envelope
from cloudqueue.listener.wire.frames import pack
from cloudqueue.listener.wire.packing import MAX_ENVELOPE_BYTES, message_bytes


def remainder_content(texts: Sequence[str], *, attempts: int, key: str | None = None) -> str | None:
    """The envelope carrying the failed items' codec texts, their attempt count and the original's
    ``key``; None when it would not fit in a message (the caller then retries the whole original
    instead)."""
    content = inline_envelope(pack(texts), attempts=attempts, key=key)
    return content if message_bytes(content) <= MAX_ENVELOPE_BYTES else None


def republish(
    storage: QueueStorage,
    queue_name: str,
    content: str,
    *,
    original: QueueMessage,
    delay_s: int,
    now: datetime,
) -> QueueMessage:
    """Put ``content`` on the queue, hidden for ``delay_s``, expiring when ``original`` would."""
    time_to_live_s, delay_s = republished_timing(original, delay_s, now)
    return storage.put_message(
        queue_name, content, time_to_live_s=time_to_live_s, visibility_delay_s=delay_s
    )


def republished_timing(original: QueueMessage, delay_s: int, now: datetime) -> tuple[int, int]:
    """The time to live and the delay of a copy of ``original`` hidden for ``delay_s``: it
    expires when the original would, and is visible before (Azure refuses a delay past it)."""
    time_to_live_s = _remaining_time_to_live_s(original, now)
    if time_to_live_s != NEVER_EXPIRES:
        delay_s = min(delay_s, time_to_live_s - 1)
    return time_to_live_s, max(0, delay_s)


def _remaining_time_to_live_s(original: QueueMessage, now: datetime) -> int:
    expires_on = original.expires_on
    if expires_on is None or expires_on.year >= 9999:  # Azure reports "never" as year 9999
        return NEVER_EXPIRES
    return max(1, math.ceil((expires_on - now).total_seconds()))


__all__ = ["remainder_content", "republish", "republished_timing"]
