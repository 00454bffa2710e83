"""Results and chains on ``listener.event_loop = "single"``: what an ``async def handle`` returns
is kept under its message's key, or sent on to the next step, before its message is deleted;
a redelivery keeps one result and sends nothing twice (SQLite)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import pytest

from cloudqueue.listener import Publisher, SqliteQueueStorage, current_envelope
from cloudqueue.listener.errors import TransientStorageError
from cloudqueue.listener.workflows.result_stores import required_result_store
from cloudqueue.workers import QueueWorker, WorkerHost
from cloudqueue.workers.api.result_handles import result_handle
from tests.support.chain_workers import (
    LINES,
    ORDERS,
    Order,
    Price,
    Split,
    Total,
    events,
    expected_totals,
    priced,
    totals,
)
from tests.support.keyed_workers import host_settings, hosting
from tests.support.polling import eventually
from tests.support.result_workers import Price as PriceItem
from tests.support.result_workers import Priced

SINGLE: dict[str, Any] = {"listener": {"event_loop": "single"}}


class FirstDeletesFail(SqliteQueueStorage):
    """The embedded store failing the first delete of each message on ``queue``, as a lost
    connection would (the message is delivered again once its visibility passes); it counts the
    puts on each queue and notes the result kept under ``key`` at each delete."""

    def __init__(self, path: Path, queue: str, key: str = "") -> None:
        super().__init__(path)
        self.queue, self.key = queue, key
        self.failed: set[str] = set()
        self.puts: Counter[str] = Counter()
        self.kept_at_delete: list[str | None] = []

    def put_message(self, queue_name: str, content: str, **options: Any) -> Any:
        self.puts[queue_name] += 1
        return super().put_message(queue_name, content, **options)

    def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        if queue_name == self.queue and self.key:
            self.kept_at_delete.append(required_result_store(self).get(self.key))
        if queue_name == self.queue and message_id not in self.failed:
            self.failed.add(message_id)
            raise TransientStorageError("delete failed on purpose")
        return super().delete_message(queue_name, message_id, pop_receipt)


class LoopPricer(QueueWorker[PriceItem]):
    """Prices on the single loop, noting the delivery, and keeps the price."""

    queue_name = "prices"
    keep_results = True
    settings: ClassVar[dict[str, Any]] = SINGLE

    async def handle(self, item: PriceItem) -> dict[str, Any]:
        return {"total": item.cents * 2, "delivery": current_envelope().dequeue_count}


def test_a_result_is_kept_under_its_key_before_each_delete(tmp_path: Path) -> None:
    """The first delete fails: each delete finds its delivery's value kept already, the
    redelivery's replacing the first under the same key, and the handle returns it."""
    storage = FirstDeletesFail(tmp_path / "q.db", "prices", key="order-1")
    storage.create_queue("prices")
    Publisher(storage, "prices", PriceItem).publish(PriceItem(sku="a", cents=21), key="order-1")
    settings = host_settings(listener={"visibility_timeout_s": 1})
    with hosting(LoopPricer, storage, settings) as host:
        assert host.hosted == []  # on its loop, not refused
        handle = result_handle(LoopPricer, "order-1", storage, None)
        eventually(lambda: storage.approximate_message_count("prices") == 0, timeout_s=30)
        assert handle.result(timeout_s=0) == {"total": 42, "delivery": 2}
    first, second = '{"total":42,"delivery":1}', '{"total":42,"delivery":2}'
    assert storage.kept_at_delete == [first, second]
    storage.close()


def test_an_async_value_comes_back_as_the_handlers_model(tmp_path: Path) -> None:
    """A value kept on the loop is read back as the model ``handle`` is annotated to return."""

    class ModelPricer(QueueWorker[PriceItem]):
        queue_name = "prices"
        keep_results = True
        settings: ClassVar[dict[str, Any]] = SINGLE

        async def handle(self, item: PriceItem) -> Priced:
            return Priced(sku=item.sku, total=item.cents + 1)

    storage = SqliteQueueStorage(tmp_path / "q.db")
    storage.create_queue("prices")
    Publisher(storage, "prices", PriceItem).publish(PriceItem(sku="g", cents=1), key="order-7")
    with hosting(ModelPricer, storage, host_settings()):
        handle = result_handle(ModelPricer, "order-7", storage, None)
        assert handle.result(timeout_s=30) == Priced(sku="g", total=2)
    storage.close()


class LoopPrice(Price):
    """``Price`` (an ``async def handle``) on the single loop."""

    settings: ClassVar[dict[str, Any]] = SINGLE


class SplitToLoop(Split):
    then = LoopPrice


@pytest.fixture
def record_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "record.txt"
    monkeypatch.setenv("TEST_RECORD_PATH", str(path))
    return path


def test_a_step_on_the_loop_sends_on_once_though_handled_twice(
    tmp_path: Path, record_path: Path
) -> None:
    """``Split`` -> ``Price`` on the single loop -> ``Total``: every ``Price`` message is handled
    twice (its first delete fails), yet each line goes on to ``Total`` once, under its derived
    key, and the totals are exact."""
    storage = FirstDeletesFail(tmp_path / "q.db", Price.queue_name)
    storage.create_queue(Split.queue_name)
    Publisher(storage, Split.queue_name, Order, key="order").publish_many(ORDERS)
    settings = host_settings(listener={"visibility_timeout_s": 1})
    host = WorkerHost([SplitToLoop, LoopPrice, Total], settings, storage=storage)
    assert [looped.queue_names for looped in host.looped] == [(Price.queue_name,)]
    host.start()
    try:
        eventually(
            lambda: (
                len(events(record_path, "pricing")) == 2 * LINES
                and storage.approximate_message_count(Price.queue_name) == 0
                and len(priced(record_path)) == LINES
            ),
            timeout_s=60,
        )
    finally:
        assert host.stop()
    assert len(storage.failed) == LINES
    assert storage.puts[Total.queue_name] == LINES
    assert totals(record_path) == expected_totals()
    storage.close()
