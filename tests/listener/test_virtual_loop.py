"""An asyncio event loop on a ``VirtualClock``: its timers wait for virtual time, its idle wait
counts as a wait on the clock, and work submitted from another thread still wakes it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from functools import partial

import pytest

from cloudqueue.listener.consumer.coroutines import LoopThread
from cloudqueue.listener.testing import VirtualClock
from cloudqueue.listener.virtual_loop import VirtualTimeLoop
from tests.support.polling import eventually


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def loop(clock: VirtualClock) -> Iterator[LoopThread]:
    thread = LoopThread("test:virtual", loop_factory=partial(VirtualTimeLoop, clock))
    yield thread
    thread.close()


def wait_until_waiting(clock: VirtualClock, count: int) -> None:
    assert clock.all_waiting(lambda: count, timeout_s=10), clock


def test_a_sleep_ends_when_virtual_time_reaches_it_and_not_before(
    clock: VirtualClock, loop: LoopThread
) -> None:
    """``asyncio.sleep(5)`` on the loop: still asleep after 4 virtual seconds, done at 5; the
    loop's ``time()`` is the clock's, and the coroutine is counted as awaiting meanwhile."""

    async def nap() -> float:
        await asyncio.sleep(5)
        return asyncio.get_running_loop().time()

    napping = loop.submit(nap())
    eventually(lambda: loop.awaiting == 1)  # started: the loop is idle until its timer
    wait_until_waiting(clock, 1)
    clock.advance(4)
    wait_until_waiting(clock, 1)
    assert not napping.done()
    assert clock.advance_to_next_wake_up() == 1
    assert napping.result(10) == clock.monotonic() == 1_005.0
    assert loop.awaiting == 0


def test_an_idle_loop_waits_without_an_end_and_does_not_move_time(
    clock: VirtualClock, loop: LoopThread
) -> None:
    """With no timer the loop still counts as waiting, but gives no wake-up to move time to;
    a coroutine submitted from another thread wakes it at once."""
    assert loop.run(asyncio.sleep(0)) is None
    wait_until_waiting(clock, 1)
    assert clock.advance_to_next_wake_up() == 0.0
    done = threading.Event()

    async def note() -> None:
        done.set()

    loop.run(note())
    assert done.is_set()
    assert clock.monotonic() == 1_000.0
