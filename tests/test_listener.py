"""CloudQueueListener on the in-memory store in manual or virtual time: no test waits for real time.

Tests that only need the queue worked off run it with ``run_until_drained`` in virtual time;
those that count waits or step through them use the ``ManualClock``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from pydantic import BaseModel
from reactivex import Observer

from listener import (
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryQueueStorage,
    MessageCodec,
    MessageEnvelope,
    PoisonRecord,
    QueueEmptyDecision,
    QueueMessage,
    QueueStorage,
    TransientStorageError,
    current_envelope,
    poison_queue_name,
)
from listener.testing import ManualClock, VirtualClock
from tests.support.polling import eventually
from workers.testing import run_until_drained


class Order(BaseModel):
    order_id: int
    sku: str


@pytest.fixture
def storage(clock: ManualClock) -> InMemoryQueueStorage:
    return InMemoryQueueStorage(clock=clock)


@pytest.fixture
def make_listener(
    storage: InMemoryQueueStorage, clock: ManualClock, queue_name: str
) -> Iterator[Callable[..., CloudQueueListener[Any]]]:
    """Builds listeners on the shared store and always stops them."""
    made: list[CloudQueueListener[Any]] = []

    def make(item_type: type[Any] = Order, **options: Any) -> CloudQueueListener[Any]:
        options.setdefault("clock", clock)
        options.setdefault("sleeper", clock)
        listener: CloudQueueListener[Any] = CloudQueueListener(
            storage, CloudQueueLocation(queue_name, visibility_timeout_s=30), item_type, **options
        )
        made.append(listener)
        return listener

    yield make
    for listener in made:
        listener.stop(timeout_s=5)


@pytest.fixture
def make_virtual_listener(
    virtual_storage: InMemoryQueueStorage, virtual_clock: VirtualClock, queue_name: str
) -> Callable[..., CloudQueueListener[Any]]:
    """A listener on the virtual clock's store, for ``run_until_drained`` (which stops it)."""

    def make(item_type: type[Any] = Order) -> CloudQueueListener[Any]:
        return CloudQueueListener(
            virtual_storage,
            CloudQueueLocation(queue_name, visibility_timeout_s=30),
            item_type,
            clock=virtual_clock,
            sleeper=virtual_clock,
        )

    return make


def put_orders(storage: InMemoryQueueStorage, queue_name: str, count: int) -> None:
    storage.create_queue(queue_name)
    codec = MessageCodec(Order)
    for order_id in range(count):
        storage.put_message(queue_name, codec.encode(Order(order_id=order_id, sku="x")))


def test_every_observer_receives_every_item_and_messages_are_deleted(
    virtual_storage: InMemoryQueueStorage,
    queue_name: str,
    make_virtual_listener: Callable[..., Any],
) -> None:
    """Each item fans out to all observers; the message is deleted once all have returned."""
    storage = virtual_storage
    put_orders(storage, queue_name, 10)
    listener = make_virtual_listener()
    first: list[int] = []
    second: list[int] = []
    listener.subscribe(lambda order: first.append(order.order_id))
    listener.subscribe(lambda order: second.append(order.order_id))
    run_until_drained(listener)
    assert listener.messages_processed == 10
    assert sorted(first) == sorted(second) == list(range(10))
    assert storage.approximate_message_count(queue_name) == 0


def test_a_message_is_deleted_only_after_its_handler_returned(
    storage: InMemoryQueueStorage, queue_name: str, make_listener: Callable[..., Any]
) -> None:
    """While the handler runs, the message is still in the queue (at-least-once, not at-most)."""
    put_orders(storage, queue_name, 1)
    entered, release = threading.Event(), threading.Event()

    def slow(_: Order) -> None:
        entered.set()
        release.wait(10)

    listener = make_listener()
    listener.subscribe(slow)
    listener.start_listener(1)
    assert entered.wait(10)
    assert storage.approximate_message_count(queue_name) == 1
    release.set()
    eventually(lambda: storage.approximate_message_count(queue_name) == 0)


