"""The embedded stores (in-memory and SQLite) on a manual clock, and SQLite shared by processes.

The contract suite proves the shared semantics on real time; here time is a ``ManualClock``, so
boundaries (a timeout ending exactly now, a TTL reached to the microsecond) are tested exactly and
without waiting. The last tests start real processes and threads on one SQLite file.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import closing
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    MessageCodec,
    PoisonRecord,
    poison_queue_name,
)
from cloudqueue.listener.errors import (
    MessageNotFoundError,
    QueueNotFoundError,
    StorageError,
    TransientStorageError,
)
from cloudqueue.listener.queue_limits import DEFAULT_TIME_TO_LIVE_S, NEVER_EXPIRES
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.testing import ManualClock, VirtualClock
from cloudqueue.workers.testing import run_until_drained

QUEUE = "work"


@pytest.fixture(params=["memory", "sqlite"])
def store(
    request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path
) -> Iterator[QueueStorage]:
    """Each embedded store on the manual clock, with the queue ``work`` created."""
    backend: QueueStorage
    if request.param == "memory":
        backend = InMemoryQueueStorage(clock=clock)
    else:
        backend = SqliteQueueStorage(tmp_path / "queues.db", clock=clock)
    backend.create_queue(QUEUE)
    yield backend
    backend.close()


def contents(store: QueueStorage, *, max_messages: int = 32, timeout_s: int = 30) -> list[str]:
    """The contents of the messages one get takes, in the order it returns them."""
    got = store.get_messages(QUEUE, max_messages=max_messages, visibility_timeout_s=timeout_s)
    return [message.content for message in got]


# Envelopes


def test_envelope_times_come_from_the_clock(store: QueueStorage, clock: ManualClock) -> None:
    """Insertion, expiry and next-visible times are the clock's now plus the configured spans."""
    start = clock.now()
    put = store.put_message(QUEUE, "m")
    assert put.inserted_on == start
    assert put.expires_on == start + timedelta(seconds=DEFAULT_TIME_TO_LIVE_S)
    assert put.next_visible_on == start

    clock.advance(5)
    got = store.get_messages(QUEUE, max_messages=1, visibility_timeout_s=30)[0]
    assert got.inserted_on == start
    assert got.next_visible_on == start + timedelta(seconds=35)


# Visibility


def test_a_message_is_hidden_exactly_for_its_visibility_timeout(
    store: QueueStorage, clock: ManualClock
) -> None:
    """A taken message stays hidden until the timeout ends, then returns with a new receipt."""
    store.put_message(QUEUE, "m")
    first = store.get_messages(QUEUE, max_messages=1, visibility_timeout_s=30)[0]
    clock.advance(29.999)
    assert contents(store) == []
    clock.advance(0.001)
    second = store.get_messages(QUEUE, max_messages=1, visibility_timeout_s=30)[0]
    assert (second.id, second.dequeue_count) == (first.id, 2)
    assert second.pop_receipt != first.pop_receipt


def test_dequeue_count_rises_with_every_redelivery(store: QueueStorage, clock: ManualClock) -> None:
    """Each get of the same message increments its dequeue count by one."""
    store.put_message(QUEUE, "m")
    counts = []
    for _ in range(5):
        counts.append(store.get_messages(QUEUE, max_messages=1, visibility_timeout_s=10)[0])
        clock.advance(10)
    assert [message.dequeue_count for message in counts] == [1, 2, 3, 4, 5]


def test_a_visibility_delay_hides_a_new_message_until_it_passes(
    store: QueueStorage, clock: ManualClock
) -> None:
    """A message put with a delay becomes visible exactly when the delay ends."""
    store.put_message(QUEUE, "later", visibility_delay_s=10)
    clock.advance(9.999)
    assert contents(store) == []
    clock.advance(0.001)
    assert contents(store) == ["later"]


def test_update_visibility_extends_the_hiding(store: QueueStorage, clock: ManualClock) -> None:
    """A renewed message stays hidden past its original timeout until the new one ends."""
    store.put_message(QUEUE, "slow")
    got = store.get_messages(QUEUE, max_messages=1, visibility_timeout_s=10)[0]
    clock.advance(5)
    store.update_visibility(QUEUE, got.id, got.pop_receipt, 60)
    clock.advance(10)
    assert contents(store) == []
    clock.advance(50)
    assert contents(store) == ["slow"]


