"""What a handler failure leaves in the log: one readable line, a traceback once at debug level."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from listener import CloudQueueListener, CloudQueueLocation, InMemoryQueueStorage, MessageCodec
from listener.errors import PermanentFailure
from listener.policies.delivery import DeliveryPolicy
from listener.testing import ManualClock
from tests.support.polling import eventually
from workers.async_handler import AsyncHandlerRunner

Listen = Callable[[Callable[[int], Any]], CloudQueueListener[int]]


@pytest.fixture
def listen(
    manual_storage: InMemoryQueueStorage, clock: ManualClock, queue_name: str
) -> Iterator[Listen]:
    """Starts a one-thread listener running its handler as the worker host does (async-capable)."""
    made: list[tuple[CloudQueueListener[int], AsyncHandlerRunner]] = []

    def make(handler: Callable[[int], Any]) -> CloudQueueListener[int]:
        listener: CloudQueueListener[int] = CloudQueueListener(
            manual_storage,
            CloudQueueLocation(queue_name, visibility_timeout_s=30),
            int,
            clock=clock,
            sleeper=clock,
            delivery=DeliveryPolicy(max_dequeue_count=3),
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
    dequeue count and the outcome; no error-level record, no observer repr, no exc_info."""
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
    assert not [r for r in records if r["log_level"] in ("error", "critical")]
    assert not [r for r in records if "observer" in r or "exc_info" in r]


def test_the_traceback_is_logged_once_per_distinct_error_at_debug_without_framework_frames(
    manual_storage: InMemoryQueueStorage, queue_name: str, listen: Listen
) -> None:
    """The same error three times gives one debug traceback, which shows the handler's frame and
    none of reactivex's, asyncio's or cloudqueue's own."""
    put(manual_storage, queue_name, 7)

    async def handle_order(number: int) -> None:
        raise ValueError(f"order {number} has no customer")

    with capture_logs() as records:
        listener = listen(handle_order)
        eventually(lambda: listener.messages_poisoned == 1)
    [traceback] = [r for r in records if r["event"] == "handler_traceback"]
    assert traceback["log_level"] == "debug"
    text = traceback["exception"]
    assert "handle_order" in text
    assert "ValueError: order 7 has no customer" in text
    for internal in ("reactivex", "asyncio", "subscribers.py", "async_handler.py"):
        assert internal not in text


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
