"""How fast one dequeue thread gets through messages, measured as the listener runs.

Each sample is a stretch of one thread's work: the messages it completed and the seconds it spent,
its gets included and its idle waits not (``cloudqueue.listener.consumer.dequeue.STRETCH_S`` long,
or one message when handling is slower). An exponentially weighted mean of the seconds per message
smooths the samples -- averaging seconds, not rates, so a slow stretch counts for what it cost --
and the estimate follows a handler that slows down or speeds up within a few samples. The
``drain_time`` scaling rule turns it into a thread count (Little's law).
"""

from __future__ import annotations

import threading

DEFAULT_SMOOTHING = 0.2
"""Weight of the newest sample: about the last ten samples shape the estimate."""


class ThroughputMeter:
    """A thread-safe, smoothed messages-per-second-per-thread estimate."""

    def __init__(self, *, smoothing: float = DEFAULT_SMOOTHING) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError("smoothing must be in (0, 1]")
        self._smoothing = smoothing
        self._seconds_per_message: float | None = None
        self._lock = threading.Lock()

    def record(self, messages: int, elapsed_s: float) -> None:
        """Add a sample: ``messages`` completed in ``elapsed_s`` seconds by one thread."""
        if messages <= 0 or elapsed_s <= 0:
            return
        sample = elapsed_s / messages
        with self._lock:
            if self._seconds_per_message is None:
                self._seconds_per_message = sample
            else:
                self._seconds_per_message += self._smoothing * (sample - self._seconds_per_message)

    @property
    def seconds_per_message(self) -> float | None:
        """The smoothed seconds per message; None before the first sample."""
        with self._lock:
            return self._seconds_per_message

    @property
    def per_thread_rate_per_s(self) -> float | None:
        """Messages per second one thread completes; None before the first message."""
        with self._lock:
            seconds = self._seconds_per_message
        return None if seconds is None else 1.0 / seconds

    def __repr__(self) -> str:
        return f"ThroughputMeter(rate={self.per_thread_rate_per_s})"
