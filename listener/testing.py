"""Helpers for testing code built on cloudqueue without real time or a real queue service.

Two injectable clocks, each both a ``Clock`` and a ``Sleeper``:

* ``VirtualClock`` moves only when told to. A dequeue thread that waits on it blocks until virtual
  time reaches the end of its wait (or its stop event is set); ``advance_when_all_waiting`` moves
  time to the next wake-up only once every dequeue thread is waiting, so a test never races ahead
  of work in progress. ``cloudqueue.workers.testing.run_until_drained`` drives it.
* ``ManualClock`` advances time by every wait instead of blocking: the simplest fake for tests
  that count waits, but an idle poller on it moves virtual time forward as fast as it can loop.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

START = datetime(2026, 1, 1, tzinfo=UTC)

STOP_POLL_S = 0.002
"""How often (real seconds) a virtual wait looks at its stop event: an Event cannot notify a
Condition, so stop reaches a waiting thread within this much real time."""


class ManualClock:
    """A clock that moves only when told to; waits advance it instead of blocking."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or START
        self._monotonic = 1_000.0
        self._lock = threading.Lock()
        self.waits: list[float] = []

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._monotonic

    def advance(self, seconds: float) -> None:
        """Move both clocks forward."""
        with self._lock:
            self._now += timedelta(seconds=seconds)
            self._monotonic += seconds

    def wait(self, stop_event: threading.Event, delay_s: float) -> bool:
        """Record the wait, advance time by it, and yield the thread without blocking."""
        with self._lock:
            self.waits.append(delay_s)
        self.advance(delay_s)
        # A zero-timeout wait yields the GIL so other threads progress between simulated sleeps.
        return stop_event.wait(0)

    def __repr__(self) -> str:
        return f"ManualClock(now={self._now.isoformat()}, waits={len(self.waits)})"


class VirtualClock:
    """Virtual time that waiting threads cannot move: only ``advance`` and its variants do."""

    def __init__(self, start: datetime | None = None) -> None:
        self._start = start or START
        self._elapsed_s = 0.0
        self._changed = threading.Condition(threading.RLock())
        # One entry per thread in ``wait``: the virtual time (elapsed seconds) it wakes at.
        self._wake_ups: dict[int, float] = {}
        self.waits: list[float] = []

    # -- Clock ---------------------------------------------------------------------------------

    def now(self) -> datetime:
        with self._changed:
            return self._start + timedelta(seconds=self._elapsed_s)

    def monotonic(self) -> float:
        with self._changed:
            return 1_000.0 + self._elapsed_s

    # -- Sleeper -------------------------------------------------------------------------------

    def wait(self, stop_event: threading.Event, delay_s: float) -> bool:
        """Block until virtual time has moved ``delay_s`` on, or the stop event is set."""
        if delay_s <= 0:
            return stop_event.is_set()
        key = threading.get_ident()
        with self._changed:
            self.waits.append(delay_s)
            self._wake_ups[key] = self._elapsed_s + delay_s
            self._changed.notify_all()
            # The advancing thread removes the entry when time reaches it, so the count of
            # waiting threads drops the moment time moves, before this thread even runs again.
            while key in self._wake_ups and not stop_event.is_set():
                self._changed.wait(STOP_POLL_S)
            self._wake_ups.pop(key, None)
            self._changed.notify_all()
        return stop_event.is_set()

    @contextlib.contextmanager
    def watching(self, delay_s: float | None) -> Iterator[Callable[[], bool]]:
        """Count the calling thread as waiting until virtual time has moved ``delay_s`` on (None:
        for as long as it stays inside), while it watches something else meanwhile -- an event
        loop its I/O (``cloudqueue.listener.virtual_loop``). Yields whether that time has come."""
        key = threading.get_ident()
        with self._changed:
            self._wake_ups[key] = math.inf if delay_s is None else self._elapsed_s + delay_s
            self._changed.notify_all()

        def ended() -> bool:
            with self._changed:
                return key not in self._wake_ups

        try:
            yield ended
        finally:
            with self._changed:
                self._wake_ups.pop(key, None)
                self._changed.notify_all()

    # -- moving time ---------------------------------------------------------------------------

    @property
    def waiting(self) -> int:
        """How many threads are waiting on this clock now."""
        with self._changed:
            return len(self._wake_ups)

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every thread whose wait has ended."""
        if seconds < 0:
            raise ValueError(f"time cannot go back; got {seconds} s")
        with self._changed:
            self._elapsed_s += seconds
            self._release_due()

    def advance_to_next_wake_up(self) -> float:
        """Move time to the end of the earliest wait; return how far it moved (0 if none)."""
        with self._changed:
            earliest = min(self._wake_ups.values(), default=math.inf)
            if earliest == math.inf:  # nobody, or only threads waiting without an end
                return 0.0
            step_s = max(0.0, earliest - self._elapsed_s)
            self._elapsed_s += step_s
            self._release_due()
            return step_s

    def all_waiting(self, threads: Callable[[], int], *, timeout_s: float = 0.05) -> bool:
        """Whether ``threads()`` threads (at least one) are all waiting, within ``timeout_s``.

        ``threads`` counts the threads that must be waiting, e.g. a listener's ``threads_alive``.
        Every thread waiting on this clock counts, so give each listener a clock of its own.
        Blocks (in real time) up to ``timeout_s`` for them to get there; False when they did not
        (someone is still working, or no thread runs at all).
        """
        with self._changed:
            return self._changed.wait_for(
                lambda: 0 < threads() <= len(self._wake_ups), timeout=timeout_s
            )

    def advance_when_all_waiting(
        self, threads: Callable[[], int], *, timeout_s: float = 0.05
    ) -> bool:
        """Move time to the next wake-up once ``threads()`` threads all wait (see
        ``all_waiting``); return False, leaving time alone, if they did not within ``timeout_s``.
        """
        with self._changed:
            if not self.all_waiting(threads, timeout_s=timeout_s):
                return False
            self.advance_to_next_wake_up()
            return True

    def wait_for_change(self, timeout_s: float) -> None:
        """Block (in real time) until a thread starts or ends a wait, or ``timeout_s`` passes."""
        with self._changed:
            self._changed.wait(timeout_s)

    def _release_due(self) -> None:
        """Wake the waits that have ended; the caller holds the condition."""
        for key in [key for key, until in self._wake_ups.items() if until <= self._elapsed_s]:
            del self._wake_ups[key]
        self._changed.notify_all()

    def __repr__(self) -> str:
        return (
            f"VirtualClock(now={self.now().isoformat()}, waiting={self.waiting}, "
            f"waits={len(self.waits)})"
        )


__all__ = ["ManualClock", "VirtualClock"]
