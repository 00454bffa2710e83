"""How fast one dequeue thread gets through messages, measured as the listener runs.

Each processed batch is a sample: messages completed divided by the seconds from the get to the
end of the batch (the thread's full cycle, storage calls included). An exponentially weighted
mean smooths the samples, so the estimate follows a handler that slows down or speeds up within
a few batches. The ``drain_time`` scaling rule turns it into a thread count (Little's law).
"""

from __future__ import annotations

import threading

DEFAULT_SMOOTHING = 0.2
"""Weight of the newest sample: about the last ten batches shape the estimate."""


class ThroughputMeter:
    """A thread-safe, smoothed messages-per-second-per-thread estimate."""

    def __init__(self, *, smoothing: float = DEFAULT_SMOOTHING) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError("smoothing must be in (0, 1]")
        self._smoothing = smoothing
        self._rate: float | None = None
        self._lock = threading.Lock()

    def record(self, messages: int, elapsed_s: float) -> None:
        """Add one batch: ``messages`` completed in ``elapsed_s`` seconds by one thread."""
        if messages <= 0 or elapsed_s <= 0:
            return
        sample = messages / elapsed_s
        with self._lock:
            if self._rate is None:
                self._rate = sample
            else:
                self._rate += self._smoothing * (sample - self._rate)

    @property
    def per_thread_rate_per_s(self) -> float | None:
        """Messages per second one thread completes; None before the first batch."""
        with self._lock:
            return self._rate

    def __repr__(self) -> str:
        return f"ThroughputMeter(rate={self._rate})"
