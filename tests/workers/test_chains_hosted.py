"""Chains in a running host on SQLite: ``Split`` -> ``Price`` -> ``Total`` give the exact totals,
each line sent on once under its derived key; a step redelivered after its chained send (its
delete failed) sends nothing twice; a chain inside a group completes it once, after its last step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from cloudqueue.listener import Publisher, SqliteQueueStorage
from cloudqueue.listener.errors import TransientStorageError
from cloudqueue.listener.stores.layouts import QueueLayout, record_layout
from cloudqueue.listener.stores.metered import MeteredStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.workflows.group_ledger import GroupStatus
from cloudqueue.listener.workflows.sqlite_groups import group_ledger_for
from cloudqueue.workers.host.host import WorkerHost
from tests.support.chain_workers import (
    LINES,
    ORDERS,
    Done,
    Order,
    Price,
    Split,
    Total,
    events,
    expected_keys,
    expected_totals,
    priced,
    totals,
)
from tests.support.keyed_workers import host_settings
from tests.support.polling import eventually
from tests.support.redis_server import RedisServer
from tests.support.written_lines import complete_lines

WORKERS = [Split, Price, Total]


@pytest.fixture
def record_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "record.txt"
    monkeypatch.setenv("TEST_RECORD_PATH", str(path))
    return path


def run_chain(storage: QueueStorage, workers: list[Any], until: Any, **sections: Any) -> None:
    host = WorkerHost(workers, host_settings(**sections), storage=storage)
    host.start()
    try:
        eventually(until, timeout_s=60)
    finally:
        host.stop()


def test_a_three_step_chain_gives_the_exact_totals(tmp_path: Path, record_path: Path) -> None:
    """Six orders split into 18 lines, each priced once and totalled: the exact sums."""
    storage = SqliteQueueStorage(tmp_path / "q.db")
    storage.create_queue(Split.queue_name)
    Publisher(storage, Split.queue_name, Order, key="order").publish_many(ORDERS)
    queues = (Split.queue_name, Price.queue_name, Total.queue_name)
    run_chain(
        storage,
        WORKERS,
        lambda: (
            len(events(record_path, "priced")) == LINES
            and all(storage.approximate_message_count(queue) == 0 for queue in queues)
        ),
    )
    assert totals(record_path) == expected_totals()
    assert {key for _, _, key in priced(record_path)} == expected_keys()
    assert len(events(record_path, "pricing")) == LINES


class FailingFirstDeletes(MeteredStorage):
    """Fails the first delete of each message on one queue, as a lost connection would: the
    message stays and is delivered again once its visibility passes. Counts every call."""

    def __init__(self, inner: QueueStorage, queue_name: str) -> None:
        super().__init__(inner)
        self.queue_name = queue_name
        self.failed: set[str] = set()

    def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        if queue_name == self.queue_name and message_id not in self.failed:
            self.failed.add(message_id)
            raise TransientStorageError("delete failed on purpose")
        return super().delete_message(queue_name, message_id, pop_receipt)


def test_a_step_redelivered_after_its_send_sends_nothing_twice(
    tmp_path: Path, record_path: Path
) -> None:
    """Every ``Price`` message is handled twice (its first delete fails), yet each line is put
    on ``Total``'s queue once: the redelivery's chained puts find their effect-once marks."""
    inner = SqliteQueueStorage(tmp_path / "q.db")
    storage = FailingFirstDeletes(inner, Price.queue_name)
    storage.create_queue(Split.queue_name)
    Publisher(storage, Split.queue_name, Order, key="order").publish_many(ORDERS)
    run_chain(
        storage,
        WORKERS,
        lambda: (
            len(events(record_path, "pricing")) == 2 * LINES
            and inner.approximate_message_count(Price.queue_name) == 0
        ),
        listener={"visibility_timeout_s": 1},
    )
    assert len(storage.failed) == LINES
    assert storage.counts_by_queue_and_operation()[(Total.queue_name, "put_message")] == LINES
    assert len(priced(record_path)) == LINES
    assert totals(record_path) == expected_totals()


def test_a_chain_inside_a_group_completes_it_once_after_its_last_step(
    tmp_path: Path, record_path: Path
) -> None:
    """The orders sent as a group: each line passes the membership on from ``Split`` through
    ``Price`` to ``Total``. With ``Total`` not running yet, every line is priced and the group
    stays open with all 18 members pending; once ``Total`` runs, one ``GroupDone`` counting 18
    handled members, after every total."""
    database = tmp_path / "q.db"
    storage = SqliteQueueStorage(database)
    storage.create_queue(Split.queue_name)
    publisher = Publisher(storage, Split.queue_name, Order, key="order")
    group = publisher.send_group(ORDERS, on_complete=Done)
    statuses: list[GroupStatus] = []

    def read(store: QueueStorage) -> GroupStatus:
        ledger = group_ledger_for(store)
        assert ledger is not None
        status = ledger.status(group.id)
        assert status is not None
        statuses.append(status)  # read while the host's store is open
        return status

    def priced_on() -> bool:
        return (
            len(events(record_path, "pricing")) == LINES
            and storage.approximate_message_count(Total.queue_name) == LINES
            and read(storage).total == LINES
        )

    run_chain(storage, [Split, Price, Done], priced_on)
    assert (statuses[-1].pending, statuses[-1].completion) == (LINES, "pending")
    reopened = SqliteQueueStorage(database)
    run_chain(
        reopened,
        [Total, Done],
        lambda: bool(events(record_path, "done")) and read(reopened).completion == "sent",
    )
    lines = complete_lines(record_path)
    done_at = next(n for n, line in enumerate(lines) if line.startswith("done "))
    assert sum(line.startswith("priced ") for line in lines[:done_at]) == LINES
    assert events(record_path, "done") == [[str(LINES), "0"]]
    status = statuses[-1]
    assert (status.total, status.handled, status.pending) == (LINES, LINES, 0)
    assert totals(record_path) == expected_totals()


def test_a_chain_puts_on_the_partitions_recorded_for_the_next_queue(
    tmp_path: Path, record_path: Path
) -> None:
    """``Price`` not running here, its queue recorded as 2 partitions: a host of ``Split`` alone
    puts the lines on ``chain-lines-p0`` and ``-p1``, where ``Price`` reads, none on the plain
    queue."""
    storage = SqliteQueueStorage(tmp_path / "q.db")
    storage.create_queue(Split.queue_name)
    record_layout(storage, Price.queue_name, QueueLayout(2))
    Publisher(storage, Split.queue_name, Order, key="order").publish_many(ORDERS)
    partitions = [f"{Price.queue_name}-p{n}" for n in range(2)]
    depths: list[list[int]] = []

    def lines_put() -> bool:
        plain = Price.queue_name in storage.list_queues()
        depths.append(
            [storage.approximate_message_count(q) for q in partitions]
            + [storage.approximate_message_count(Price.queue_name) if plain else 0]
        )
        return sum(depths[-1]) == LINES

    run_chain(storage, [Split], lines_put)
    *on_partitions, on_plain = depths[-1]
    assert all(on_partitions)  # spread by key over both
    assert on_plain == 0


class IdlePrice(Price):
    """``Price`` scaled to no poller: only a trigger (or its watchdog, 10 minutes away) wakes it."""

    settings: ClassVar[dict[str, Any]] = {"scaling": {"min_threads": 0}}


class SplitToIdle(Split):
    then = IdlePrice


def test_a_chained_put_wakes_the_next_worker_through_the_trigger_channel(
    tmp_path: Path, record_path: Path, redis_server: RedisServer
) -> None:
    """With ``Price`` idle at zero threads, the lines ``Split`` sends on are announced on the
    host's trigger channel, and ``Price`` takes them at once."""
    storage = SqliteQueueStorage(tmp_path / "q.db")
    storage.create_queue(Split.queue_name)
    settings = host_settings(
        triggers={"url": redis_server.url, "watchdog_interval_s": 600}, listener={"threads": 1}
    )
    host = WorkerHost([SplitToIdle, IdlePrice, Total], settings, storage=storage)
    host.start()
    try:
        price = host.hosted[1].listener
        eventually(lambda: price.threads_alive == 0, timeout_s=60)
        Publisher(storage, Split.queue_name, Order, key="order").publish_many(ORDERS)
        eventually(lambda: len(priced(record_path)) == LINES, timeout_s=30)
    finally:
        host.stop()
    assert totals(record_path) == expected_totals()
