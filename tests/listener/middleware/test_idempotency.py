"""Idempotent handling: with ``[idempotency] window_s``, a key completed within the window is not
handled again -- on every store, for sync and async handlers; its completion is recorded before
the delete, its record expires, and each skip is logged and counted."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from structlog.testing import capture_logs

from cloudqueue.listener import InMemoryQueueStorage, Publisher, SqliteQueueStorage
from cloudqueue.listener.middleware.keyed import KeyedHandling
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.stores.key_connection import open_key_ledger
from cloudqueue.listener.stores.key_ledger import key_ledger_for
from cloudqueue.listener.stores.key_records import KeyLedger
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.testing import ManualClock
from cloudqueue.workers.cli import cli
from tests.support.azurite import AzuriteProcess
from tests.support.event_loop_consumer import KINDS, start_either
from tests.support.keyed_workers import Record, drained, host_settings, hosting, recording_worker
from tests.support.polling import eventually


def enqueue_twice_with_cli(connection_string: str, queue: str) -> None:
    """``cloudqueue enqueue QUEUE --key id`` of ids 0..9, twice over."""
    items = "\n".join(json.dumps({"id": n}) for n in range(10))
    env = {"CLOUDQUEUE_CONNECTION_STRING": connection_string}
    for _ in range(2):
        result = CliRunner().invoke(cli, ["enqueue", queue, "--key", "id"], input=items, env=env)
        assert result.exit_code == 0, result.output


@pytest.mark.parametrize("handler", ["sync", "async", "single"])
@pytest.mark.parametrize("kind", ["sqlite", "azure"])
def test_ten_keys_enqueued_twice_each_are_handled_ten_times(
    kind: str,
    handler: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """10 items enqueued twice each with ``--key id`` (the worker also defining key): each id is
    handled once; the 10 copies are deleted as duplicate_skipped. For a plain handler, an async
    one on dequeue threads, and one on the single loop (``listener.event_loop = "single"``)."""
    queue = f"idem-{uuid.uuid4().hex[:10]}"
    storage: QueueStorage
    if kind == "sqlite":
        connection_string = f"sqlite:///{tmp_path / 'q.db'}"
        storage = SqliteQueueStorage(tmp_path / "q.db")
        ledger: KeyLedger | None = None
    else:
        azurite: AzuriteProcess = request.getfixturevalue("azurite_with_blobs")
        connection_string = azurite.connection_string
        storage = AzureQueueStorage.from_connection_string(connection_string)
        ledger = open_key_ledger(connection_string)
    enqueue_twice_with_cli(connection_string, queue)
    record = Record()
    worker = recording_worker(record, queue, asynchronous=handler != "sync", handler_s=0.02)
    loop = {"listener": {"event_loop": "single"}} if handler == "single" else {}
    settings = host_settings(idempotency={"window_s": 600}, **loop)
    with capture_logs() as logs, hosting(worker, storage, settings, key_ledger=ledger) as host:
        assert len(host.looped) == (handler == "single")
        drained(storage, queue, lambda: len(record.ids) >= 10, timeout_s=60)
    assert sorted(record.ids) == list(range(10))
    skipped = [e for e in logs if e["event"] == "duplicate_skipped"]
    assert len(skipped) == 10
    assert all(e["message_id"] and e["key"] for e in skipped)
    storage.close()


def test_without_a_window_every_copy_is_handled(tmp_path: Path) -> None:
    """Idempotency off (the default): the 20 messages are 20 handlings."""
    queue = "idem-off"
    enqueue_twice_with_cli(f"sqlite:///{tmp_path / 'q.db'}", queue)
    storage, record = SqliteQueueStorage(tmp_path / "q.db"), Record()
    with hosting(recording_worker(record, queue), storage, host_settings()):
        drained(storage, queue, lambda: len(record.ids) >= 20, timeout_s=30)
    assert sorted(record.ids) == sorted(list(range(10)) * 2)
    storage.close()


def test_the_workers_key_dedupes_plain_items_and_counts_in_the_metrics() -> None:
    """Plain items carry no key: the worker's key(item) is used. Skips are counted in
    cloudqueue_message_decisions, by queue and decision."""
    storage, queue, record = InMemoryQueueStorage(), "plain-items", Record()
    storage.create_queue(queue)
    Publisher(storage, queue, dict).publish_many([{"id": n % 3} for n in range(9)])
    settings = host_settings(idempotency={"window_s": 60}, observability={"metrics_port": 0})
    with hosting(recording_worker(record, queue), storage, settings) as host:
        drained(storage, queue, lambda: len(record.ids) >= 3, timeout_s=30)
        assert host.observability is not None
        counted = host.observability.metrics.message_decisions.labels(queue, "duplicate_skipped")
        assert counted._value.get() == 6
    assert sorted(record.ids) == [0, 1, 2]


def test_the_workers_key_dedupes_plain_items_on_the_single_loop() -> None:
    """``listener.event_loop = "single"``: the host gives the loop the worker's key(item), so
    plain items that carry no key are deduplicated there as on threads."""
    storage, queue, record = InMemoryQueueStorage(), "plain-items", Record()
    storage.create_queue(queue)
    Publisher(storage, queue, dict).publish_many([{"id": n % 3} for n in range(9)])
    settings = host_settings(idempotency={"window_s": 60}, listener={"event_loop": "single"})
    worker = recording_worker(record, queue, asynchronous=True)
    with hosting(worker, storage, settings) as host:
        assert host.looped  # on the single loop, not on threads
        assert not host.hosted
        drained(storage, queue, lambda: len(record.ids) >= 3, timeout_s=30)
    assert sorted(record.ids) == [0, 1, 2]


@pytest.mark.parametrize("kind", KINDS)
def test_a_key_sent_again_after_its_completion_is_skipped_by_either_consumer(
    kind: str, queue_name: str
) -> None:
    """``KeyedHandling`` on a listener of either kind (on the event-loop consumer, stepped on a
    worker thread for a keyed message): key 1's first message is handled, its second deleted
    unhandled and counted ``duplicate_skipped``."""
    storage = InMemoryQueueStorage()
    storage.create_queue(queue_name)
    ledger = key_ledger_for(storage)
    assert ledger is not None
    keyed = KeyedHandling(ledger, window_s=60)
    publisher = Publisher(storage, queue_name, dict, key="id")
    handled: list[int] = []
    record = lambda item: handled.append(item["id"])  # noqa: E731
    listener = start_either(
        kind, storage, queue_name, record, middleware=[keyed], dequeue_interval_s=0.05
    )
    try:
        publisher.publish({"id": 1})
        eventually(lambda: listener.messages_processed == 1)
        publisher.publish({"id": 1})
        eventually(lambda: listener.messages_processed == 2)
    finally:
        listener.stop(timeout_s=10)
    assert handled == [1]
    assert keyed.decisions.snapshot() == {"duplicate_skipped": 1}


def test_a_failed_handling_records_no_completion_and_is_retried() -> None:
    """A handler that raised completed nothing: its key is handled on the next delivery."""
    storage, queue, record = InMemoryQueueStorage(), "failing", Record()
    storage.create_queue(queue)
    Publisher(storage, queue, dict).publish({"id": 1})
    worker = recording_worker(record, queue, fail_first=1)
    settings = host_settings(idempotency={"window_s": 60}, listener={"retry_delay_s": 0})
    with hosting(worker, storage, settings):
        drained(storage, queue, lambda: len(record.ids) >= 1, timeout_s=30)
    assert record.ids == [1]


def test_a_key_is_handled_again_once_its_window_has_passed() -> None:
    """The completion record expires after window_s (on the store's clock)."""
    clock = ManualClock()
    storage, queue, record = InMemoryQueueStorage(clock=clock), "windowed", Record()
    storage.create_queue(queue)
    publisher = Publisher(storage, queue, dict, key="id")
    settings = host_settings(idempotency={"window_s": 3600})
    with hosting(recording_worker(record, queue), storage, settings):
        publisher.publish({"id": 7})
        drained(storage, queue, lambda: len(record.ids) == 1, timeout_s=30)
        clock.advance(1800)
        publisher.publish({"id": 7})
        drained(storage, queue, lambda: True, timeout_s=30)
        assert record.ids == [7]
        clock.advance(1801)
        publisher.publish({"id": 7})
        drained(storage, queue, lambda: len(record.ids) == 2, timeout_s=30)


def test_the_completion_is_recorded_before_the_message_is_deleted() -> None:
    """When the delete is made, the key's record already says done (the order that makes a
    crash between the two skip the message's next delivery)."""
    storage, queue, record = _RecordingDeletes(), "ordered", Record()
    storage.create_queue(queue)
    Publisher(storage, queue, dict).publish({"id": 3}, key="k3")
    from cloudqueue.listener.stores.key_ledger import key_ledger_for

    ledger = key_ledger_for(storage)
    assert ledger is not None
    storage.on_delete = lambda: storage.done_at_delete.append(
        ledger.record(queue, "key", "k3").done_until is not None
    )
    with hosting(
        recording_worker(record, queue), storage, host_settings(idempotency={"window_s": 60})
    ):
        drained(storage, queue, lambda: len(record.ids) == 1, timeout_s=30)
    assert storage.done_at_delete == [True]


class _RecordingDeletes(InMemoryQueueStorage):
    """An in-memory store that looks at the ledger as each delete is made."""

    def __init__(self) -> None:
        super().__init__()
        self.done_at_delete: list[bool] = []
        self.on_delete: Any = lambda: None

    def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        self.on_delete()
        return super().delete_message(queue_name, message_id, pop_receipt)
