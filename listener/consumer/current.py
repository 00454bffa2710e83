"""The envelope of the message being handled, for handlers that want more than the item.

Observers receive plain items; a handler that needs the message id, dequeue count or insertion
time calls ``current_envelope()``. It is a context variable set by the dequeue thread around each
delivery, so it is correct for whichever thread calls the observer, and unset everywhere else.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime

from cloudqueue.listener.stores.storage import QueueMessage


@dataclass(frozen=True, slots=True)
class MessageEnvelope:
    """Where an item came from: its queue, message id, dequeue count and times."""

    queue_name: str
    message_id: str
    dequeue_count: int
    inserted_on: datetime
    expires_on: datetime | None
    content_chars: int = 0
    """The length of the message's text as stored (what a workload recording sizes)."""
    key: str | None = None
    """The message's key (``cloudqueue.listener.wire.keys``), carried or the worker's; None without
    one."""

    @classmethod
    def of(cls, queue_name: str, message: QueueMessage, key: str | None = None) -> MessageEnvelope:
        return cls(
            queue_name=queue_name,
            message_id=message.id,
            dequeue_count=message.dequeue_count,
            inserted_on=message.inserted_on,
            expires_on=message.expires_on,
            content_chars=len(message.content),
            key=key,
        )


_current: ContextVar[tuple[str, QueueMessage, str | None] | None] = ContextVar(
    "cloudqueue_envelope", default=None
)
"""The queue, message and key being delivered: the envelope is made only when a handler asks
for it (most never do, and the delivery of every message sets this)."""


def current_envelope() -> MessageEnvelope:
    """The envelope of the item being delivered; LookupError outside a delivery."""
    delivery = _current.get()
    if delivery is None:
        raise LookupError("current_envelope() is only available while an item is being handled")
    return MessageEnvelope.of(*delivery)


def current_message() -> QueueMessage | None:
    """The message being delivered, its text included (None outside a delivery): for what rides
    in its envelope (a group member's membership, ``cloudqueue.listener.workflows``)."""
    delivery = _current.get()
    return None if delivery is None else delivery[1]


def set_current_message(
    queue_name: str | None, message: QueueMessage | None = None, key: str | None = None
) -> None:
    """Set by the thread that delivers a message, around its delivery (internal)."""
    _current.set(None if queue_name is None or message is None else (queue_name, message, key))
