"""Fetched messages waiting for a thread: shared by all dequeue threads of one listener.

A thread that finds the hand-off empty fetches a batch (up to 32: one storage transaction) and
puts it here; every thread of the listener then takes its next message from here before it fetches
again. So one get feeds the whole pool, and no thread sits on a batch of slow messages while its
neighbours are idle. Waiting messages keep their leases (the ``LeaseKeeper`` renews them); when
the listener stops, or its last thread leaves, the remaining ones are released to the queue.
"""

from __future__ import annotations

from collections import deque

from listener.leases import Lease


class HandOff:
    """A thread-safe FIFO of leased messages nobody has started yet."""

    def __init__(self) -> None:
        # deque's append and popleft are atomic (documented as thread-safe): no lock needed.
        self._waiting: deque[Lease] = deque()

    def put(self, leases: list[Lease]) -> None:
        self._waiting.extend(leases)

    def take(self) -> Lease | None:
        """The oldest waiting message, or None when there is none."""
        try:
            return self._waiting.popleft()
        except IndexError:
            return None

    def take_all(self) -> list[Lease]:
        taken: list[Lease] = []
        while (lease := self.take()) is not None:
            taken.append(lease)
        return taken

    def __len__(self) -> int:
        return len(self._waiting)

    def __repr__(self) -> str:
        return f"HandOff(waiting={len(self._waiting)})"
