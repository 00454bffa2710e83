"""The narrow interface between a listener and the scaler of its pool of dequeue threads.

The scaler is given the listener's ``PoolControl`` when it is made, and binds its ``ScalingHooks``
through it: they join the listener's middleware, so the dequeue loop's events reach them (an
empty get, work found after an idle spell, a stretch of work done) and the scaler answers through
the control -- measure the load, start threads, let an idle one stop, ask some to leave, wake idle
ones. Neither sees the rest of the other; each decision that changes the pool is an ``on_scaled``
event for the other middleware (the metrics count them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from cloudqueue.listener.consumer.events import (
    BatchProcessed,
    QueueEmpty,
    QueueEmptyDecision,
    QueueWorkDetected,
    Scaled,
)
from cloudqueue.listener.consumer.middleware import Middleware
from cloudqueue.listener.consumer.pool import DequeuePool
from cloudqueue.listener.consumer.stack import MiddlewareStack


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
        """A thread finished a stretch of work (see
        ``cloudqueue.listener.consumer.dequeue.STRETCH_S``)."""
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
        """Report the loop's events to ``hooks`` from now on (they join the middleware)."""
        ...


class ScalerEvents(Middleware):
    """A scaler's hooks as a middleware: the listener's events reach it on the bus."""

    def __init__(self, hooks: ScalingHooks) -> None:
        self.hooks = hooks

    def on_queue_empty(self, event: QueueEmpty) -> QueueEmptyDecision:
        return self.hooks.on_queue_empty(event.idle_count)

    def on_queue_work_detected(self, event: QueueWorkDetected) -> None:
        self.hooks.on_queue_work_detected()

    def on_batch_processed(self, event: BatchProcessed) -> None:
        self.hooks.on_batch_processed()

    def __repr__(self) -> str:
        return f"ScalerEvents({self.hooks!r})"


class ListenerPoolControl:
    """A listener's side of ``PoolControl``: what its scaler may see and do, nothing more."""

    def __init__(
        self,
        queue_name: str,
        *,
        pool: DequeuePool,
        stack: MiddlewareStack,
        measure_load: Callable[[], ListenerLoad],
        start_threads: Callable[[int], None],
        stopping: threading.Event,
        nudge: threading.Event,
    ) -> None:
        self._queue_name = queue_name
        self._pool = pool
        self._stack = stack
        self._measure_load = measure_load
        self._start_threads = start_threads
        self._stopping = stopping
        self._nudge = nudge

    @property
    def queue_name(self) -> str:
        return self._queue_name

    @property
    def active_threads(self) -> int:
        return self._pool.active

    def measure_load(self) -> ListenerLoad:
        return self._measure_load()

    def start_threads(self, count: int) -> None:
        # A scaling decision made just before stop() may land after it: a stopping pool stays.
        if not self._stopping.is_set():
            self._start_threads(count)
            self._scaled("up", count)

    def reserve_stop(self, floor: int) -> bool:
        stopping = self._pool.reserve_stop(floor)
        if stopping:
            self._scaled("down", 1)
        return stopping

    def request_scale_in(self, count: int, *, floor: int) -> int:
        granted = self._pool.request_scale_in(count, floor=floor)
        if granted:
            self._scaled("down", granted)
        return granted

    def wake_idle(self) -> None:
        self._nudge.set()

    def bind(self, hooks: ScalingHooks) -> None:
        self._stack.add(ScalerEvents(hooks))

    def _scaled(self, direction: Literal["up", "down"], threads: int) -> None:
        if self._stack.wants("on_scaled"):
            self._stack.emit("on_scaled", Scaled(self._queue_name, direction, threads))

    def __repr__(self) -> str:
        return f"PoolControl(queue={self.queue_name!r}, active={self.active_threads})"
