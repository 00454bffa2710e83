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
refuses one: each of its items would resume from it. The text, its size and the reading are
``message_notes``'s, which the event loop's ``event_loop.reporting`` shares; the writes here are the
threaded listener's, from the handler's thread.
"""

from __future__ import annotations

from typing import Any

from cloudqueue.listener.consumer.handler_progress import HandlerProgress
from cloudqueue.listener.consumer.leases import Lease, LeaseKeeper
from cloudqueue.listener.consumer.message_notes import SAVED, CheckpointSaving, MessageNotes
from cloudqueue.listener.consumer.middleware import MessageContext
from cloudqueue.listener.stores.payload_store import PayloadStore
from cloudqueue.listener.wire.handler_notes import checkpoint_text, parse_checkpoint


class HeldMessage(MessageNotes):
    """The message a handler is handling on a listener's thread, as far as it may write to it."""

    def __init__(
        self,
        lease: Lease,
        keeper: LeaseKeeper,
        context: MessageContext[Any],
        payload_store: PayloadStore | None,
    ) -> None:
        super().__init__(context, payload_store, keeper.clock)
        self.lease = lease
        self.keeper = keeper

    def save_checkpoint(self, state: object) -> CheckpointSaving:
        """Save ``state`` (a small JSON value) for a redelivery of this message to resume from;
        returns once it is stored (what it returns is done: awaiting it returns at once).
        CheckpointError when it is no JSON value, is over the limit, or the message carries
        several items."""
        text = checkpoint_text(state)
        self._refuse_several_items()
        with self.lease.lock:
            progress = self.lease.progress
        content = self._inline_content(text, progress)
        if content is None:
            name, content = self._stored_content(progress)
            assert self.payload_store is not None  # else _stored_content refused it
            self.payload_store.put(name, text.encode("utf-8"))
            self.lease.checkpoint_payload = name
        self.keeper.rewrite(self.lease, content)
        self._content, self._checkpoint = content, parse_checkpoint(text)
        return SAVED

    def _keep_report(self, report: HandlerProgress, content: str | None) -> None:
        with self.lease.lock:
            self.lease.progress = report
            if content is not None:
                self.lease.pending_content = content

    def _keep_payload_name(self, name: str) -> None:
        self.lease.checkpoint_payload = name


__all__ = ["HeldMessage"]
