"""A listener's running counters and meters, safe to bump from any dequeue thread."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields

from cloudqueue.listener.clock import Clock
from cloudqueue.listener.consumer.depth import KnownDepth
from cloudqueue.listener.consumer.throughput import ThroughputMeter


@dataclass
class ListenerCounters:
    """Totals since the listener was created, plus the messages held right now."""

    processed: int = 0
    """Messages handled by every observer (and deleted, or found already gone)."""
    items_processed: int = 0
    """Items handled by every observer: a ``Publisher`` batch of 200 is 200 items, 1 message.
    The items of a batch that succeeded count even when others of it are retried."""
    failed: int = 0
    """Deliveries where an observer raised; the message was left for a retry."""
    retried_later: int = 0
    """Of those, deliveries where a handler raised ``RetryLater``: no fault, it asked for later."""
    poisoned: int = 0
    """Moved to the poison queue."""
    poison_failures: int = 0
    """Moves to the poison queue that failed (the message stayed in its queue)."""
    dequeue_errors: int = 0
    """Gets that failed (storage outages, unexpected errors)."""
    in_flight: int = 0
    """Fetched by this listener and not yet deleted, left or released."""
    delay_hops: int = 0
    """Messages delayed beyond 7 days hidden again, unhandled, because they were not due yet."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + amount)

    def message_processed(self, items: int) -> None:
        """A message (of ``items`` items) was handled and deleted: one lock for both counts."""
        with self._lock:
            self.processed += 1
            self.items_processed += items

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "_lock"}


@dataclass(frozen=True)
class ListenerMeters:
    """Everything a listener measures as it runs, shared by its loop, scaler and figures."""

    counters: ListenerCounters
    throughput: ThroughputMeter
    """Messages per second one thread gets through (the scaler's rate)."""
    latency: ThroughputMeter
    """Seconds from a message's start to its settlement, measured when several are in flight
    per thread (the scaler's rules size in-flight capacity from it)."""
    handler_time: ThroughputMeter
    """Seconds the observers take on one message, settlement excluded: how many messages a
    thread keeps in flight follows from it
    (``cloudqueue.listener.consumer.in_flight.slots_per_loop``)."""
    known_depth: KnownDepth
    """The visible depth last counted, or 0 after an empty get: the figures read it."""

    @classmethod
    def new(cls, clock: Clock) -> ListenerMeters:
        return cls(
            ListenerCounters(),
            ThroughputMeter(),
            ThroughputMeter(),
            ThroughputMeter(),
            KnownDepth(clock),
        )
