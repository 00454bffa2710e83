"""A rate limit as a middleware: each message waits its turn before it starts.

The wait happens on the dequeue thread, before the message takes a handler slot, so a limited
listener fetches no faster than it may handle; the message's lease is renewed meanwhile, and the
wait is not counted as handling time (the scaler does not mistake a limit for slow handlers). A
stop ends every wait at once; a message that was waiting is released to the queue.
"""

from __future__ import annotations

import threading

from cloudqueue.listener.consumer.events import ListenerStarted, ListenerStopped
from cloudqueue.listener.consumer.middleware import Middleware
from cloudqueue.listener.limits.limiter import RateLimiter
from cloudqueue.listener.stores.storage import QueueMessage


class RateLimit(Middleware):
    """Lets a listener's messages start at no more than its limiter's rate."""

    blocking = True
    """Its ``before_handle`` waits: on an event loop, on a worker thread."""

    def __init__(self, limiter: RateLimiter) -> None:
        self.limiter = limiter
        self._stopping = threading.Event()

    def on_start(self, event: ListenerStarted) -> None:
        self._stopping = event.stopping

    def before_handle(self, message: QueueMessage) -> None:
        self.limiter.acquire(self._stopping)

    def on_stop(self, event: ListenerStopped) -> None:
        self.limiter.close()

    def __repr__(self) -> str:
        return f"RateLimit({self.limiter!r})"


__all__ = ["RateLimit"]
