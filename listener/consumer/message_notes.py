"""What a handler writes to its message, as the message's new text: the part both consumers share.

``MessageNotes`` is made for each delivery and reached through ``current_envelope()``. It turns a
progress report and a checkpoint into the message's rewritten text (``wire.handler_notes``), sizes
it (a checkpoint that does not fit goes to the payload store, under a name of the message's own),
refuses what cannot be saved, and reads the checkpoint a redelivery resumes from. How the text
reaches storage is each consumer's: the threaded one writes from the handler's thread
(``reporting``), the event-loop one from a task on its loop (``event_loop.reporting``).

Reading is forgiving where the message came from someone else: a checkpoint that is not JSON, or
names a payload that is not the queue's or is gone, is logged once (``checkpoint_unreadable``)
and read as none, so the handler starts over rather than the message failing on every delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Generator
from concurrent.futures import Future
from typing import Any, Protocol

import structlog

from cloudqueue.listener.clock import Clock
from cloudqueue.listener.consumer.handler_progress import HandlerProgress
from cloudqueue.listener.consumer.middleware import MessageContext
from cloudqueue.listener.errors import MessageTooLargeError
from cloudqueue.listener.stores.payload_store import PayloadStore, check_payload_owner
from cloudqueue.listener.wire.handler_notes import (
    CHECKPOINT_BLOB_FIELD,
    CHECKPOINT_FIELD,
    MAX_CHECKPOINT_BYTES,
    PROGRESS_FIELD,
    CheckpointError,
    parse_checkpoint,
    progress_note,
    rewritten,
)
from cloudqueue.listener.wire.membership import membership_of

log = structlog.get_logger(__name__)

_UNREAD = object()


class CheckpointSaving(Protocol):
    """What ``save_checkpoint`` returns: awaiting it returns once the checkpoint is stored (at
    once where it was stored before ``save_checkpoint`` returned, as on threads)."""

    def __await__(self) -> Generator[Any, None, None]: ...


class Saved:
    """A checkpoint stored already: awaiting it returns at once."""

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # a generator that ends at once


SAVED = Saved()


class Saving:
    """A checkpoint's write under way: awaiting it returns once it is stored, or raises what
    storage raised. Awaiting never cancels the write (a handler past its time limit leaves it to
    end)."""

    def __init__(self, write: asyncio.Future[None]) -> None:
        self.write = write

    def __await__(self) -> Generator[Any, None, None]:
        return asyncio.shield(self.write).__await__()


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running on this thread, if any."""
    with contextlib.suppress(RuntimeError):
        return asyncio.get_running_loop()
    return None


def log_unsaved(notes: MessageNotes, write: asyncio.Future[None] | Future[None]) -> None:
    """Log a checkpoint's write that failed (retrieving its error: a handler need not await
    it)."""
    if write.cancelled():
        return
    failure = write.exception()
    if failure is not None:
        log.warning(
            "checkpoint_not_saved",
            queue=notes.queue_name,
            message_id=notes.message.id,
            error=f"{type(failure).__name__}: {str(failure)[:200]}",
        )