def test_a_receipt_stays_valid_after_its_timeout_until_another_get(
    store: QueueStorage, clock: ManualClock
) -> None:
    """A late consumer may still delete its message if nobody has taken it again meanwhile."""
    store.put_message(QUEUE, "late")
    got = store.get_messages(QUEUE, max_messages=1, visibility_timeout_s=10)[0]
    clock.advance(60)
    assert store.delete_message(QUEUE, got.id, got.pop_receipt) is True
    assert store.approximate_message_count(QUEUE) == 0


# Order


def test_gets_hand_out_messages_in_insertion_order(store: QueueStorage) -> None:
    """Visible messages come out oldest first, across consecutive gets."""
    for index in range(10):
        store.put_message(QUEUE, f"m{index}")
    assert contents(store, max_messages=3) == ["m0", "m1", "m2"]
    assert contents(store) == [f"m{index}" for index in range(3, 10)]


def test_a_redelivered_message_keeps_its_place_in_line(
    store: QueueStorage, clock: ManualClock
) -> None:
    """When a message becomes visible again it is handed out before those put after it."""
    for content in ("a", "b", "c"):
        store.put_message(QUEUE, content)
    assert contents(store, max_messages=1, timeout_s=10) == ["a"]
    clock.advance(10)
    assert contents(store) == ["a", "b", "c"]


# Time-to-live


def test_a_message_expires_exactly_at_its_time_to_live(
    store: QueueStorage, clock: ManualClock
) -> None:
    """At its TTL a message leaves the count and can be neither delivered, deleted nor renewed."""
    put = store.put_message(QUEUE, "brief", time_to_live_s=60)
    clock.advance(59.999)
    assert store.approximate_message_count(QUEUE) == 1
    clock.advance(0.001)
    assert store.approximate_message_count(QUEUE) == 0
    assert contents(store) == []
    assert store.delete_message(QUEUE, put.id, put.pop_receipt) is False
    with pytest.raises(MessageNotFoundError):
        store.update_visibility(QUEUE, put.id, put.pop_receipt, 10)


def test_a_message_taken_by_a_get_still_expires(store: QueueStorage, clock: ManualClock) -> None:
    """Being invisible does not extend a message's life: it expires while a consumer holds it."""
    store.put_message(QUEUE, "held", time_to_live_s=60)
    got = store.get_messages(QUEUE, max_messages=1, visibility_timeout_s=600)[0]
    clock.advance(60)
    assert store.approximate_message_count(QUEUE) == 0
    assert store.delete_message(QUEUE, got.id, got.pop_receipt) is False


def test_default_ttl_is_seven_days_and_never_expires_means_never(
    store: QueueStorage, clock: ManualClock
) -> None:
    """A message with the default TTL is gone after 7 days; one put with NEVER_EXPIRES is not."""
    store.put_message(QUEUE, "default")
    store.put_message(QUEUE, "forever", time_to_live_s=NEVER_EXPIRES)
    clock.advance(DEFAULT_TIME_TO_LIVE_S)
    assert contents(store) == ["forever"]
    clock.advance(365 * 24 * 3600)
    assert store.approximate_message_count(QUEUE) == 1


# Missing queues


def test_every_operation_on_a_missing_queue_raises_queue_not_found(store: QueueStorage) -> None:
    """Delete and update, like get, put and count, refuse a queue that was never created."""
    put = store.put_message(QUEUE, "elsewhere")
    with pytest.raises(QueueNotFoundError):
        store.delete_message("missing", put.id, put.pop_receipt)
    with pytest.raises(QueueNotFoundError):
        store.update_visibility("missing", put.id, put.pop_receipt, 10)


# Threads on one store


def drain(
    store: QueueStorage, queue: str, *, work_s: float = 0, timeout_s: float = 60
) -> list[tuple[str, bool]]:
    """Get, "work" ``work_s`` on, and delete messages until the queue is empty; return each
    content taken and whether its delete succeeded."""
    delivered: list[tuple[str, bool]] = []
    pause = threading.Event()  # never set: waiting on it is a pause, as in a real consumer
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        batch = store.get_messages(queue, max_messages=4, visibility_timeout_s=60)
        if not batch:
            if store.approximate_message_count(queue) == 0:
                return delivered
            pause.wait(0.005)  # others still hold messages in flight
        for message in batch:
            pause.wait(work_s)
            deleted = store.delete_message(queue, message.id, message.pop_receipt)
            delivered.append((message.content, deleted))
    raise TimeoutError(f"queue {queue} not drained within {timeout_s} s")


