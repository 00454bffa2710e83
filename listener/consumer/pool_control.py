"""The narrow interface between a listener and the scaler of its pool of dequeue threads.

The scaler is given the listener's ``PoolControl`` when it is made, and binds its ``ScalingHooks``
through it: the dequeue loop then reports three events to the hooks (an empty get, work found
after an idle spell, a stretch of work done), and the scaler answers through the control --
measure the load, start threads, let an idle one stop, ask some to leave, wake idle ones. Neither
sees the rest of the other, and the listener's own ``queue_empty`` / ``queue_work_detected`` /
``batch_processed`` handlers stay the user's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class QueueEmptyDecision:
    """What a queue_empty handler tells the dequeue thread that found the queue empty."""

    stop: bool
    delay_s: float


@dataclass(frozen=True, slots=True)
class ListenerLoad:
    """What a scaler needs to know, measured at one moment."""

    approximate_depth: int
    """The queue's approximate count: visible and in-flight messages of every consumer."""
    in_flight: int
    """Messages this listener's threads are handling now. Fetched messages still waiting in the
    hand-off for a free thread are not counted: they are backlog, part of ``visible_depth``."""
    active_threads: int
    per_thread_rate_per_s: float | None
    message_latency_s: float | None = None
    """Measured seconds from a message's start to its settlement (None until measured)."""
    concurrency: int = 1
    """Messages each thread keeps in flight (``CloudQueueListener.concurrency``)."""

    @property
    def visible_depth(self) -> int:
        """An estimate of the messages waiting for a consumer."""
        return max(0, self.approximate_depth - self.in_flight)


class ScalingHooks(Protocol):
    """What the dequeue loop tells a scaler; called on dequeue threads, so keep them short."""

    def on_queue_empty(self, idle_count: int) -> QueueEmptyDecision:
        """A thread's get was empty (``idle_count`` in a row): how long it waits, or stops."""
        ...

    def on_queue_work_detected(self) -> None:
        """A thread that was idle (or the listener's first get) found messages."""
        ...

    def on_batch_processed(self) -> None:
        """A thread finished a stretch of work (see ``listener.STRETCH_S``)."""
        ...


class PoolControl(Protocol):
    """What a scaler may see and do of one listener's pool of dequeue threads."""

    @property
    def queue_name(self) -> str: ...

    @property
    def active_threads(self) -> int:
        """Threads running and not committed to leave."""
        ...

    def measure_load(self) -> ListenerLoad:
        """Depth (one storage call), in-flight messages, active threads and measured rate."""
        ...

    def start_threads(self, count: int) -> None:
        """Start ``count`` more dequeue threads."""
        ...

    def reserve_stop(self, floor: int) -> bool:
        """May the calling (idle) thread stop, leaving more than ``floor`` active?"""
        ...

    def request_scale_in(self, count: int, *, floor: int) -> int:
        """Ask up to ``count`` threads to leave after their current message; how many will."""
        ...

    def wake_idle(self) -> None:
        """End the back-off waits of idle threads now (a push trigger says work is waiting)."""
        ...

    def bind(self, hooks: ScalingHooks) -> None:
        """Report the loop's events to ``hooks`` from now on (replacing any bound before)."""
        ...