def test_a_failing_observer_leaves_the_message_for_redelivery_and_the_loop_goes_on(
    virtual_storage: InMemoryQueueStorage,
    queue_name: str,
    make_virtual_listener: Callable[..., Any],
) -> None:
    """One observer raising: others still get the item, the message comes back, the loop lives."""
    put_orders(virtual_storage, queue_name, 3)
    attempts: dict[int, int] = {}
    seen_by_other: list[int] = []
    errors: list[Exception] = []

    def flaky(order: Order) -> None:
        attempts[order.order_id] = attempts.get(order.order_id, 0) + 1
        if order.order_id == 1 and attempts[order.order_id] == 1:
            raise RuntimeError("first attempt fails")

    listener = make_virtual_listener()
    listener.subscribe(Observer(flaky, errors.append))
    listener.subscribe(lambda order: seen_by_other.append(order.order_id))
    run_until_drained(listener, fail_fast=False)
    # One thread did it all: it survived the failure and took the message again.
    assert listener.messages_processed == 3
    assert attempts == {0: 1, 1: 2, 2: 1}
    assert seen_by_other.count(1) == 2
    assert listener.messages_failed == 1
    assert errors == []  # per-message failures never end the subscription through on_error
    assert listener.peak_dequeue_tasks == 1


def test_the_handler_can_read_the_envelope_of_the_message_it_handles(
    virtual_storage: InMemoryQueueStorage,
    queue_name: str,
    make_virtual_listener: Callable[..., Any],
) -> None:
    """current_envelope() gives the id and dequeue count of the item being handled."""
    put_orders(virtual_storage, queue_name, 1)
    envelopes: list[MessageEnvelope] = []
    listener = make_virtual_listener()
    listener.subscribe(lambda _: envelopes.append(current_envelope()))
    run_until_drained(listener)
    assert len(envelopes) == 1
    assert envelopes[0].queue_name == queue_name
    assert envelopes[0].dequeue_count == 1
    with pytest.raises(LookupError):
        current_envelope()


@pytest.mark.parametrize(
    "content",
    ["not base64 at all!", "bm90IGpzb24=", "eyJvcmRlcl9pZCI6ICJ4In0=", ""],
    ids=["malformed-base64", "malformed-json", "schema-invalid", "empty"],
)
def test_undecodable_messages_go_to_the_poison_queue_while_good_ones_flow(
    content: str,
    virtual_storage: InMemoryQueueStorage,
    queue_name: str,
    make_virtual_listener: Callable[..., Any],
) -> None:
    """A message that is not an item is moved to <queue>-poison with the reason, at once."""
    storage = virtual_storage
    put_orders(storage, queue_name, 2)
    storage.put_message(queue_name, content)
    handled: list[int] = []
    listener = make_virtual_listener()
    listener.subscribe(lambda order: handled.append(order.order_id))
    run_until_drained(listener)
    assert listener.messages_poisoned == 1
    assert len(handled) == 2
    assert storage.approximate_message_count(queue_name) == 0
    poisoned = storage.get_messages(
        poison_queue_name(queue_name), max_messages=32, visibility_timeout_s=30
    )
    record = PoisonRecord.from_json(poisoned[0].content)
    assert (record.reason, record.content, record.queue) == ("undecodable", content, queue_name)
    assert record.error


def test_an_empty_get_raises_queue_empty_with_a_growing_idle_count(
    storage: InMemoryQueueStorage, queue_name: str, make_listener: Callable[..., Any]
) -> None:
    """The queue_empty handler sees 1, 2, 3…; its delay is waited; stop=True ends the thread."""
    storage.create_queue(queue_name)
    idle_counts: list[int] = []

    def on_empty(_: Any, idle_count: int) -> QueueEmptyDecision:
        idle_counts.append(idle_count)
        return QueueEmptyDecision(stop=idle_count >= 3, delay_s=idle_count * 0.5)

    listener = make_listener(queue_empty=on_empty)
    listener.start_listener(1)
    eventually(lambda: listener.active_dequeue_tasks == 0)
    assert idle_counts == [1, 2, 3]
    assert listener.sleeper.waits == [0.5, 1.0]


