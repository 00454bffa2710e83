"""A listener on several queues counts what each queue's messages became.

The listener's own counters add up every queue it reads. A listener whose location names several
queues also has a ``QueueTally`` on its middleware seam, so that the metrics, ``cloudqueue status``
and the dashboard can tell, say, how many urgent messages were handled beside the normal ones.
It costs one ``after_settle`` call per message, and only on such listeners.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from listener.consumer.middleware import MessageContext, Middleware

COUNTED = {
    "deleted": "processed",
    "dropped": "processed",
    "skipped": "processed",
    "rerouted": "processed",
    "retried": "failed",
    "poisoned": "poisoned",
}
"""Which ``ListenerCounters`` field each outcome counts in (``left`` counts in none)."""

FIELDS = ("processed", "items_processed", "failed", "poisoned")


class QueueTally(Middleware):
    """Settled messages of each queue, by the ``ListenerCounters`` field they count in."""

    def __init__(self, queue_names: Sequence[str]) -> None:
        self._counts = {queue: dict.fromkeys(FIELDS, 0) for queue in queue_names}
        self._lock = threading.Lock()

    def after_settle(self, context: MessageContext[Any]) -> None:
        outcome = context.outcome
        field = None if outcome is None else COUNTED.get(outcome.kind)
        counts = self._counts.get(context.queue_name)
        if field is None or counts is None:
            return
        with self._lock:
            counts[field] += 1
            if outcome is not None and outcome.kind == "deleted":
                counts["items_processed"] += len(context.items)

    def counts(self, queue_name: str) -> dict[str, int]:
        """The queue's counts so far (zeros for a queue it does not read)."""
        with self._lock:
            return dict(self._counts.get(queue_name) or dict.fromkeys(FIELDS, 0))

    def __repr__(self) -> str:
        return f"QueueTally({self._counts})"


__all__ = ["QueueTally"]