class MessageNotes:
    """The message a handler is handling, as far as the handler may write to it."""

    def __init__(
        self, context: MessageContext[Any], payload_store: PayloadStore | None, clock: Clock
    ) -> None:
        self.message = message = context.message
        self.queue_name = context.queue_name
        self.envelope = context.envelope
        self.key = context.key
        self.items = len(context.items)
        self.payload_store = payload_store
        self.clock = clock
        self._content = message.content
        """The message's text as last written (as fetched, until a handler wrote)."""
        self._checkpoint: Any = _UNREAD

    @property
    def checkpoint(self) -> Any:
        """The state last saved for this message (by this delivery or an earlier one); None
        when there is none."""
        if self._checkpoint is _UNREAD:
            self._checkpoint = self._read_checkpoint()
        return self._checkpoint

    def progress(self, fraction: float, detail: str = "") -> None:
        """Report how far the handler is (0 to 1) and what it is doing; ValueError for a
        fraction outside 0..1 or a detail longer than one short line."""
        note = progress_note(fraction, detail)
        membership = membership_of(self.envelope)
        report = HandlerProgress(
            queue=self.queue_name,
            message_id=self.message.id,
            fraction=note["fraction"],
            detail=detail,
            reported_at=self.clock.now().isoformat(),
            key=self.key,
            group=None if membership is None else membership.group_id,
            member=None if membership is None else membership.member_id,
        )
        try:
            content: str | None = self._written({PROGRESS_FIELD: note})
        except MessageTooLargeError:  # a message that cannot carry it still shows it in status
            content = None
        self._keep_report(report, content)

    def save_checkpoint(self, state: object) -> CheckpointSaving:
        """Save ``state`` (a small JSON value) for a redelivery of this message to resume from.
        CheckpointError when it is no JSON value, is over the limit, or the message carries
        several items."""
        raise NotImplementedError

    def _keep_report(self, report: HandlerProgress, content: str | None) -> None:
        """Keep ``report`` for status, and ``content`` (if any) for the next renewal to
        write."""
        raise NotImplementedError

    def _keep_payload_name(self, name: str) -> None:
        """Remember that this message's checkpoint is stored as ``name`` (removed after the
        delete)."""
        raise NotImplementedError

    def _refuse_several_items(self) -> None:
        if self.items != 1:
            raise CheckpointError(
                f"a checkpoint belongs to a message of one item; this message carries "
                f"{self.items} (a publisher's batch), and each would resume from it"
            )

    def _inline_content(self, text: str, progress: HandlerProgress | None) -> str | None:
        """The message's text carrying checkpoint ``text`` (and the last report); None when it
        does not fit, and the checkpoint must go to the payload store."""
        try:
            return self._written(
                {**_progress_field(progress), CHECKPOINT_FIELD: text, CHECKPOINT_BLOB_FIELD: None}
            )
        except MessageTooLargeError:
            return None

    def _stored_content(self, progress: HandlerProgress | None) -> tuple[str, str]:
        """The payload name for a checkpoint too large for the message, and the message's text
        naming it; CheckpointError without a payload store."""
        if self.payload_store is None:
            raise CheckpointError(
                "the checkpoint does not fit in the message, and the listener has no payload "
                "store to keep it in (pass payload_store=..., or save less)"
            )
        name = self._own_payload_name()
        fields = {**_progress_field(progress), CHECKPOINT_FIELD: None, CHECKPOINT_BLOB_FIELD: name}
        return name, self._written(fields)

    def _written(self, changes: dict[str, object | None]) -> str:
        return rewritten(self._content, changes)

    def stored_checkpoint_name(self) -> str | None:
        """The payload a redelivery's checkpoint is in (None: inline, or none at all)."""
        fields = {} if self.envelope is None else self.envelope.fields
        if fields.get(CHECKPOINT_FIELD) is not None:
            return None
        name = fields.get(CHECKPOINT_BLOB_FIELD)
        return None if name is None else str(name)

    def _read_checkpoint(self) -> Any:
        fields = {} if self.envelope is None else self.envelope.fields
        inline, name = fields.get(CHECKPOINT_FIELD), fields.get(CHECKPOINT_BLOB_FIELD)
        if inline is None and name is None:
            return None
        try:
            if inline is not None:
                if not isinstance(inline, str):
                    raise ValueError("the checkpoint field is not JSON text")
                return parse_checkpoint(inline)
            return parse_checkpoint(self._stored_checkpoint(str(name)))
        except Exception as failure:  # someone else's message: start over, never fail on it
            log.warning(
                "checkpoint_unreadable",
                queue=self.queue_name,
                message_id=self.message.id,
                error=f"{type(failure).__name__}: {str(failure)[:200]}",
            )
            return None

    def _stored_checkpoint(self, name: str) -> str:
        check_payload_owner(name, self.queue_name)
        if self.payload_store is None:
            raise ValueError(f"the checkpoint is in payload {name!r}, but there is no store")
        data = self.payload_store.get(name, max_bytes=MAX_CHECKPOINT_BYTES)
        if name == self._own_payload_name():  # never another message's: that one may need it
            self._keep_payload_name(name)
        return data.decode("utf-8")

    def _own_payload_name(self) -> str:
        """The payload name of this message's checkpoint: the same for each save of it."""
        digest = hashlib.sha256(f"checkpoint:{self.message.id}".encode()).hexdigest()
        return f"{self.queue_name}/{digest[:32]}"


def _progress_field(report: HandlerProgress | None) -> dict[str, object]:
    """The last progress report as its envelope field (carried along with a checkpoint)."""
    if report is None:
        return {}
    return {PROGRESS_FIELD: {"fraction": report.fraction, "detail": report.detail}}


__all__ = ["SAVED", "CheckpointSaving", "MessageNotes"]
