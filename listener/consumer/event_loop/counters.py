"""What the event-loop consumer did so far: its counters, kept on its loop."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class AsyncCounters:
    """What the consumer did so far (read on its loop, or as a snapshot from anywhere)."""

    processed: int = 0
    failed: int = 0
    retried: int = 0
    poisoned: int = 0
    left: int = 0
    dequeue_errors: int = 0
    in_flight: int = 0
    delay_hops: int = 0
    """Messages delayed beyond 7 days hidden again, unhandled: not due yet (``event_loop.hops``)."""
