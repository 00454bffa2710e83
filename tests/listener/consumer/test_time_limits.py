"""Time limits: a handler past ``time_limit_s`` loses its message (retried, then poisoned as
``time_limit``) and its slot, is stopped where Python allows, and is counted while stuck; the
other messages keep flowing. Most tests move a manual clock past the limit by hand."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    DeliveryPolicy,
    MessageContext,
    Middleware,
    QueueStorage,
    poison_queue_name,
)
from cloudqueue.listener.consumer.time_limits import SOFT_FRACTION
from cloudqueue.listener.poison.queue import browse_poisoned
from cloudqueue.listener.poison.record import read_record
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.testing import ManualClock
from cloudqueue.workers.host.async_handler import AsyncHandlerRunner
from cloudqueue.workers.observability.health import (
    Heartbeats,
    ProcessProbes,
    Reachability,
    WatchedPool,
)
from tests.support.polling import eventually

LIMIT_S = 2.0
PAST_LIMIT_S = LIMIT_S + 0.1


class Settled(Middleware):
    """Counts each message's settlements by outcome."""

    def __init__(self) -> None:
        self.outcomes: list[str] = []

    def after_settle(self, context: MessageContext[Any]) -> None:
        assert context.outcome is not None
        self.outcomes.append(f"{context.outcome.kind}:{context.outcome.reason}")


class Stuck:
    """A handler that never returns for item ``n == -1`` until released (blocked in C), and
    records every other item."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = 0
        self.handled: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, item: dict[str, int]) -> None:
        if item["n"] == -1:
            with self._lock:
                self.entered += 1
            self.release.wait()
            return
        with self._lock:
            self.handled.append(item["n"])


@pytest.fixture
def listeners() -> Iterator[list[CloudQueueListener[Any]]]:
    made: list[CloudQueueListener[Any]] = []
    yield made
    for listener in made:
        listener.stop(timeout_s=10)


def limited(
    storage: QueueStorage,
    queue: str,
    listeners: list[CloudQueueListener[Any]],
    handler: Callable[[Any], None],
    *,
    clock: ManualClock | None = None,
    limit_s: float = LIMIT_S,
    max_dequeue_count: int = 5,
    retry_delay_s: float = 0,
    concurrency: int = 4,
    middleware: list[Middleware] | None = None,
    runner: AsyncHandlerRunner | None = None,
) -> CloudQueueListener[dict[str, int]]:
    """A started listener of ``{"n": ...}`` items under a time limit."""
    extra: dict[str, Any] = {} if clock is None else {"clock": clock}
    listener: CloudQueueListener[dict[str, int]] = CloudQueueListener(
        storage,
        CloudQueueLocation(queue, visibility_timeout_s=30),
        dict,
        dequeue_interval_s=0.02,
        delivery=DeliveryPolicy(
            retry_delay_s=retry_delay_s,
            max_retry_delay_s=max(60.0, retry_delay_s),
            max_dequeue_count=max_dequeue_count,
        ),
        concurrency=concurrency,
        time_limit_s=limit_s,
        middleware=middleware or [],
        loop=None if runner is None else runner.loop,
        **extra,
    )
    listeners.append(listener)
    listener.subscribe(handler)
    storage.create_queue(queue)
    listener.start_listener(1)
    return listener


def put(storage: QueueStorage, queue: str, *numbers: int) -> None:
    for n in numbers:
        storage.put_message(queue, json.dumps({"n": n}))


def poison_records(storage: QueueStorage, queue: str) -> list[tuple[str, str, int]]:
    """Each poison record's reason, error and deliveries."""
    records = [read_record(m.content) for m in browse_poisoned(storage, queue, limit=32)]
    return [(r.reason, r.error, r.dequeue_count) for r in records if r is not None]


def probes_for(listener: CloudQueueListener[Any], max_stuck_threads: int) -> ProcessProbes:
    pool = WatchedPool(
        listener.queue_name,
        lambda: listener.threads_alive,
        1,
        stuck_threads=lambda: listener.stuck_threads,
        max_stuck_threads=max_stuck_threads,
    )
    probes = ProcessProbes(10, Heartbeats(), Reachability(), [pool])
    probes.started = True
    return probes


