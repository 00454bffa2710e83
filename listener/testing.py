"""Helpers for testing code built on cloudqueue without real time or a real queue service.

``ManualClock`` is both a ``Clock`` and a ``Sleeper``: time moves only when a test advances it or
when a dequeue thread "sleeps" on it, so back-off, visibility timeouts and TTLs play out instantly.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta


class ManualClock:
    """A clock that moves only when told to; waits advance it instead of blocking."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
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
