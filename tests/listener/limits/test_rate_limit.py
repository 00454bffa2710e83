"""Rate limits: the pure bucket, the in-process limiter, and the listener and scaler with one."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest
from pydantic import SecretStr, ValidationError

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryQueueStorage,
    MessageCodec,
    Middleware,
)
from cloudqueue.listener.consumer.pool_control import ListenerLoad
from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.limits.limiter import LocalRateLimiter
from cloudqueue.listener.limits.redis_limiter import RedisRateLimiter
from cloudqueue.listener.middleware.rate_limit import RateLimit
from cloudqueue.listener.policies.rate_limit import (
    capped_by_limit,
    default_burst,
    reserve,
    threads_for_limit,
)
from cloudqueue.listener.scaling.scaler import ScalingPolicy, targets
from cloudqueue.listener.testing import ManualClock
from cloudqueue.workers import QueueWorker, WorkerHost
from cloudqueue.workers.settings import CloudQueueSettings, RateLimitSettings, TriggerSettings
from tests.support.event_loop_consumer import KINDS, Consuming, start_either
from tests.support.polling import eventually

# -- the pure bucket -----------------------------------------------------------------------------


def grants(call_times_s: list[float], *, rate: float, burst: int) -> list[float]:
    """When each call, made at the given times, is let through."""
    tat: float | None = None
    granted = []
    for now in call_times_s:
        reservation = reserve(tat, now_s=now, max_messages_per_s=rate, burst=burst)
        tat = reservation.tat_s
        granted.append(now + reservation.wait_s)
    return granted


def test_a_new_bucket_starts_empty_and_paces_from_the_first_message() -> None:
    """Callers arriving together are let through one interval apart, the first at once."""
    assert grants([0.0] * 5, rate=10, burst=3) == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])


def test_after_idling_a_burst_passes_at_once_and_no_more() -> None:
    """An idle bucket refills to ``burst`` tokens: that many pass at once, the next waits."""
    start = [0.0]  # the first message, then a long idle
    later = [100.0] * 4
    granted = grants(start + later, rate=10, burst=3)
    assert granted[1:] == pytest.approx([100.0, 100.0, 100.0, 100.1])


def test_the_bucket_never_holds_more_than_its_burst() -> None:
    """However long the idle, the tokens saved are capped at the burst."""
    granted = grants([0.0, 1_000.0, *([1_000.0] * 10)], rate=1, burst=2)
    assert sum(1 for t in granted[1:] if t == 1_000.0) == 2


@pytest.mark.parametrize("seed", range(5))
def test_no_window_lets_more_than_rate_times_length_plus_burst_through(seed: int) -> None:
    """Whatever the arrival pattern, grants in any window of W seconds are <= rate x W + burst."""
    rng = random.Random(seed)
    rate, burst = 50.0, 4
    arrivals = sorted(rng.uniform(0, 20) for _ in range(2_000))
    granted = sorted(grants(arrivals, rate=rate, burst=burst))
    for window_s in (0.1, 1.0, 5.0):
        end = 0
        for start, first in enumerate(granted):
            while end < len(granted) and granted[end] < first + window_s:
                end += 1
            assert end - start <= rate * window_s + burst + 1e-9


def test_a_wait_is_never_negative_and_late_callers_wait_nothing() -> None:
    """A caller arriving after its slot passed goes at once."""
    first = reserve(None, now_s=0.0, max_messages_per_s=2, burst=1)
    late = reserve(first.tat_s, now_s=10.0, max_messages_per_s=2, burst=1)
    assert (first.wait_s, late.wait_s) == (0.0, 0.0)


def test_the_default_burst_is_a_twentieth_of_a_second_of_the_limit_and_at_least_one() -> None:
    """1,000/s bursts 50; 5/s bursts 1."""
    assert (default_burst(1_000), default_burst(5)) == (50, 1)


@pytest.mark.parametrize("limit", [0.0, -1.0, float("nan"), float("inf")])
def test_a_limit_that_is_not_a_positive_number_is_refused(limit: float) -> None:
    """ConfigurationError names the bad value."""
    with pytest.raises(ConfigurationError, match="max_messages_per_s"):
        LocalRateLimiter(limit, burst=1)


# -- threads a limit keeps busy ------------------------------------------------------------------


def test_threads_for_a_limit_follow_littles_law_plus_one() -> None:
    """10 msg/s at 0.5 s a message keeps 5 threads busy; one more covers the get between batches."""
    assert threads_for_limit(10, per_thread_rate_per_s=2.0) == 6
    assert threads_for_limit(1_000, per_thread_rate_per_s=5_000.0) == 2


def test_without_a_measurement_or_a_limit_the_rule_stands() -> None:
    """No measured rate yet, or no limit: the scaling rule's count is not capped."""
    assert capped_by_limit(16, 10, per_thread_rate_per_s=None) == 16
    assert capped_by_limit(16, None, per_thread_rate_per_s=2.0) == 16
    assert capped_by_limit(16, 10, per_thread_rate_per_s=2.0) == 6


