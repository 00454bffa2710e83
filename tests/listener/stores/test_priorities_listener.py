"""A worker on several queues: urgent work first, weighted shares, and every message settled in
the queue it came from (deleted, retried, renewed, poisoned), on the real stores."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudqueue.listener import CloudQueueListener, DeliveryPolicy, Publisher
from cloudqueue.listener.errors import PermanentFailure
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.poison.queue import browse_poisoned, poison_queue_name
from cloudqueue.listener.poison.record import read_record
from cloudqueue.listener.policies.priority import Priority
from cloudqueue.listener.push.triggers import InProcessTriggerChannel, WorkDetected
from cloudqueue.listener.scaling.scaler import ElasticScaler, ScalingPolicy
from cloudqueue.listener.scaling.waker import TriggerWaker
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.stores.prioritized import PrioritizedQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost
from cloudqueue.workers.settings import ScalingSettings
from tests.conftest import make_storage
from tests.support.polling import eventually

SETTINGS = CloudQueueSettings(shutdown_grace_s=5)


@pytest.fixture(params=["sqlite", "azure"])
def real_storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[QueueStorage]:
    """The SQLite store and Azurite."""
    backend = make_storage(request.param, request, tmp_path)
    yield backend
    backend.close()


def names(*roles: str) -> tuple[str, ...]:
    """Fresh queue names (Azurite is shared by the whole session)."""
    tag = uuid.uuid4().hex[:10]
    return tuple(f"{role}-{tag}" for role in roles)


def recording_worker(
    queues: tuple[str, ...], settings: dict[str, Any] | None = None
) -> tuple[type[QueueWorker[str]], list[str]]:
    """A worker class on ``queues``, and the items it handles, in order."""
    handled: list[str] = []
    lock = threading.Lock()

    class Recording(QueueWorker[str]):
        queue_name = queues

        def handle(self, item: str) -> None:
            with lock:
                handled.append(item)

    Recording.settings = {"listener": settings or {}}
    return Recording, handled


def prioritized(listener: CloudQueueListener[Any]) -> PrioritizedQueueStorage:
    assert isinstance(listener.storage, PrioritizedQueueStorage)
    return listener.storage


def publish(storage: QueueStorage, queue: str, items: list[str]) -> None:
    storage.create_queue(queue)
    Publisher(storage, queue, str).publish_many(items)


def test_strict_handles_the_waiting_urgent_messages_among_the_first_fifty(
    real_storage: QueueStorage,
) -> None:
    """200 normal and 20 urgent waiting before the worker starts: all 20 urgent come among the
    first 50 handled (the issue's goal), on SQLite and Azurite."""
    urgent, normal = names("urgent", "normal")
    publish(real_storage, normal, [f"n{number}" for number in range(200)])
    publish(real_storage, urgent, [f"u{number}" for number in range(20)])
    worker, handled = recording_worker((urgent, normal))
    host = WorkerHost([worker], SETTINGS, storage=real_storage)
    host.start()
    try:
        eventually(lambda: len(handled) == 220, timeout_s=60)
    finally:
        assert host.stop()
    positions = [at for at, item in enumerate(handled) if item.startswith("u")]
    assert len(positions) == 20
    assert max(positions) < 50, positions


def test_weighted_three_to_one_shares_a_long_drain_three_to_one() -> None:
    """3,000 high and 1,000 low messages, weights 3:1, batches of 4, one thread: while both
    queues have work, three of every four handled are high (within 10 %)."""
    storage = InMemoryQueueStorage()
    high, low = names("high", "low")
    publish(storage, high, [f"h{number}" for number in range(3000)])
    publish(storage, low, [f"l{number}" for number in range(1000)])
    options = {"priority": "weighted", "weights": [3, 1], "dequeue_batch_size": 4}
    worker, handled = recording_worker((high, low), {**options, "concurrency": 1})
    settings = CloudQueueSettings(shutdown_grace_s=5, scaling=ScalingSettings(max_threads=1))
    host = WorkerHost([worker], settings, storage=storage)
    host.start()
    try:
        eventually(lambda: len(handled) == 4000, timeout_s=60)
    finally:
        assert host.stop()
    first = handled[:3000]
    highs = sum(item.startswith("h") for item in first)
    assert 2.7 <= highs / (len(first) - highs) <= 3.3, highs
    assert prioritized(host.listeners[0]).fetched() == {high: 3000, low: 1000}


def listener_on(
    storage: QueueStorage,
    queues: tuple[str, ...],
    handle: Callable[[str], None],
    **options: Any,
) -> CloudQueueListener[str]:
    for queue in queues:
        storage.create_queue(queue)
    listener: CloudQueueListener[str] = CloudQueueListener(
        storage,
        CloudQueueLocation.of(queues, options.pop("visibility_timeout_s", 30)),
        str,
        dequeue_interval_s=0.05,
        **options,
    )
    listener.subscribe(handle)
    return listener


def poison_records(storage: QueueStorage, queue: str) -> list[tuple[str, str, str | None]]:
    records = [read_record(m.content) for m in browse_poisoned(storage, queue, limit=None)]
    return [(r.queue, r.reason, r.partition) for r in records if r is not None]


def test_each_queue_poisons_into_its_own_poison_queue() -> None:
    """A failing urgent item goes to urgent-poison, a failing normal one to normal-poison, each
    record naming its queue; the listener creates both poison queues."""
    storage = InMemoryQueueStorage()
    urgent, normal = "urgent", "normal"

    def fail(item: str) -> None:
        raise PermanentFailure(f"cannot {item}")

    listener = listener_on(storage, (urgent, normal), fail)
    publish(storage, urgent, ["u"])
    publish(storage, normal, ["n1", "n2", "n3"])
    listener.start_listener(1)
    try:
        eventually(lambda: listener.messages_poisoned == 4)
    finally:
        listener.stop(5)
    assert poison_records(storage, urgent) == [(urgent, "permanent_failure", None)]
    assert poison_records(storage, normal) == [(normal, "permanent_failure", None)] * 3
    assert storage.approximate_message_count(urgent) == 0
    assert storage.approximate_message_count(normal) == 0
    assert listener.counters_of(normal)["poisoned"] == 3
    assert listener.counters_of(urgent)["poisoned"] == 1


def test_a_failed_batch_item_is_retried_in_the_queue_it_came_from() -> None:
    """A batch from normal with one failing item: the item comes back in normal, not urgent."""
    storage = InMemoryQueueStorage()
    urgent, normal = "urgent", "normal"
    seen: list[str] = []
    failed_once = threading.Event()

    def handle(item: str) -> None:
        seen.append(item)
        if item == "b" and not failed_once.is_set():
            failed_once.set()
            raise RuntimeError("once")

    listener = listener_on(
        storage, (urgent, normal), handle, delivery=DeliveryPolicy(retry_delay_s=0)
    )
    storage.create_queue(normal)
    Publisher(storage, normal, str, batch=True).publish_many(["a", "b", "c"])
    listener.start_listener(1)
    try:
        eventually(lambda: seen.count("b") == 2)
        eventually(lambda: storage.approximate_message_count(normal) == 0)
    finally:
        listener.stop(5)
    assert sorted(seen) == ["a", "b", "b", "c"]
    assert prioritized(listener).fetched()[urgent] == 0


def test_a_long_handler_on_a_lower_queue_keeps_its_message_renewed() -> None:
    """Renewal reaches the message in its own queue: held past its timeout, delivered once.

    Real time on purpose: renewal races real expiry, which a manual clock cannot model.
    """
    storage = InMemoryQueueStorage()
    urgent, normal = "urgent", "normal"
    deliveries: list[str] = []
    finish = threading.Event()

    def long_job(item: str) -> None:
        deliveries.append(item)
        finish.wait(30)

    listener = listener_on(storage, (urgent, normal), long_job, visibility_timeout_s=2)
    publish(storage, normal, ["slow"])
    listener.start_listener(3)
    try:
        eventually(lambda: listener.visibility_renewals >= 3, timeout_s=20)  # 1.5 timeouts
        finish.set()
        eventually(lambda: listener.messages_processed == 1)
    finally:
        finish.set()
        listener.stop(5)
    assert deliveries == ["slow"]
    assert storage.approximate_message_count(normal) == 0


def test_a_trigger_for_a_lower_queue_wakes_a_listener_at_zero_threads() -> None:
    """Push triggers: an event naming normal wakes the worker on (urgent, normal)."""
    storage = InMemoryQueueStorage()
    urgent, normal = "urgent", "normal"
    handled: list[str] = []
    listener = listener_on(storage, (urgent, normal), handled.append)
    scaler = ElasticScaler(listener.pool_control, ScalingPolicy(min_threads=0, max_threads=2))
    channel = InProcessTriggerChannel()
    waker = TriggerWaker(listener, scaler, channel, account="devstoreaccount1")
    try:
        publish(storage, normal, ["woken"])
        channel.publish(WorkDetected("devstoreaccount1", "elsewhere"))
        assert listener.active_dequeue_tasks == 0
        channel.publish(WorkDetected("devstoreaccount1", normal))
        eventually(lambda: handled == ["woken"])
    finally:
        waker.close()
        listener.stop(5)


def test_each_queue_counts_its_own_messages_in_flight_and_handled() -> None:
    """A normal message held by its handler is in flight on normal, not on urgent."""
    storage = InMemoryQueueStorage()
    urgent, normal = "urgent", "normal"
    release = threading.Event()

    def hold(item: str) -> None:
        release.wait(10)

    listener = listener_on(storage, (urgent, normal), hold)
    publish(storage, normal, ["held"])
    listener.start_listener(1)
    try:
        eventually(lambda: listener.counters_of(normal)["in_flight"] == 1)
        assert listener.counters_of(urgent)["in_flight"] == 0
        release.set()
        eventually(lambda: listener.messages_processed == 1)
    finally:
        release.set()
        listener.stop(5)
    on_normal, on_urgent = listener.counters_of(normal), listener.counters_of(urgent)
    assert (on_normal["in_flight"], on_normal["processed"], on_urgent["processed"]) == (0, 1, 0)


def test_a_listener_on_one_queue_reads_it_directly() -> None:
    """One queue: no prioritized storage between the listener and its store, ids unchanged."""
    storage = InMemoryQueueStorage()
    listener = listener_on(storage, ("alone",), lambda item: None)
    assert listener.storage is storage
    several = listener_on(storage, ("urgent", "normal"), lambda item: None)
    assert isinstance(several.storage, PrioritizedQueueStorage)
    assert several.storage.priority == Priority()


def test_the_worker_creates_every_queue_and_poison_queue() -> None:
    """Starting on (urgent, normal, low) creates all three and their three poison queues."""
    storage = InMemoryQueueStorage()
    queues = ("urgent", "normal", "low")
    worker, _ = recording_worker(queues)
    host = WorkerHost([worker], SETTINGS, storage=storage)
    host.start()
    assert host.stop()
    expected = sorted([*queues, *(poison_queue_name(queue) for queue in queues)])
    assert storage.list_queues() == expected
