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
from structlog.testing import capture_logs

from cloudqueue.listener import (
    BatchProcessed,
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryQueueStorage,
    MessageCodec,
    MessageEnvelope,
    Middleware,
    PoisonRecord,
    QueueEmpty,
    QueueEmptyDecision,
    QueueMessage,
    QueueStorage,
    QueueWorkDetected,
    TransientStorageError,
    current_envelope,
    poison_queue_name,
)
from cloudqueue.listener.consumer.handoff import fetch_size
from cloudqueue.listener.testing import ManualClock, VirtualClock
from cloudqueue.workers.testing import run_until_drained
from tests.support.polling import eventually


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
    """A middleware answering QueueEmpty sees 1, 2, 3…; its delay is waited; stop=True ends the
    thread."""
    storage.create_queue(queue_name)
    idle_counts: list[int] = []

    class IdleWaits(Middleware):
        def on_queue_empty(self, event: QueueEmpty) -> QueueEmptyDecision:
            idle_counts.append(event.idle_count)
            return QueueEmptyDecision(stop=event.idle_count >= 3, delay_s=event.idle_count * 0.5)

    listener = make_listener(middleware=[IdleWaits()])
    listener.start_listener(1)
    eventually(lambda: listener.active_dequeue_tasks == 0)
    assert idle_counts == [1, 2, 3]
    assert listener.sleeper.waits == [0.5, 1.0]


def test_an_idle_thread_that_finds_work_raises_queue_work_detected(
    storage: InMemoryQueueStorage, queue_name: str, make_listener: Callable[..., Any]
) -> None:
    """QueueWorkDetected reaches the middleware when a thread that saw an empty queue gets
    messages again."""
    storage.create_queue(queue_name)
    detected = threading.Event()
    went_idle = threading.Event()

    class Watch(Middleware):
        def on_queue_empty(self, event: QueueEmpty) -> QueueEmptyDecision:
            went_idle.set()
            return QueueEmptyDecision(stop=False, delay_s=0.1)

        def on_queue_work_detected(self, event: QueueWorkDetected) -> None:
            detected.set()

    listener = make_listener(middleware=[Watch()])
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


# -- a dequeue thread never dies -----------------------------------------------------------------


class BrokenSettlement(InMemoryQueueStorage):
    """An in-memory store whose delete or visibility update raises a bug-like ValueError."""

    def __init__(self, clock: ManualClock, *, broken: str, failures: int) -> None:
        super().__init__(clock=clock)
        self.broken = broken
        self.failures = failures

    def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        self._maybe_fail("delete_message")
        return super().delete_message(queue_name, message_id, pop_receipt)

    def update_visibility(
        self,
        queue_name: str,
        message_id: str,
        pop_receipt: str,
        visibility_timeout_s: int,
        *,
        content: str | None = None,
    ) -> str:
        self._maybe_fail("update_visibility")
        return super().update_visibility(
            queue_name, message_id, pop_receipt, visibility_timeout_s, content=content
        )

    def _maybe_fail(self, operation: str) -> None:
        if operation == self.broken and self.failures > 0:
            self.failures -= 1
            raise ValueError(f"a bug in {operation}")


@pytest.mark.parametrize("broken", ["delete_message", "update_visibility"])
def test_a_settlement_that_raises_unexpectedly_does_not_end_the_only_thread(
    broken: str, clock: ManualClock, queue_name: str
) -> None:
    """The error is logged with its traceback, the message reappears, the thread goes on."""
    storage = BrokenSettlement(clock, broken=broken, failures=1)
    put_orders(storage, queue_name, 3)
    handled: list[int] = []

    def handle(order: Order) -> None:
        handled.append(order.order_id)
        if broken == "update_visibility" and handled.count(order.order_id) == 1:
            raise RuntimeError("retry me")  # a retry settles through update_visibility

    listener = CloudQueueListener(
        storage, CloudQueueLocation(queue_name), Order, clock=clock, sleeper=clock
    )
    try:
        listener.subscribe(handle)
        with capture_logs() as logs:
            listener.start_listener(1)
            eventually(lambda: storage.approximate_message_count(queue_name) == 0)
        assert sorted(set(handled)) == [0, 1, 2]
        assert listener.threads_alive == 1
        failures = [e for e in logs if e["event"] == "message_failed_unexpectedly"]
        assert len(failures) == 1
        assert isinstance(failures[0]["exc_info"], ValueError)
        assert listener.counters.in_flight == 0
    finally:
        listener.stop(5)


