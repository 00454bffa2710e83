"""A running handler's reports on the message it holds: progress, and checkpoints to resume from.

``HeldMessage`` is made for each delivery and reached through ``current_envelope()``:

* ``progress(fraction, detail)`` is kept on the message's lease at once (the host publishes it
  with its live state, which ``status`` reads) and written into the message's text with the next
  visibility renewal, the update-message call the listener sends anyway: a report costs no
  storage transaction of its own. Reports between two renewals overwrite each other.
* ``save_checkpoint(state)`` is written at once, one update-message call that also renews the
  visibility, so when it returns, a redelivery of the message -- after a crash, a ``kill -9``, a
  time limit or a failure -- receives ``state`` as ``current_envelope().checkpoint``. The state
  travels in the message's text while the message still fits, beyond that in the payload store
  under a name of the message's own (``<queue>/<hash of its id>``, so each save replaces the
  last), which the message names (``cloudqueue.listener.wire.handler_notes``); it is removed
  when the message is deleted (``Lease.checkpoint_payload``).

A checkpoint belongs to one message, so a message carrying several items (a publisher's batch)
refuses one: each of its items would resume from it. Reading is forgiving where the message came
from someone else: a checkpoint that is not JSON, or names a payload that is not the queue's or is
gone, is logged once (``checkpoint_unreadable``) and read as none, so the handler starts over
rather than the message failing on every delivery.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any

import structlog

from cloudqueue.listener.consumer.handler_progress import HandlerProgress
from cloudqueue.listener.consumer.leases import Lease, LeaseKeeper
from cloudqueue.listener.errors import MessageTooLargeError
from cloudqueue.listener.stores.payload_store import PayloadStore, check_payload_owner
from cloudqueue.listener.wire.envelope import Envelope
from cloudqueue.listener.wire.handler_notes import (
    CHECKPOINT_BLOB_FIELD,
    CHECKPOINT_FIELD,
    MAX_CHECKPOINT_BYTES,
    PROGRESS_FIELD,
    CheckpointError,
    checkpoint_text,
    parse_checkpoint,
    progress_note,
    rewritten,
)
from cloudqueue.listener.wire.membership import membership_of

log = structlog.get_logger(__name__)

_UNREAD = object()


class HeldMessage:
    """The message a handler is handling, as far as the handler may write to it."""

    def __init__(
        self,
        lease: Lease,
        keeper: LeaseKeeper,
        *,
        queue_name: str,
        envelope: Envelope | None,
        payload_store: PayloadStore | None,
        key: str | None = None,
        items: int = 1,
    ) -> None:
        self.lease = lease
        self.keeper = keeper
        self.queue_name = queue_name
        self.envelope = envelope
        self.payload_store = payload_store
        self.key = key
        self.items = items
        self._content = lease.message.content
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
            message_id=self.lease.message.id,
            fraction=note["fraction"],
            detail=detail,
            reported_at=self.keeper.clock.now().isoformat(),
            key=self.key,
            group=None if membership is None else membership.group_id,
            member=None if membership is None else membership.member_id,
        )
        with self.lease.lock:
            self.lease.progress = report
            # A message that cannot carry it still shows it in status.
            with contextlib.suppress(MessageTooLargeError):
                self.lease.pending_content = self._written({PROGRESS_FIELD: note})

    def save_checkpoint(self, state: object) -> None:
        """Save ``state`` (a small JSON value) for a redelivery of this message to resume from;
        returns once it is stored. CheckpointError when it is no JSON value, is over the limit,
        or the message carries several items."""
        text = checkpoint_text(state)
        if self.items != 1:
            raise CheckpointError(
                f"a checkpoint belongs to a message of one item; this message carries "
                f"{self.items} (a publisher's batch), and each would resume from it"
            )
        with self.lease.lock:
            progress = self._progress_field()
        try:
            content = self._written(
                {**progress, CHECKPOINT_FIELD: text, CHECKPOINT_BLOB_FIELD: None}
            )
        except MessageTooLargeError:
            content = self._written_to_store(text, progress)
        self.keeper.rewrite(self.lease, content)
        self._content, self._checkpoint = content, parse_checkpoint(text)

    def _written_to_store(self, text: str, progress: dict[str, object]) -> str:
        if self.payload_store is None:
            raise CheckpointError(
                "the checkpoint does not fit in the message, and the listener has no payload "
                "store to keep it in (pass payload_store=..., or save less)"
            )
        name = self._own_payload_name()
        self.payload_store.put(name, text.encode("utf-8"))
        self.lease.checkpoint_payload = name
        fields = {**progress, CHECKPOINT_FIELD: None, CHECKPOINT_BLOB_FIELD: name}
        return self._written(fields)

    def _written(self, changes: dict[str, object | None]) -> str:
        return rewritten(self._content, changes)

    def _progress_field(self) -> dict[str, object]:
        """The last progress report as its envelope field (carried along with a checkpoint)."""
        report = self.lease.progress
        if report is None:
            return {}
        return {PROGRESS_FIELD: {"fraction": report.fraction, "detail": report.detail}}

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
                message_id=self.lease.message.id,
                error=f"{type(failure).__name__}: {str(failure)[:200]}",
            )
            return None

    def _stored_checkpoint(self, name: str) -> str:
        check_payload_owner(name, self.queue_name)
        if self.payload_store is None:
            raise ValueError(f"the checkpoint is in payload {name!r}, but there is no store")
        data = self.payload_store.get(name, max_bytes=MAX_CHECKPOINT_BYTES)
        if name == self._own_payload_name():  # never another message's: that one may need it
            self.lease.checkpoint_payload = name
        return data.decode("utf-8")

    def _own_payload_name(self) -> str:
        """The payload name of this message's checkpoint: the same for each save of it."""
        digest = hashlib.sha256(f"checkpoint:{self.lease.message.id}".encode()).hexdigest()
        return f"{self.queue_name}/{digest[:32]}"


__all__ = ["HeldMessage"]
