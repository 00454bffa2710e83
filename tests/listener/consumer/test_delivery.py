"""Retries, poisoning and visibility renewal, on the in-memory store in virtual time."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import pytest

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryQueueStorage,
    MessageCodec,
    PoisonRecord,
    poison_queue_name,
)
from cloudqueue.listener.errors import PermanentFailure
from cloudqueue.listener.poison.requeue import requeue_poisoned
from cloudqueue.listener.policies.delivery import DeliveryPolicy, exhausted, retry_visibility_s
from cloudqueue.listener.testing import VirtualClock
from cloudqueue.workers.testing import run_until_drained
from tests.support.polling import eventually


@pytest.fixture
def clock(virtual_clock: VirtualClock) -> VirtualClock:
    return virtual_clock


@pytest.fixture
def storage(virtual_storage: InMemoryQueueStorage) -> InMemoryQueueStorage:
    """This module's store: in memory, in virtual time (conftest's ``virtual_storage``)."""
    return virtual_storage


@pytest.fixture
def listen(
    storage: InMemoryQueueStorage, clock: VirtualClock, queue_name: str
) -> Callable[..., CloudQueueListener[Any]]:
    """Runs a one-thread listener with a handler until the queue is drained, then stops it."""

    def run(handler: Callable[[int], None], **policy: Any) -> CloudQueueListener[int]:
        listener: CloudQueueListener[int] = CloudQueueListener(
            storage,
            CloudQueueLocation(queue_name, visibility_timeout_s=30),
            int,
            clock=clock,
            sleeper=clock,
            delivery=DeliveryPolicy(**policy),
        )
        listener.subscribe(handler)
        run_until_drained(listener, fail_fast=False)
        return listener

    return run


def put(storage: InMemoryQueueStorage, queue_name: str, *numbers: int) -> None:
    for number in numbers:
        storage.put_message(queue_name, MessageCodec(int).encode(number))


def poisoned(storage: InMemoryQueueStorage, queue_name: str) -> list[PoisonRecord]:
    messages = storage.get_messages(
        poison_queue_name(queue_name), max_messages=32, visibility_timeout_s=1
    )
    return [PoisonRecord.from_json(message.content) for message in messages]


def test_the_retry_delay_grows_with_the_dequeue_count() -> None:
    """~1 s, ~3 s, ~7 s... after successive failures, capped, in whole seconds."""
    policy = DeliveryPolicy(retry_delay_s=1.0, max_retry_delay_s=10.0)
    delays = [retry_visibility_s(n, policy, random.Random(n)) for n in range(1, 7)]
    assert delays == sorted(delays)
    assert delays[0] <= 2
    assert delays[-1] == 10
    assert exhausted(5, DeliveryPolicy())
    assert not exhausted(4, DeliveryPolicy())


def test_a_failed_message_comes_back_after_the_short_retry_delay_not_the_timeout(
    storage: InMemoryQueueStorage, queue_name: str, clock: VirtualClock, listen: Any
) -> None:
    """After a failure the message is hidden for ~1 s, not for the 30 s visibility timeout."""
    put(storage, queue_name, 7)
    failed_at: list[float] = []
    succeeded_at: list[float] = []

    def flaky(_: int) -> None:
        if not failed_at:
            failed_at.append(clock.monotonic())
            raise RuntimeError("transient")
        succeeded_at.append(clock.monotonic())

    listen(flaky)
    assert succeeded_at[0] - failed_at[0] < 5


def test_an_always_failing_message_is_poisoned_after_max_dequeue_count_with_its_errors(
    storage: InMemoryQueueStorage, queue_name: str, listen: Any
) -> None:
    """Five failed deliveries, then the poison queue, with the first and last error."""
    put(storage, queue_name, 13, 1, 2)
    attempts: list[int] = []
    good: list[int] = []

    def handler(number: int) -> None:
        if number == 13:
            attempts.append(number)
            raise ValueError(f"attempt {len(attempts)}")
        good.append(number)

    listener = listen(handler)
    assert listener.messages_poisoned == 1
    assert sorted(good) == [1, 2]
    assert len(attempts) == 5
    (record,) = poisoned(storage, queue_name)
    assert (record.reason, record.dequeue_count) == ("max_dequeue_count_exceeded", 5)
    assert (record.first_error, record.error) == ("ValueError: attempt 1", "ValueError: attempt 5")


def test_a_permanent_failure_is_poisoned_at_once(
    storage: InMemoryQueueStorage, queue_name: str, listen: Any
) -> None:
    """Raising PermanentFailure skips the pointless retries."""
    put(storage, queue_name, 4)
    calls: list[int] = []

    def handler(number: int) -> None:
        calls.append(number)
        raise PermanentFailure("customer account closed")

    listener = listen(handler)
    assert listener.messages_poisoned == 1
    assert calls == [4]
    (record,) = poisoned(storage, queue_name)
    assert record.reason == "permanent_failure"
    assert "customer account closed" in record.error


def test_a_message_past_its_dequeue_limit_is_poisoned_without_handling(
    storage: InMemoryQueueStorage, queue_name: str, clock: VirtualClock, listen: Any
) -> None:
    """A message that crashed its workers every time (count > max) is not handed out again."""
    put(storage, queue_name, 9)
    for _ in range(3):  # three deliveries whose workers "crashed" (never settled)
        storage.get_messages(queue_name, max_messages=1, visibility_timeout_s=1)
        clock.advance(2)
    calls: list[int] = []
    listener = listen(calls.append, max_dequeue_count=3)
    assert listener.messages_poisoned == 1
    assert calls == []
    assert poisoned(storage, queue_name)[0].reason == "max_dequeue_count_exceeded"


def test_requeue_brings_poisoned_messages_back_with_their_original_content(
    storage: InMemoryQueueStorage, queue_name: str, listen: Any
) -> None:
    """After a fix, `requeue` puts each poisoned message back exactly as it was sent."""
    put(storage, queue_name, 21)
    storage.put_message(queue_name, "not base64!")
    listener = listen(lambda _: (_ for _ in ()).throw(PermanentFailure("bug")))
    assert listener.messages_poisoned == 2
    assert requeue_poisoned(storage, queue_name) == 2
    contents = sorted(
        m.content for m in storage.get_messages(queue_name, max_messages=32, visibility_timeout_s=1)
    )
    assert contents == sorted([MessageCodec(int).encode(21), "not base64!"])


def test_a_handler_running_three_visibility_timeouts_is_renewed_and_delivered_once(
    queue_name: str,
) -> None:
    """Renewal at half the timeout keeps a long job's message hidden from the other threads.

    Real time on purpose: renewal races real expiry, which a manual clock cannot model.
    """
    storage = InMemoryQueueStorage()
    storage.create_queue(queue_name)
    put(storage, queue_name, 1)
    deliveries: list[int] = []
    finish = threading.Event()

    def long_job(number: int) -> None:
        deliveries.append(number)
        finish.wait(30)

    listener: CloudQueueListener[int] = CloudQueueListener(
        storage,
        CloudQueueLocation(queue_name, visibility_timeout_s=2),
        int,
        dequeue_interval_s=0.05,
    )
    listener.subscribe(long_job)
    listener.start_listener(3)
    try:
        eventually(lambda: listener.visibility_renewals >= 6, timeout_s=20)  # ~3 timeouts of 2 s
        finish.set()
        eventually(lambda: listener.messages_processed == 1)
    finally:
        finish.set()
        listener.stop(5)
    assert deliveries == [1]
    assert storage.approximate_message_count(queue_name) == 0
