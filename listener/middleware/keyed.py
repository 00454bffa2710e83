"""Idempotent handling and cancelling by key, as a middleware on the key ledger.

For a message with a key (``MessageContext.key``), before its handler runs, one atomic change of
the key's record in the queue's own store (``cloudqueue.listener.stores.key_records.begin``) says:

* ``cancelled``: the key was cancelled (``cloudqueue cancel``, ``Publisher.cancel``): the message
  is deleted unhandled, logged ``cancelled`` and counted;
* ``duplicate`` (idempotency on, ``window_s`` > 0): the key completed within the window: deleted
  unhandled, logged ``duplicate_skipped`` and counted;
* ``busy`` (idempotency on): another message of the key is being handled, in another process:
  deferred (``key_busy``) and tried again shortly. Within this process the messages of one key
  are taken one at a time, so a duplicate waits for the first and is then skipped;
* else the record marks the key as being handled by this message (so a cancel now is reported
  ``too_late``), and the handler runs.

When the handler returned, its completion is recorded -- before the message is deleted -- for
``window_s``; a cancel that came while it ran is logged ``cancel_too_late``. A crash after that
record leaves a message whose key is done: its next delivery is skipped. A crash inside the
handler, or between its return and the record, runs it once more.

If the store cannot be reached before the handler (``key_ledger_unavailable``), idempotency
retries the message later; with only the cancel check on, the message is handled unchecked
rather than held back for a cancel that may not exist. After the handler, the completion is then
not recorded (``key_completion_not_recorded``) and the message is deleted anyway.
"""

from __future__ import annotations

from typing import Any

import structlog

from cloudqueue.listener.clock import EVENT_SLEEPER, SYSTEM_CLOCK, Clock, Sleeper
from cloudqueue.listener.consumer.middleware import CallNext, MessageContext, Middleware, Resume
from cloudqueue.listener.consumer.wrapping import Wrapper
from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.limits.key_gate import LocalKeyGate
from cloudqueue.listener.middleware.decisions import Count, Decisions
from cloudqueue.listener.middleware.handling_marks import HandlingMarks
from cloudqueue.listener.stores.key_records import KeyLedger, begin, finish

log = structlog.get_logger(__name__)

BUSY_RETRY_S = 1.0
"""How soon a message whose key another process handles tries again."""

UNAVAILABLE_RETRY_S = 5
"""How soon a message is tried again when the key ledger could not be read."""


class KeyedHandling(Middleware):
    """Skips cancelled keys and (with ``window_s`` > 0) keys completed within the window."""

    def __init__(
        self,
        ledger: KeyLedger,
        *,
        window_s: float = 0.0,
        hold_s: float = 60.0,
        count: Count | None = None,
        clock: Clock = SYSTEM_CLOCK,
        sleeper: Sleeper = EVENT_SLEEPER,
    ) -> None:
        """``hold_s``: how long a handling mark lasts if its holder dies; while its handler
        runs, the mark is extended (``cloudqueue.listener.middleware.handling_marks``)."""
        if window_s < 0 or hold_s <= 0:
            raise ValueError(f"window_s must be >= 0 and hold_s > 0, got {window_s}, {hold_s}")
        self.ledger = ledger
        self.window_s = window_s
        self.hold_s = hold_s
        self.decisions = Decisions(count)
        self._one_at_a_time = LocalKeyGate(1) if window_s else None
        self.marks = HandlingMarks(ledger, hold_s, clock=clock, sleeper=sleeper)

    def blocks(self, context: MessageContext[Any]) -> bool:
        """A keyed message's ledger calls may wait: on an event loop its steps run on a worker
        thread; a message without a key costs no hop (``cloudqueue.listener.consumer
        .event_loop.stack``): with cancel checks on by default, every hosted worker has this."""
        return context.key is not None and context.deliverable

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> Wrapper:
        """A generator: ``yield`` for ``call_next()`` (``consumer.wrapping``)."""
        key, gate = context.key, self._one_at_a_time
        if key is None or not context.deliverable:
            if gate is not None and not context.deliverable:
                gate.abandon(context.message_id)
            yield
            return
        if gate is None:
            yield from self._handle(context, key)
            return

        def defer(resume_after_s: float | None) -> Resume:
            return context.defer("key_busy", resume_after_s=resume_after_s)

        if not gate.enter(key, context.message_id, defer):
            self._decided("key_busy", context, key)
            return
        try:
            yield from self._handle(context, key)
        finally:
            gate.leave(key, context.message_id)

    def _handle(self, context: MessageContext[Any], key: str) -> Wrapper:
        queue, message_id = context.queue_name, context.message_id
        try:
            begun = begin(
                self.ledger,
                queue,
                key,
                message_id=message_id,
                hold_s=self.hold_s,
                dedupe=bool(self.window_s),
            )
        except StorageError as failure:
            log.warning("key_ledger_unavailable", message_id=message_id, error=str(failure))
            if self.window_s:  # without the record a duplicate cannot be told: later
                context.retry(
                    "key_ledger_unavailable", delay_s=UNAVAILABLE_RETRY_S, error=str(failure)
                )
            else:  # a cancel check only: the work goes on unchecked rather than wait
                yield
            return
        if begun == "cancelled":
            self._decided("cancelled", context, key)
            context.skip("cancelled")
        elif begun == "duplicate":
            self._decided("duplicate_skipped", context, key)
            context.skip("duplicate")
        elif begun == "busy":
            self._decided("key_busy", context, key)
            context.defer("key_busy", resume_after_s=BUSY_RETRY_S)
        else:
            with self.marks.held(queue, key, message_id):
                yield
            self._finish(context, key)

    def _finish(self, context: MessageContext[Any], key: str) -> None:
        """Record the completion (before settlement deletes the message) and end the mark."""
        completed = (
            context.handled
            and not context.failures
            and context.decision is None
            and context.middleware_error is None
        )
        try:
            too_late = finish(
                self.ledger,
                context.queue_name,
                key,
                message_id=context.message_id,
                done_s=self.window_s if completed else None,
            )
        except StorageError as failure:
            log.warning(
                "key_completion_not_recorded", message_id=context.message_id, error=str(failure)
            )
            return
        if too_late:
            self._decided("cancel_too_late", context, key)

    def _decided(self, decision: str, context: MessageContext[Any], key: str) -> None:
        self.decisions.add(decision)
        log.info(decision, message_id=context.message_id, key=key)

    def __repr__(self) -> str:
        return f"KeyedHandling(window_s={self.window_s}, decisions={self.decisions.snapshot()})"


__all__ = ["KeyedHandling"]
