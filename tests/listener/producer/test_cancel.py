"""Cancelling queued work by key: ``Publisher.cancel`` and ``cloudqueue cancel`` record the key in
the queue's own store; a message of it is deleted unhandled when next fetched (``cancelled``);
a key being handled now is reported too late and its item finishes."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from structlog.testing import capture_logs

from cloudqueue.listener import InMemoryQueueStorage, Publisher, SqliteQueueStorage
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.stores.key_connection import open_key_ledger
from cloudqueue.listener.stores.key_records import KeyLedger
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.testing import ManualClock
from cloudqueue.workers import QueueWorker
from cloudqueue.workers.cli import cli
from tests.support.azurite import AzuriteProcess
from tests.support.keyed_workers import Record, drained, host_settings, hosting, recording_worker
from tests.support.polling import eventually

SIX_DAYS_S = 6 * 24 * 3600


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("kind", ["memory", "sqlite", "azure"])
def test_cancel_of_two_of_five_delayed_keys_leaves_three_handled_and_two_never(
    kind: str, asynchronous: bool, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Five keys published with a delay (six days on an injected clock; two seconds on Azurite,
    which has its own clock); two cancelled: the three others are handled, the two never."""
    clock = ManualClock()
    queue = f"later-{uuid.uuid4().hex[:8]}"
    storage: QueueStorage
    ledger: KeyLedger | None = None
    delay_s = SIX_DAYS_S
    if kind == "memory":
        storage = InMemoryQueueStorage(clock=clock)
    elif kind == "sqlite":
        storage = SqliteQueueStorage(tmp_path / "q.db", clock=clock)
    else:
        azurite: AzuriteProcess = request.getfixturevalue("azurite_with_blobs")
        storage = AzureQueueStorage.from_connection_string(azurite.connection_string)
        ledger, delay_s = open_key_ledger(azurite.connection_string), 2
    storage.create_queue(queue)
    publisher = Publisher(storage, queue, dict, key="id", ledger=ledger)
    for n in range(5):
        publisher.publish({"id": n}, delay_s=delay_s)
    assert publisher.cancel("1", "3") == {"1": "cancelled", "3": "cancelled"}
    record = Record()
    worker = recording_worker(record, queue, asynchronous=asynchronous)
    settings = host_settings(observability={"metrics_port": 0})
    with capture_logs() as logs, hosting(worker, storage, settings, key_ledger=ledger) as host:
        clock.advance(delay_s + 1)
        drained(storage, queue, lambda: len(record.ids) == 3, timeout_s=30)
        assert host.observability is not None
        counted = host.observability.metrics.message_decisions.labels(queue, "cancelled")
        assert counted._value.get() == 2
    assert sorted(record.ids) == [0, 2, 4]
    cancelled = [e for e in logs if e["event"] == "cancelled"]
    assert sorted(e["key"] for e in cancelled) == ["1", "3"]
    assert all(e["message_id"] for e in cancelled)
    storage.close()


def test_cancelling_a_key_being_handled_is_too_late_and_the_item_finishes() -> None:
    """While a handler runs, cancel says too_late; the item finishes and is deleted, and the
    worker logs cancel_too_late. A later message of the key is cancelled."""
    storage, queue = InMemoryQueueStorage(), "in-hand"
    storage.create_queue(queue)
    publisher = Publisher(storage, queue, dict, key="id")
    started, release, finished = threading.Event(), threading.Event(), []

    class Slow(QueueWorker[dict[str, Any]]):
        queue_name = queue

        def handle(self, item: dict[str, Any]) -> None:
            started.set()
            release.wait(10)
            finished.append(item["id"])

    publisher.publish({"id": 9})
    with capture_logs() as logs, hosting(Slow, storage, host_settings()):
        eventually(started.is_set)
        assert publisher.cancel("9") == {"9": "too_late"}
        release.set()
        drained(storage, queue, lambda: finished == [9], timeout_s=30)
        publisher.publish({"id": 9})
        drained(storage, queue, lambda: True, timeout_s=30)
    assert finished == [9]
    events = [e["event"] for e in logs]
    assert "cancel_too_late" in events
    assert "cancelled" in events


def test_a_cancel_holds_for_its_time_then_the_key_is_handled_again() -> None:
    """After ``hold_s`` a message of the key is handled as any other."""
    clock = ManualClock()
    storage, queue, record = InMemoryQueueStorage(clock=clock), "held", Record()
    storage.create_queue(queue)
    publisher = Publisher(storage, queue, dict, key="id")
    publisher.cancel("5", hold_s=3600)
    with hosting(recording_worker(record, queue), storage, host_settings()):
        publisher.publish({"id": 5})
        drained(storage, queue, lambda: True, timeout_s=30)
        assert record.ids == []
        clock.advance(3601)
        publisher.publish({"id": 5})
        drained(storage, queue, lambda: record.ids == [5], timeout_s=30)


def test_a_worker_that_does_not_check_handles_cancelled_keys() -> None:
    """``cancel.check = false``: no record is read, so a cancelled key is handled."""
    storage, queue, record = InMemoryQueueStorage(), "unchecked", Record()
    storage.create_queue(queue)
    publisher = Publisher(storage, queue, dict, key="id")
    publisher.cancel("1")
    publisher.publish({"id": 1})
    with hosting(recording_worker(record, queue), storage, host_settings(cancel={"check": False})):
        drained(storage, queue, lambda: record.ids == [1], timeout_s=30)


def test_the_cancel_command_records_keys_and_refuses_a_missing_queue(tmp_path: Path) -> None:
    """``cloudqueue cancel`` says what it did per key (or JSON); a missing queue or a bad key is
    exit code 2 with one line; a worker then deletes the cancelled key's message unhandled."""
    database = tmp_path / "q.db"
    env = {"CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{database}"}
    runner = CliRunner()
    missing = runner.invoke(cli, ["cancel", "nosuch", "k1"], env=env)
    assert missing.exit_code == 2
    assert "queue nosuch does not exist" in missing.output
    items = "\n".join(json.dumps({"id": n}) for n in range(3))
    enqueued = runner.invoke(cli, ["enqueue", "jobs", "--key", "id"], input=items, env=env)
    assert enqueued.exit_code == 0
    said = runner.invoke(cli, ["cancel", "jobs", "1"], env=env)
    assert said.exit_code == 0, said.output
    assert '"1" on jobs: cancelled' in said.output
    as_json = runner.invoke(cli, ["cancel", "jobs", "2", "--json", "--hold", "1h"], env=env)
    assert json.loads(as_json.stdout) == {"2": "cancelled"}
    bad = runner.invoke(cli, ["cancel", "jobs", "a\tb"], env=env)
    assert bad.exit_code == 2
    assert "control characters" in bad.output
    storage, record = SqliteQueueStorage(database), Record()
    with hosting(recording_worker(record, "jobs"), storage, host_settings()):
        drained(storage, "jobs", lambda: len(record.ids) == 1, timeout_s=30)
    assert record.ids == [0]
    storage.close()
