"""Recording the workload a worker sees, for ``cloudqueue tune`` (``run --record FILE``).

The handler is wrapped, as the metrics wrap it: each first delivery counts as an arrival at its
message's insertion time, and each delivery's handling time, size and outcome go to the
``ProfileRecorder`` (``listener.simulation.profile``), which writes one line per minute.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from listener.consumer.current import current_envelope
from listener.simulation.profile import ProfileRecorder

SEEN_MESSAGES = 4_096
"""Message ids remembered so that the items of one batch message count as one arrival."""


def recorded_handler(
    handler: Callable[[Any], None], recorder: ProfileRecorder
) -> Callable[[Any], None]:
    """The handler, recording each delivery's arrival (first time only), time and outcome."""
    seen: OrderedDict[str, None] = OrderedDict()
    lock = threading.Lock()

    def first_time(message_id: str) -> bool:
        with lock:
            if message_id in seen:
                return False
            seen[message_id] = None
            if len(seen) > SEEN_MESSAGES:
                seen.popitem(last=False)
            return True

    def handle(item: Any) -> None:
        try:
            envelope = current_envelope()
        except LookupError:  # called outside a delivery (a test calling it directly)
            handler(item)
            return
        if envelope.dequeue_count == 1 and first_time(envelope.message_id):
            recorder.arrived(envelope.inserted_on)
        started = time.perf_counter()
        failed = True
        try:
            handler(item)
            failed = False
        finally:
            recorder.handled(
                time.perf_counter() - started, size_bytes=envelope.content_chars, failed=failed
            )

    return handle
