"""Results through a running worker, on memory and SQLite: what a handler returns comes back
through ``send``'s handle, expires with its time to live, is kept once per key however often its
message is delivered, and is found for every member of a group; with push triggers the waiter
reads the store only for the value."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudqueue.listener import (
    InMemoryQueueStorage,
    Publisher,
    QueueStorage,
    SqliteQueueStorage,
    TransientStorageError,
)
from cloudqueue.listener.consumer.current import current_envelope
from cloudqueue.listener.poison.record import read_record
from cloudqueue.listener.stores.forwarding import ForwardingStorage
from cloudqueue.listener.testing import ManualClock
from cloudqueue.listener.workflows.group_done import GroupDone
from cloudqueue.listener.workflows.result_handle import ResultHandle
from cloudqueue.listener.workflows.result_store import ResultStore
from cloudqueue.listener.workflows.result_stores import required_result_store, result_store_for
from cloudqueue.listener.workflows.sending import GroupHandle
from cloudqueue.workers import QueueWorker, WorkerHost, close_senders, load_settings
from cloudqueue.workers.api.result_handles import result_handle
from tests.support.keyed_workers import host_settings, hosting
from tests.support.polling import eventually
from tests.support.redis_server import RedisServer
from tests.support.result_workers import Price, Priced, Pricer, WakeUps
from tests.support.runs import run_environment

pytest_plugins = ["tests.support.redis_server"]


@pytest.fixture(params=["memory", "sqlite"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[QueueStorage]:
    made: QueueStorage = (
        InMemoryQueueStorage() if request.param == "memory" else SqliteQueueStorage(tmp_path / "q")
    )
    made.create_queue("prices")
    yield made
    made.close()


def test_a_handlers_value_comes_back_through_its_handle(storage: QueueStorage) -> None:
    """The handler's ``Priced`` is kept under the message's key and ``result`` returns it as
    that model."""
    Publisher(storage, "prices", Price).publish(Price(sku="a", cents=21), key="order-1")
    handle = result_handle(Pricer, "order-1", storage, None)
    with hosting(Pricer, storage, host_settings()):
        assert handle.result(timeout_s=30) == Priced(sku="a", total=42)


def test_an_async_handlers_value_comes_back_too(storage: QueueStorage) -> None:
    """An ``async def handle`` returns through its coroutine: that value is the one kept."""

    class AsyncPricer(QueueWorker[Price]):
        queue_name = "prices"
        keep_results = True

        async def handle(self, item: Price) -> Priced:
            await asyncio.sleep(0)
            return Priced(sku=item.sku, total=item.cents + 1)

    Publisher(storage, "prices", Price).publish(Price(sku="g", cents=1), key="order-7")
    handle = result_handle(AsyncPricer, "order-7", storage, None)
    with hosting(AsyncPricer, storage, host_settings()):
        assert handle.result(timeout_s=30) == Priced(sku="g", total=2)


def test_worker_send_makes_a_key_and_its_handle_waits_for_the_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Pricer.send(item)`` without a key: the handle has a new key, which the worker keeps
    its result under (SQLite, the store the settings name)."""
    for name, value in run_environment(f"sqlite:///{tmp_path / 'q.db'}", tmp_path).items():
        monkeypatch.setenv(name, value)
    close_senders()
    try:
        host = WorkerHost([Pricer], load_settings(backoff={"max_idle_s": 0.2}))
        host.start()
        try:
            handle = Pricer.send({"sku": "b", "cents": 5})
            assert handle.key is not None
            assert len(handle.key) == 32
            assert handle.result(timeout_s=30) == Priced(sku="b", total=10)
        finally:
            host.stop()
    finally:
        close_senders()


def test_a_result_expires_with_its_time_to_live(tmp_path: Path) -> None:
    """Read an hour after it was kept (``results_ttl_s = 3600``), the result is gone: the
    handle times out naming the key."""
    clock = ManualClock()
    storage = SqliteQueueStorage(tmp_path / "q.db", clock=clock)
    storage.create_queue("prices")
    Publisher(storage, "prices", Price).publish(Price(sku="c", cents=1), key="order-3")
    with hosting(Pricer, storage, host_settings()):
        handle = result_handle(Pricer, "order-3", storage, None)
        assert handle.result(timeout_s=30) == Priced(sku="c", total=2)
        clock.advance(3600)
        with pytest.raises(TimeoutError, match="'order-3'"):
            handle.result(timeout_s=0)
    storage.close()


