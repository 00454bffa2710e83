"""The key ledger, one contract on its three stores: memory, a SQLite table, and Azure blobs
changed by conditional writes (against Azurite). Times come from an injected clock."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudqueue.listener.stores.azure_keys import AzureKeyLedger
from cloudqueue.listener.stores.azure_payloads import container_from_connection_string
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.stores.key_connection import open_key_ledger
from cloudqueue.listener.stores.key_ledger import InMemoryKeyLedger, SqliteKeyLedger, key_ledger_for
from cloudqueue.listener.stores.key_records import (
    SWEEP_INTERVAL_S,
    KeyLedger,
    begin,
    cancel,
    extend,
    finish,
    mark_sent,
    was_sent,
)
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.stores.metered import MeteredStorage, blob_counts
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.listener.testing import ManualClock
from cloudqueue.workers.host.cost_meter import CostMeter
from tests.support.azurite import AzuriteProcess

QUEUE = "orders"


@pytest.fixture(params=["memory", "sqlite", "azure"])
def ledger(
    request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock
) -> Iterator[KeyLedger]:
    """A fresh ledger of each kind on the manual clock."""
    made: KeyLedger
    if request.param == "memory":
        made = InMemoryKeyLedger(clock=clock)
    elif request.param == "sqlite":
        made = SqliteKeyLedger(SqliteQueueStorage(tmp_path / "q.db", clock=clock), owns=True)
    else:
        azurite: AzuriteProcess = request.getfixturevalue("azurite_with_blobs")
        container = f"keys{uuid.uuid4().hex[:12]}"
        made = AzureKeyLedger(
            container_from_connection_string(azurite.connection_string, container), clock=clock
        )
    yield made
    made.close()


def start(ledger: KeyLedger, key: str, message_id: str = "m1", *, dedupe: bool = True) -> str:
    return begin(ledger, QUEUE, key, message_id=message_id, hold_s=60, dedupe=dedupe)


def test_a_completed_key_is_a_duplicate_until_its_window_passes(
    ledger: KeyLedger, clock: ManualClock
) -> None:
    """begin starts a fresh key; after finish with done_s the key is a duplicate for that long."""
    assert start(ledger, "a") == "started"
    assert finish(ledger, QUEUE, "a", message_id="m1", done_s=30) is False
    assert start(ledger, "a", "m2") == "duplicate"
    assert start(ledger, "a", "m2", dedupe=False) == "started"  # idempotency off: handled
    finish(ledger, QUEUE, "a", message_id="m2", done_s=None)
    clock.advance(31)
    assert start(ledger, "a", "m3") == "started"


def test_a_key_being_handled_is_busy_for_another_message_but_not_for_its_own_redelivery(
    ledger: KeyLedger, clock: ManualClock
) -> None:
    """While m1 handles the key another message waits; m1 itself (delivered again after a crash)
    takes over; a handling mark whose holder died runs out after hold_s."""
    assert start(ledger, "a", "m1") == "started"
    assert start(ledger, "a", "m2") == "busy"
    assert start(ledger, "a", "m1") == "started"
    clock.advance(61)
    assert start(ledger, "a", "m2") == "started"


def test_a_cancel_before_handling_cancels_and_one_during_handling_is_too_late(
    ledger: KeyLedger, clock: ManualClock
) -> None:
    """cancel answers cancelled, too_late (handling now) or done; begin then says cancelled
    until the hold passes, and the finishing handler learns its cancel came too late."""
    assert cancel(ledger, QUEUE, "queued", hold_s=100) == "cancelled"
    assert start(ledger, "queued") == "cancelled"
    assert start(ledger, "running") == "started"
    assert cancel(ledger, QUEUE, "running", hold_s=100) == "too_late"
    assert finish(ledger, QUEUE, "running", message_id="m1", done_s=50) is True
    assert start(ledger, "other") == "started"
    finish(ledger, QUEUE, "other", message_id="m1", done_s=50)
    assert cancel(ledger, QUEUE, "other", hold_s=100) == "done"
    clock.advance(101)
    assert start(ledger, "queued") == "started"


def test_only_the_holder_extends_its_handling_mark_and_a_dead_holders_mark_expires(
    ledger: KeyLedger, clock: ManualClock
) -> None:
    """extend pushes a running handler's mark to hold_s from now; another message cannot, and
    once a holder stopped extending, its mark expires and another message of the key starts."""
    assert start(ledger, "a") == "started"
    clock.advance(50)
    assert extend(ledger, QUEUE, "a", message_id="m1", hold_s=60) is True
    clock.advance(50)  # past the first hold, inside the extended one
    assert start(ledger, "a", "m2") == "busy"
    assert extend(ledger, QUEUE, "a", message_id="m2", hold_s=60) is False
    clock.advance(11)
    assert start(ledger, "a", "m2") == "started"
    assert extend(ledger, QUEUE, "a", message_id="m1", hold_s=60) is False  # lost to m2


def test_one_of_many_concurrent_messages_of_a_key_starts(ledger: KeyLedger) -> None:
    """Eight threads beginning one key at once, each for its own message: exactly one starts."""
    answers: list[str] = []
    lock, ready = threading.Lock(), threading.Barrier(8)

    def one(index: int) -> None:
        ready.wait()
        answer = start(ledger, "hot", f"m{index}")
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(answers) == ["busy"] * 7 + ["started"]


def test_marks_of_effect_once_publishing_expire(ledger: KeyLedger, clock: ManualClock) -> None:
    """A sent mark is there for its window, then gone; it is no key record."""
    assert not was_sent(ledger, QUEUE, "abc")
    mark_sent(ledger, QUEUE, "abc", window_s=10)
    assert was_sent(ledger, QUEUE, "abc")
    assert start(ledger, "abc") == "started"  # another kind of record
    clock.advance(11)
    assert not was_sent(ledger, QUEUE, "abc")


def test_expired_records_are_swept_from_memory(clock: ManualClock) -> None:
    """Memory keeps no record past its expiry: each is dropped once it has passed."""
    ledger = InMemoryKeyLedger(clock=clock)
    for n in range(100):
        cancel(ledger, QUEUE, f"k{n}", hold_s=10)
    assert len(ledger) == 100
    clock.advance(11)
    cancel(ledger, QUEUE, "late", hold_s=10)
    assert len(ledger) == 1


def test_expired_records_are_swept_from_sqlite_at_most_every_interval(
    tmp_path: Path, clock: ManualClock
) -> None:
    """SQLite deletes expired rows in one statement per sweep interval, not per change."""
    database = SqliteQueueStorage(tmp_path / "q.db", clock=clock)
    ledger = SqliteKeyLedger(database)
    for n in range(50):
        cancel(ledger, QUEUE, f"k{n}", hold_s=10)

    def rows() -> int:
        with database.transaction() as db:
            return int(db.execute("SELECT COUNT(*) FROM message_keys").fetchone()[0])

    clock.advance(11)
    cancel(ledger, QUEUE, "a", hold_s=10)
    assert rows() == 51  # the first change swept at once, when nothing had expired yet
    clock.advance(SWEEP_INTERVAL_S)
    cancel(ledger, QUEUE, "b", hold_s=10)
    assert rows() == 1
    database.close()


def test_expired_records_are_swept_from_azure_blobs(
    azurite_with_blobs: AzuriteProcess, clock: ManualClock
) -> None:
    """A sweep deletes the blobs whose times have all passed and leaves the live ones."""
    container = container_from_connection_string(
        azurite_with_blobs.connection_string, f"keys{uuid.uuid4().hex[:12]}"
    )
    ledger = AzureKeyLedger(container, clock=clock)
    for n in range(5):
        cancel(ledger, QUEUE, f"old{n}", hold_s=10)
    clock.advance(11)
    cancel(ledger, QUEUE, "live", hold_s=10)
    assert ledger.sweep() == 5
    assert len(list(container.list_blob_names())) == 1
    ledger.close()


def test_the_ledger_of_an_embedded_store_is_found_through_its_wrappers(tmp_path: Path) -> None:
    """One in-memory store has one ledger (seen through metering too); a SQLite file's ledger
    opened from its connection string sees what the storage's own ledger wrote."""
    memory = InMemoryQueueStorage()
    assert key_ledger_for(memory) is key_ledger_for(MeteredStorage(memory))
    assert key_ledger_for(InMemoryQueueStorage()) is not key_ledger_for(memory)
    path = tmp_path / "q.db"
    database = SqliteQueueStorage(path)
    own = key_ledger_for(database)
    assert own is not None
    cancel(own, QUEUE, "k", hold_s=60)
    opened = open_key_ledger(f"sqlite:///{path}")
    assert start(opened, "k") == "cancelled"
    opened.close()
    database.close()


