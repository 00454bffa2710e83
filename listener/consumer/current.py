"""The envelope of the message being handled, for handlers that want more than the item.

Observers receive plain items; a handler that needs the message id, dequeue count or insertion
time calls ``current_envelope()``. It is a context variable set by the dequeue thread around each
delivery, so it is correct for whichever thread calls the observer, and unset everywhere else.

The envelope is also how a handler writes to its message while it runs: ``progress(fraction,
detail)``, ``save_checkpoint(state)``, and ``checkpoint``, the state a redelivery resumes from
(``cloudqueue.listener.consumer.message_notes``). They sit on the envelope rather than beside it
because the envelope is the one per-message thing a handler already reaches, from any thread it
handles on.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cloudqueue.listener.stores.storage import QueueMessage

if TYPE_CHECKING:
    from cloudqueue.listener.consumer.message_notes import CheckpointSaving, MessageNotes


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
    held: MessageNotes | None = field(default=None, compare=False, repr=False)
    """What the handler may write to its message (None where no listener delivers it)."""

    @classmethod
    def of(
        cls,
        queue_name: str,
        message: QueueMessage,
        key: str | None = None,
        held: MessageNotes | None = None,
    ) -> MessageEnvelope:
        return cls(
            queue_name=queue_name,
            message_id=message.id,
            dequeue_count=message.dequeue_count,
            inserted_on=message.inserted_on,
            expires_on=message.expires_on,
            content_chars=len(message.content),
            key=key,
            held=held,
        )

    @property
    def checkpoint(self) -> Any:
        """The state last saved with ``save_checkpoint`` for this message, by this delivery or
        an earlier one (which a kill, crash or failure ended); None when there is none."""
        return None if self.held is None else self.held.checkpoint

    def save_checkpoint(self, state: object) -> CheckpointSaving:
        """Save ``state``, a small JSON value, for a redelivery of this message to resume from:
        stored when this returns (one update-message call, which also renews the visibility).
        On the single event loop (``listener.event_loop = "single"``) the write starts at once
        and ``await envelope.save_checkpoint(state)`` returns once it is stored; called from a
        thread the handler started, it returns once stored, as on threads. CheckpointError
        when it is not JSON, over the limit, or the message is a batch."""
        if self.held is None:
            raise LookupError("save_checkpoint() needs a message a listener is handling")
        return self.held.save_checkpoint(state)

    def progress(self, fraction: float, detail: str = "") -> None:
        """Report how far the handler is (0 to 1) and what it does: shown by ``cloudqueue
        status`` and a group's status, and written into the message with its next visibility
        renewal, at no transaction of its own. ValueError for a fraction outside 0..1."""
        if self.held is not None:
            self.held.progress(fraction, detail)


_Delivery = tuple[str, QueueMessage, str | None, "MessageNotes | None"]

_current: ContextVar[_Delivery | None] = ContextVar("cloudqueue_envelope", default=None)
"""The queue, message, key and held message being delivered: the envelope is made only when a
handler asks for it (most never do, and the delivery of every message sets this)."""


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
    queue_name: str | None,
    message: QueueMessage | None = None,
    key: str | None = None,
    held: MessageNotes | None = None,
) -> None:
    """Set by the thread that delivers a message, around its delivery (internal)."""
    delivery = None if queue_name is None or message is None else (queue_name, message, key, held)
    _current.set(delivery)