def assert_each_delivered_once(delivered: list[tuple[str, bool]], expected: list[str]) -> None:
    duplicates = [content for content, seen in Counter(c for c, _ in delivered).items() if seen > 1]
    assert duplicates == []
    assert sorted(content for content, _ in delivered) == sorted(expected)
    assert all(deleted for _, deleted in delivered)


def test_threads_sharing_a_store_take_each_message_once(store: QueueStorage) -> None:
    """Threads draining one store together get and delete every message exactly once."""
    expected = [f"m{index}" for index in range(200)]
    for content in expected:
        store.put_message(QUEUE, content)
    with ThreadPoolExecutor(4) as pool:
        batches = list(pool.map(lambda _: drain(store, QUEUE), range(4)))
    assert_each_delivered_once([item for batch in batches for item in batch], expected)


# SQLite specifics


def test_sqlite_store_survives_reopening(tmp_path: Path, clock: ManualClock) -> None:
    """A new store on the same file sees the queues, messages and their visibility as left."""
    path = tmp_path / "queues.db"
    first = SqliteQueueStorage(path, clock=clock)
    first.create_queue(QUEUE)
    first.put_message(QUEUE, "taken")
    first.put_message(QUEUE, "waiting")
    assert contents(first, max_messages=1) == ["taken"]
    first.close()

    second = SqliteQueueStorage(path, clock=clock)
    try:
        assert second.approximate_message_count(QUEUE) == 2
        assert contents(second) == ["waiting"]
        clock.advance(30)
        redelivered = second.get_messages(QUEUE, max_messages=32, visibility_timeout_s=30)
        assert [(m.content, m.dequeue_count) for m in redelivered] == [("taken", 2), ("waiting", 2)]
    finally:
        second.close()


def test_sqlite_store_creates_missing_folders_and_uses_wal(tmp_path: Path) -> None:
    """The file's parent folders are created, and the journal is in WAL mode for sharing."""
    path = tmp_path / ".cloudqueue" / "nested" / "queues.db"
    SqliteQueueStorage(path).close()
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def write_around_the_api(path: Path, message_id: str, raw: bytes) -> None:
    """Replace a message's content with bytes, as sqlite3 used directly can (not UTF-8 here)."""
    with closing(sqlite3.connect(path)) as db:
        db.execute("UPDATE messages SET content = CAST(? AS TEXT) WHERE id = ?", (raw, message_id))
        db.commit()


def test_a_row_that_is_not_utf8_never_blocks_its_queue(tmp_path: Path, clock: ManualClock) -> None:
    """Peek and get deliver it with each bad byte replaced, and the messages behind it too."""
    path = tmp_path / "queues.db"
    store = SqliteQueueStorage(path, clock=clock)
    try:
        store.create_queue(QUEUE)
        broken = store.put_message(QUEUE, "placeholder")
        store.put_message(QUEUE, "behind it")
        write_around_the_api(path, broken.id, b"caf\xe9 \xff")
        peeked = store.peek_messages(QUEUE, max_messages=32)
        assert [m.content for m in peeked] == ["caf\ufffd \ufffd", "behind it"]
        assert contents(store) == ["caf\ufffd \ufffd", "behind it"]
    finally:
        store.close()


def test_a_listener_poisons_a_row_that_is_not_utf8_and_goes_on(tmp_path: Path) -> None:
    """With the default codec the row is poisoned as undecodable; the next item is handled."""
    path = tmp_path / "queues.db"
    clock = VirtualClock()
    store = SqliteQueueStorage(path, clock=clock)
    try:
        store.create_queue(QUEUE)
        broken = store.put_message(QUEUE, "placeholder")
        store.put_message(QUEUE, MessageCodec(int).encode(7))
        write_around_the_api(path, broken.id, b"\xff\xfe")
        listener = CloudQueueListener(
            store, CloudQueueLocation(QUEUE), int, clock=clock, sleeper=clock
        )
        assert run_until_drained(listener, fail_fast=False) == [7]
        (record,) = store.peek_messages(poison_queue_name(QUEUE), max_messages=32)
        assert PoisonRecord.from_json(record.content).reason == "undecodable"
        assert listener.messages_poisoned == 1
    finally:
        store.close()