class DeleteFailsOnce(ForwardingStorage):
    """A store whose first delete fails: the message handled is delivered again. It notes
    the result kept under ``key`` at each delete."""

    def __init__(self, inner: QueueStorage, key: str) -> None:
        super().__init__(inner)
        self.failed = threading.Event()
        self.key = key
        self.kept_at_delete: list[str | None] = []

    def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        kept = result_store_for(self.inner)
        self.kept_at_delete.append(None if kept is None else kept.get(self.key))
        if queue_name == "prices" and not self.failed.is_set():
            self.failed.set()
            raise TransientStorageError("delete failed on purpose")
        return super().delete_message(queue_name, message_id, pop_receipt)

    def close(self) -> None:
        """The store under it is the test's, closed by its fixture."""


def test_a_redelivered_message_keeps_one_result_the_last_one(storage: QueueStorage) -> None:
    """Each delete finds the result of its delivery kept already; the first delete fails, and
    handled again the message keeps its result again under the same key, replacing the first
    (one row)."""

    class Counter(QueueWorker[Price]):
        queue_name = "prices"
        keep_results = True

        def handle(self, item: Price) -> dict[str, Any]:
            return {"sku": item.sku, "delivery": current_envelope().dequeue_count}

    flaky = DeleteFailsOnce(storage, "order-4")
    Publisher(storage, "prices", Price).publish(Price(sku="d", cents=1), key="order-4")
    settings = host_settings(listener={"visibility_timeout_s": 1})
    with hosting(Counter, flaky, settings):
        eventually(lambda: storage.approximate_message_count("prices") == 0, timeout_s=30)
    kept = result_store_for(storage)
    assert flaky.failed.is_set()
    assert kept is not None
    assert kept.get("order-4") == '{"sku":"d","delivery":2}'
    assert flaky.kept_at_delete == ['{"sku":"d","delivery":1}', '{"sku":"d","delivery":2}']
    assert len(list_keys(storage)) == 1


def list_keys(storage: QueueStorage) -> list[str]:
    """Every key the store holds a result for (SQLite: its rows; memory: its dict)."""
    if isinstance(storage, SqliteQueueStorage):
        with storage.reading() as db:
            return [row[0] for row in db.execute("SELECT key FROM message_results")]
    kept = result_store_for(storage)
    return [] if kept is None else list(kept._kept)  # type: ignore[attr-defined]


def test_a_groups_results_hold_every_members_value(storage: QueueStorage) -> None:
    """Ten members priced by a worker that keeps results, sent without keys: the completion
    worker, handling the ``GroupDone``, finds each member's price among the group's
    ``results()`` (kept before the member counted as settled)."""
    totals: list[int] = []
    summed = threading.Event()

    class Totals(QueueWorker[GroupDone]):
        queue_name = "finished"

        def handle(self, done: GroupDone) -> None:
            group = GroupHandle.of(done.group_id, storage)
            totals.extend(sorted(priced.total for priced in group.results(Priced)))
            summed.set()

    storage.create_queue("finished")
    items = [Price(sku=f"s{n}", cents=n) for n in range(10)]
    Publisher(storage, "prices", Price).send_group(items, on_complete=Totals)
    with hosting(Pricer, storage, host_settings()), hosting(Totals, storage, host_settings()):
        assert summed.wait(30)
    assert totals == [2 * n for n in range(10)]


@pytest.mark.parametrize(
    ("returned", "reason"),
    [(object(), "result_not_json"), ("x" * 40_000, "result_too_large")],
)
def test_a_value_that_cannot_be_kept_poisons_its_message_with_the_reason(
    storage: QueueStorage, returned: object, reason: str
) -> None:
    """A handler returning something JSON cannot hold, or too large, has its message moved to
    the poison queue with that reason, and no result kept."""

    class Odd(QueueWorker[Price]):
        queue_name = "prices"
        keep_results = True

        def handle(self, item: Price) -> object:
            return returned

    Publisher(storage, "prices", Price).publish(Price(sku="e", cents=1), key="order-5")
    with hosting(Odd, storage, host_settings()):  # it closes the store when it stops
        eventually(lambda: storage.approximate_message_count("prices-poison") == 1, timeout_s=30)
        [poisoned] = storage.peek_messages("prices-poison", max_messages=1)
        kept = result_store_for(storage)
        assert kept is not None
        assert kept.get("order-5") is None
    record = read_record(poisoned.content)
    assert record is not None
    assert record.reason == reason