def test_hooks_that_raise_do_not_end_the_thread(
    storage: InMemoryQueueStorage, queue_name: str, make_listener: Callable[..., Any]
) -> None:
    """A middleware raising on QueueEmpty, QueueWorkDetected and BatchProcessed: logged, the
    loop goes on."""
    storage.create_queue(queue_name)
    handled: list[int] = []
    empties: list[int] = []

    class Broken(Middleware):
        def on_queue_empty(self, event: QueueEmpty) -> QueueEmptyDecision:
            empties.append(event.idle_count)
            raise ValueError("a bug in on_queue_empty")

        def on_queue_work_detected(self, event: QueueWorkDetected) -> None:
            raise ValueError("a bug in a hook")

        def on_batch_processed(self, event: BatchProcessed) -> None:
            raise ValueError("a bug in a hook")

    listener = make_listener(middleware=[Broken()])
    listener.subscribe(lambda order: handled.append(order.order_id))
    listener.start_listener(1)
    eventually(lambda: len(empties) >= 2)
    put_orders(storage, queue_name, 2)
    eventually(lambda: sorted(handled) == [0, 1])
    put_orders(storage, queue_name, 1)
    eventually(lambda: len(handled) == 3)
    assert listener.threads_alive == 1


# -- fetching for the hand-off -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("threads", "rate", "expected"),
    [(1, None, 32), (1, 1000.0, 32), (1, 4.0, 32), (1, 0.2, 3), (4, 0.2, 12), (1, 0.01, 1)],
)
def test_a_get_asks_for_what_the_pool_can_start_within_half_a_visibility_timeout(
    threads: int, rate: float | None, expected: int
) -> None:
    """Full batches until measured and for fast handlers; a few at a time for very slow ones."""
    assert (
        fetch_size(
            batch_size=32, threads=threads, per_thread_rate_per_s=rate, visibility_timeout_s=30
        )
        == expected
    )


class RecordingGets(InMemoryQueueStorage):
    """An in-memory store that notes how many messages each get asked for."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.asked: list[int] = []

    def get_messages(
        self, queue_name: str, *, max_messages: int, visibility_timeout_s: int
    ) -> list[QueueMessage]:
        self.asked.append(max_messages)
        return super().get_messages(
            queue_name, max_messages=max_messages, visibility_timeout_s=visibility_timeout_s
        )


def test_a_listener_with_a_very_slow_handler_fetches_small_batches(
    clock: ManualClock, queue_name: str
) -> None:
    """5 s per message, 30 s visibility, one thread: after the first batch, gets ask for 3."""
    storage = RecordingGets(clock)
    put_orders(storage, queue_name, 40)
    listener = CloudQueueListener(
        storage, CloudQueueLocation(queue_name), Order, clock=clock, sleeper=clock
    )
    try:
        listener.subscribe(lambda _: clock.advance(5.0))
        listener.start_listener(1)
        eventually(lambda: listener.messages_processed == 40)
        assert storage.asked[0] == 32
        assert set(storage.asked[1:]) == {3}
    finally:
        listener.stop(5)


def test_the_last_thread_to_leave_releases_the_messages_waiting_in_the_hand_off(
    storage: InMemoryQueueStorage, queue_name: str, make_listener: Callable[..., Any]
) -> None:
    """Scaled in to zero mid-batch: the unstarted messages are visible again at once."""
    put_orders(storage, queue_name, 5)
    entered, release = threading.Event(), threading.Event()

    def slow(_: Order) -> None:
        entered.set()
        release.wait(10)

    listener = make_listener()
    listener.subscribe(slow)
    listener.start_listener(1)
    assert entered.wait(10)
    assert listener.pool_control.request_scale_in(1, floor=0) == 1
    release.set()
    eventually(lambda: listener.threads_alive == 0)
    assert listener.messages_processed == 1
    visible = storage.get_messages(queue_name, max_messages=32, visibility_timeout_s=30)
    assert len(visible) == 4  # released, not hidden until the visibility timeout
    assert listener.counters.in_flight == 0
