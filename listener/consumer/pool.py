"""The listener's dequeue threads: how many run, which are leaving, and the most ever running.

Scaling in is cooperative: a thread leaves only between messages, never in the middle of one, so
no fetched message is abandoned (unstarted ones wait in the listener's hand-off for the others).
"Active" counts threads that are running and not yet committed to leave, so a decision to shrink
shows in ``query_state()`` at once, and two threads deciding to stop at the same moment can never
take the pool below its floor.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable


class DequeuePool:
    """A thread-safe registry of dequeue threads with graceful scale-in."""

    def __init__(self, name_prefix: str) -> None:
        self._name_prefix = name_prefix
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._leaving: set[threading.Thread] = set()
        self._scale_in_requests = 0
        self._numbers = itertools.count(1)
        self.peak = 0

    def start(self, count: int, target: Callable[[], None]) -> int:
        """Start ``count`` threads running ``target``; return the active count afterwards."""
        with self._lock:
            for _ in range(count):
                thread = threading.Thread(
                    target=target, name=f"{self._name_prefix}:{next(self._numbers)}", daemon=True
                )
                self._threads.add(thread)
                thread.start()
            active = self._active()
            self.peak = max(self.peak, active)
            return active

    @property
    def active(self) -> int:
        """Threads running and not committed to leave."""
        with self._lock:
            return self._active()

    def _active(self) -> int:
        return len(self._threads) - len(self._leaving) - self._scale_in_requests

    def threads(self) -> list[threading.Thread]:
        with self._lock:
            return list(self._threads)

    def reserve_stop(self, floor: int) -> bool:
        """Let the calling thread leave if more than ``floor`` threads would still be active."""
        with self._lock:
            if self._active() <= floor:
                return False
            self._leaving.add(threading.current_thread())
            return True

    def request_scale_in(self, count: int, *, floor: int) -> int:
        """Ask ``count`` threads to leave after their current message; return how many will."""
        with self._lock:
            granted = max(0, min(count, self._active() - floor))
            self._scale_in_requests += granted
            return granted

    def take_scale_in_request(self) -> bool:
        """Called by a thread between messages: True means it should leave now."""
        if self._scale_in_requests == 0:
            # Unlocked read first: this runs once per message, and a lock taken by every thread
            # that often stalls fast handlers. A request seen one message late costs nothing.
            return False
        with self._lock:
            if self._scale_in_requests == 0:
                return False
            self._scale_in_requests -= 1
            self._leaving.add(threading.current_thread())
            return True

    def retire_current(self) -> int:
        """Remove the calling thread; return the number of threads still registered."""
        current = threading.current_thread()
        with self._lock:
            self._threads.discard(current)
            self._leaving.discard(current)
            return len(self._threads)

    def __repr__(self) -> str:
        with self._lock:
            return (
                f"DequeuePool(threads={len(self._threads)}, leaving={len(self._leaving)}, "
                f"scale_in_requests={self._scale_in_requests}, peak={self.peak})"
            )
