"""Virtual time: the clock the real scaler reads, and the queue of what happens next.

Events run in time order; at one instant, in the order of their kinds (puts first, charts
last), and within a kind in the order they were scheduled.
"""

from __future__ import annotations

import heapq
import itertools
from datetime import datetime, timedelta
from typing import Any

from cloudqueue.listener.testing import START

ARRIVAL, THREAD, SAMPLE, WATCHDOG = 0, 1, 2, 3
"""Event kinds, in the order they run at one instant: puts first, charts last."""


class SimClock:
    """The scaler's clock: virtual seconds from the start."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def monotonic(self) -> float:
        return 1_000.0 + self.now_s

    def now(self) -> datetime:
        return START + timedelta(seconds=self.now_s)


class EventQueue:
    """Scheduled events, earliest first."""

    def __init__(self) -> None:
        self._events: list[tuple[float, int, int, Any]] = []
        self._sequence = itertools.count()

    def schedule(self, at_s: float, kind: int, payload: Any) -> None:
        heapq.heappush(self._events, (at_s, kind, next(self._sequence), payload))

    def pop_before(self, end_s: float) -> tuple[float, int, Any] | None:
        """The next event if it happens before ``end_s`` (None: nothing more before the end)."""
        if not self._events or self._events[0][0] >= end_s:
            return None
        at_s, kind, _, payload = heapq.heappop(self._events)
        return at_s, kind, payload
