"""Recording the workload a worker sees, for ``cloudqueue tune`` (``run --record FILE``).

A middleware, as the metrics are: each first delivery counts as an arrival at its message's
insertion time, and each delivery's handling time, size and outcome go to the ``ProfileRecorder``
(``cloudqueue.listener.simulation.profile``), which writes one line per minute.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

from cloudqueue.listener.consumer.middleware import CallNext, MessageContext, Middleware
from cloudqueue.listener.consumer.wrapping import Wrapper
from cloudqueue.listener.simulation.profile import ProfileRecorder

SEEN_MESSAGES = 4_096
"""Message ids remembered, so that a message retried soon after is not a second arrival."""


class Recording(Middleware):
    """Records each message's arrival (first delivery only), handling time and outcome (a
    generator: ``yield`` for ``call_next()``, so no thread hop on the event-loop consumer)."""

    def __init__(self, recorder: ProfileRecorder) -> None:
        self.recorder = recorder
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> Wrapper:
        if not context.deliverable:  # settled without a handler call: not the workload
            yield
            return
        message = context.message
        if message.dequeue_count == 1 and self._first_time(message.id):
            self.recorder.arrived(message.inserted_on)
        started = time.perf_counter()
        try:
            yield
        finally:
            self.recorder.handled(
                time.perf_counter() - started,
                size_bytes=len(message.content),
                failed=context.failed or not context.handled,
            )

    def _first_time(self, message_id: str) -> bool:
        with self._lock:
            if message_id in self._seen:
                return False
            self._seen[message_id] = None
            if len(self._seen) > SEEN_MESSAGES:
                self._seen.popitem(last=False)
            return True


__all__ = ["Recording"]
