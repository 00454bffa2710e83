"""What ``cloudqueue status`` and the dashboard say about a queue itself: its depth, how much of
it is waiting, and how long the oldest waiting message has waited.

Azure's approximate count includes invisible messages: held by a consumer (in flight) or put
with a delay. One peek -- one storage transaction, up to 32 messages, visible ones only -- tells
the rest: fewer than 32 peeked is the exact visible count; 32 means at least that many, and the
visible count is then estimated as the depth less the messages the workers seen by ``status``
hold. A queue is served roughly oldest first, so the oldest peeked message is the oldest waiting
one; a message already in flight is not waiting and not counted.

Delayed messages are invisible, so the service counts them with those in flight. A message
delayed beyond 7 days shows up between two hops (``cloudqueue.listener.consumer.hops``) until a
worker hides it again, or for as long as no worker runs: the peek sees its due time, and counts it
as delayed, not as waiting.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cloudqueue.listener.errors import QueueNotFoundError
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.wire.due import due_of

PEEK_MAX = 32
"""The most messages one peek returns (the Queue API's limit)."""


@dataclass(frozen=True, slots=True)
class QueueFacts:
    """A queue's depth split into waiting and invisible messages, and its oldest waiting age."""

    visible: int
    visible_exact: bool
    """False when 32 or more were visible: ``visible`` is then an estimate."""
    in_flight: int
    """Invisible messages: being handled, or delayed by their publisher."""
    oldest_age_s: float | None
    """Seconds since the oldest visible message that is due was put; None when none is."""
    delayed: int = 0
    """Visible messages the peek saw that are not due yet (delayed beyond 7 days, between two
    hops): counted in ``visible``, not waiting."""


def queue_facts(
    storage: QueueStorage, queue: str, *, depth: int, held_by_workers: int, now: datetime
) -> QueueFacts:
    """Peek at ``queue`` (of approximate ``depth``) once and split the depth."""
    peeked = storage.peek_messages(queue, max_messages=PEEK_MAX)
    if len(peeked) < PEEK_MAX:
        visible, exact = len(peeked), True
    else:
        visible, exact = max(PEEK_MAX, depth - held_by_workers), False
    waiting = [message for message in peeked if not _not_due(message.content, now)]
    oldest = min((message.inserted_on for message in waiting), default=None)
    age_s = None if oldest is None else max(0.0, (now - oldest).total_seconds())
    return QueueFacts(visible, exact, max(0, depth - visible), age_s, len(peeked) - len(waiting))


def _not_due(content: str, now: datetime) -> bool:
    due = due_of(content)
    return due is not None and due > now


def depth_or_none(storage: QueueStorage, queue: str) -> int | None:
    """The queue's approximate depth; None when it does not exist (or was deleted meanwhile)."""
    try:
        return storage.approximate_message_count(queue)
    except QueueNotFoundError:
        return None
