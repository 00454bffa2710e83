"""A hosted worker on several queues: its settings, what status, the dashboard and the metrics
see of each queue, and partitioned queues among them."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import ClassVar

import pytest

from cloudqueue.listener.stores.layouts import QueueLayout, read_layout
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost
from cloudqueue.workers.cli.status_text import worker_line
from cloudqueue.workers.host.live_state import LiveStatePublisher
from cloudqueue.workers.settings import ObservabilitySettings
from cloudqueue.workers.testing import run_until_drained
from cloudqueue.workers.views.fleet import running_workers
from tests.support.cli import cloudqueue
from tests.support.polling import eventually

URGENT, NORMAL = "urgent", "normal"


class Invoices(QueueWorker[str]):
    queue_name = (URGENT, NORMAL)
    handled: ClassVar[list[str]] = []

    def handle(self, item: str) -> None:
        if item == "bad":
            raise ValueError("bad item")
        self.handled.append(item)


@pytest.fixture
def store(tmp_path: Path) -> SqliteQueueStorage:
    return SqliteQueueStorage(tmp_path / "queues.db")


def put(storage: SqliteQueueStorage, queue: str, *texts: str) -> None:
    storage.create_queue(queue)
    for text in texts:
        storage.put_message(queue, text)


def run_until_handled(host: WorkerHost, count: int) -> None:
    host.start()
    try:
        eventually(lambda: len(Invoices.handled) >= count, timeout_s=20)
    finally:
        assert host.stop()


def test_live_state_has_an_entry_per_queue_with_its_own_counts(
    store: SqliteQueueStorage, tmp_path: Path
) -> None:
    """`status normal` and the dashboard find the worker under each queue, each queue's handled
    count its own, and the queues it shares its threads with named."""
    Invoices.handled = []
    put(store, URGENT, "u1", "u2")
    put(store, NORMAL, "n1", "n2", "n3")
    settings = CloudQueueSettings(shutdown_grace_s=5, state_dir=tmp_path / "run")
    host = WorkerHost([Invoices], settings, storage=store)
    run_until_handled(host, 5)
    LiveStatePublisher(settings.state_dir, worker="app:Invoices", storage="here").publish(
        host.listeners
    )
    urgent = running_workers(settings.state_dir, URGENT, "here")
    normal = running_workers(settings.state_dir, NORMAL, "here")
    assert [view.listener.processed for view in urgent] == [2]
    assert [view.listener.processed for view in normal] == [3]
    assert normal[0].listener.priority_set == [URGENT, NORMAL]
    assert normal[0].listener.items_processed == 3
    assert "threads shared by urgent > normal" in worker_line(normal[0], rates=False)


def test_metrics_count_and_time_each_queue_apart(store: SqliteQueueStorage) -> None:
    """Messages by outcome and pickup times carry the queue each message came from."""
    Invoices.handled = []
    put(store, URGENT, "u1")
    put(store, NORMAL, "n1", "n2")
    settings = CloudQueueSettings(
        shutdown_grace_s=5, observability=ObservabilitySettings(metrics_port=0)
    )
    host = WorkerHost([Invoices], settings, storage=store)
    observability = host.observability
    assert observability is not None
    run_until_handled(host, 3)
    value = observability.metrics.registry.get_sample_value
    processed = {"outcome": "processed"}
    assert value("cloudqueue_messages_total", {"queue": URGENT, **processed}) == 1
    assert value("cloudqueue_messages_total", {"queue": NORMAL, **processed}) == 2
    assert value("cloudqueue_pickup_seconds_count", {"queue": URGENT}) == 1
    assert value("cloudqueue_pickup_seconds_count", {"queue": NORMAL}) == 2


def test_queues_of_a_worker_may_be_partitioned_each_with_its_layout(
    store: SqliteQueueStorage, tmp_path: Path
) -> None:
    """listener.partitions = 2 spreads both queues; each layout is recorded, both drain."""
    Invoices.handled = []
    settings = CloudQueueSettings(shutdown_grace_s=5)
    settings = settings.model_copy(
        update={"listener": settings.listener.model_copy(update={"partitions": 2})}
    )
    writer = PartitionedQueueStorage([store], {URGENT: 2, NORMAL: 2})
    for queue in (URGENT, NORMAL):
        writer.create_queue(queue)
    for number in range(4):
        writer.put_message(NORMAL, f"n{number}")
        writer.put_message(URGENT, f"u{number}")
    host = WorkerHost([Invoices], settings, storage=store)
    run_until_handled(host, 8)
    assert sorted(Invoices.handled) == [f"n{n}" for n in range(4)] + [f"u{n}" for n in range(4)]
    reopened = SqliteQueueStorage(tmp_path / "queues.db")  # the host closed what it was given
    assert read_layout(reopened, URGENT) == QueueLayout(2)
    assert read_layout(reopened, NORMAL) == QueueLayout(2)
    assert reopened.list_queues(f"{NORMAL}-p") == [f"{NORMAL}-p0", f"{NORMAL}-p1", "normal-poison"]
    assert sum(reopened.approximate_message_count(f"{NORMAL}-p{n}") for n in range(2)) == 0
    reopened.close()


WORKERS = """
from cloudqueue.workers import QueueWorker


class Twice(QueueWorker[str]):
    queue_name = ("urgent", "normal", "urgent")

    def handle(self, item: str) -> None:
        pass


class ShortWeights(Twice):
    queue_name = ("urgent", "normal")
    settings = {"listener": {"priority": "weighted", "weights": [3]}}
"""

BAD = {
    # Each case of a bad tuple or bad weights is a unit test
    # (tests/listener/stores/test_priorities.py); these check the path from a worker class and a
    # setting to the exit code.
    "a queue named twice": (("run", "w:Twice"), ("Twice", "'urgent' twice")),
    "fewer weights than queues": (
        ("run", "w:ShortWeights"),
        ("ShortWeights", "one weight per queue"),
    ),
    "an unknown priority": (
        ("run", "w:ShortWeights", "--set", "listener.priority=fastest"),
        ("listener.priority", "'strict' or 'weighted'"),
    ),
}


@pytest.mark.parametrize("row", BAD.values(), ids=list(BAD))
def test_bad_queues_or_weights_exit_2_with_one_line(
    row: tuple[tuple[str, ...], tuple[str, ...]], tmp_path: Path
) -> None:
    """No half-working worker: one line naming what is wrong, exit code 2, no traceback."""
    (tmp_path / "w.py").write_text(textwrap.dedent(WORKERS))
    clean = {key: value for key, value in os.environ.items() if not key.startswith("CLOUDQUEUE")}
    env = {
        **clean,
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'queues.db'}",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
    }
    args, names = row
    result = cloudqueue(*args, env=env, cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert (result.returncode, len(lines)) == (2, 1), result.stderr
    assert "Traceback" not in result.stderr
    for name in names:
        assert name in lines[0]


def test_run_until_drained_takes_a_worker_on_several_queues() -> None:
    """The testing helper runs a worker on several queues; the items go to its first queue."""
    result = run_until_drained(Invoices, ["fine", "bad"], fail_fast=False)
    assert result.handled == ["fine"]
    assert [(item.item, item.reason) for item in result.poisoned] == [
        ("bad", "max_dequeue_count_exceeded")
    ]
