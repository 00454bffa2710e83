"""A warning that hostile input can raise thousands of times a second, logged at most once a minute.

The first occurrence is logged at once; the ones after it are counted, and the next event -- no
sooner than ``interval_s`` after the previous one -- says how many came meanwhile (``count``).
Whoever records also calls ``flush`` now and then, so a burst that stops is still summarised.
"""

from __future__ import annotations

import threading
from typing import Any

import structlog

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock

log = structlog.get_logger(__name__)

DEFAULT_INTERVAL_S = 60.0


class ThrottledWarning:
    """One warning event, counted every time and logged at most once per ``interval_s``."""

    def __init__(
        self,
        event: str,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Clock = SYSTEM_CLOCK,
        logger: Any = None,
    ) -> None:
        self.event = event
        self.interval_s = interval_s
        self.clock = clock
        self.total = 0
        """Every occurrence so far, logged or not."""
        self._log = log if logger is None else logger
        self._lock = threading.Lock()
        self._pending = 0
        self._fields: dict[str, Any] = {}
        self._logged_at: float | None = None

    def record(self, **fields: Any) -> None:
        """Count one occurrence; log it (with the ones before it) when a log is due."""
        with self._lock:
            self.total += 1
            self._pending += 1
            self._fields = fields  # the latest occurrence speaks for the summary
        self.flush()

    def flush(self) -> None:
        """Log what was counted since the last event, if there is any and the interval is over."""
        with self._lock:
            now = self.clock.monotonic()
            due = self._logged_at is None or now - self._logged_at >= self.interval_s
            if not (due and self._pending):
                return
            count, self._pending, self._logged_at = self._pending, 0, now
            fields = self._fields
        self._log.warning(self.event, count=count, total=self.total, **fields)

    def __repr__(self) -> str:
        return f"ThrottledWarning({self.event!r}, total={self.total}, pending={self._pending})"