def test_the_scaler_does_not_grow_past_what_the_limit_keeps_busy() -> None:
    """A deep backlog asks for 16 threads; a 10/s limit at 2 msg/s a thread caps it at 6."""
    load = ListenerLoad(
        approximate_depth=10_000, in_flight=0, active_threads=1, per_thread_rate_per_s=2.0
    )
    assert targets(load, ScalingPolicy(max_threads=16)) == (16, 16)
    assert targets(load, ScalingPolicy(max_threads=16, max_messages_per_s=10)) == (6, 6)


def test_min_threads_wins_over_the_limit_cap() -> None:
    """The configured floor is kept even when the limit needs fewer threads."""
    load = ListenerLoad(
        approximate_depth=10_000, in_flight=0, active_threads=4, per_thread_rate_per_s=1_000.0
    )
    policy = ScalingPolicy(min_threads=4, max_threads=16, max_messages_per_s=10)
    assert targets(load, policy) == (4, 4)


# -- the in-process limiter ----------------------------------------------------------------------


def test_the_local_limiter_waits_on_the_sleeper_one_interval_per_message(
    clock: ManualClock,
) -> None:
    """With a manual clock, five turns at 20/s take 0.2 virtual seconds of waits."""
    limiter = LocalRateLimiter(20, burst=1, clock=clock, sleeper=clock)
    stop = threading.Event()
    waited = [limiter.acquire(stop) for _ in range(5)]
    assert waited == pytest.approx([0.0, 0.05, 0.05, 0.05, 0.05])
    assert clock.waits == pytest.approx([0.05] * 4)


def test_a_stop_ends_a_limiter_wait_at_once() -> None:
    """A thread waiting a long turn returns as soon as the stop event is set."""
    limiter = LocalRateLimiter(0.001, burst=1)  # one message every 1,000 s
    stop = threading.Event()
    limiter.acquire(stop)  # the first goes at once; the second would wait 1,000 s
    waiter = threading.Thread(target=limiter.acquire, args=(stop,))
    waiter.start()
    stop.set()
    waiter.join(5)
    assert not waiter.is_alive()


def test_threads_sharing_a_local_limiter_line_up_one_interval_apart() -> None:
    """Eight threads reserving at once get eight distinct slots spaced by the interval."""
    limiter = LocalRateLimiter(100, burst=1, clock=ManualClock())
    waits: list[float] = []
    lock = threading.Lock()

    def take() -> None:
        wait_s = limiter.reserve_s()
        with lock:
            waits.append(wait_s)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert sorted(waits) == pytest.approx([n * 0.01 for n in range(8)])


# -- the listener with a limit -------------------------------------------------------------------


@pytest.fixture
def limited_listener(
    clock: ManualClock, queue_name: str
) -> Iterator[Callable[..., CloudQueueListener[Any]]]:
    """Builds listeners with a rate limiter and always stops them."""
    made: list[CloudQueueListener[Any]] = []

    def make(storage: InMemoryQueueStorage, **options: Any) -> CloudQueueListener[Any]:
        listener: CloudQueueListener[Any] = CloudQueueListener(
            storage, CloudQueueLocation(queue_name, visibility_timeout_s=30), dict, **options
        )
        made.append(listener)
        return listener

    yield make
    for listener in made:
        listener.stop(timeout_s=5)


@pytest.fixture
def consumers() -> Iterator[list[Consuming]]:
    """Consumers of either kind, always stopped."""
    made: list[Consuming] = []
    yield made
    for consumer in made:
        consumer.stop(timeout_s=5)


def put_items(storage: InMemoryQueueStorage, queue_name: str, count: int) -> None:
    codec = MessageCodec(dict)
    for n in range(count):
        storage.put_message(queue_name, codec.encode({"n": n}))


