"""Scaling on in-flight capacity: the pure ``targets()`` with several messages in flight per thread.

A thread that keeps ``concurrency`` messages in flight settles concurrency / latency messages a
second, so ``drain_time`` sizes the pool from the measured per-message latency (Little's law: in
flight needed = backlog / target time x latency); the bounds and the rate limit still cap it.
"""

from __future__ import annotations

from cloudqueue.listener.consumer.pool_control import ListenerLoad
from cloudqueue.listener.policies.scaling_rules import (
    ScalingInput,
    drain_time,
    thread_capacity_per_s,
)
from cloudqueue.listener.scaling.scaler import ScalingPolicy, targets


def load(
    *, depth: int, latency_s: float | None, concurrency: int, rate: float | None = None
) -> ListenerLoad:
    return ListenerLoad(
        approximate_depth=depth,
        in_flight=0,
        active_threads=1,
        per_thread_rate_per_s=rate,
        message_latency_s=latency_s,
        concurrency=concurrency,
    )


def test_drain_time_sizes_in_flight_capacity_from_the_measured_latency() -> None:
    """800 waiting, 10 s target, 0.2 s per message: 16 in flight needed, 8 per thread: 2 threads."""
    policy = ScalingPolicy(rule=drain_time(10), max_threads=16)
    assert targets(load(depth=800, latency_s=0.2, concurrency=8, rate=5), policy) == (2, 2)


def test_one_message_per_thread_keeps_the_measured_rate() -> None:
    """With concurrency 1 the thread's measured rate decides, as before: 800 / (5 x 10) = 16."""
    policy = ScalingPolicy(rule=drain_time(10), max_threads=32)
    assert targets(load(depth=800, latency_s=0.2, concurrency=1, rate=5), policy) == (16, 16)


def test_max_threads_and_the_rate_limit_still_cap_growth() -> None:
    """A latency that asks for 50 threads gets max_threads; a rate limit of 8/s lowers it to what
    threads of capacity 2/s keep busy (4, plus one for the round trips between batches)."""
    slow = load(depth=10_000, latency_s=1.0, concurrency=2, rate=1)
    assert targets(slow, ScalingPolicy(rule=drain_time(100), max_threads=16)) == (16, 16)
    limited = ScalingPolicy(rule=drain_time(100), max_threads=16, max_messages_per_s=8)
    assert targets(slow, limited) == (5, 5)


def test_a_thread_s_capacity_falls_back_to_its_rate_until_latency_is_measured() -> None:
    """No latency yet: the measured rate (or None) stands in."""
    unmeasured = ScalingInput(depth=1, active_threads=1, per_thread_rate_per_s=3.0, concurrency=8)
    assert thread_capacity_per_s(unmeasured) == 3.0
    measured = ScalingInput(
        depth=1, active_threads=1, per_thread_rate_per_s=3.0, message_latency_s=0.5, concurrency=8
    )
    assert thread_capacity_per_s(measured) == 16.0
