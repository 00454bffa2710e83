"""Handling marks kept alive while their handlers run.

When idempotent handling starts a message, the key's record says "being handled by this message"
until ``hold_s`` from then (``cloudqueue.listener.stores.key_records.begin``), so that another
process's message of the same key waits, and so that a mark whose holder died expires by itself. A
handler that runs longer than ``hold_s`` would lose its mark while still working, and a duplicate
from another process could start beside it. So, as long as a handler runs, its mark is pushed to
``hold_s`` from now once it is a third of ``hold_s`` old: one ledger change (on Azure one blob
write) per running handler every ``hold_s / 3``; none for the handlers that end sooner.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import structlog

from cloudqueue.listener.clock import EVENT_SLEEPER, SYSTEM_CLOCK, Clock, Sleeper
from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.periodic import PeriodicThread
from cloudqueue.listener.stores.key_records import KeyLedger, extend

log = structlog.get_logger(__name__)


@dataclass
class _Mark:
    queue: str
    key: str
    extended_at: float
    """When it was last set (monotonic seconds)."""


class HandlingMarks:
    """The marks of this process's running handlers, each extended every ``hold_s / 3`` by one
    thread that runs only while a handler holds a mark."""

    def __init__(
        self,
        ledger: KeyLedger,
        hold_s: float,
        *,
        clock: Clock = SYSTEM_CLOCK,
        sleeper: Sleeper = EVENT_SLEEPER,
    ) -> None:
        self.ledger = ledger
        self.hold_s = hold_s
        self.clock = clock
        self.sleeper = sleeper
        self._held: dict[str, _Mark] = {}
        self._lock = threading.Lock()
        self._keeper: _Keeper | None = None

    @contextmanager
    def held(self, queue: str, key: str, message_id: str) -> Iterator[None]:
        """While inside, ``message_id``'s mark of ``key`` (just set by ``begin``) is kept."""
        with self._lock:
            self._held[message_id] = _Mark(queue, key, self.clock.monotonic())
            if self._keeper is None:
                # A sixth of hold_s between looks: a mark is extended when a third old, at the
                # latest half of hold_s after it was set.
                self._keeper = _Keeper(self, self.hold_s / 6).start()
        try:
            yield
        finally:
            with self._lock:
                self._held.pop(message_id, None)

    def extend_due(self) -> bool:
        """Extend the marks a third of ``hold_s`` old; False (the keeper ends) when none is held."""
        now = self.clock.monotonic()
        with self._lock:
            if not self._held:
                self._keeper = None
                return False
            due = [
                (message_id, mark)
                for message_id, mark in self._held.items()
                if now - mark.extended_at >= self.hold_s / 3
            ]
        for message_id, mark in due:
            self._extend(message_id, mark, now)
        return True

    def _extend(self, message_id: str, mark: _Mark, now: float) -> None:
        try:
            kept = extend(
                self.ledger, mark.queue, mark.key, message_id=message_id, hold_s=self.hold_s
            )
        except StorageError as failure:  # tried again at the next look
            log.warning("key_mark_not_extended", message_id=message_id, error=str(failure))
            return
        mark.extended_at = now
        with self._lock:
            running = message_id in self._held  # else it ended meanwhile, and its mark with it
        if not kept and running:
            log.warning("key_mark_lost", message_id=message_id, key=mark.key)

    def __repr__(self) -> str:
        return f"HandlingMarks(hold_s={self.hold_s}, held={len(self._held)})"


class _Keeper(PeriodicThread):
    def __init__(self, marks: HandlingMarks, interval_s: float) -> None:
        super().__init__("cloudqueue:key-marks", interval_s=interval_s, sleeper=marks.sleeper)
        self.marks = marks

    def tick(self) -> bool:
        return self.marks.extend_due()


__all__ = ["HandlingMarks"]
