"""A listener's load as its scaler sees it: the queue's depth beside what the listener holds."""

from __future__ import annotations

from collections.abc import Callable

from cloudqueue.listener.consumer.handoff import HandOff
from cloudqueue.listener.consumer.pool import DequeuePool
from cloudqueue.listener.consumer.pool_control import ListenerLoad
from cloudqueue.listener.consumer.stats import ListenerMeters
from cloudqueue.listener.stores.storage import QueueStorage


class LoadReader:
    """Measures a listener's load (one storage call), or reads it at the last known depth."""

    def __init__(
        self,
        storage: QueueStorage,
        queue_name: str,
        *,
        meters: ListenerMeters,
        handoff: HandOff,
        pool: DequeuePool,
        slots_per_thread: Callable[[], int],
    ) -> None:
        self.storage = storage
        self.queue_name = queue_name
        self.meters = meters
        self.handoff = handoff
        self.pool = pool
        self.slots_per_thread = slots_per_thread

    def measure(self) -> ListenerLoad:
        """Count the queue (one storage call) and remember the visible depth it implies."""
        load = self._at(self.storage.approximate_message_count(self.queue_name))
        self.meters.known_depth.counted(load.visible_depth)
        return load

    def known(self) -> ListenerLoad | None:
        """The load now at the last known depth, without a storage call (None before one)."""
        reading = self.meters.known_depth.reading()
        if reading is None:
            return None
        return self._at(reading.visible + self._held_by_handlers())

    def _held_by_handlers(self) -> int:
        # Fetched messages still waiting in the hand-off are backlog, not in flight.
        return max(0, self.meters.counters.in_flight - len(self.handoff))

    def _at(self, depth: int) -> ListenerLoad:
        meters = self.meters
        return ListenerLoad(
            approximate_depth=depth,
            in_flight=self._held_by_handlers(),
            active_threads=self.pool.active,
            per_thread_rate_per_s=meters.throughput.per_thread_rate_per_s,
            message_latency_s=meters.latency.seconds_per_message,
            concurrency=self.slots_per_thread(),
        )


__all__ = ["LoadReader"]
