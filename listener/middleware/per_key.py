"""Per-key concurrency as a middleware: at most N messages of one key handled at a time.

The key is the worker's ``concurrency_key(item)`` where it has one, else the message's key
(``MessageContext.key``); a message without one is not limited. A message whose key is full is
deferred (``key_busy``, logged once per message and counted each time): it gives up its handler
slot, keeps its visibility (its lease is renewed), and comes back when a permit frees
(``cloudqueue.listener.limits.key_gate``: in this process, or across the fleet through Redis). Other
keys flow meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from cloudqueue.listener.consumer.events import ListenerStopped
from cloudqueue.listener.consumer.middleware import CallNext, MessageContext, Middleware
from cloudqueue.listener.limits.key_gate import KeyGate, Resume
from cloudqueue.listener.middleware.decisions import Count, Decisions
from cloudqueue.listener.wire.keys import key_text

log = structlog.get_logger(__name__)

MAX_REMEMBERED = 10_000

ConcurrencyKey = Callable[[Any], object]
"""The worker's ``concurrency_key(item)``: None for an item without one."""


class PerKeyLimit(Middleware):
    """Holds the messages of each key to the gate's limit."""

    def __init__(
        self,
        gate: KeyGate,
        *,
        concurrency_key: ConcurrencyKey | None = None,
        count: Count | None = None,
    ) -> None:
        self.gate = gate
        self.concurrency_key = concurrency_key
        self.decisions = Decisions(count)
        self._waited: set[str] = set()
        """Messages that waited already: logged at info once each (set operations are atomic)."""

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> None:
        if not context.deliverable:
            self.gate.abandon(context.message_id)  # a permit passed to it is not used
            call_next()
            return
        key = self._key(context)
        if key is None:
            call_next()
            return
        holder = context.message_id

        def defer(resume_after_s: float | None) -> Resume:
            return context.defer("key_busy", resume_after_s=resume_after_s)

        if not self.gate.enter(key, holder, defer):
            self.decisions.add("key_busy")
            first_wait = holder not in self._waited
            if len(self._waited) >= MAX_REMEMBERED:
                self._waited.clear()  # only decides info or debug: forgetting is harmless
            self._waited.add(holder)
            (log.info if first_wait else log.debug)("key_busy", message_id=holder, key=key)
            return
        self._waited.discard(holder)
        try:
            call_next()
        finally:
            self.gate.leave(key, holder)

    def on_stop(self, event: ListenerStopped) -> None:
        self.gate.close()

    def _key(self, context: MessageContext[Any]) -> str | None:
        if self.concurrency_key is None:
            return context.key
        keys = {_text(self.concurrency_key(item)) for item in context.items}
        return keys.pop() if len(keys) == 1 else None

    def __repr__(self) -> str:
        return f"PerKeyLimit({self.gate!r})"


def _text(value: object) -> str | None:
    return None if value is None else key_text(value)


__all__ = ["PerKeyLimit"]
