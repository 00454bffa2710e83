"""A listener's running counters, safe to bump from any dequeue thread."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields


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
    poisoned: int = 0
    """Moved to the poison queue."""
    poison_failures: int = 0
    """Moves to the poison queue that failed (the message stayed in its queue)."""
    dequeue_errors: int = 0
    """Gets that failed (storage outages, unexpected errors)."""
    in_flight: int = 0
    """Fetched by this listener and not yet deleted, left or released."""
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