def test_sqlite_lock_held_past_the_busy_timeout_is_transient(tmp_path: Path) -> None:
    """When another writer keeps the file locked, operations raise TransientStorageError."""
    path = tmp_path / "queues.db"
    store = SqliteQueueStorage(path, busy_timeout_s=0)
    store.create_queue(QUEUE)
    other_writer = sqlite3.connect(path, isolation_level=None)
    try:
        other_writer.execute("BEGIN IMMEDIATE")
        with pytest.raises(TransientStorageError):
            store.put_message(QUEUE, "blocked")
        other_writer.execute("ROLLBACK")
        store.put_message(QUEUE, "through")
        assert store.approximate_message_count(QUEUE) == 1
    finally:
        other_writer.close()
        store.close()


def test_sqlite_store_used_after_close_raises_storage_error(tmp_path: Path) -> None:
    """A closed store fails with the project's StorageError, not a sqlite3 exception."""
    store = SqliteQueueStorage(tmp_path / "queues.db")
    store.create_queue(QUEUE)
    store.close()
    with pytest.raises(StorageError):
        store.approximate_message_count(QUEUE)


# SQLite shared by processes

_start_together: Any = None
"""The barrier a pool process waits at before draining, set by ``_init_drainer``."""


def _init_drainer(barrier: Any) -> None:
    global _start_together  # noqa: PLW0603 - a spawned pool worker receives it only this way
    _start_together = barrier


def _drain_in_process(path: str, queue: str, threads: int) -> list[tuple[str, bool]]:
    """Runs in a spawned process: open the shared file, then drain it with several threads."""
    store = SqliteQueueStorage(path)
    try:
        _start_together.wait(timeout=60)
        with ThreadPoolExecutor(threads) as pool:
            # Work between get and delete, as real consumers do, lets the processes interleave:
            # without it one process's threads can hand the write lock to each other for the
            # whole run while the others sit in SQLite's busy handler.
            batches = list(pool.map(lambda _: drain(store, queue, work_s=0.005), range(threads)))
    finally:
        store.close()
    return [item for batch in batches for item in batch]


def _open_each_together(paths: list[str]) -> list[str]:
    """Runs in a spawned process: open each new file at the same moment as the other processes;
    the errors met, as text."""
    errors = []
    for path in paths:
        _start_together.wait(timeout=60)
        try:
            SqliteQueueStorage(path).close()
        except StorageError as error:
            errors.append(str(error))
    return errors


def test_workers_started_together_on_a_new_file_all_open_it(tmp_path: Path) -> None:
    """Four processes open each of 60 new files at once (as a fleet starting together does): none
    fails. Before the WAL switch was retried, about one open in thirty met "database is locked"."""
    paths = [str(tmp_path / f"new{index}" / "queues.db") for index in range(60)]
    processes = 4
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes)
    with ProcessPoolExecutor(
        processes, mp_context=context, initializer=_init_drainer, initargs=(barrier,)
    ) as pool:
        futures = [pool.submit(_open_each_together, paths) for _ in range(processes)]
        errors = [error for future in futures for error in future.result(timeout=120)]
    assert errors == []


def test_sqlite_file_shared_by_processes_and_threads_delivers_each_message_once(
    tmp_path: Path,
) -> None:
    """Three processes of three threads each drain one file: every message once, none lost."""
    path = tmp_path / "shared" / "queues.db"
    expected = [f"m{index}" for index in range(300)]
    store = SqliteQueueStorage(path)
    store.create_queue(QUEUE)
    for content in expected:
        store.put_message(QUEUE, content)

    processes = 3
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes)
    with ProcessPoolExecutor(
        processes, mp_context=context, initializer=_init_drainer, initargs=(barrier,)
    ) as pool:
        futures = [pool.submit(_drain_in_process, str(path), QUEUE, 3) for _ in range(processes)]
        per_process = [future.result(timeout=90) for future in futures]

    assert_each_delivered_once([item for batch in per_process for item in batch], expected)
    # The file really was shared: more than one process took messages from it.
    assert sum(1 for batch in per_process if batch) >= 2, [len(batch) for batch in per_process]
    assert store.approximate_message_count(QUEUE) == 0
    store.close()
