"""A message that cannot reach the poison queue: it waits in its queue, keeps its reason, and the
worker says so (a counted, rate-limited log event and red readiness) until a move succeeds.

The listener runs on a ``VirtualClock`` over the in-memory store; a store that refuses puts to the
poison queue is the real store behind a forwarding decorator that raises for those calls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryQueueStorage,
    PoisonRecord,
    poison_queue_name,
)
from cloudqueue.listener.errors import PermanentFailure, StorageError
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.stores.forwarding import ForwardingStorage
from cloudqueue.listener.testing import VirtualClock
from cloudqueue.workers.observability.health import (
    Heartbeats,
    ProcessProbes,
    Reachability,
    WatchedPool,
)

QUEUE = "invoices"
POISON = poison_queue_name(QUEUE)
UNDECODABLE = "%%% not base64 %%%"
R = TypeVar("R")


class RefusingPoison(ForwardingStorage):
    """The real store, except that puts to a poison queue fail while ``refusing`` is set."""

    def __init__(self, inner: InMemoryQueueStorage) -> None:
        super().__init__(inner)
        self.refusing = threading.Event()

    def _call(self, queue_name: str, operation: str, call: Callable[[], R]) -> R:
        if self.refusing.is_set() and operation == "put_message" and queue_name == POISON:
            raise StorageError("the store refused the put")
        return call()


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def store(clock: VirtualClock) -> RefusingPoison:
    """The in-memory store on the virtual clock, with the queue and its poison queue."""
    inner = InMemoryQueueStorage(clock=clock)
    inner.create_queue(QUEUE)
    inner.create_queue(POISON)
    return RefusingPoison(inner)


def listener_on(
    store: RefusingPoison, clock: VirtualClock, **options: Any
) -> CloudQueueListener[int]:
    return CloudQueueListener(
        store,
        CloudQueueLocation(QUEUE),
        int,
        clock=clock,
        sleeper=clock,
        delivery=DeliveryPolicy(max_dequeue_count=2, retry_delay_s=0.0),
        **options,
    )


@pytest.fixture
def running(store: RefusingPoison, clock: VirtualClock) -> Iterator[CloudQueueListener[int]]:
    """A started listener on the refusing store (stopped afterwards)."""
    listener = listener_on(store, clock)
    listener.subscribe(lambda _: None)
    listener.start_listener(1)
    yield listener
    listener.stop(10)


def run_until(
    listener: CloudQueueListener[int], clock: VirtualClock, done: Callable[[], bool]
) -> None:
    """Move virtual time on whenever every dequeue thread waits, until ``done()``."""
    deadline = time.monotonic() + 20
    while not done():
        assert time.monotonic() < deadline, "not reached within 20 s"
        if clock.all_waiting(lambda: listener.threads_alive):
            clock.advance_to_next_wake_up()


def poison_records(store: RefusingPoison) -> list[PoisonRecord]:
    messages = store.inner.peek_messages(POISON, max_messages=32)
    return [PoisonRecord.from_json(message.content) for message in messages]


def test_a_poison_queue_deleted_while_the_worker_runs_is_created_again(
    store: RefusingPoison, clock: VirtualClock
) -> None:
    """The move re-creates it and the record keeps the handler's reason."""

    def handle(_: int) -> None:
        store.inner.delete_queue(POISON)
        raise PermanentFailure("invoice 7 references a deleted customer")

    listener = listener_on(store, clock)
    listener.subscribe(handle)
    store.inner.put_message(QUEUE, "Nw==")  # 7
    listener.start_listener(1)
    try:
        run_until(listener, clock, lambda: listener.messages_poisoned == 1)
    finally:
        listener.stop(10)
    (record,) = poison_records(store)
    assert record.reason == "permanent_failure"
    assert store.inner.approximate_message_count(QUEUE) == 0


def test_without_queue_creation_a_deleted_poison_queue_is_left_alone(
    store: RefusingPoison, clock: VirtualClock
) -> None:
    """A listener that may not create queues keeps the message in its queue and counts it."""
    store.inner.delete_queue(POISON)
    listener = listener_on(store, clock, create_queues=False)
    listener.subscribe(lambda _: None)
    store.inner.put_message(QUEUE, UNDECODABLE)
    listener.start_listener(1)
    try:
        run_until(listener, clock, lambda: listener.counters.poison_failures >= 2)
        assert listener.poisoning_failing
    finally:
        listener.stop(10)
    assert store.inner.list_queues() == [QUEUE]
    assert store.inner.approximate_message_count(QUEUE) == 1


def test_while_moves_fail_the_message_waits_and_readiness_is_red_until_one_succeeds(
    store: RefusingPoison, clock: VirtualClock, running: CloudQueueListener[int]
) -> None:
    """Past max_dequeue_count meanwhile, it is still poisoned with its own reason at last."""
    probes = ProcessProbes(
        stall_after_s=3600,
        heartbeats=Heartbeats(),
        reachability=Reachability(),
        pools=[WatchedPool(QUEUE, lambda: 1, 1, lambda: running.poisoning_failing)],
        started=True,
    )
    store.refusing.set()
    store.inner.put_message(QUEUE, UNDECODABLE)
    with capture_logs() as logged:
        run_until(running, clock, lambda: running.counters.poison_failures >= 4)
    failures = [event for event in logged if event["event"] == "poison_failed"]
    assert 1 <= len(failures) < running.counters.poison_failures
    assert probes.readiness().reasons == (f"poison queue unwritable: {QUEUE}",)
    assert store.inner.approximate_message_count(QUEUE) == 1
    assert running.messages_poisoned == 0

    store.refusing.clear()
    run_until(running, clock, lambda: running.messages_poisoned == 1)
    (record,) = poison_records(store)
    assert (record.reason, record.content) == ("undecodable", UNDECODABLE)
    assert record.dequeue_count >= 5
    assert probes.readiness().ok
    assert store.inner.approximate_message_count(QUEUE) == 0
