"""The event-loop consumer on virtual time: renewal of a long handler, and an idle spell of five
minutes followed by a burst (the loop runs on a ``VirtualTimeLoop``, the store on its clock)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from functools import partial

import pytest

from cloudqueue.listener.consumer.coroutines import LoopThread
from cloudqueue.listener.consumer.event_loop.consumer import AsyncConsumer
from cloudqueue.listener.scaling.scaler import ScalingPolicy, idle_delay_s
from cloudqueue.listener.stores.async_storage import DirectAsyncStorage
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.testing import VirtualClock
from cloudqueue.listener.virtual_loop import VirtualTimeLoop
from cloudqueue.listener.wire.codec import MessageCodec

CODEC = MessageCodec(int)
IDLE = ScalingPolicy(min_threads=1, max_threads=4, max_idle_s=15.0)
"""A 15 s idle cap keeps five virtual minutes to a few dozen wake-ups of real time."""


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def loop(clock: VirtualClock) -> Iterator[LoopThread]:
    thread = LoopThread("test:async-consumer", loop_factory=partial(VirtualTimeLoop, clock))
    yield thread
    thread.close()


def run_time_until(clock: VirtualClock, done: Callable[[], bool], *, limit_s: float) -> None:
    """Move virtual time from wake-up to wake-up (the loop thread waiting) until ``done``."""
    end = clock.monotonic() + limit_s
    while not done():
        assert clock.monotonic() <= end, f"not done within {limit_s} virtual seconds"
        clock.advance_when_all_waiting(lambda: 1, timeout_s=1)


def test_a_handler_longer_than_the_visibility_timeout_keeps_its_message(
    clock: VirtualClock, loop: LoopThread, queue_name: str
) -> None:
    """A 35 s handler on a 10 s visibility timeout: its message is renewed at half the timeout,
    never redelivered, and deleted when the handler returns."""
    storage = InMemoryQueueStorage(clock=clock)
    storage.create_queue(queue_name)
    storage.put_message(queue_name, CODEC.encode(1))
    calls: list[int] = []

    async def handle(item: int) -> None:
        calls.append(item)
        await asyncio.sleep(35)

    consumer = AsyncConsumer(
        DirectAsyncStorage(storage),
        queue_name,
        handle,
        CODEC,
        scaling=IDLE,
        visibility_timeout_s=10,
    )
    running = loop.submit(consumer.run())
    run_time_until(clock, lambda: consumer.counters.processed == 1, limit_s=120)
    loop.submit(_stop(consumer)).result(10)
    running.result(10)
    assert calls == [1]
    assert consumer.leases.renewals >= 6
    assert storage.approximate_message_count(queue_name) == 0


def test_after_five_idle_minutes_a_burst_is_picked_up_within_one_idle_wait(
    clock: VirtualClock, loop: LoopThread, queue_name: str
) -> None:
    """Idle for five minutes, the consumer polls no more often than the idle back-off allows (the
    threaded path's curve, at its shortest jitter); a burst of 100 then starts within one capped
    idle wait and is handled with no error."""
    storage = InMemoryQueueStorage(clock=clock)
    handled: list[int] = []

    async def handle(item: int) -> None:
        handled.append(item)

    consumer = AsyncConsumer(DirectAsyncStorage(storage), queue_name, handle, CODEC, scaling=IDLE)
    running = loop.submit(consumer.run())
    idle_from = clock.monotonic()
    run_time_until(clock, lambda: clock.monotonic() - idle_from >= 300, limit_s=320)
    idle_gets = consumer.gets
    for item in range(100):
        storage.put_message(queue_name, CODEC.encode(item))
    burst_at = clock.monotonic()
    run_time_until(clock, lambda: len(handled) == 100, limit_s=60)
    pickup_s = clock.monotonic() - burst_at
    loop.submit(_stop(consumer)).result(10)
    running.result(10)
    assert idle_gets <= most_polls(IDLE, clock.monotonic() - idle_from)
    assert pickup_s <= IDLE.max_idle_s
    assert consumer.counters.dequeue_errors == 0
    assert sorted(handled) == list(range(100))


def most_polls(policy: ScalingPolicy, seconds: float) -> int:
    """The most gets one task makes in ``seconds`` of idle back-off: every wait at its shortest."""

    class Lowest:
        def uniform(self, a: float, b: float) -> float:
            return a

    polls, waited = 1, 0.0
    while waited < seconds:
        waited += idle_delay_s(polls, policy, Lowest())
        polls += 1
    return polls


async def _stop(consumer: AsyncConsumer[int]) -> None:
    consumer.stop()


def test_a_handler_finishing_in_the_stop_grace_keeps_its_message_renewed(
    clock: VirtualClock, loop: LoopThread, queue_name: str
) -> None:
    """Stopped while a 30 s handler runs on a 10 s visibility timeout: renewal goes on through
    the grace, so at 20 s no other consumer can take the message, and it is deleted at the end."""
    storage = InMemoryQueueStorage(clock=clock)
    storage.create_queue(queue_name)
    storage.put_message(queue_name, CODEC.encode(1))
    started: list[float] = []

    async def handle(item: int) -> None:
        started.append(clock.monotonic())
        await asyncio.sleep(30)

    consumer = AsyncConsumer(
        DirectAsyncStorage(storage),
        queue_name,
        handle,
        CODEC,
        scaling=IDLE,
        visibility_timeout_s=10,
        grace_s=60,
    )
    running = loop.submit(consumer.run())
    run_time_until(clock, lambda: bool(started), limit_s=30)
    loop.submit(_stop(consumer)).result(10)
    run_time_until(clock, lambda: clock.monotonic() >= started[0] + 20, limit_s=30)
    taken_by_another = storage.get_messages(queue_name, max_messages=1, visibility_timeout_s=1)
    run_time_until(clock, running.done, limit_s=60)
    running.result(10)
    assert taken_by_another == []
    assert consumer.counters.processed == 1
    assert storage.approximate_message_count(queue_name) == 0
