"""A daemon thread that does one thing every interval until it is closed.

It waits on an event through the injected ``Sleeper``, so closing is immediate and tests move it
along without real time. The push watchdog and the plain-queue watch are two of these.
"""

from __future__ import annotations

import threading
from typing import Self

from cloudqueue.listener.clock import EVENT_SLEEPER, Sleeper


class PeriodicThread:
    """Calls ``tick`` every ``interval_s`` (and once at start with ``tick_at_start``) on its own
    daemon thread, until ``close`` or until ``tick`` returns False."""

    def __init__(
        self,
        name: str,
        *,
        interval_s: float,
        sleeper: Sleeper = EVENT_SLEEPER,
        tick_at_start: bool = False,
    ) -> None:
        self.interval_s = interval_s
        self.sleeper = sleeper
        self._tick_at_start = tick_at_start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def tick(self) -> bool:
        """One round of the work; False ends the thread."""
        raise NotImplementedError

    def start(self) -> Self:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5)

    def _run(self) -> None:
        if self._tick_at_start and not self.tick():
            return
        while not self.sleeper.wait(self._stop, self.interval_s):
            if not self.tick():
                return
