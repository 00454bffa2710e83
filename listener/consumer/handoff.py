"""Fetched messages waiting for a thread: shared by all dequeue threads of one listener.

A thread that finds the hand-off empty fetches a batch (up to 32: one storage transaction) and
puts it here; every thread of the listener then takes its next message from here before it fetches
again. So one get feeds the whole pool, and no thread sits on a batch of slow messages while its
neighbours are idle. Waiting messages keep their leases (the ``LeaseKeeper`` renews them); when
the listener stops, or its last thread leaves, the remaining ones are released to the queue.

How many to fetch (``fetch_size``): the configured batch, but no more than the pool can start
within half a visibility timeout at the measured rate. Fast handlers always get full batches
(fewest transactions); a handler taking seconds gets small ones, so one worker does not hide
messages that other workers -- or, without renewal, a redelivery -- could take sooner.
"""

from __future__ import annotations

import math
from collections import deque

from cloudqueue.listener.consumer.leases import Lease

FETCH_HORIZON_FRACTION = 0.5
"""Fetch no more than the pool can start within this fraction of the visibility timeout."""


class HandOff:
    """A thread-safe FIFO of leased messages nobody has started yet."""

    def __init__(self) -> None:
        # deque's append and popleft are atomic (documented as thread-safe): no lock needed.
        self._waiting: deque[Lease] = deque()

    def put(self, leases: list[Lease]) -> None:
        self._waiting.extend(leases)

    def put_first(self, lease: Lease) -> None:
        """Put ``lease`` before every waiting message (a deferred message that may go on now)."""
        self._waiting.appendleft(lease)

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


def fetch_size(
    *,
    batch_size: int,
    threads: int,
    per_thread_rate_per_s: float | None,
    visibility_timeout_s: float,
) -> int:
    """How many messages one get should ask for (1..batch_size); the full batch until measured."""
    if per_thread_rate_per_s is None:
        return batch_size
    horizon_s = visibility_timeout_s * FETCH_HORIZON_FRACTION
    startable = math.floor(max(1, threads) * per_thread_rate_per_s * horizon_s)
    return max(1, min(batch_size, startable))
