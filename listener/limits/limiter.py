"""The rate limiter seam, and the limiter that holds a limit across one process's threads."""

from __future__ import annotations

import threading
from typing import Protocol

from cloudqueue.listener.clock import EVENT_SLEEPER, SYSTEM_CLOCK, Clock, Sleeper
from cloudqueue.listener.policies.rate_limit import check_limit, default_burst, reserve


class RateLimiter(Protocol):
    """Lets messages through at no more than ``max_messages_per_s``."""

    @property
    def max_messages_per_s(self) -> float:
        """The limit (the scaler sizes the pool to it)."""

    def acquire(self, stop_event: threading.Event) -> float:
        """Wait for one message's turn, or until ``stop_event`` is set; return the seconds waited.

        The caller checks ``stop_event`` afterwards: when it is set the turn was not granted.
        """

    def close(self) -> None:
        """Release connections (the limiter is not used afterwards)."""


class LocalRateLimiter:
    """A token bucket shared by the threads of one process (thread-safe).

    The reservation is made under a lock and waited out after it, on the caller's stop event,
    so threads wait their turns in parallel and a stop ends every wait at once.
    """

    def __init__(
        self,
        max_messages_per_s: float,
        *,
        burst: int | None = None,
        clock: Clock = SYSTEM_CLOCK,
        sleeper: Sleeper = EVENT_SLEEPER,
    ) -> None:
        self.burst = default_burst(max_messages_per_s) if burst is None else burst
        check_limit(max_messages_per_s, self.burst)
        self._max_messages_per_s = max_messages_per_s
        self.clock = clock
        self.sleeper = sleeper
        self._tat_s: float | None = None
        self._lock = threading.Lock()

    @property
    def max_messages_per_s(self) -> float:
        return self._max_messages_per_s

    def reserve_s(self) -> float:
        """Take the next slot; return how long until it comes (no waiting here)."""
        with self._lock:
            reservation = reserve(
                self._tat_s,
                now_s=self.clock.monotonic(),
                max_messages_per_s=self._max_messages_per_s,
                burst=self.burst,
            )
            self._tat_s = reservation.tat_s
        return reservation.wait_s

    def acquire(self, stop_event: threading.Event) -> float:
        wait_s = self.reserve_s()
        if wait_s > 0:
            self.sleeper.wait(stop_event, wait_s)
        return wait_s

    def close(self) -> None:
        """Nothing to release."""

    def __repr__(self) -> str:
        return (
            f"LocalRateLimiter(max_messages_per_s={self._max_messages_per_s}, burst={self.burst})"
        )