def rate_per_s(timestamps: list[float]) -> float:
    """Messages a second between the first and the last handled message."""
    ordered = sorted(timestamps)
    return (len(ordered) - 1) / (ordered[-1] - ordered[0])


@pytest.mark.parametrize("kind", KINDS)
def test_a_listener_with_a_limit_handles_at_that_rate_in_virtual_time(
    kind: str,
    clock: ManualClock,
    manual_storage: InMemoryQueueStorage,
    queue_name: str,
    consumers: list[Consuming],
) -> None:
    """400 messages at 50/s: the rate between the first and the last is 50/s within 10 %."""
    put_items(manual_storage, queue_name, 400)
    limiter = LocalRateLimiter(50, clock=clock, sleeper=clock)
    handled_at: list[float] = []
    record = lambda _: handled_at.append(clock.monotonic())  # noqa: E731
    middleware: list[Middleware] = [RateLimit(limiter)]
    listener = start_either(
        kind, manual_storage, queue_name, record, middleware=middleware, clock=clock, sleeper=clock
    )
    consumers.append(listener)
    eventually(lambda: listener.messages_processed == 400)
    assert rate_per_s(handled_at) == pytest.approx(50, rel=0.10)


def test_the_measured_throughput_is_the_handlers_pace_not_the_limits(
    clock: ManualClock,
    manual_storage: InMemoryQueueStorage,
    queue_name: str,
    limited_listener: Callable[..., CloudQueueListener[Any]],
) -> None:
    """Waits for the limit stay out of the per-thread rate the scaler sizes the pool with."""
    put_items(manual_storage, queue_name, 64)
    limiter = LocalRateLimiter(10, clock=clock, sleeper=clock)
    listener = limited_listener(
        manual_storage, middleware=[RateLimit(limiter)], clock=clock, sleeper=clock
    )
    listener.subscribe(lambda _: clock.advance(0.01))  # a handler taking 10 ms
    listener.start_listener(1)
    eventually(lambda: listener.messages_processed == 64)
    measured = listener.meters.throughput.per_thread_rate_per_s
    assert measured is not None
    assert measured == pytest.approx(100, rel=0.10)


def test_a_real_clock_drain_of_2000_messages_stays_within_10_percent_of_the_limit(
    queue_name: str, limited_listener: Callable[..., CloudQueueListener[Any]]
) -> None:
    """Four threads, 1,000/s: the rate computed from handling timestamps is at most 1,100/s."""
    storage = InMemoryQueueStorage()
    storage.create_queue(queue_name)
    put_items(storage, queue_name, 2_000)
    listener = limited_listener(storage, middleware=[RateLimit(LocalRateLimiter(1_000))])
    handled_at: list[float] = []
    lock = threading.Lock()

    def record(_: object) -> None:
        with lock:
            handled_at.append(time.monotonic())

    listener.subscribe(record)
    listener.start_listener(4)
    eventually(lambda: listener.messages_processed == 2_000, timeout_s=60)
    assert rate_per_s(handled_at) <= 1_000 * 1.10


def test_held_messages_stay_hidden_while_they_wait_for_the_limit(queue_name: str) -> None:
    """A batch waiting past the visibility timeout is renewed: an eager second thread gets none."""
    storage = InMemoryQueueStorage()
    storage.create_queue(queue_name)
    put_items(storage, queue_name, 8)
    listener: CloudQueueListener[Any] = CloudQueueListener(
        storage,
        CloudQueueLocation(queue_name, visibility_timeout_s=1),
        dict,
        dequeue_interval_s=0.05,
        middleware=[RateLimit(LocalRateLimiter(4, burst=1))],
    )
    handled: list[int] = []
    lock = threading.Lock()

    def record(item: dict[str, int]) -> None:
        with lock:
            handled.append(item["n"])

    listener.subscribe(record)
    try:
        listener.start_listener(2)  # one thread takes all 8; the last waits ~1.75 s, past 1 s
        eventually(lambda: listener.messages_processed == 8, timeout_s=30)
    finally:
        listener.stop(timeout_s=5)
    assert sorted(handled) == list(range(8))
    assert listener.visibility_renewals > 0


