"""The middleware seam: a user's own middleware times, skips and re-routes messages on every
store; hooks see the listener's events in order; a middleware that fails is contained; async
hooks run on the listener's event loop -- on the threaded listener and on the event-loop
consumer of ``async def`` handlers alike."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    DeliveryPolicy,
    ListenerStarted,
    ListenerStopped,
    MessageContext,
    Middleware,
    QueueStorage,
    QueueWorkDetected,
    poison_queue_name,
)
from cloudqueue.listener.consumer.middleware import CallNext
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from tests.conftest import make_storage
from tests.support.event_loop_consumer import KINDS, Consuming, start_either
from tests.support.polling import eventually


@pytest.fixture
def listeners() -> Iterator[list[Consuming]]:
    made: list[Consuming] = []
    yield made
    for listener in made:
        listener.stop(timeout_s=10)


def start(
    storage: QueueStorage,
    queue_name: str,
    middleware: list[Middleware],
    listeners: list[Consuming],
    kind: str = "threads",
) -> tuple[Consuming, list[int]]:
    """A listener of ``{"n": ...}`` items with ``middleware``, recording what its handler got;
    a failed message is retried at once. ``event_loop``: the consumer of an async handler."""
    handled: list[int] = []
    listener = start_either(
        kind,
        storage,
        queue_name,
        lambda item: handled.append(item["n"]),
        middleware=middleware,
        delivery=DeliveryPolicy(retry_delay_s=0),
        dequeue_interval_s=0.05,
    )
    listeners.append(listener)
    return listener, handled


def put(storage: QueueStorage, queue_name: str, *numbers: int) -> None:
    for n in numbers:
        storage.put_message(queue_name, f'{{"n": {n}}}')


class Timing(Middleware):
    """Times each message's handling."""

    def __init__(self) -> None:
        self.seconds: dict[int, float] = {}

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> None:
        started = time.perf_counter()
        call_next()
        self.seconds[context.items[0]["n"]] = time.perf_counter() - started


class Router(Middleware):
    """Skips odd numbers, re-routes numbers above 100 to another queue, handles the rest."""

    def __init__(self, overflow: str) -> None:
        self.overflow = overflow

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> None:
        n = context.items[0]["n"]
        if n > 100:
            context.reroute(self.overflow)
        elif n % 2:
            context.skip("odd")
        else:
            call_next()


@pytest.mark.parametrize(
    ("backend", "kind"),
    [("memory", "threads"), ("sqlite", "threads"), ("azure", "threads"), ("memory", "event_loop")],
)
def test_a_users_middleware_times_skips_and_reroutes_on_every_store(
    backend: str,
    kind: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    queue_name: str,
    listeners: list[Consuming],
) -> None:
    """Even numbers are handled (and timed); odd ones are deleted unhandled; 101 and 102 end up
    on the overflow queue, as they were sent, and not on the listener's queue or poison queue."""
    storage = make_storage(backend, request, tmp_path)
    request.addfinalizer(storage.close)
    overflow = f"{queue_name}-overflow"
    storage.create_queue(queue_name)
    storage.create_queue(overflow)
    timing = Timing()
    listener, handled = start(storage, queue_name, [timing, Router(overflow)], listeners, kind)
    put(storage, queue_name, 1, 2, 3, 4, 101, 102)
    eventually(lambda: listener.messages_processed == 6)
    assert sorted(handled) == [2, 4]
    assert sorted(timing.seconds) == [1, 2, 3, 4, 101, 102]
    rerouted = storage.peek_messages(overflow, max_messages=32)
    assert sorted(message.content for message in rerouted) == ['{"n": 101}', '{"n": 102}']
    assert storage.approximate_message_count(queue_name) == 0
    assert storage.approximate_message_count(poison_queue_name(queue_name)) == 0