def test_azure_storage_has_no_ledger_to_find(azurite_with_blobs: AzuriteProcess) -> None:
    """An Azure queue storage names no ledger: it is opened from the connection string."""
    storage = AzureQueueStorage.from_connection_string(azurite_with_blobs.connection_string)
    assert key_ledger_for(storage) is None
    storage.close()


def test_the_azure_ledgers_blob_calls_are_counted_per_queue_and_in_the_live_cost(
    azurite_with_blobs: AzuriteProcess, clock: ManualClock
) -> None:
    """A keyed message costs 3 blob transactions (a read and a create as handling starts, a write
    as it ends; the container made once besides): counted under its queue, and added by the cost
    meter to the queue's own calls. An embedded store's ledger bills none."""
    container = container_from_connection_string(
        azurite_with_blobs.connection_string, f"keys{uuid.uuid4().hex[:12]}"
    )
    ledger = AzureKeyLedger(container, clock=clock)
    storage = MeteredStorage(InMemoryQueueStorage())
    meter = CostMeter(storage, blob_counts(None, ledger), clock=clock, window_s=10)
    meter.sample()
    assert start(ledger, "first") == "started"  # read, create: no container, made, create again
    assert ledger.counts_by_queue() == {QUEUE: 4}
    for n in range(10):
        start(ledger, f"k{n}", f"m{n}")
        finish(ledger, QUEUE, f"k{n}", message_id=f"m{n}", done_s=None)
    assert ledger.counts_by_queue() == {QUEUE: 4 + 10 * 3}
    begin(ledger, "other", "x", message_id="m", hold_s=60, dedupe=True)  # counted apart
    assert ledger.counts_by_queue() == {QUEUE: 34, "other": 2}
    clock.advance(10)
    meter.sample()
    assert meter.cost_of(QUEUE).storage_transactions_per_hour == pytest.approx(34 * 360)
    ledger.close()
    assert InMemoryKeyLedger(clock=clock).counts_by_queue() == {}
