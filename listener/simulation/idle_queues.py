"""What a listener on K queues costs while everything is idle, and how late it would see work.

``idle_cost`` runs the real parts -- ``CloudQueueListener`` over a ``PrioritizedQueueStorage``,
its ``ElasticScaler`` and, with push triggers, its ``Watchdog`` -- on an in-memory store, every
call to the store timed. In virtual time (the default: a ``VirtualClock`` that jumps from one
wait to the next) an idle hour takes seconds; given a ``storage`` and the system clock it is a
real run against that store.

The figures, per queue: calls an hour, and the worst-case pickup -- the longest span between two
looks at the queue (gets while polling; the watchdog's counts with push triggers, for a message
whose trigger was lost). A message put just after one look waits until the next.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from cloudqueue.listener.clock import EVENT_SLEEPER, SYSTEM_CLOCK, Clock, Sleeper
from cloudqueue.listener.consumer.listener import CloudQueueListener
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.scaling.scaler import ElasticScaler, ScalingPolicy
from cloudqueue.listener.scaling.waker import DEFAULT_WATCHDOG_INTERVAL_S, Watchdog
from cloudqueue.listener.stores.forwarding import ForwardingStorage
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.testing import VirtualClock
from cloudqueue.listener.wire.codec import MessageCodec

R = TypeVar("R")

LOOKS = {"get_messages", "approximate_message_count"}
"""The calls that look at a queue for work."""

STALLED_S = 30.0
"""Real seconds a virtual run may wait for its threads to wait on the clock before giving up."""


@dataclass(frozen=True, slots=True)
class IdleQueue:
    """One queue of the set, idle."""

    queue: str
    transactions_per_hour: float
    worst_pickup_s: float
    """The longest span between two looks at this queue."""


@dataclass(frozen=True, slots=True)
class IdleCost:
    """K idle queues read by one listener, over ``seconds`` after a warm-up."""

    queues: int
    push: bool
    seconds: float
    transactions_per_hour: float
    per_queue: tuple[IdleQueue, ...]
    calls: dict[str, int]
    """The calls of the measured span, by operation."""


class _TimedCalls(ForwardingStorage):
    """Notes when each call was made, by queue and operation."""

    def __init__(self, inner: QueueStorage, clock: Clock) -> None:
        super().__init__(inner)
        self.clock = clock
        self.calls: dict[str, list[tuple[float, str]]] = defaultdict(list)
        self._lock = threading.Lock()

    def _call(self, queue_name: str, operation: str, call: Callable[[], R]) -> R:
        with self._lock:
            self.calls[queue_name].append((self.clock.monotonic(), operation))
        return call()

    def between(self, start_s: float, end_s: float) -> dict[str, list[tuple[float, str]]]:
        with self._lock:
            return {
                queue: [call for call in calls if start_s <= call[0] < end_s]
                for queue, calls in self.calls.items()
            }


def idle_cost(
    queue_count: int,
    *,
    seconds: float = 3600.0,
    warm_up_s: float = 60.0,
    policy: ScalingPolicy | None = None,
    push: bool = False,
    watchdog_interval_s: float = DEFAULT_WATCHDOG_INTERVAL_S,
    storage: QueueStorage | None = None,
    prefix: str = "idle",
    seed: int = 1,
) -> IdleCost:
    """Measure ``queue_count`` empty queues read by one listener (see the module docstring).

    Without ``storage``, an in-memory store in virtual time; with one, real time on it. With
    ``push``, the pool may shrink to zero threads (``min_threads = 0``) and the watchdog looks.
    """
    names = [f"{prefix}-{index}" for index in range(queue_count)]
    virtual = VirtualClock() if storage is None else None
    clock: Clock = SYSTEM_CLOCK if virtual is None else virtual
    sleeper: Sleeper = EVENT_SLEEPER if virtual is None else virtual
    timed = _TimedCalls(storage or InMemoryQueueStorage(clock=clock), clock)
    policy = policy or ScalingPolicy(min_threads=0 if push else 1)
    listener: CloudQueueListener[str] = CloudQueueListener(
        timed,
        CloudQueueLocation.of(names),
        str,
        codec=MessageCodec(str),
        clock=clock,
        sleeper=sleeper,
    )
    scaler = ElasticScaler(
        listener.pool_control, policy, rng=random.Random(seed), clock=clock, sleeper=sleeper
    )
    listener.subscribe(lambda _: None)
    watchdog = (
        Watchdog(listener, scaler, interval_s=watchdog_interval_s, sleeper=sleeper).start()
        if push
        else None
    )
    listener.start_listener(1)
    waiting = (lambda: listener.threads_alive + 1) if push else (lambda: listener.threads_alive)
    try:
        start_s = _run_until(clock, virtual, waiting, clock.monotonic() + warm_up_s)
        _run_until(clock, virtual, waiting, start_s + seconds)
        calls = timed.between(start_s, start_s + seconds)
    finally:
        if watchdog is not None:
            watchdog.close()
        listener.stop(10)
    per_queue = tuple(_idle_queue(name, calls.get(name, []), start_s, seconds) for name in names)
    operations = Counter(operation for found in calls.values() for _, operation in found)
    per_hour = sum(operations.values()) * 3600.0 / seconds
    return IdleCost(queue_count, push, seconds, per_hour, per_queue, dict(operations))


def _run_until(
    clock: Clock, virtual: VirtualClock | None, waiting: Callable[[], int], end_s: float
) -> float:
    """Let time pass up to ``end_s`` (virtual: wait by wait, once every thread waits); return
    the time reached."""
    stalled_since = time.monotonic()
    while clock.monotonic() < end_s:
        if virtual is None:  # a real run: real time passes
            EVENT_SLEEPER.wait(threading.Event(), min(1.0, end_s - clock.monotonic()))
        elif virtual.all_waiting(waiting, timeout_s=0.1):
            virtual.advance_to_next_wake_up()
            stalled_since = time.monotonic()
        elif time.monotonic() - stalled_since > STALLED_S:
            raise RuntimeError(f"the listener's threads stopped waiting on {virtual!r}")
    return clock.monotonic()


def _idle_queue(
    queue: str, calls: list[tuple[float, str]], start_s: float, seconds: float
) -> IdleQueue:
    looks = sorted(at for at, operation in calls if operation in LOOKS)
    spans = [later - earlier for earlier, later in itertools.pairwise(looks)]
    # Before the first look and after the last, a message would wait at least that long too.
    edges = [looks[0] - start_s, start_s + seconds - looks[-1]] if looks else [seconds]
    return IdleQueue(queue, len(calls) * 3600.0 / seconds, max([*spans, *edges]))


__all__ = ["IdleCost", "IdleQueue", "idle_cost"]
