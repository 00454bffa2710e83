"""``ResultHandle``: what ``send`` returns, to wait for the handler's stored result.

Waiting reads the result store, and how often is the cost (Azure bills each read):

* without push triggers, after 0.1 s, then twice as long each time up to every 5 s
  (``FIRST_POLL_S`` .. ``LAST_POLL_S``, as ``GroupHandle.wait``): about 7 reads in the first
  6 s, then one per 5 s -- not one per 0.2 s (Taskiq), which is 432,000 reads a day;
* with push triggers (``ResultSignals``), it subscribes, reads once (the result may be there
  already), and then reads only when the worker announces the key: 0 reads while it waits, 1 for
  the value. A slow check every ``PUSH_CHECK_S`` stands in for a lost trigger.

A handle that is never asked costs nothing: the store is opened by the first ``result`` call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from cloudqueue.listener.clock import EVENT_SLEEPER, SYSTEM_CLOCK, Clock, Sleeper
from cloudqueue.listener.workflows.result_signals import ResultSignals
from cloudqueue.listener.workflows.result_store import ResultStore
from cloudqueue.listener.workflows.result_values import decode_result
from cloudqueue.listener.workflows.sending import FIRST_POLL_S, LAST_POLL_S

PUSH_CHECK_S = 30.0
"""With push triggers, the store is read this often anyway: a trigger is never the only path."""


class ResultHandle:
    """A sent message's ``key`` and ``result(timeout_s)``, its handler's stored return value."""

    def __init__(
        self,
        key: str | None,
        open_store: Callable[[], ResultStore],
        *,
        as_type: object = None,
        signals: ResultSignals | None = None,
        clock: Clock = SYSTEM_CLOCK,
        sleeper: Sleeper = EVENT_SLEEPER,
        refusal: str | None = None,
    ) -> None:
        """``as_type``: what the result decodes as (a pydantic model; else JSON values).
        ``refusal``: why this message can have no result (``result`` raises it)."""
        self.key = key
        self._open_store = open_store
        self.as_type = as_type
        self.signals = signals
        self.clock = clock
        self.sleeper = sleeper
        self.refusal = refusal
        self._store: ResultStore | None = None

    def result(self, timeout_s: float) -> Any:
        """The handler's return value, once stored: waits up to ``timeout_s`` for it, then
        raises ``TimeoutError`` naming the key."""
        if self.refusal is not None or self.key is None:
            raise ValueError(self.refusal or "this message was sent without a key: no result")
        if self._store is None:
            self._store = self._open_store()
        key, store = self.key, self._store
        deadline = self.clock.monotonic() + timeout_s
        stored = threading.Event()
        subscription = None if self.signals is None else self.signals.subscribe(key, stored)
        try:
            text = self._wait(store, key, stored, deadline, pushed=subscription is not None)
        finally:
            if subscription is not None:
                subscription.dispose()
        if text is None:
            raise TimeoutError(f"no result for key {key!r} after {timeout_s:g} s")
        return decode_result(text, self.as_type)

    def _wait(
        self,
        store: ResultStore,
        key: str,
        stored: threading.Event,
        deadline: float,
        *,
        pushed: bool,
    ) -> str | None:
        """The stored text, or None at the deadline; reads as the module docstring says."""
        pause_s = FIRST_POLL_S
        while True:
            stored.clear()  # before the read: an announcement during it wakes the next wait
            text = store.get(key)
            left = deadline - self.clock.monotonic()
            if text is not None or left <= 0:
                return text
            self.sleeper.wait(stored, min(PUSH_CHECK_S if pushed else pause_s, left))
            pause_s = min(pause_s * 2, LAST_POLL_S)

    def __repr__(self) -> str:
        return f"ResultHandle({self.key!r})"


__all__ = ["PUSH_CHECK_S", "ResultHandle"]
