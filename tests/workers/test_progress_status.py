"""Progress in ``cloudqueue status`` and a group's status: a running member's report, read from
the live state its process publishes (no storage transaction)."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryQueueStorage,
    Publisher,
    current_envelope,
)
from cloudqueue.listener.stores.connection import describe_storage
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.listener.workflows.sending import GroupHandle
from cloudqueue.listener.workflows.sqlite_groups import group_ledger_for
from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost
from cloudqueue.workers.cli import cli
from cloudqueue.workers.host.live_progress import group_progress_source, running_progress
from cloudqueue.workers.host.live_state import LiveStatePublisher, read_live_states
from tests.support.polling import eventually

QUEUE = "invoices"


class Running:
    """A member whose handler reports 40 % and runs until the test lets it finish."""

    def __init__(self, storage: InMemoryQueueStorage) -> None:
        storage.create_queue(QUEUE)
        self.group = Publisher(storage, QUEUE, str).send_group(["bill"], on_complete="billed")
        self.reported, self.finish = threading.Event(), threading.Event()
        self.listener = CloudQueueListener(storage, CloudQueueLocation(QUEUE), str)
        self.listener.subscribe(self.handle)

    def handle(self, _: str) -> None:
        current_envelope().progress(0.4, "2 of 5 pages")
        self.reported.set()
        self.finish.wait(30)


@pytest.fixture
def running() -> Iterator[Running]:
    member = Running(InMemoryQueueStorage())
    member.listener.start_listener(1)
    assert member.reported.wait(10)
    yield member
    member.finish.set()
    member.listener.stop(timeout_s=5)


def status(tmp_path: Path, *args: str) -> str:
    """`cloudqueue status invoices ARGS` on a SQLite store where the queue exists."""
    with closing(SqliteQueueStorage(tmp_path / "queues.db")) as queues:
        queues.create_queue(QUEUE)
    env = {
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'queues.db'}",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
    }
    result = CliRunner().invoke(cli, ["status", QUEUE, *args], env=env)
    assert result.exit_code == 0, result.output
    return result.output


def publish(tmp_path: Path, running: Running) -> None:
    where = describe_storage(f"sqlite:///{tmp_path / 'queues.db'}")
    publisher = LiveStatePublisher(tmp_path / "run", worker="app:Billing", storage=where)
    publisher.publish([running.listener])


def test_status_shows_a_running_members_progress(tmp_path: Path, running: Running) -> None:
    """The JSON has the report under its worker; the text a line under the worker's line."""
    publish(tmp_path, running)
    (worker,) = json.loads(status(tmp_path, "--json"))["workers"]
    (report,) = worker["progress"]
    assert (report["fraction"], report["detail"]) == (0.4, "2 of 5 pages")
    assert (report["group"], report["member"]) == (running.group.id, "0")
    text = status(tmp_path)
    assert f"member 0 of group {running.group.id} 40%: 2 of 5 pages (reported" in text


def test_a_group_handle_with_a_progress_source_shows_its_members_progress(
    tmp_path: Path, running: Running
) -> None:
    """``status().progress`` lists the member's report; another group's lists none, and a
    handle without a source none."""
    publish(tmp_path, running)
    handle = running.group
    with_source = GroupHandle(
        handle.id, handle.ledger, progress=group_progress_source(tmp_path / "run")
    )
    (report,) = with_source.status().progress
    assert (report.member, report.fraction, report.detail) == ("0", 0.4, "2 of 5 pages")
    assert handle.status().progress == ()
    assert running_progress(tmp_path / "run", group="another-group") == []


def test_the_report_leaves_the_live_state_once_the_message_settled(
    tmp_path: Path, running: Running
) -> None:
    """After the handler returned, the next publish has no progress for the queue."""
    running.finish.set()
    eventually(lambda: running.listener.messages_processed == 1)
    publish(tmp_path, running)
    (state,) = read_live_states(tmp_path / "run", QUEUE)
    assert state.pid == os.getpid()
    assert state.queues[0].progress == ()


def test_groups_show_lists_its_running_members_progress(tmp_path: Path, running: Running) -> None:
    """`cloudqueue groups show ID` adds the member's report under the group's counts, and its
    JSON a ``progress`` list."""
    publish(tmp_path, running)
    with closing(SqliteQueueStorage(tmp_path / "queues.db")) as queues:
        ledger = group_ledger_for(queues)
        assert ledger is not None
        ledger.open(running.group.id, total=1, on_complete="billed")
    env = {
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'queues.db'}",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
    }
    shown = CliRunner().invoke(cli, ["groups", "show", running.group.id], env=env)
    assert shown.exit_code == 0, shown.output
    assert f"member 0 of group {running.group.id} 40%: 2 of 5 pages" in shown.output
    as_json = CliRunner().invoke(cli, ["groups", "show", running.group.id, "--json"], env=env)
    (report,) = json.loads(as_json.stdout)["progress"]
    assert (report["member"], report["fraction"], report["detail"]) == ("0", 0.4, "2 of 5 pages")


class Converting(QueueWorker[str]):
    """An ``async def`` member on the single event loop, reporting 40 % until let finish."""

    queue_name = QUEUE
    settings: ClassVar[dict[str, Any]] = {"listener": {"event_loop": "single"}}
    reported, finish = threading.Event(), threading.Event()

    async def handle(self, _: str) -> None:
        current_envelope().progress(0.4, "2 of 5 pages")
        Converting.reported.set()
        await asyncio.to_thread(Converting.finish.wait, 30)


def test_status_shows_the_progress_of_a_handler_on_the_single_event_loop(
    tmp_path: Path,
) -> None:
    """A worker with ``listener.event_loop = "single"`` publishes its running member's report
    as a threaded one does; once the message settled, the next publish has none."""
    storage = InMemoryQueueStorage()
    storage.create_queue(QUEUE)
    group = Publisher(storage, QUEUE, str).send_group(["bill"], on_complete="billed")
    Converting.reported.clear()
    Converting.finish.clear()
    host = WorkerHost([Converting], CloudQueueSettings(shutdown_grace_s=5), storage=storage)
    where = describe_storage(f"sqlite:///{tmp_path / 'queues.db'}")
    publisher = LiveStatePublisher(tmp_path / "run", worker="app:Converting", storage=where)
    host.start()
    try:
        assert Converting.reported.wait(10)
        publisher.publish([], loop_workers=host.looped)
        (worker,) = json.loads(status(tmp_path, "--json"))["workers"]
        (report,) = worker["progress"]
        assert (report["fraction"], report["detail"]) == (0.4, "2 of 5 pages")
        assert (report["group"], report["member"]) == (group.id, "0")
        Converting.finish.set()
        eventually(lambda: host.looped[0].consumer.counters.processed == 1)
        publisher.publish([], loop_workers=host.looped)
        (state,) = read_live_states(tmp_path / "run", QUEUE)
        assert state.queues[0].progress == ()
    finally:
        Converting.finish.set()
        assert host.stop()
