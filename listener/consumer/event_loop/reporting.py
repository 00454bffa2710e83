"""A running handler's reports on the message it holds, on the event loop: progress and checkpoints.

The event-loop consumer's counterpart of ``reporting``, with the same text, size rule and
payload-store overflow (``message_notes``), and the same promises; only the writes differ, since
an ``async def`` handler must not stop the loop for a network call:

* ``progress(fraction, detail)`` is kept on the held message at once (the host publishes it with
  its live state) and written into the message's text with the next visibility renewal
  (``event_loop.leases``): no storage transaction of its own.
* ``save_checkpoint(state)`` checks the state at once (CheckpointError as on threads) and starts
  its write at once, in a task on the loop: one update-message call that also renews the
  visibility (after the payload store's put, on a worker thread, for a checkpoint too large for
  the message). It returns an awaitable: ``await envelope.save_checkpoint(state)`` returns once
  the checkpoint is stored, which is the threaded promise; a handler that does not await it goes
  on at once, and its message is not settled before the write has ended (a write that fails is
  logged, ``checkpoint_not_saved``). Saves are written in the order they were made. Called from
  a thread the handler started (``asyncio.to_thread``), it returns once stored, as on threads.
* a redelivery's checkpoint kept in the payload store is read on a worker thread before the
  handler starts (``load``), so ``checkpoint`` never reaches the store from the loop.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from cloudqueue.listener.clock import Clock
from cloudqueue.listener.consumer.event_loop.leases import AsyncLeases, HeldMessage
from cloudqueue.listener.consumer.handler_progress import HandlerProgress
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


class LoopNotes(MessageNotes):
    """The message a handler is handling on the event loop, as far as it may write to it."""

    def __init__(
        self,
        held: HeldMessage,
        leases: AsyncLeases,
        context: MessageContext[Any],
        payload_store: PayloadStore | None,
        clock: Clock,
    ) -> None:
        super().__init__(context, payload_store, clock)
        self.held, self.leases = held, leases
        self._loop = asyncio.get_running_loop()
        self.writing: asyncio.Task[None] | None = None
        """The last write started (the writes end in order): the settlement waits for it."""

    async def load(self) -> None:
        """Read a checkpoint kept in the payload store, on a worker thread (the store is sync);
        nothing for one in the message, or none."""
        if self.stored_checkpoint_name() is not None:
            self._checkpoint = await asyncio.to_thread(self._read_checkpoint)

    async def written(self) -> None:
        """Wait until the writes started have ended (a failed one was logged)."""
        if self.writing is not None:
            await asyncio.wait([self.writing])

    def save_checkpoint(self, state: object) -> CheckpointSaving:
        """Check ``state`` and start its write; awaiting the result returns once it is stored.
        From another thread than the loop's: returns once it is stored."""
        text = checkpoint_text(state)
        self._refuse_several_items()
        progress = self.held.progress
        content, stored = self._inline_content(text, progress), None
        if content is None:
            stored, content = self._stored_content(progress)
        if running_loop() is not self._loop:  # a thread the handler started: wait, as on threads
            write = asyncio.run_coroutine_threadsafe(
                self._started(text, content, stored), self._loop
            )
            write.result()
            return SAVED
        return Saving(self._start(text, content, stored))

    async def _started(self, text: str, content: str, stored: str | None) -> None:
        await self._start(text, content, stored)

    def _start(self, text: str, content: str, stored: str | None) -> asyncio.Task[None]:
        # The new text carries the last report: a report pending for the renewal is in it.
        self._content, self.held.pending_content = content, None
        write = self._loop.create_task(self._write(text, content, stored))
        write.add_done_callback(partial(log_unsaved, self))
        self.writing = write
        return write

    async def _write(self, text: str, content: str, stored: str | None) -> None:
        # Its first step takes the held message's lock (or queues for it, first come first
        # served): the writes are made in the order of the saves, and a renewal due meanwhile
        # waits for the write it comes after.
        put = None if stored is None else partial(self._put, stored, text)
        await self.leases.rewrite(self.held, content, put)
        self._checkpoint = parse_checkpoint(text)

    async def _put(self, name: str, text: str) -> None:
        """Store a checkpoint too large for the message, on a worker thread (the store is sync),
        before the message names it: no renewal writes the name first."""
        self.held.checkpoint_payload = name  # removed after the delete, even if half-done
        assert self.payload_store is not None  # else _stored_content refused it
        await asyncio.to_thread(self.payload_store.put, name, text.encode("utf-8"))

    def _keep_report(self, report: HandlerProgress, content: str | None) -> None:
        self.held.progress = report
        if content is not None:
            self.held.pending_content = content

    def _keep_payload_name(self, name: str) -> None:
        self.held.checkpoint_payload = name


__all__ = ["LoopNotes"]
