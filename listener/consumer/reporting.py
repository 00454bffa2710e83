"""A running handler's reports on the message it holds: progress, and checkpoints to resume from.

``HeldMessage`` is made for each delivery and reached through ``current_envelope()``:

* ``progress(fraction, detail)`` is kept on the message's lease at once (the host publishes it
  with its live state, which ``status`` reads) and written into the message's text with the next
  visibility renewal, the update-message call the listener sends anyway: a report costs no
  storage transaction of its own. Reports between two renewals overwrite each other.
* ``save_checkpoint(state)`` is written at once, one update-message call that also renews the
  visibility, so when it returns, a redelivery of the message -- after a crash, a ``kill -9``, a
  time limit or a failure -- receives ``state`` as ``current_envelope().checkpoint``. Called from
  an ``async def`` handler, on the loop every coroutine of the process shares
  (``coroutines.LoopThread``), it checks the state at once and writes on a worker thread, so
  that one handler's write does not hold up the others; it then returns an awaitable (``await
  envelope.save_checkpoint(state)`` returns once it is stored, as on the single event loop), and
  the message is not settled before the write has ended (a write that fails is logged,
  ``checkpoint_not_saved``). Saves are written in the order they were made. The state
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

import asyncio
import concurrent.futures
from functools import partial
from typing import Any

from cloudqueue.listener.consumer.handler_progress import HandlerProgress
from cloudqueue.listener.consumer.leases import Lease, LeaseKeeper
from cloudqueue.listener.consumer.message_notes import (
    SAVED,
    CheckpointSaving,
    MessageNotes,
    Saving,
    log_unsaved,
    running_loop,
)
from cloudqueue.listener.consumer.middleware import MessageContext
from cloudqueue.listener.stores.payload_store import PayloadStore
from cloudqueue.listener.wire.handler_notes import checkpoint_text, parse_checkpoint

_WRITERS = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="cloudqueue:checkpoints")
"""Writes checkpoints saved on an event loop; its threads start with the first such save."""


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
        self._writing: concurrent.futures.Future[None] | None = None
        """The last write started from an event loop (they end in order)."""

    def save_checkpoint(self, state: object) -> CheckpointSaving:
        """Save ``state`` (a small JSON value) for a redelivery of this message to resume from;
        returns once it is stored, or, on an event loop, an awaitable that returns then.
        CheckpointError when it is no JSON value, is over the limit, or the message carries
        several items."""
        text = checkpoint_text(state)
        self._refuse_several_items()
        with self.lease.lock:
            progress = self.lease.progress
            content, stored = self._inline_content(text, progress), None
            if content is None:
                stored, content = self._stored_content(progress)
            # The new text carries the last report, and a report made from now on is made on it:
            # a renewal writing that report never drops the checkpoint.
            self._content, self.lease.pending_content = content, None
        if running_loop() is None:  # after any write an earlier save started on the loop
            self._write_after(self._writing, text, content, stored)
            return SAVED
        previous = self._writing
        self._writing = writing = _WRITERS.submit(
            self._write_after, previous, text, content, stored
        )
        writing.add_done_callback(partial(log_unsaved, self))
        return Saving(asyncio.wrap_future(writing))

    def written(self) -> None:
        """Wait until the writes started on an event loop have ended (a failed one was
        logged): the message is settled after them."""
        if self._writing is not None:
            concurrent.futures.wait([self._writing])

    def _write_after(
        self,
        previous: concurrent.futures.Future[None] | None,
        text: str,
        content: str,
        stored: str | None,
    ) -> None:
        if previous is not None:  # submitted earlier, so already running or done
            concurrent.futures.wait([previous])
        self._write(text, content, stored)

    def _write(self, text: str, content: str, stored: str | None) -> None:
        if stored is not None:
            assert self.payload_store is not None  # else _stored_content refused it
            self._keep_payload_name(stored)  # removed after the delete, even if half-done
            self.payload_store.put(stored, text.encode("utf-8"))
        self.keeper.rewrite(self.lease, content)
        self._checkpoint = parse_checkpoint(text)

    def _keep_report(self, report: HandlerProgress, content: str | None) -> None:
        with self.lease.lock:
            self.lease.progress = report
            if content is not None:
                self.lease.pending_content = content

    def _keep_payload_name(self, name: str) -> None:
        self.lease.checkpoint_payload = name


__all__ = ["HeldMessage"]