class CountedReads:
    """A result store whose reads are counted."""

    def __init__(self, inner: ResultStore) -> None:
        self.inner = inner
        self.reads = 0

    def put(self, key: str, value: str, *, ttl_s: float, group_id: str | None = None) -> None:
        self.inner.put(key, value, ttl_s=ttl_s, group_id=group_id)

    def get(self, key: str) -> str | None:
        self.reads += 1
        return self.inner.get(key)

    def for_group(self, group_id: str) -> Iterator[tuple[str, str]]:
        return self.inner.for_group(group_id)

    def close(self) -> None:
        self.inner.close()


class ReleasedAfter:
    """A handle's sleeper on a manual clock: once ``at_s`` seconds of waits have passed, it lets
    the held handler go and waits (on an event, with a deadline) until the result is kept."""

    def __init__(self, clock: ManualClock, at_s: float, release: threading.Event, kept: Any):
        self.clock = clock
        self.until = clock.monotonic() + at_s
        self.release = release
        self.kept = kept

    def wait(self, stop_event: threading.Event, delay_s: float) -> bool:
        self.clock.wait(stop_event, delay_s)
        if self.clock.monotonic() >= self.until and not self.release.is_set():
            self.release.set()
            eventually(self.kept, timeout_s=30)
        return False


def test_without_push_triggers_a_long_wait_reads_at_most_once_per_second_after_5_s(
    storage: QueueStorage,
) -> None:
    """A handler held for 60 s of the waiter's (manual) time: the waiter's reads back off to
    one per 5 s, and the read after the worker kept the value returns it."""
    release = threading.Event()

    class Held(Pricer):
        def handle(self, item: Price) -> Priced:
            release.wait(30)
            return super().handle(item)

    inner = result_store_for(storage)
    assert inner is not None
    counted = CountedReads(inner)
    clock = ManualClock()
    start = clock.monotonic()
    sleeper = ReleasedAfter(clock, 60, release, lambda: inner.get("order-8") is not None)
    handle = ResultHandle("order-8", lambda: counted, as_type=Priced, clock=clock, sleeper=sleeper)
    Publisher(storage, "prices", Price).publish(Price(sku="h", cents=3), key="order-8")
    with hosting(Held, storage, host_settings()):
        try:
            assert handle.result(timeout_s=600) == Priced(sku="h", total=6)
        finally:
            release.set()
    waited = clock.monotonic() - start
    assert 60 <= waited < 66
    assert counted.reads == 7 + 11  # to 6.3 s; then every 5 s to 61.3 s, which finds it
    late = sum(1 for w in itertools.accumulate(clock.waits) if w > 5)
    assert late / (waited - 5) <= 1.0


def test_with_push_triggers_the_waiter_reads_only_before_waiting_and_for_the_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer
) -> None:
    """A worker on SQLite with Redis triggers holds the item until told; the waiter reads once,
    waits, and is woken by the worker's announcement: 2 reads in all, 0 while it waited."""
    release = threading.Event()

    class Held(Pricer):
        def handle(self, item: Price) -> Priced:
            release.wait(30)
            return super().handle(item)

    env = run_environment(f"sqlite:///{tmp_path / 'q.db'}", tmp_path)
    for name, value in {**env, "CLOUDQUEUE_TRIGGERS__URL": redis_server.url}.items():
        monkeypatch.setenv(name, value)
    counted: list[CountedReads] = []

    def counting(storage: QueueStorage) -> ResultStore:
        counted.append(CountedReads(required_result_store(storage)))
        return counted[-1]

    close_senders()
    host = WorkerHost([Held], load_settings(backoff={"max_idle_s": 0.2}))
    host.start()
    try:
        handle = Held.send({"sku": "f", "cents": 4})
        monkeypatch.setattr(handle, "_open_store", lambda: counting(host.storage))
        handle.sleeper = wake_ups = WakeUps()
        got: list[object] = []
        waiter = threading.Thread(target=lambda: got.append(handle.result(timeout_s=25)))
        waiter.start()
        eventually(lambda: bool(counted) and counted[0].reads == 1, timeout_s=10)
        release.set()
        waiter.join(30)
    finally:
        release.set()
        host.stop()
        close_senders()
    assert got == [Priced(sku="f", total=8)]
    assert counted[0].reads == 2
    assert wake_ups.ended == [True]  # woken by the worker's announcement, not at a time-out
