"""The simulated pool of dequeue threads, as its scaler sees it: the ``PoolControl`` it is given.

The pool keeps each thread's loop state and the bookkeeping the figures need (thread-seconds,
the peak); what a thread does is ``PolicySimulation``'s: the pool asks it to run a thread that
starts or is woken, through the two callables it is made with.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from cloudqueue.listener.consumer.pool_control import ListenerLoad, ScalingHooks
from cloudqueue.listener.consumer.throughput import ThroughputMeter
from cloudqueue.listener.simulation.queue import SimulatedQueue
from cloudqueue.listener.simulation.stand_ins import SIMULATED_QUEUE
from cloudqueue.listener.simulation.timeline import SimClock


@dataclass(slots=True)
class SimThread:
    """One simulated dequeue thread's loop state (as the listener's ``_LoopState``)."""

    number: int
    idle_count: int = 0
    stretch_started: float | None = None
    stretch_handled: int = 0
    wake_generation: int = 0
    idle_waiting: bool = False
    retire_at_wake: bool = False


class SimulatedPool:
    """Threads running, leaving and asked to leave; what the scaler may see and do of them."""

    def __init__(
        self,
        queue: SimulatedQueue,
        clock: SimClock,
        throughput: ThroughputMeter,
        *,
        run: Callable[[SimThread, float], None],
        wake: Callable[[SimThread, float], None],
    ) -> None:
        """``run(thread, at_s)`` starts a new thread's loop; ``wake`` ends an idle one's wait."""
        self.queue = queue
        self.clock = clock
        self.throughput = throughput
        self._run = run
        self._wake = wake
        self.threads: dict[int, SimThread] = {}
        self.leaving: set[int] = set()
        self.scale_in_requests = 0
        self.processing = 0
        """Messages whose handler runs now."""
        self.current: SimThread | None = None
        """The thread whose event the scaler is answering (the one an idle stop applies to)."""
        self.hooks: ScalingHooks | None = None
        self.thread_seconds = 0.0
        self.peak = 0
        self.peak_since_sample = 0
        self._numbers = itertools.count(1)
        self._last_change_s = 0.0

    # -- PoolControl ---------------------------------------------------------------------------

    @property
    def queue_name(self) -> str:
        return SIMULATED_QUEUE

    @property
    def active_threads(self) -> int:
        return len(self.threads) - len(self.leaving) - self.scale_in_requests

    def measure_load(self) -> ListenerLoad:
        return ListenerLoad(
            approximate_depth=self.queue.approximate_count(),
            in_flight=self.processing,
            active_threads=self.active_threads,
            per_thread_rate_per_s=self.throughput.per_thread_rate_per_s,
        )

    def start_threads(self, count: int) -> None:
        self.account()
        for _ in range(count):
            thread = SimThread(next(self._numbers))
            self.threads[thread.number] = thread
            self._run(thread, self.clock.now_s)
        self.peak = max(self.peak, self.active_threads)
        self.peak_since_sample = max(self.peak_since_sample, self.active_threads)

    def reserve_stop(self, floor: int) -> bool:
        if self.current is None or self.active_threads <= floor:
            return False
        self.leaving.add(self.current.number)
        return True

    def request_scale_in(self, count: int, *, floor: int) -> int:
        granted = max(0, min(count, self.active_threads - floor))
        self.scale_in_requests += granted
        return granted

    def wake_idle(self) -> None:
        for thread in self.threads.values():
            if thread.idle_waiting:
                self._wake(thread, self.clock.now_s)

    def bind(self, hooks: ScalingHooks) -> None:
        self.hooks = hooks

    # -- bookkeeping ---------------------------------------------------------------------------

    def take_scale_in_request(self) -> bool:
        """True (and one request fewer) when a thread has been asked to leave."""
        if self.scale_in_requests <= 0:
            return False
        self.scale_in_requests -= 1
        return True

    def retire(self, thread: SimThread) -> None:
        self.account()
        del self.threads[thread.number]
        self.leaving.discard(thread.number)

    def account(self) -> None:
        """Add the thread-seconds since the last change (leaving threads still count)."""
        now_s = self.clock.now_s
        self.thread_seconds += len(self.threads) * (now_s - self._last_change_s)
        self._last_change_s = now_s

    def __repr__(self) -> str:
        return f"SimulatedPool(active={self.active_threads}, processing={self.processing})"
