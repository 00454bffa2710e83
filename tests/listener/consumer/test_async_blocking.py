"""A blocking call inside an ``async def`` handler on the event-loop consumer: the loop's watch
names the handler, the line and the call while the loop is held, then how long it was held."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from structlog.testing import capture_logs

from cloudqueue.listener.consumer.coroutines import LoopThread
from cloudqueue.listener.consumer.event_loop.watch import LoopWatch
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.testing import ManualClock
from cloudqueue.listener.wire.codec import MessageCodec
from tests.support.event_loop_consumer import ONE_TASK, running_async_consumer
from tests.support.polling import eventually

CODEC = MessageCodec(int)


def events(logs: Sequence[Mapping[str, Any]], name: str) -> list[Mapping[str, Any]]:
    return [entry for entry in logs if entry["event"] == name]


def test_a_handler_blocking_the_loop_is_named_with_its_line_and_how_long_it_held_the_loop(
    queue_name: str,
) -> None:
    """A sync wait in ``async def handle`` holds the loop past ``blocked_after_s``: a warning
    names the handler, the line of the call and the call, with the asyncio.to_thread hint, while
    it lasts; once released, a second says how long it held the loop; the message is handled."""
    storage = InMemoryQueueStorage()
    storage.create_queue(queue_name)
    storage.put_message(queue_name, CODEC.encode(1))
    release = threading.Event()
    line = 0

    async def handle(item: int) -> None:
        nonlocal line
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        release.wait(30)  # the fault under test: a sync call holding the loop's thread

    with (
        capture_logs() as logs,
        running_async_consumer(
            storage, queue_name, handle, CODEC, scaling=ONE_TASK, blocked_after_s=0.1
        ) as consumer,
    ):
        [blocked] = eventually(lambda: events(logs, "event_loop_blocked"))
        release.set()
        [unblocked] = eventually(lambda: events(logs, "event_loop_unblocked"))
        eventually(lambda: consumer.counters.processed == 1)
    assert blocked["log_level"] == unblocked["log_level"] == "warning"
    assert blocked["handler"] == f"{__name__}.{handle.__qualname__}"
    assert blocked["at"] == f"{__file__}:{line}"
    assert blocked["call"] == "threading.Event.wait"
    assert "asyncio.to_thread" in blocked["hint"]
    assert blocked["blocked_s"] >= 0.1
    assert unblocked["handler"] == blocked["handler"]
    assert unblocked["blocked_s"] >= blocked["blocked_s"]


async def started(watch: LoopWatch) -> None:
    watch.start()


def test_a_callback_is_reported_once_past_the_threshold_and_its_end_with_the_time_it_held() -> None:
    """Looked at on a manual clock: an idle loop is never reported, however long; a callback
    holding it 59 s of a 60 s threshold is not; at 61 s it is, once; after it ends, its end is
    reported with the 61 s it held the loop."""
    clock = ManualClock()
    loop = LoopThread("test:watched-loop")
    watch = LoopWatch("q", blocked_after_s=60, clock=clock)  # its own looks: 15 s apart
    loop.run(started(watch))
    entered, release = threading.Event(), threading.Event()

    async def stuck() -> None:
        entered.set()
        release.wait(30)  # holds the loop's thread

    try:
        with capture_logs() as logs:
            watch.check()
            clock.advance(600)
            watch.check()  # idle for 10 minutes: waiting for work, not blocked
            running = loop.submit(stuck())
            assert entered.wait(30)
            watch.check()
            clock.advance(59)
            watch.check()
            quiet = list(logs)
            clock.advance(2)
            watch.check()
            watch.check()
            release.set()
            running.result(30)
            watch.check()
    finally:
        release.set()
        watch.stop()
        loop.close()
    assert quiet == []
    assert [entry["event"] for entry in logs] == ["event_loop_blocked", "event_loop_unblocked"]
    blocked, unblocked = logs
    assert blocked["handler"] == f"{__name__}.{stuck.__qualname__}"
    assert (blocked["blocked_s"], unblocked["blocked_s"]) == (61, 61)