@pytest.mark.parametrize("kind", KINDS)
def test_stop_ends_the_wait_for_the_limit_and_releases_the_held_messages(
    kind: str, queue_name: str, consumers: list[Consuming]
) -> None:
    """At one message per 100 s, stop returns at once and the nine waiting messages are back
    (on the event loop, the wait is on a worker thread, ended by the same stop)."""
    storage = InMemoryQueueStorage()
    storage.create_queue(queue_name)
    put_items(storage, queue_name, 10)
    middleware: list[Middleware] = [RateLimit(LocalRateLimiter(0.01, burst=1))]
    listener = start_either(kind, storage, queue_name, lambda _: None, middleware=middleware)
    consumers.append(listener)
    eventually(lambda: listener.messages_processed == 1)
    assert listener.stop(timeout_s=5)
    released = storage.get_messages(queue_name, max_messages=32, visibility_timeout_s=30)
    assert len(released) == 9


# -- settings ------------------------------------------------------------------------------------


def test_a_fleet_limit_without_redis_is_refused() -> None:
    """rate_limit.fleet needs triggers.url, and a limit to share."""
    with pytest.raises(ValidationError, match=r"triggers\.url"):
        CloudQueueSettings.model_validate({"rate_limit": {"max_messages_per_s": 10, "fleet": True}})
    with pytest.raises(ValidationError, match="max_messages_per_s"):
        RateLimitSettings(fleet=True)


@pytest.mark.parametrize("limit", ["0", "-5", "inf", "nan", "fast"])
def test_a_limit_that_is_not_a_positive_finite_number_is_refused_at_start(limit: str) -> None:
    """The settings error names rate_limit.max_messages_per_s."""
    with pytest.raises(ValidationError, match="max_messages_per_s"):
        CloudQueueSettings.model_validate({"rate_limit": {"max_messages_per_s": limit}})


def test_the_limit_reaches_the_scaling_policy() -> None:
    """The scaler caps its target with the worker's limit."""
    settings = CloudQueueSettings(rate_limit=RateLimitSettings(max_messages_per_s=25))
    assert settings.scaling_policy().max_messages_per_s == 25


# -- hosting -------------------------------------------------------------------------------------


class Limited(QueueWorker[dict[str, int]]):
    queue_name = "limited"
    settings: ClassVar[dict[str, dict[str, Any]]] = {"rate_limit": {"max_messages_per_s": 25}}

    def handle(self, item: dict[str, int]) -> None:
        """Nothing to do."""


class FleetLimited(Limited):
    settings: ClassVar[dict[str, dict[str, Any]]] = {
        "rate_limit": {"max_messages_per_s": 25, "fleet": True}
    }


def test_a_workers_own_limit_reaches_its_listener_and_its_scaler() -> None:
    """Per-worker settings: a local limiter of 25/s, and the scaler caps with 25/s."""
    host = WorkerHost([Limited], CloudQueueSettings(), storage=InMemoryQueueStorage())
    (hosted,) = host.hosted
    [limit] = [m for m in hosted.listener.middleware if isinstance(m, RateLimit)]
    limiter = limit.limiter
    assert isinstance(limiter, LocalRateLimiter)
    assert limiter.max_messages_per_s == 25
    assert hosted.scaler.policy.max_messages_per_s == 25


def test_a_fleet_limit_uses_one_redis_key_per_account_and_queue() -> None:
    """With triggers.url the fleet limiter's key names the store's account and the queue."""
    settings = CloudQueueSettings(
        connection_string=SecretStr("memory://"),
        triggers=TriggerSettings(url=SecretStr("redis://127.0.0.1:1/0")),
    )
    host = WorkerHost([FleetLimited], settings, storage=InMemoryQueueStorage())
    [limit] = [m for m in host.hosted[0].listener.middleware if isinstance(m, RateLimit)]
    limiter = limit.limiter
    assert isinstance(limiter, RedisRateLimiter)
    assert limiter.key == "cloudqueue:rate-limit:memory:limited"
    limiter.close()


def test_a_worker_asking_for_a_fleet_limit_without_redis_is_refused() -> None:
    """A worker's own fleet = true with no triggers.url fails at start, naming the setting."""
    # Per-worker settings are validated whole (issue 9), so this is refused before any thread.
    with pytest.raises((ConfigurationError, ValidationError), match=r"triggers\.url"):
        WorkerHost([FleetLimited], CloudQueueSettings(), storage=InMemoryQueueStorage())
