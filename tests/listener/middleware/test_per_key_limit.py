"""Per-key concurrency: with ``[limits] per_key = N`` at most N messages of one key are handled at
a time, other keys flow, a waiting message neither holds a slot nor loses its visibility, and
with ``limits.url`` the limit holds across processes through Redis leases that expire."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener import InMemoryQueueStorage, Publisher, SqliteQueueStorage
from cloudqueue.listener.limits.key_gate import RESERVATION_S, LocalKeyGate
from cloudqueue.listener.limits.redis_key_gate import RedisKeyGate, key_set
from cloudqueue.listener.middleware.per_key import PerKeyLimit
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.testing import ManualClock
from cloudqueue.workers import QueueWorker
from tests.support.event_loop_consumer import KINDS, Consuming, start_either
from tests.support.keyed_workers import Record, drained, host_settings, hosting, recording_worker
from tests.support.polling import eventually
from tests.support.redis_server import RedisServer


def overlaps(record: Record, limit: int) -> list[Any]:
    """The keys that had more than ``limit`` handlers running at one moment."""
    by_key: dict[Any, list[tuple[float, float]]] = {}
    for _, key, started, ended in record.spans:
        by_key.setdefault(key, []).append((started, ended))
    over = []
    for key, spans in by_key.items():
        events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
        running = peak = 0
        for _, step in events:
            running += step
            peak = max(peak, running)
        if peak > limit:
            over.append(key)
    return over


def most_at_once(record: Record) -> int:
    """The most handlers of any keys running at one moment."""
    events = sorted([(s, 1) for *_, s, _ in record.spans] + [(e, -1) for *_, e in record.spans])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def publish_keyed(storage: QueueStorage, queue: str, count: int, keys: int) -> None:
    storage.create_queue(queue)
    publisher = Publisher(storage, queue, dict, key="k")
    for n in range(count):
        publisher.publish({"id": n, "k": f"key-{n % keys}"})


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_forty_items_over_four_keys_never_overlap_within_a_key(
    asynchronous: bool, storage: QueueStorage
) -> None:
    """40 items over 4 keys, per_key = 1, 0.2 s handlers, on every store: no two of a key at
    once, while the keys run side by side (the drain's pace: tests/benchmarks/bench_keys.py)."""
    queue = f"perkey-{uuid.uuid4().hex[:10]}"
    publish_keyed(storage, queue, 40, 4)
    record = Record()
    worker = recording_worker(record, queue, asynchronous=asynchronous, handler_s=0.2)
    settings = host_settings(limits={"per_key": 1}, cancel={"check": False})
    with hosting(worker, storage, settings):
        drained(storage, queue, lambda: len(record.ids) == 40, timeout_s=60)
    assert sorted(record.ids) == list(range(40))
    assert overlaps(record, 1) == []
    assert most_at_once(record) > 1  # other keys flowed meanwhile


def start_one_key(
    kind: str,
    storage: InMemoryQueueStorage,
    queue_name: str,
    count: int,
    limit: PerKeyLimit,
    handled: list[int],
    *,
    handler_s: float,
) -> Consuming:
    """``count`` messages of one key, then a consumer of either kind with ``limit`` and four
    handlers at once, each noting its item's id and working ``handler_s``."""
    publish_keyed(storage, queue_name, count, 1)
    return start_either(
        kind,
        storage,
        queue_name,
        lambda item: handled.append(item["id"]),
        middleware=[limit],
        concurrency=4,
        handler_s=handler_s,
        dequeue_interval_s=0.05,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_a_busy_keys_messages_wait_held_and_none_fails_on_either_consumer(
    kind: str, queue_name: str
) -> None:
    """Six messages of one key at per_key = 1, four handlers at once, 50 ms each: those that
    find the key busy are deferred (counted ``key_busy``) and handled later, each once, with no
    delivery failed (on the event loop too: deferred, not retried)."""
    storage, limit = InMemoryQueueStorage(), PerKeyLimit(LocalKeyGate(1))
    handled: list[int] = []
    listener = start_one_key(kind, storage, queue_name, 6, limit, handled, handler_s=0.05)
    try:
        eventually(lambda: listener.messages_processed == 6)
    finally:
        listener.stop(timeout_s=10)
    assert sorted(handled) == list(range(6))
    assert listener.messages_failed == 0
    assert limit.decisions.snapshot().get("key_busy", 0) > 0


@pytest.mark.parametrize("kind", KINDS)
def test_at_a_stop_the_messages_waiting_for_a_busy_key_are_back_in_the_queue_at_once(
    kind: str, queue_name: str
) -> None:
    """Four messages of one key at per_key = 1: one runs (300 ms), three wait deferred; a stop
    lets the running one finish and makes the three visible again at once."""
    storage, limit = InMemoryQueueStorage(), PerKeyLimit(LocalKeyGate(1))
    handled: list[int] = []
    listener = start_one_key(kind, storage, queue_name, 4, limit, handled, handler_s=0.3)
    try:
        eventually(lambda: limit.decisions.snapshot().get("key_busy", 0) == 3)
    finally:
        listener.stop(timeout_s=10)
    assert len(handled) == 1
    assert listener.messages_processed == 1
    back = storage.get_messages(queue_name, max_messages=32, visibility_timeout_s=30)
    assert len(back) == 3


def test_per_key_two_lets_two_of_a_key_run_together() -> None:
    """per_key = 2: never three of a key at once, and two do run together."""
    storage, queue, record = InMemoryQueueStorage(), "two-at-once", Record()
    publish_keyed(storage, queue, 12, 1)
    worker = recording_worker(record, queue, handler_s=0.1)
    with hosting(worker, storage, host_settings(limits={"per_key": 2})):
        drained(storage, queue, lambda: len(record.ids) == 12, timeout_s=30)
    assert overlaps(record, 2) == []
    assert overlaps(record, 1) != []


def test_a_waiting_message_does_not_hold_its_slot_back_from_other_keys() -> None:
    """One thread with two slots: while a slow message of key A runs and another A waits, the
    messages of key B go through the second slot -- all of them before the slow one ends."""
    storage, queue, record = InMemoryQueueStorage(), "neighbours", Record()
    storage.create_queue(queue)
    publisher = Publisher(storage, queue, dict, key="k")
    publisher.publish({"id": "slow", "k": "A", "s": 1.0})
    slow_started = threading.Event()

    worker = recording_worker(record, queue, handler_s=0.0)
    original = worker.handle

    def handle(self: Any, item: dict[str, Any]) -> None:
        if item["id"] == "slow":
            slow_started.set()
        time.sleep(item["s"])  # the slow one's own work
        original(self, item)

    worker.handle = handle  # type: ignore[method-assign]
    settings = host_settings(
        limits={"per_key": 1},
        listener={"concurrency": 2, "dequeue_batch_size": 32},
        scaling={"max_threads": 1},
    )
    with capture_logs() as logs, hosting(worker, storage, settings):
        # The rest only once the slow one holds its key: else a handler thread started for
        # "waits" could reach the key first.
        assert slow_started.wait(30)
        publisher.publish({"id": "waits", "k": "A", "s": 0})
        for n in range(5):
            publisher.publish({"id": n, "k": "B", "s": 0})
        drained(storage, queue, lambda: len(record.ids) == 7, timeout_s=30)
    ended = {span[0]: span[3] for span in record.spans}
    assert all(ended[n] < ended["slow"] for n in range(5))
    assert ended["waits"] > ended["slow"]
    busy = [e for e in logs if e["event"] == "key_busy"]
    assert busy
    assert busy[0]["key"] == "A"
    assert busy[0]["message_id"]


def test_a_waiting_message_keeps_its_visibility_beyond_the_timeout(tmp_path: Any) -> None:
    """Handlers of 1.5 s with a 1 s visibility timeout: the waiting message is renewed while it
    waits, so neither message is delivered twice."""
    storage = SqliteQueueStorage(tmp_path / "q.db")
    queue, record = "renewed", Record()
    publish_keyed(storage, queue, 2, 1)
    worker = recording_worker(record, queue, handler_s=1.5)
    settings = host_settings(limits={"per_key": 1}, listener={"visibility_timeout_s": 1})
    with hosting(worker, storage, settings) as host:
        drained(storage, queue, lambda: len(record.ids) == 2, timeout_s=30)
        assert host.listeners[0].visibility_renewals >= 2
    assert sorted(record.ids) == [0, 1]
    assert overlaps(record, 1) == []
    storage.close()


def test_the_workers_concurrency_key_counts_where_it_differs() -> None:
    """Messages keyed by invoice, limited per customer through ``concurrency_key``."""
    storage, queue, record = InMemoryQueueStorage(), "by-customer", Record()
    storage.create_queue(queue)
    publisher = Publisher(storage, queue, dict, key="id")
    for n in range(8):
        publisher.publish({"id": n, "k": f"customer-{n % 2}"})
    base = recording_worker(record, queue, handler_s=0.1)

    class ByCustomer(base):  # type: ignore[valid-type, misc]
        def concurrency_key(self, item: dict[str, Any]) -> str:
            return str(item["k"])

    with hosting(ByCustomer, storage, host_settings(limits={"per_key": 1})):
        drained(storage, queue, lambda: len(record.ids) == 8, timeout_s=30)
    assert overlaps(record, 1) == []


def test_a_permit_passes_to_the_oldest_waiter_and_a_stale_one_frees() -> None:
    """The local gate resumes waiters in order, each with the leaving permit kept for it; a
    permit whose waiter never came back is given back after its reservation."""
    clock = ManualClock()
    gate = LocalKeyGate(1, clock=clock)
    resumed: list[str] = []

    def defer_as(name: str) -> Any:
        return lambda after: lambda: resumed.append(name)

    assert gate.enter("k", "m1", defer_as("m1"))
    assert not gate.enter("k", "m2", defer_as("m2"))
    assert not gate.enter("k", "m3", defer_as("m3"))
    gate.leave("k", "m1")
    assert resumed == ["m2"]
    assert not gate.enter("k", "m4", defer_as("m4"))  # the permit is m2's
    assert gate.enter("k", "m2", defer_as("m2"))
    gate.leave("k", "m2")
    assert resumed == ["m2", "m3"]  # m3 never comes back (released at a stop)
    clock.advance(RESERVATION_S + 1)
    assert gate.enter("k", "m5", defer_as("m5"))
    gate.leave("k", "m5")
    assert resumed == ["m2", "m3", "m4"]


def test_the_fleet_limit_holds_across_two_hosts_through_redis(redis_server: RedisServer) -> None:
    """Two hosts on one queue, per_key = 1 through the same Redis: no overlap within a key
    across both, and each handled some."""
    storage, queue = InMemoryQueueStorage(), f"fleet-{uuid.uuid4().hex[:8]}"
    publish_keyed(storage, queue, 16, 2)
    first, second = Record(), Record()
    settings = host_settings(limits={"per_key": 1, "url": redis_server.url})
    worker_a = recording_worker(first, queue, handler_s=0.1)
    worker_b = recording_worker(second, queue, handler_s=0.1)
    with hosting(worker_a, storage, settings), hosting(worker_b, storage, settings):
        drained(storage, queue, lambda: len(first.ids) + len(second.ids) == 16, timeout_s=60)
    both = Record(spans=first.spans + second.spans)
    assert sorted(both.ids) == list(range(16))
    assert overlaps(both, 1) == []


def test_a_dead_holders_fleet_permit_frees_when_its_lease_runs_out(
    redis_server: RedisServer,
) -> None:
    """A holder that never leaves (its process died) keeps its permit only for lease_s."""
    prefix = key_set("test", f"q{uuid.uuid4().hex[:8]}", "")
    dead = RedisKeyGate(redis_server.url, prefix=prefix, limit=1, lease_s=0.5)
    alive = RedisKeyGate(redis_server.url, prefix=prefix, limit=1, lease_s=0.5)
    deferred: list[float | None] = []
    assert dead.enter("k", "m1", lambda after: lambda: None)
    dead.close()  # no more renewals, as if killed

    def defer(after: float | None) -> Any:
        deferred.append(after)
        return lambda: None

    assert not alive.enter("k", "m2", defer)
    assert deferred
    assert deferred[0] is not None
    eventually(lambda: alive.enter("k", "m2", defer), timeout_s=5)
    alive.leave("k", "m2")
    alive.close()


def test_a_held_fleet_permit_is_renewed_past_its_lease(redis_server: RedisServer) -> None:
    """A live holder's lease is extended while it handles: nobody enters after lease_s."""
    prefix = key_set("test", f"q{uuid.uuid4().hex[:8]}", "")
    holder = RedisKeyGate(redis_server.url, prefix=prefix, limit=1, lease_s=0.3)
    other = RedisKeyGate(redis_server.url, prefix=prefix, limit=1, lease_s=0.3)
    assert holder.enter("k", "m1", lambda after: lambda: None)
    threading.Event().wait(1.0)  # time passing is the point: three leases' worth, renewed
    assert not other.enter("k", "m2", lambda after: lambda: None)
    holder.leave("k", "m1")
    assert other.enter("k", "m2", lambda after: lambda: None)
    holder.close()
    other.close()


def test_redis_out_of_reach_falls_back_to_the_local_limit(redis_server: RedisServer) -> None:
    """Redis down: one warning, and the limit holds in this process meanwhile."""
    prefix = key_set("test", f"q{uuid.uuid4().hex[:8]}", "")
    gate = RedisKeyGate(redis_server.url, prefix=prefix, limit=1, lease_s=5)
    redis_server.stop()
    with capture_logs() as logs:
        assert gate.enter("k", "m1", lambda after: lambda: None)
        assert not gate.enter("k", "m2", lambda after: lambda: None)
    assert [e["event"] for e in logs] == ["fleet_key_limit_unavailable"]
    gate.close()


def test_a_worker_holding_its_most_deferred_messages_fetches_no_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hot key's backlog: once MAX_DEFERRED messages wait, the worker stops fetching (they
    stay in the queue, not held and renewed by it) until the key frees; then all drain."""
    monkeypatch.setattr("cloudqueue.listener.consumer.deferrals.MAX_DEFERRED", 4)
    storage, queue = InMemoryQueueStorage(), "hot-key"
    storage.create_queue(queue)
    publisher = Publisher(storage, queue, dict, key="k")
    for n in range(100):
        publisher.publish({"id": n, "k": "hot"})
    release, started, handled = threading.Event(), threading.Event(), []

    class Blocking(QueueWorker[dict[str, Any]]):
        queue_name = queue

        def handle(self, item: dict[str, Any]) -> None:
            started.set()
            release.wait(30)
            handled.append(item["id"])

    # One dequeue thread: with more, a scale-up on the burst lets each thread have a get under
    # way when the deferrals fill, and the bound below would race with it (15 held, once).
    settings = host_settings(
        limits={"per_key": 1},
        listener={"dequeue_batch_size": 8},
        scaling={"max_threads": 1},
    )
    with hosting(Blocking, storage, settings) as host:
        eventually(started.is_set)
        deferrals = host.listeners[0]._parts.deferrals
        eventually(lambda: deferrals.full)
        # Absence of fetching can only be seen over time: a few idle waits' worth.
        threading.Event().wait(1.5)
        visible = len(storage.peek_messages(queue, max_messages=32))
        assert visible == 32  # 100 less at most two batches of 8 fetched
        assert len(deferrals) <= 8
        release.set()
        drained(storage, queue, lambda: len(handled) == 100, timeout_s=60)
    assert sorted(handled) == list(range(100))
