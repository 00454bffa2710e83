"""A partitioned queue's layout is recorded in the store: by the worker that starts on it, checked
against every later worker's settings, moved along by a repartitioning; and a plain queue of
the same name holding messages is reported. On the three stores (Azure: Azurite)."""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.stores.layouts import QueueLayout, layout_home, read_layout, record_layout
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost
from cloudqueue.workers.host.plain_queue import PlainQueueWatch

SETTINGS = CloudQueueSettings(shutdown_grace_s=5)


def worker_on(queue: str, partitions: int, drain: int | None = None) -> type[QueueWorker[Any]]:
    """A worker class on ``queue`` whose own settings partition it."""
    listener: dict[str, Any] = {"partitions": partitions}
    if drain is not None:
        listener["drain_partitions"] = drain

    class Worker(QueueWorker[dict[str, Any]]):
        queue_name = queue
        settings: ClassVar[dict[str, Any]] = {"listener": listener}

        def handle(self, item: dict[str, Any]) -> None:
            pass

    return Worker


def start_host(storage: QueueStorage, worker: type[QueueWorker[Any]]) -> WorkerHost:
    """Build a host on ``storage`` (its layout is checked and recorded as it is built)."""
    return WorkerHost([worker], SETTINGS, storage=storage)


def test_a_partitioned_worker_records_its_layout_where_commands_find_it(
    storage: QueueStorage, queue_name: str
) -> None:
    """A worker serving 4 partitions records 4 on <queue>-p0; a plain worker records nothing."""
    assert read_layout(storage, queue_name) is None
    start_host(storage, worker_on(queue_name, 4))
    assert read_layout(storage, queue_name) == QueueLayout(4)
    assert layout_home(queue_name) in storage.list_queues(queue_name)
    plain = f"{queue_name}x"
    start_host(storage, worker_on(plain, 1))
    assert read_layout(storage, plain) is None
    assert storage.list_queues(plain) == []


def test_a_worker_whose_setting_disagrees_with_the_record_is_refused_at_start(
    storage: QueueStorage, queue_name: str
) -> None:
    """Recorded as 4 partitions, a plain worker (and a 3-partition one) is one clear error."""
    record_layout(storage, queue_name, QueueLayout(4))
    for partitions in (1, 3):
        with pytest.raises(ConfigurationError) as refused:
            start_host(storage, worker_on(queue_name, partitions))
        message = str(refused.value)
        assert f"queue {queue_name} is recorded as 4 partitions" in message
        assert "set listener.partitions = 4" in message
        assert "listener.drain_partitions = 4" in message
    assert read_layout(storage, queue_name) == QueueLayout(4)


def test_a_repartitioning_updates_the_record_and_its_end_waits_for_the_old_partitions(
    storage: QueueStorage, queue_name: str
) -> None:
    """5 -> 2: draining 5 is accepted and recorded; leaving the drain while p4 holds a message is
    refused; once p4 is empty the end of the drain is recorded."""
    record_layout(storage, queue_name, QueueLayout(5))
    start_host(storage, worker_on(queue_name, 2, drain=5))
    assert read_layout(storage, queue_name) == QueueLayout(2, draining=5)
    storage.create_queue(f"{queue_name}-p4")
    put = storage.put_message(f"{queue_name}-p4", "left behind")
    with pytest.raises(ConfigurationError, match=rf"{queue_name}-p4 still hold 1 message"):
        start_host(storage, worker_on(queue_name, 2))
    assert read_layout(storage, queue_name) == QueueLayout(2, draining=5)
    storage.delete_message(f"{queue_name}-p4", put.id, put.pop_receipt)
    start_host(storage, worker_on(queue_name, 2))
    assert read_layout(storage, queue_name) == QueueLayout(2)


def test_messages_on_a_plain_queue_beside_the_partitions_are_reported_while_they_wait(
    storage: QueueStorage, queue_name: str
) -> None:
    """Each check warns with the count while the plain queue holds messages, then says once
    that it is empty; each check is one count."""
    view = PartitionedQueueStorage([storage], {queue_name: 4})
    view.create_queue(queue_name)
    storage.create_queue(queue_name)
    for n in range(2):
        storage.put_message(queue_name, str(n))
    watch = PlainQueueWatch(view, queue_name)
    with capture_logs() as logs:
        assert watch.check() == 2
        assert watch.check() == 2
        for _ in range(2):
            taken = storage.get_messages(queue_name, max_messages=1, visibility_timeout_s=30)
            storage.delete_message(queue_name, taken[0].id, taken[0].pop_receipt)
        assert watch.check() == 0
        assert watch.check() == 0
    events = [(log["event"], log.get("messages")) for log in logs]
    assert events == [
        ("plain_queue_beside_partitions", 2),
        ("plain_queue_beside_partitions", 2),
        ("plain_queue_beside_partitions_emptied", None),
    ]
    assert logs[0]["fix"] == f"cloudqueue queues merge-plain {queue_name}"


def test_the_watch_checks_at_start_and_on_every_tick_until_closed(
    storage: QueueStorage, queue_name: str
) -> None:
    """Started, the watch warns at once and again after each wait of its sleeper."""
    ticks = threading.Semaphore(0)

    class CountingSleeper:
        def wait(self, stop_event: threading.Event, delay_s: float) -> bool:
            ticks.release()
            return stop_event.wait(0.01)

    storage.create_queue(queue_name)
    storage.put_message(queue_name, "stranded")
    view = PartitionedQueueStorage([storage], {queue_name: 4})
    watch = PlainQueueWatch(view, queue_name, interval_s=60, sleeper=CountingSleeper())
    with capture_logs() as logs:
        watch.start()
        for _ in range(3):
            assert ticks.acquire(timeout=10)
        watch.close()
    warnings = [log for log in logs if log["event"] == "plain_queue_beside_partitions"]
    assert len(warnings) >= 2
    assert all(log["messages"] == 1 for log in warnings)
