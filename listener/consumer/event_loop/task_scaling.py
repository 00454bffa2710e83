"""How many dequeue tasks the event-loop consumer runs, and how much each of them gets.

The decisions are the threaded path's pure ones: ``fetch_size`` how many to get (1..32),
``idle_delay_s`` / ``should_stop_idle`` the idle back-off and when a surplus task leaves (unless
a middleware answers ``on_queue_empty``: the scaler's), ``targets`` (read as tasks) how many fetch
once work appears after an idle spell, the CPU guard whether they may grow,
``randomized_exponential_backoff`` the wait after a failed get. The events the scaler and the
metrics read about the tasks are emitted here too: ``on_queue_work_detected``,
``on_batch_processed`` at the end of a task's stretch of work, ``on_scaled``.

The consumer owns the tasks themselves; this counts the ones running (``active``) and measures
the handling time per message (``latency``) its decisions read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from cloudqueue.listener.consumer.event_loop.counters import AsyncCounters
from cloudqueue.listener.consumer.event_loop.depth import AsyncDepth
from cloudqueue.listener.consumer.event_loop.stack import AsyncMiddlewareStack
from cloudqueue.listener.consumer.events import (
    BatchProcessed,
    QueueEmpty,
    QueueWorkDetected,
    Scaled,
)
from cloudqueue.listener.consumer.handoff import fetch_size
from cloudqueue.listener.consumer.pool_control import ListenerLoad
from cloudqueue.listener.consumer.throughput import ThroughputMeter
from cloudqueue.listener.policies.backoff import RandomSource, randomized_exponential_backoff
from cloudqueue.listener.scaling.cpu import ProcessCpuMeter
from cloudqueue.listener.scaling.scaler import (
    ScalingPolicy,
    idle_delay_s,
    should_stop_idle,
    targets,
)

log = structlog.get_logger(__name__)


class TaskScaling:
    """The dequeue tasks' count and the decisions that change it, for one consumer's queue."""

    def __init__(
        self,
        queue_name: str,
        *,
        policy: ScalingPolicy,
        stack: AsyncMiddlewareStack,
        depth: AsyncDepth,
        counters: AsyncCounters,
        rng: RandomSource,
        concurrency: int,
        batch_size: int,
        visibility_timeout_s: int,
        max_error_delay_s: float,
    ) -> None:
        self.queue_name, self.policy, self.stack = queue_name, policy, stack
        self.depth, self.counters, self.rng = depth, counters, rng
        self.concurrency, self.batch_size = concurrency, batch_size
        self.visibility_timeout_s = visibility_timeout_s
        self.max_error_delay_s = max_error_delay_s
        self.active = 0
        """Dequeue tasks running and not leaving."""
        self.found_work = False
        """Work seen since the last idle spell (or since ``wake()`` restarted the tasks)."""
        self.latency = ThroughputMeter()  # seconds per message, one at a time: the latency
        self._cpu = ProcessCpuMeter()
        self._deciding = asyncio.Lock()

    def fetch_size(self) -> int:
        """How many messages the next get asks for (a whole batch until handling is measured)."""
        latency_s = self.latency.seconds_per_message
        return fetch_size(
            batch_size=self.batch_size,
            threads=self.active,
            per_thread_rate_per_s=None if latency_s is None else self.concurrency / latency_s,
            visibility_timeout_s=self.visibility_timeout_s,
        )

    def idle_decision(self, idle_count: int) -> tuple[bool, float]:
        """Whether this task leaves, and else how long it waits: the deciding middleware's
        answer (the scaler's), else the scaling policy's idle back-off. The last task never
        leaves: a consumer keeps at least one get going."""
        decision = None
        if self.stack.wants("on_queue_empty"):
            event = QueueEmpty(self.queue_name, idle_count, self.active)
            decision = self.stack.queue_empty(event)
        if decision is not None:
            return decision.stop and self.active > 1, decision.delay_s
        delay_s = idle_delay_s(idle_count, self.policy, self.rng)
        return should_stop_idle(delay_s, self.active, self.policy), delay_s

    def error_delay_s(self, error_count: int) -> float:
        """The wait after ``error_count`` failed storage calls in a row (as the threaded
        listener's, at most ``max_error_delay_s``)."""
        return randomized_exponential_backoff(
            error_count, delta_s=0.1, min_s=0.0, max_s=self.max_error_delay_s, rng=self.rng
        )

    async def work_found(self, messages: int, start: Callable[[int], None]) -> None:
        """A get brought ``messages`` after an idle spell (or the first ones): say so, and run
        as many dequeue tasks as the scaling rule wants (``start`` starts them)."""
        self.found_work = True
        if self.stack.wants("on_queue_work_detected"):
            detected = QueueWorkDetected(self.queue_name, messages)
            await self.stack.emit("on_queue_work_detected", detected)
        await self._grow(start)

    async def _grow(self, start: Callable[[int], None]) -> None:
        async with self._deciding:  # one decision at a time, or two would both add the difference
            try:
                depth = await self.depth.count()
            except Exception as failure:
                log.warning("rescale_skipped", error=str(failure))
                return
            grow_target, _ = targets(self.load_at(depth), self.policy)
            if grow_target <= self.active:
                return
            cores = self._cpu.cores_used()  # None: the first reading, which only starts a window
            if cores is not None and cores >= self.policy.cpu_saturation_cores:
                log.warning("scaling_capped", active=self.active, target=grow_target)
                return
            started = grow_target - self.active
            start(started)
        if self.stack.wants("on_scaled"):
            await self.stack.emit("on_scaled", Scaled(self.queue_name, "up", started))

    async def left(self) -> None:
        """A surplus task left, idle."""
        if self.stack.wants("on_scaled"):
            await self.stack.emit("on_scaled", Scaled(self.queue_name, "down", 1))

    async def stretch_ended(self, stretch: Stretch) -> None:
        """A task's stretch of work ends (an empty get, or ``STRETCH_S`` of work)."""
        handled, seconds = stretch.end()
        if handled and self.stack.wants("on_batch_processed"):
            finished = BatchProcessed(self.queue_name, handled, seconds)
            await self.stack.emit("on_batch_processed", finished)

    def known_load(self) -> ListenerLoad | None:
        """The load now at the last known depth, without a storage call (None before one)."""
        reading = self.depth.known.reading()
        if reading is None:
            return None
        return self.load_at(reading.visible + self.counters.in_flight)

    def load_at(self, depth: int) -> ListenerLoad:
        """The load as the scaling rule reads it, at ``depth`` (the approximate count)."""
        return ListenerLoad(
            approximate_depth=depth,
            in_flight=self.counters.in_flight,
            active_threads=self.active,
            per_thread_rate_per_s=None,
            message_latency_s=self.latency.seconds_per_message,
            concurrency=self.concurrency,
        )


class Stretch:
    """A dequeue task's stretch of work: messages started since it began (loop time)."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.handled = 0

    def add(self, messages: int) -> float:
        """Count ``messages`` started; the seconds the stretch has lasted."""
        now = asyncio.get_running_loop().time()
        if self.started is None:
            self.started = now
        self.handled += messages
        return now - self.started

    def end(self) -> tuple[int, float]:
        """The stretch's messages and seconds; a new one begins at the next ``add``."""
        started, handled = self.started, self.handled
        self.started, self.handled = None, 0
        if started is None:
            return 0, 0.0
        return handled, asyncio.get_running_loop().time() - started
