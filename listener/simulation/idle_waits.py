"""What a simulated thread does after an empty get: wait as the idle policy says, or stop.

The decision is the scaler's (``on_queue_empty``), else the policy's own function, else the
fixed interval, as in ``CloudQueueListener._raise_queue_empty``.

Idle stretches go in long strides: until the next put (or chart sample), an idle thread's gets
on an empty queue are empty whatever happens elsewhere, since nothing else can store a message.
A simulated day is mostly such stretches, so their gets are counted in place instead of one
event each -- the same calls, billed the same, and for one thread in the same order; with
several idle threads only the interleaving of their random draws (and which of them stops
first) differs.
"""

from __future__ import annotations

import random

from cloudqueue.listener.consumer.events import QueueEmptyDecision
from cloudqueue.listener.simulation.policies import PolicySpec
from cloudqueue.listener.simulation.pool import SimThread, SimulatedPool
from cloudqueue.listener.simulation.queue import SimulatedQueue


class IdlePolicy:
    """The idle waits of one simulated pool."""

    def __init__(
        self, spec: PolicySpec, pool: SimulatedPool, rng: random.Random, *, latency_s: float
    ) -> None:
        self.spec = spec
        self.pool = pool
        self.rng = rng
        self.latency_s = latency_s

    def decide(self, thread: SimThread) -> QueueEmptyDecision:
        """How long ``thread`` waits after its ``idle_count``-th empty get, or whether it stops."""
        if self.pool.hooks is not None:
            self.pool.current = thread
            return self.pool.hooks.on_queue_empty(thread.idle_count)
        if self.spec.queue_empty is not None:
            return self.spec.queue_empty(thread.idle_count, self.rng)
        return QueueEmptyDecision(stop=False, delay_s=self.spec.dequeue_interval_s)

    def stride(
        self, queue: SimulatedQueue, thread: SimThread, wake_s: float, *, horizon_s: float
    ) -> tuple[float, bool]:
        """The empty gets from ``wake_s`` until the horizon, billed at once: when the thread
        next runs, and whether it is then still waiting idle (False: it stops then)."""
        if self.pool.hooks is None and self.spec.queue_empty is None:
            return self._skip_fixed_polls(queue, thread, wake_s, horizon_s), True
        while wake_s < horizon_s:
            queue.transactions["get_messages"] += 1
            thread.idle_count += 1
            decision = self.decide(thread)
            if decision.stop:
                thread.retire_at_wake = True  # counted as running until that get returns
                return wake_s + self.latency_s, False
            wake_s += self.latency_s + decision.delay_s
        return wake_s, True

    def _skip_fixed_polls(
        self, queue: SimulatedQueue, thread: SimThread, wake_s: float, horizon_s: float
    ) -> float:
        """A fixed interval repeats itself exactly: bill its empty gets at once; the next wake."""
        period_s = self.spec.dequeue_interval_s + self.latency_s
        if period_s <= 0 or wake_s + period_s >= horizon_s:
            return wake_s
        polls = int((horizon_s - wake_s) // period_s)
        queue.transactions["get_messages"] += polls
        thread.idle_count += polls
        return wake_s + polls * period_s