class Outcomes(Middleware):
    """Keeps each settled message's outcome, and the events in the order they came."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}
        self.events: list[str] = []

    def on_start(self, event: ListenerStarted) -> None:
        self.events.append("start")

    def on_queue_work_detected(self, event: QueueWorkDetected) -> None:
        self.events.append(f"work:{event.messages}")

    def after_settle(self, context: MessageContext[Any]) -> None:
        assert context.outcome is not None
        self.outcomes[context.message.content] = context.outcome.kind + (
            f":{context.outcome.reason}" if context.outcome.reason else ""
        )

    def on_stop(self, event: ListenerStopped) -> None:
        self.events.append(f"stop:{event.processed}")


class GiveUpOnNegatives(Middleware):
    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> None:
        if context.deliverable and context.items[0]["n"] < 0:
            context.give_up("negative", "negative numbers are refused")
        else:
            call_next()


@pytest.mark.parametrize("kind", KINDS)
def test_every_message_is_settled_once_and_its_outcome_seen(
    kind: str, queue_name: str, listeners: list[Consuming]
) -> None:
    """A handled message is deleted, an undecodable one poisoned, a given-up one poisoned with
    the middleware's reason; the hooks see start, work and stop in order."""
    storage = InMemoryQueueStorage()
    storage.create_queue(queue_name)
    outcomes = Outcomes()
    listener, _ = start(storage, queue_name, [outcomes, GiveUpOnNegatives()], listeners, kind)
    put(storage, queue_name, 1, -1)
    storage.put_message(queue_name, "not json")
    eventually(lambda: len(outcomes.outcomes) == 3)
    assert outcomes.outcomes == {
        '{"n": 1}': "deleted",
        '{"n": -1}': "poisoned:negative",
        "not json": "poisoned:undecodable",
    }
    listener.stop(timeout_s=10)
    assert outcomes.events[0] == "start"
    assert outcomes.events[1].startswith("work:")
    assert outcomes.events[-1] == "stop:1"


class Raising(Middleware):
    def __init__(self) -> None:
        self.calls = 0

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> None:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("a bug in a middleware")
        call_next()

    def after_settle(self, context: MessageContext[Any]) -> None:
        raise RuntimeError("another bug")


class Forgetful(Middleware):
    """Neither goes on nor decides: the message must not be deleted unhandled."""

    def __init__(self) -> None:
        self.forgot = False

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> None:
        if not self.forgot:
            self.forgot = True
            return
        call_next()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("middleware", [Raising, Forgetful])
def test_a_failing_middleware_counts_as_a_failed_delivery_and_the_message_comes_back(
    middleware: type[Middleware], kind: str, queue_name: str, listeners: list[Consuming]
) -> None:
    """A middleware that raises (or forgets to go on) fails that delivery like a failing
    observer: logged, retried later, then handled; the thread lives on."""
    storage = InMemoryQueueStorage()
    storage.create_queue(queue_name)
    with capture_logs() as logs:
        listener, handled = start(storage, queue_name, [middleware()], listeners, kind)
        put(storage, queue_name, 7)
        eventually(lambda: listener.messages_failed == 1)
        eventually(lambda: handled == [7], timeout_s=20)
    assert [entry["event"] for entry in logs].count("message_retry_scheduled") == 1
    assert listener.threads_alive == 1
    assert listener.messages_processed == 1


class AsyncGate(Middleware):
    """An async middleware: awaits before going on, on the listener's event loop."""

    def __init__(self) -> None:
        self.loop_threads: set[str] = set()

    async def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> None:
        self.loop_threads.add(threading.current_thread().name)
        await asyncio.sleep(0)
        await call_next()

    async def after_settle(self, context: MessageContext[Any]) -> None:
        self.loop_threads.add(threading.current_thread().name)


@pytest.mark.parametrize(
    ("kind", "loop_thread"), [("threads", ":middleware"), ("event_loop", "test:async-consumer")]
)
def test_async_hooks_run_on_the_listeners_event_loop(
    kind: str, loop_thread: str, queue_name: str, listeners: list[Consuming]
) -> None:
    """An ``async def`` around_handle and after_settle are awaited on one event loop thread:
    the threaded listener's side loop, or the event-loop consumer's own loop (no side loop);
    the handler itself still runs, and the message is deleted."""
    storage = InMemoryQueueStorage()
    storage.create_queue(queue_name)
    gate = AsyncGate()
    listener, handled = start(storage, queue_name, [gate], listeners, kind)
    put(storage, queue_name, 1, 2, 3)
    eventually(lambda: listener.messages_processed == 3)
    assert sorted(handled) == [1, 2, 3]
    assert len(gate.loop_threads) == 1
    assert next(iter(gate.loop_threads)).endswith(loop_thread)


def test_a_setting_or_a_worker_attribute_that_names_no_middleware_is_refused() -> None:
    """Anything but a Middleware (or a class/factory making one) is one ConfigurationError."""
    from cloudqueue.listener import ConfigurationError
    from cloudqueue.listener.consumer.middleware import make_middleware

    with pytest.raises(ConfigurationError, match="is not a Middleware"):
        make_middleware(object(), "example")
    with pytest.raises(ConfigurationError, match="is not a Middleware"):
        CloudQueueListener(
            InMemoryQueueStorage(),
            CloudQueueLocation("work"),
            dict,
            middleware=[object()],  # type: ignore[list-item]
        )
    assert isinstance(make_middleware(Timing, "Timing"), Timing)
