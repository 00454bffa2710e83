"""The listener's events, as its middleware receive them
(``cloudqueue.listener.consumer.middleware``).

Two of them are the design's own callbacks, under its names: ``QueueEmpty`` (a get came back
empty: how long should the thread wait, and should it stop?) and ``QueueWorkDetected`` (a thread
that was idle found work: should the pool grow?). The scaler answers both as a middleware; a
listener without one waits ``dequeue_interval_s`` between empty gets.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class ListenerStarted:
    queue_name: str
    threads: int
    """Dequeue threads started."""
    stopping: threading.Event
    """Set when the listener is asked to stop: a middleware that waits (a rate limit) waits on
    it, so that a stop ends its wait at once."""


@dataclass(frozen=True, slots=True)
class ListenerStopped:
    queue_name: str
    processed: int
    """Messages handled and deleted over the listener's life."""


@dataclass(frozen=True, slots=True)
class QueueEmpty:
    """A dequeue thread's get came back empty, ``idle_count`` times in a row."""

    queue_name: str
    idle_count: int
    active_threads: int


@dataclass(frozen=True, slots=True)
class QueueEmptyDecision:
    """What a queue_empty handler tells the dequeue thread that found the queue empty."""

    stop: bool
    delay_s: float


@dataclass(frozen=True, slots=True)
class QueueWorkDetected:
    """A dequeue thread that was idle got messages (also the listener's first non-empty get)."""

    queue_name: str
    messages: int
    """How many that get returned."""


@dataclass(frozen=True, slots=True)
class BatchProcessed:
    """A dequeue thread finished a stretch of work
    (``cloudqueue.listener.consumer.dequeue.STRETCH_S``)."""

    queue_name: str
    messages: int
    seconds: float


@dataclass(frozen=True, slots=True)
class Scaled:
    """The scaler grew the pool (``up``: threads started) or shrank it (``down``)."""

    queue_name: str
    direction: Literal["up", "down"]
    threads: int
    """Threads started, or asked to leave."""


__all__ = [
    "BatchProcessed",
    "ListenerStarted",
    "ListenerStopped",
    "QueueEmpty",
    "QueueEmptyDecision",
    "QueueWorkDetected",
    "Scaled",
]
