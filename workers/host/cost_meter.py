"""The live cost meter: each queue's storage transactions per hour, and the month they project to.

It reads the host's ``MeteredStorage`` (queue calls, the queue's ``-poison`` queue included),
``MeteredPayloadStore`` (blob calls for large payloads) and its key ledger (blob calls of the
cancel check and idempotent handling on Azure) each time the live state is published,
and turns the counts over the last ``window_s`` into a rate. Until it has counted for a whole
window the rate is None, not a guess: the first seconds of a process (its threads backing off
from 0.1 s, the queues created) cost more than its steady state and would project a wrong month.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.simulation.cost import (
    DEFAULT_PRICE_PER_10K_USD,
    monthly_cost_from_hourly_usd,
)
from cloudqueue.listener.stores.metered import CountsByQueue, MeteredStorage

WINDOW_S = 600.0
"""The rate follows the last ten minutes: recent enough to show a change, long enough to span
many idle back-off cycles. Nothing is claimed before it is full."""


@dataclass(frozen=True, slots=True)
class QueueCost:
    """What one queue's consumers cost now, as published in its live state."""

    storage_transactions_per_hour: float | None
    projected_cost_per_month_usd: float | None
    counted_s: float | None = None
    """Seconds the meter has counted so far (None: unknown); the figures appear at ``WINDOW_S``."""


UNKNOWN = QueueCost(None, None)


class CostMeter:
    """Samples the counts at each ``sample()``; ``cost_of(queue)`` is the rate over the window."""

    def __init__(
        self,
        storage: MeteredStorage,
        blobs: Mapping[str, CountsByQueue] | None = None,
        *,
        price_per_10k_usd: float = DEFAULT_PRICE_PER_10K_USD,
        clock: Clock = SYSTEM_CLOCK,
        window_s: float = WINDOW_S,
    ) -> None:
        self.storage = storage
        self.blobs = dict(blobs or {})
        """Billed blob calls by operation (``cloudqueue.listener.stores.metered.blob_counts``)."""
        self.price_per_10k_usd = price_per_10k_usd
        self.clock = clock
        self.window_s = window_s
        self._samples: deque[tuple[float, dict[str, int]]] = deque()

    def sample(self) -> None:
        """Record the counts now, forgetting samples older than the window needs."""
        counts = dict(self.storage.counts_by_queue())
        for operation, source in self.blobs.items():
            for queue, count in source.counts_by_queue().items():
                counts[f"{operation}:{queue}"] = count
        now_s = self.clock.monotonic()
        self._samples.append((now_s, counts))
        while len(self._samples) > 2 and self._samples[1][0] <= now_s - self.window_s:
            self._samples.popleft()

    def cost_of(self, queue: str) -> QueueCost:
        """Transactions per hour over the window, and a month at that rate (None: not full yet)."""
        if len(self._samples) < 2:
            return QueueCost(None, None, 0.0)
        (first_s, first), (last_s, last) = self._samples[0], self._samples[-1]
        elapsed_s = last_s - first_s
        if elapsed_s < self.window_s:
            return QueueCost(None, None, elapsed_s)
        counted = _of_queue(last, queue) - _of_queue(first, queue)
        per_hour = counted / elapsed_s * 3_600.0
        return QueueCost(per_hour, monthly_cost_from_hourly_usd(per_hour, self.price_per_10k_usd))


def _of_queue(counts: dict[str, int], queue: str) -> int:
    """A queue's calls: its own, its poison queue's, and its blob calls (payloads, key records)."""
    own = (queue, poison_queue_name(queue))
    return sum(n for name, n in counts.items() if name in own or name.endswith(f":{queue}"))