def test_a_handler_that_never_returns_is_poisoned_as_time_limit_while_the_others_flow(
    clock: ManualClock,
    manual_storage: InMemoryQueueStorage,
    queue_name: str,
    listeners: list[CloudQueueListener[Any]],
) -> None:
    """Done-when: after max_dequeue_count (5) deliveries past the 2 s limit the stuck message is
    in the poison queue with reason time_limit; 30 ordinary messages beside it were handled; the
    five stuck threads are counted, and the worker stays ready up to the bound, not past it."""
    handler = Stuck()
    listener = limited(manual_storage, queue_name, listeners, handler, clock=clock)
    put(manual_storage, queue_name, -1, *range(30))
    for delivery in range(1, 6):
        eventually(lambda d=delivery: handler.entered == d)  # type: ignore[misc]
        clock.advance(PAST_LIMIT_S)
        eventually(lambda d=delivery: listener.time_limited == d)  # type: ignore[misc]
    eventually(lambda: len(handler.handled) == 30)
    eventually(lambda: poison_records(manual_storage, queue_name))
    [(reason, error, deliveries)] = poison_records(manual_storage, queue_name)
    assert (reason, deliveries) == ("time_limit", 5)
    assert "listener.time_limit_s (2 s)" in error
    assert sorted(handler.handled) == list(range(30))
    assert listener.stuck_threads == 5
    assert probes_for(listener, max_stuck_threads=5).readiness().ok
    not_ready = probes_for(listener, max_stuck_threads=4).readiness()
    assert not not_ready.ok
    assert "stuck threads" in not_ready.reasons[0]
    assert probes_for(listener, max_stuck_threads=4).liveness().ok  # alive, only not ready
    handler.release.set()
    eventually(lambda: listener.stuck_threads == 0)
    assert manual_storage.approximate_message_count(queue_name) == 0
    assert listener.messages_processed == 30  # the late returns settled nothing


def test_a_late_return_does_not_settle_the_message_a_second_time(
    clock: ManualClock,
    manual_storage: InMemoryQueueStorage,
    queue_name: str,
    listeners: list[CloudQueueListener[Any]],
) -> None:
    """At the limit the message is hidden for its retry delay and settled once; when the stuck
    handler returns afterwards, the message is neither deleted nor settled again."""
    handler, settled = Stuck(), Settled()
    listener = limited(
        manual_storage,
        queue_name,
        listeners,
        handler,
        clock=clock,
        retry_delay_s=30,
        middleware=[settled],
    )
    put(manual_storage, queue_name, -1)
    eventually(lambda: handler.entered == 1)
    with capture_logs() as logs:
        clock.advance(PAST_LIMIT_S)
        eventually(lambda: settled.outcomes == ["retried:time_limit"])
        handler.release.set()
        eventually(lambda: listener.stuck_threads == 0)
    assert settled.outcomes == ["retried:time_limit"]
    assert listener.messages_processed == 0
    assert manual_storage.approximate_message_count(queue_name) == 1  # hidden, still there
    assert [e["event"] for e in logs if e["event"].startswith("time_limit")] == [
        "time_limit",
        "time_limit_late_return",
    ]


def test_a_busy_python_handler_is_interrupted_and_its_thread_comes_back(
    clock: ManualClock,
    manual_storage: InMemoryQueueStorage,
    queue_name: str,
    listeners: list[CloudQueueListener[Any]],
) -> None:
    """A handler looping in Python gets TimeLimitExceeded, which its ``except Exception`` does
    not swallow: nothing after the loop runs, and no thread stays stuck."""
    started, went_on, swallowed = threading.Event(), threading.Event(), threading.Event()

    def spin(item: dict[str, int]) -> None:
        started.set()
        try:
            while True:
                pass
        except Exception:
            swallowed.set()
        went_on.set()

    listener = limited(
        manual_storage, queue_name, listeners, spin, clock=clock, max_dequeue_count=1
    )
    put(manual_storage, queue_name, 1)
    eventually(started.is_set)
    clock.advance(PAST_LIMIT_S)
    eventually(lambda: poison_records(manual_storage, queue_name))
    eventually(lambda: listener.time_limited == 1 and listener.stuck_threads == 0)
    assert not went_on.is_set()
    assert not swallowed.is_set()
    assert poison_records(manual_storage, queue_name)[0][0] == "time_limit"


