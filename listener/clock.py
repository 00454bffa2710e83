"""Time as the listener sees it, injectable so that tests never wait for real.

``Clock`` tells wall time (for message envelopes, visibility and TTL in the embedded stores) and
monotonic time (for intervals and deadlines). ``Sleeper`` is how a dequeue thread waits: it must
return early when the stop event is set, so that stop is immediate.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """A source of time."""

    def now(self) -> datetime:
        """The current wall time, timezone-aware UTC."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back, for measuring intervals."""


class Sleeper(Protocol):
    """Waits for a while, or until stop is requested."""

    def wait(self, stop_event: threading.Event, delay_s: float) -> bool:
        """Wait up to ``delay_s``; return True when the stop event was set."""


class SystemClock:
    """The machine's clocks."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class EventSleeper:
    """Sleeps on the stop event, so a stop request ends the wait at once."""

    def wait(self, stop_event: threading.Event, delay_s: float) -> bool:
        return stop_event.wait(max(0.0, delay_s))


SYSTEM_CLOCK = SystemClock()
EVENT_SLEEPER = EventSleeper()