def test_an_idle_thread_that_finds_work_raises_queue_work_detected(
    storage: InMemoryQueueStorage, queue_name: str, make_listener: Callable[..., Any]
) -> None:
    """queue_work_detected fires when a thread that saw an empty queue gets messages again."""
    storage.create_queue(queue_name)
    detected = threading.Event()
    went_idle = threading.Event()

    def on_empty(_: Any, idle_count: int) -> QueueEmptyDecision:
        went_idle.set()
        return QueueEmptyDecision(stop=False, delay_s=0.1)

    listener = make_listener(queue_empty=on_empty, queue_work_detected=lambda _: detected.set())
    listener.subscribe(lambda _: None)
    listener.start_listener(1)
    assert went_idle.wait(10)
    assert not detected.is_set()
    put_orders(storage, queue_name, 1)
    assert detected.wait(10)


def test_a_thread_survives_storage_outages_and_backs_off(
    storage: InMemoryQueueStorage, clock: ManualClock, queue_name: str
) -> None:
    """Transient errors are logged and backed off exponentially; then work resumes."""
    put_orders(storage, queue_name, 1)
    outage = cast(QueueStorage, FailingGets(storage, failures=4))
    handled = threading.Event()
    listener = CloudQueueListener(
        outage,
        CloudQueueLocation(queue_name),
        Order,
        clock=clock,
        sleeper=clock,
        max_error_delay_s=60,
    )
    try:
        listener.subscribe(lambda _: handled.set())
        listener.start_listener(1)
        assert handled.wait(10)
        waits = clock.waits[:4]
        assert len(waits) == 4
        assert waits == sorted(waits)  # exponential: each back-off longer than the last
        assert listener.active_dequeue_tasks == 1
    finally:
        listener.stop(5)


def test_stop_lets_the_in_flight_item_finish_and_releases_the_rest_of_the_batch(
    storage: InMemoryQueueStorage, queue_name: str, make_listener: Callable[..., Any]
) -> None:
    """stop() waits for the running handler, deletes its message, and un-hides unstarted ones."""
    put_orders(storage, queue_name, 5)
    entered, release = threading.Event(), threading.Event()
    completed = threading.Event()

    def slow(_: Order) -> None:
        entered.set()
        release.wait(10)

    listener = make_listener()
    listener.subscribe(Observer(slow, on_completed=completed.set))
    listener.start_listener(1)
    assert entered.wait(10)
    stopper = threading.Thread(target=listener.stop, args=(10,))
    stopper.start()
    eventually(lambda: listener.stopped)
    assert not completed.is_set()
    release.set()
    stopper.join(10)
    assert completed.is_set()
    assert listener.messages_processed == 1
    visible = storage.get_messages(queue_name, max_messages=32, visibility_timeout_s=30)
    assert len(visible) == 4  # released at once, not after the visibility timeout


def test_query_state_reports_depth_and_thread_counts(
    storage: InMemoryQueueStorage, queue_name: str, make_listener: Callable[..., Any]
) -> None:
    """QueryState: approximate depth, active threads, and the most threads ever active."""
    put_orders(storage, queue_name, 7)
    listener = make_listener()
    block = threading.Event()
    listener.subscribe(lambda _: block.wait(10))
    listener.start_listener(2)
    listener.start_listener(1)
    state = listener.query_state()
    assert state.current_queue_depth == 7
    assert state.active_dequeue_tasks == 3
    assert state.total_dequeue_tasks == 3
    block.set()


def test_subscribing_after_stop_completes_at_once(make_listener: Callable[..., Any]) -> None:
    """A stopped listener is a completed observable."""
    listener = make_listener()
    listener.stop(1)
    completed = threading.Event()
    listener.subscribe(on_completed=completed.set)
    assert completed.is_set()
    with pytest.raises(RuntimeError):
        listener.start_listener(1)


class FailingGets:
    """Storage whose first ``failures`` gets fail as an outage would, then recover."""

    def __init__(self, inner: InMemoryQueueStorage, failures: int) -> None:
        self.inner = inner
        self.failures = failures

    def get_messages(self, queue_name: str, **options: Any) -> list[QueueMessage]:
        if self.failures > 0:
            self.failures -= 1
            raise TransientStorageError("simulated 503")
        return self.inner.get_messages(queue_name, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