def test_an_async_handler_is_cancelled_at_the_limit(
    clock: ManualClock,
    manual_storage: InMemoryQueueStorage,
    queue_name: str,
    listeners: list[CloudQueueListener[Any]],
) -> None:
    """A coroutine that never finishes is cancelled: its thread is free at once (never stuck),
    and after max_dequeue_count deliveries the message is poisoned as time_limit."""
    awaiting, cancelled = [0], [0]

    async def hang(item: dict[str, int]) -> None:
        awaiting[0] += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled[0] += 1
            raise

    runner = AsyncHandlerRunner(hang)
    try:
        listener = limited(
            manual_storage,
            queue_name,
            listeners,
            runner,
            clock=clock,
            max_dequeue_count=2,
            runner=runner,
        )
        put(manual_storage, queue_name, 1)
        for delivery in (1, 2):
            eventually(lambda d=delivery: awaiting[0] == d)  # type: ignore[misc]
            clock.advance(PAST_LIMIT_S)
            eventually(lambda d=delivery: cancelled[0] == d)  # type: ignore[misc]
        eventually(lambda: poison_records(manual_storage, queue_name))
        assert poison_records(manual_storage, queue_name)[0][:2][0] == "time_limit"
        assert listener.stuck_threads == 0
    finally:
        listeners.pop().stop(10)
        runner.close()


def test_the_soft_warning_comes_once_per_message_before_the_limit(
    clock: ManualClock,
    manual_storage: InMemoryQueueStorage,
    queue_name: str,
    listeners: list[CloudQueueListener[Any]],
) -> None:
    """At 80 % of the limit one ``time_limit_near`` is logged with the message id, however long
    the handler goes on; the limit itself comes later."""
    handler = Stuck()
    listener = limited(manual_storage, queue_name, listeners, handler, clock=clock)
    put(manual_storage, queue_name, -1)
    eventually(lambda: handler.entered == 1)
    with capture_logs() as logs:
        clock.advance(LIMIT_S * SOFT_FRACTION + 0.01)
        eventually(lambda: any(e["event"] == "time_limit_near" for e in logs))
        clock.advance(0.05)
        clock.advance(0.05)
        assert listener.time_limited == 0
        clock.advance(LIMIT_S)
        eventually(lambda: any(e["event"] == "time_limit" for e in logs))
    [near] = [e for e in logs if e["event"] == "time_limit_near"]
    [limit] = [e for e in logs if e["event"] == "time_limit"]
    assert near["message_id"] == limit["message_id"]
    handler.release.set()


def test_no_time_limit_means_no_monitor_and_inline_handling(
    manual_storage: InMemoryQueueStorage, queue_name: str, listeners: list[CloudQueueListener[Any]]
) -> None:
    """Without a limit nothing is timed: a listener with one slot handles on its own thread."""
    names: list[str] = []
    listener: CloudQueueListener[dict[str, int]] = CloudQueueListener(
        manual_storage, CloudQueueLocation(queue_name), dict, dequeue_interval_s=0.02
    )
    listeners.append(listener)
    listener.subscribe(lambda item: names.append(threading.current_thread().name))
    listener.start_listener(1)
    put(manual_storage, queue_name, 1)
    eventually(lambda: listener.messages_processed == 1)
    assert names == [f"cloudqueue:{queue_name}:1"]
    assert not any(queue_name in t.name for t in threading.enumerate() if "time" in t.name)


def test_a_stuck_handler_on_every_store_is_poisoned_as_time_limit(
    storage: QueueStorage, queue_name: str, listeners: list[CloudQueueListener[Any]]
) -> None:
    """On real time with a 0.5 s limit, on each store: the blocked message is poisoned after two
    deliveries with reason time_limit while five others are handled."""
    handler = Stuck()
    listener = limited(storage, queue_name, listeners, handler, limit_s=0.5, max_dequeue_count=2)
    put(storage, queue_name, -1, *range(5))
    eventually(lambda: poison_records(storage, queue_name), timeout_s=30)
    eventually(lambda: len(handler.handled) == 5, timeout_s=30)
    [(reason, _, deliveries)] = poison_records(storage, queue_name)
    assert (reason, deliveries) == ("time_limit", 2)
    assert listener.time_limited == 2
    handler.release.set()
    eventually(lambda: storage.approximate_message_count(queue_name) == 0)
    assert storage.approximate_message_count(poison_queue_name(queue_name)) == 1
