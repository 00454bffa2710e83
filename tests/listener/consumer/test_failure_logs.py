"""What a handler failure leaves in the log: one readable line each time, the traceback at warning
the first time an error is seen, repeats counted, and the last traceback at error on poisoning."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryQueueStorage,
    MessageCodec,
)
from cloudqueue.listener.errors import PermanentFailure
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.testing import ManualClock
from cloudqueue.workers import QueueWorker
from cloudqueue.workers.host.async_handler import AsyncHandlerRunner
from cloudqueue.workers.testing import run_until_drained
from tests.support.polling import eventually


class Listen(Protocol):
    def __call__(
        self, handler: Callable[[int], Any], *, max_dequeue_count: int = 3
    ) -> CloudQueueListener[int]: ...


@pytest.fixture
def listen(
    manual_storage: InMemoryQueueStorage, clock: ManualClock, queue_name: str
) -> Iterator[Listen]:
    """Starts a one-thread listener running its handler as the worker host does (async-capable)."""
    made: list[tuple[CloudQueueListener[int], AsyncHandlerRunner]] = []

    def make(
        handler: Callable[[int], Any], *, max_dequeue_count: int = 3
    ) -> CloudQueueListener[int]:
        listener: CloudQueueListener[int] = CloudQueueListener(
            manual_storage,
            CloudQueueLocation(queue_name, visibility_timeout_s=30),
            int,
            clock=clock,
            sleeper=clock,
            delivery=DeliveryPolicy(max_dequeue_count=max_dequeue_count),
        )
        runner = AsyncHandlerRunner(handler)
        listener.subscribe(runner)
        listener.start_listener(1)
        made.append((listener, runner))
        return listener

    yield make
    for listener, runner in made:
        listener.stop(5)
        runner.close()


def put(storage: InMemoryQueueStorage, queue_name: str, number: int) -> None:
    storage.put_message(queue_name, MessageCodec(int).encode(number))


def test_each_failure_is_one_line_saying_what_failed_and_what_happens_next(
    manual_storage: InMemoryQueueStorage, queue_name: str, listen: Listen
) -> None:
    """Two retries then the poison queue: three warning lines naming the error, the message, its
    dequeue count and the outcome; one error-level record (the traceback), no observer repr."""
    put(manual_storage, queue_name, 7)

    async def handle(number: int) -> None:
        raise ValueError(f"order {number} has no customer")

    with capture_logs() as records:
        listener = listen(handle)
        eventually(lambda: listener.messages_poisoned == 1)
    failures = [r for r in records if r["event"] in ("message_retry_scheduled", "message_poisoned")]
    assert [r["event"] for r in failures] == ["message_retry_scheduled"] * 2 + ["message_poisoned"]
    for count, record in enumerate(failures, start=1):
        assert record["log_level"] == "warning"
        assert record["error"] == "ValueError: order 7 has no customer"
        assert record["dequeue_count"] == count
        assert record["message_id"]
    assert all(isinstance(r["retry_in_s"], int) for r in failures[:2])
    assert failures[2]["reason"] == "max_dequeue_count_exceeded"
    errors = [r for r in records if r["log_level"] in ("error", "critical")]
    assert [r["event"] for r in errors] == ["poisoned_handler_traceback"]
    assert not [r for r in records if "observer" in r or "exc_info" in r]


def test_the_first_traceback_of_an_error_is_a_warning_and_the_poisoning_one_an_error(
    manual_storage: InMemoryQueueStorage, queue_name: str, listen: Listen
) -> None:
    """The same error three times gives one warning traceback and, when the message is poisoned,
    one error traceback; both show the handler's frame and none of reactivex's, asyncio's or
    cloudqueue's own."""
    put(manual_storage, queue_name, 7)

    async def handle_order(number: int) -> None:
        raise ValueError(f"order {number} has no customer")

    with capture_logs() as records:
        listener = listen(handle_order)
        eventually(lambda: listener.messages_poisoned == 1)
    [first] = [r for r in records if r["event"] == "handler_traceback"]
    [last] = [r for r in records if r["event"] == "poisoned_handler_traceback"]
    assert (first["log_level"], last["log_level"]) == ("warning", "error")
    for record in (first, last):
        text = record["exception"]
        assert "handle_order" in text
        assert "ValueError: order 7 has no customer" in text
        for internal in ("reactivex", "asyncio", "subscribers.py", "async_handler.py"):
            assert internal not in text


def test_a_repeated_error_is_counted_not_logged_again(
    manual_storage: InMemoryQueueStorage, queue_name: str, listen: Listen
) -> None:
    """Twelve failures of one bug (four messages, three deliveries each): one traceback, one
    line saying it happened 10 times, and one error traceback per poisoned message."""
    for number in range(4):
        put(manual_storage, queue_name, number)

    def handle(number: int) -> None:
        raise ValueError(f"order {number} has no customer")

    with capture_logs() as records:
        listener = listen(handle)
        eventually(lambda: listener.messages_poisoned == 4)
    events = [r["event"] for r in records]
    assert events.count("handler_traceback") == 1
    [repeated] = [r for r in records if r["event"] == "handler_error_repeated"]
    assert repeated["times"] == 10
    assert "test_failure_logs.py:" in repeated["raised_at"]
    assert events.count("poisoned_handler_traceback") == 4


def test_a_permanent_failure_is_one_warning_naming_the_poison_reason(
    manual_storage: InMemoryQueueStorage, queue_name: str, listen: Listen
) -> None:
    """A deliberate PermanentFailure is not an error-level record: one line, reason included."""
    put(manual_storage, queue_name, 4)

    def handle(_: int) -> None:
        raise PermanentFailure("customer account closed")

    with capture_logs() as records:
        listener = listen(handle)
        eventually(lambda: listener.messages_poisoned == 1)
    [record] = [r for r in records if r["log_level"] in ("warning", "error", "critical")]
    assert record["event"] == "message_poisoned"
    assert record["reason"] == "permanent_failure"
    assert record["error"] == "PermanentFailure: customer account closed"
    assert record["dequeue_count"] == 1


def test_a_failure_given_up_at_its_first_delivery_prints_one_traceback(
    manual_storage: InMemoryQueueStorage, queue_name: str, listen: Listen
) -> None:
    """A message poisoned by its first failure (one delivery allowed) leaves one traceback, at
    error, not the same one twice."""
    put(manual_storage, queue_name, 5)

    def handle(number: int) -> None:
        raise ValueError(f"order {number} cannot be retried")

    with capture_logs() as records:
        listener = listen(handle, max_dequeue_count=1)
        eventually(lambda: listener.messages_poisoned == 1)
    tracebacks = [r for r in records if "exception" in r]
    assert [r["event"] for r in tracebacks] == ["poisoned_handler_traceback"]
    assert "order 5 cannot be retried" in tracebacks[0]["exception"]


class OrderWorker(QueueWorker[int]):
    queue_name = "orders"
    settings = {"poison": {"max_dequeue_count": 2}}  # noqa: RUF012 - as users write it

    def handle(self, item: int) -> None:
        raise ValueError(f"order {item} has no customer")


def test_under_run_until_drained_a_traceback_shows_only_the_users_frames() -> None:
    """The testing helper's own wrapper (which records what the handler finished) is not one of
    the frames a traceback shows: the handler's frame is, as under ``cloudqueue run``."""
    with capture_logs() as records:
        run_until_drained(OrderWorker(), [8], fail_fast=False)
    texts = [r["exception"] for r in records if "exception" in r]
    assert texts
    for text in texts:
        assert "in handle" in text
        assert "recorders.py" not in text
