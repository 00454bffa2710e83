"""A listener on several queues counts what each queue's messages became.

The listener's own counters add up every queue it reads. A listener whose location names several
queues also has a ``QueueTally`` on its middleware seam, so that the metrics, ``cloudqueue status``
and the dashboard can tell, say, how many urgent messages were handled beside the normal ones.
It costs a call per get and one per message, and only on such listeners.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from cloudqueue.listener.consumer.middleware import MessageContext, Middleware
from cloudqueue.listener.stores.storage import QueueMessage

COUNTED = {
    "deleted": "processed",
    "dropped": "processed",
    "skipped": "processed",
    "rerouted": "processed",
    "retried": "failed",
    "poisoned": "poisoned",
}
"""Which ``ListenerCounters`` field each outcome counts in (``left`` counts in none)."""

FIELDS = ("processed", "items_processed", "failed", "poisoned", "in_flight")


class QueueTally(Middleware):
    """Settled messages of each queue, by the ``ListenerCounters`` field they count in, and the
    messages of each queue fetched and not settled yet."""

    def __init__(self, queue_names: Sequence[str], queue_of: Callable[[str], str]) -> None:
        """``queue_of`` tells the queue a fetched message came from, by its id."""
        self._counts = {queue: dict.fromkeys(FIELDS, 0) for queue in queue_names}
        self._queue_of = queue_of
        self._lock = threading.Lock()

    def after_fetch(self, queue_name: str, messages: Sequence[QueueMessage]) -> None:
        if not messages:
            return
        queue = self._queue_of(messages[0].id)  # one get reads one queue
        with self._lock:
            self._counts[queue]["in_flight"] += len(messages)

    def after_settle(self, context: MessageContext[Any]) -> None:
        outcome = context.outcome
        counts = self._counts.get(context.queue_name)
        if outcome is None or counts is None:
            return
        field = COUNTED.get(outcome.kind)
        with self._lock:
            counts["in_flight"] -= 1
            if field is not None:
                counts[field] += 1
            if outcome.kind == "deleted":
                counts["items_processed"] += len(context.items)

    def counts(self, queue_name: str, *, in_flight: int) -> dict[str, int]:
        """The queue's counts so far (zeros for a queue it does not read). ``in_flight`` is the
        listener's: messages released unstarted (at stop) are not settled, so a queue's own
        figure is held to it."""
        with self._lock:
            counts = dict(self._counts.get(queue_name) or dict.fromkeys(FIELDS, 0))
        counts["in_flight"] = max(0, min(counts["in_flight"], in_flight))
        return counts

    def __repr__(self) -> str:
        return f"QueueTally({self._counts})"


__all__ = ["QueueTally"]
