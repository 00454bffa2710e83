"""At most N messages of one key handled at a time: the ``KeyGate`` seam, and the gate of one
process.

A message whose key is full does not wait on a thread: the gate *defers* it (``defer``, the
listener's ``MessageContext.defer``), so it holds no handler slot while its lease keeps it hidden,
and the messages of other keys go on. When a message of that key leaves, the gate passes its
permit straight to the oldest waiter and resumes it: a resumed message never finds its key taken
by a newcomer, so no waiter starves.

A permit passed to a waiter that never comes back (released to the queue when the listener
stopped) would be lost; it is kept for ``RESERVATION_S`` only, and the message -- whose id does
not change when it is delivered again -- finds it if it comes back within that time.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Protocol

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock

Resume = Callable[[], None]
Defer = Callable[[float | None], Resume]
"""Defers the message asking to enter: resumed when the returned function is called, or after
the given seconds (None: only when called)."""

RESERVATION_S = 60.0
"""How long a permit passed to a resumed waiter is kept for it."""


class KeyGate(Protocol):
    """Lets at most ``limit`` holders in per key."""

    def enter(self, key: str, holder: str, defer: Defer) -> bool:
        """True: ``holder`` (a message id) may go on, and must ``leave`` after. False: the key
        is full and the message was deferred (``defer`` called); it comes back later."""

    def leave(self, key: str, holder: str) -> None:
        """``holder`` is done with ``key``: its permit goes to a waiter, or back."""

    def abandon(self, holder: str) -> None:
        """``holder`` will not use a permit passed to it (its message cannot be handled)."""

    def close(self) -> None:
        """Release connections and threads."""


class LocalKeyGate:
    """The limit per key within one process (thread-safe)."""

    def __init__(self, limit: int, *, clock: Clock = SYSTEM_CLOCK) -> None:
        if limit < 1:
            raise ValueError(f"a per-key limit must be >= 1, got {limit}")
        self.limit = limit
        self._clock = clock
        self._held: dict[str, int] = {}
        self._waiting: dict[str, deque[tuple[str, Resume]]] = {}
        self._reserved: dict[str, tuple[str, float]] = {}
        """Permits passed to resumed waiters: holder -> (key, until)."""
        self._lock = threading.Lock()

    def enter(self, key: str, holder: str, defer: Defer) -> bool:
        with self._lock:
            reserved = self._reserved.pop(holder, None)
            if reserved is not None and reserved[0] == key:
                return True
            if reserved is not None:  # a permit of another key (a changed item): give it back
                self._free(reserved[0])
            if self._held.get(key, 0) >= self.limit:
                self._drop_stale(key)
            if self._held.get(key, 0) < self.limit:
                self._held[key] = self._held.get(key, 0) + 1
                return True
            self._waiting.setdefault(key, deque()).append((holder, defer(None)))
            return False

    def leave(self, key: str, holder: str) -> None:
        with self._lock:
            resume = self._pass_on(key)
        if resume is not None:
            resume()

    def abandon(self, holder: str) -> None:
        with self._lock:
            if not self._reserved:  # the usual answer, without a dict lookup under contention
                return
            reserved = self._reserved.pop(holder, None)
            resume = None if reserved is None else self._pass_on(reserved[0])
        if resume is not None:
            resume()

    def close(self) -> None:
        """Nothing to release."""

    @property
    def held(self) -> dict[str, int]:
        """Permits in use per key (waiters' reserved permits included)."""
        with self._lock:
            return dict(self._held)

    def _pass_on(self, key: str) -> Resume | None:
        """A leaving permit: to the oldest waiter (whose resume is returned), or back."""
        waiting = self._waiting.get(key)
        if not waiting:
            self._free(key)
            return None
        holder, resume = waiting.popleft()
        if not waiting:
            del self._waiting[key]
        self._reserved[holder] = (key, self._clock.monotonic() + RESERVATION_S)
        return resume

    def _free(self, key: str) -> None:
        left = self._held.get(key, 0) - 1
        if left > 0:
            self._held[key] = left
        else:
            self._held.pop(key, None)

    def _drop_stale(self, key: str) -> None:
        """Give back the permits of ``key`` whose waiters did not come back in time."""
        now = self._clock.monotonic()
        stale = [h for h, (k, until) in self._reserved.items() if k == key and until <= now]
        for holder in stale:
            del self._reserved[holder]
            self._free(key)

    def __repr__(self) -> str:
        return f"LocalKeyGate(limit={self.limit}, keys={len(self._held)})"


__all__ = ["RESERVATION_S", "Defer", "KeyGate", "LocalKeyGate", "Resume"]
