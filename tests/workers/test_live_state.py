"""Live state: running hosts publish their listeners' state as files; `status` reads it back."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import structlog
from click.testing import CliRunner

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryQueueStorage,
    MessageCodec,
)
from cloudqueue.listener.stores.connection import describe_storage
from cloudqueue.listener.stores.metered import MeteredStorage
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.workers.cli import cli
from cloudqueue.workers.host.live_state import (
    STALE_AFTER_S,
    LiveState,
    LiveStatePublisher,
    QueueLiveState,
    pid_is_alive,
    read_live_states,
)
from tests.support.polling import eventually

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
HOST = socket.gethostname()


class FrozenNow:
    """A settable stand-in for the publisher's wall clock."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def storage() -> MeteredStorage:
    """An in-memory store that counts every call made to it."""
    return MeteredStorage(InMemoryQueueStorage())


@pytest.fixture
def make_listener(storage: MeteredStorage) -> Iterator[Callable[[str], CloudQueueListener[str]]]:
    """Builds string listeners on the shared store and always stops them."""
    made: list[CloudQueueListener[str]] = []

    def make(queue: str) -> CloudQueueListener[str]:
        # Explicit base64: in auto a str listener reads any text, and these tests need one
        # malformed message to be poisoned.
        listener = CloudQueueListener(
            storage,
            CloudQueueLocation(queue),
            str,
            codec=MessageCodec(str, encoding="base64"),
            dequeue_interval_s=0.01,
        )
        made.append(listener)
        return listener

    yield make
    for listener in made:
        listener.stop(timeout_s=5)


@pytest.fixture
def dead_pid() -> int:
    """The pid of a child process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(30)
    return child.pid


def busy_listener(
    make_listener: Callable[[str], CloudQueueListener[str]],
    storage: MeteredStorage,
    queue: str,
    *,
    failing: bool = False,
) -> CloudQueueListener[str]:
    """A two-thread listener that has processed 4 items and poisoned a malformed message; with
    ``failing``, it has also failed at least once on an item whose handler always raises."""
    storage.create_queue(queue)
    codec = MessageCodec(str)
    for item in ["ok-1", "ok-2", "ok-3", "ok-4"] + (["fail"] if failing else []):
        storage.put_message(queue, codec.encode(item))
    storage.put_message(queue, "not base64 JSON")

    def handle(item: str) -> None:
        if item == "fail":
            raise RuntimeError("this item always fails")

    listener = make_listener(queue)
    listener.subscribe(handle)
    listener.start_listener(2)
    eventually(
        lambda: (
            listener.messages_processed == 4
            and listener.messages_poisoned >= 1
            and listener.messages_failed >= failing
        )
    )
    return listener


def queue_state(queue: str, processed: int = 0) -> QueueLiveState:
    return QueueLiveState(
        queue=queue,
        active_threads=1,
        peak_threads=1,
        processed=processed,
        failed=0,
        poisoned=0,
        dequeue_errors=0,
        in_flight=0,
        per_thread_rate_per_s=None,
    )


def write_state(
    directory: Path,
    *,
    pid: int,
    host: str = HOST,
    queue: str = "invoices",
    storage: str | None = "memory",
    updated_at: datetime = T0,
) -> None:
    """A state file as a publisher on ``host`` with ``pid`` would have written it."""
    state = LiveState(pid, host, "app:Worker", storage, updated_at, (queue_state(queue),))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{host}-{pid}.json").write_text(json.dumps(state.to_json()))


def test_publish_writes_each_listeners_threads_counters_and_rate(
    tmp_path: Path, storage: MeteredStorage, make_listener: Callable[..., Any]
) -> None:
    """The file <host>-<pid>.json holds the process, the time, and one entry per listener."""
    listener = busy_listener(make_listener, storage, "invoices", failing=True)
    listener.stop()  # freezes its counters: the failing item would keep coming back
    idle = make_listener("refunds")
    idle.start_listener(1)
    publisher = LiveStatePublisher(tmp_path, worker="app:Billing", now=FrozenNow())
    publisher.publish([listener, idle])
    assert publisher.path == tmp_path / f"{HOST}-{os.getpid()}.json"
    data = json.loads(publisher.path.read_text())
    assert (data["pid"], data["host"], data["worker"]) == (os.getpid(), HOST, "app:Billing")
    assert data["updated_at"] == "2026-01-01T12:00:00+00:00"
    invoices, refunds = data["queues"]
    rate = invoices.pop("per_thread_rate_per_s")
    assert isinstance(rate, float)
    assert rate > 0
    counters = listener.counters.snapshot()
    # The file counts a RetryLater among "failed"; its own count is a metric, not published here.
    del counters["retried_later"]
    no_meter = {
        "storage_transactions_per_hour": None,
        "projected_cost_per_month_usd": None,
        "priority_set": None,
        "cost_counted_s": None,
    }
    no_time_limit = {"stuck_threads": 0}
    no_reports: dict[str, list[object]] = {"progress": []}  # no handler running: no reports
    assert invoices == {
        "queue": "invoices",
        "active_threads": 0,
        "peak_threads": 2,
        **counters,
        **no_meter,
        **no_time_limit,
        **no_reports,
    }
    assert (counters["processed"], counters["poisoned"], counters["in_flight"]) == (4, 1, 0)
    assert counters["failed"] >= 1
    assert refunds == {
        "queue": "refunds",
        "active_threads": 1,
        "peak_threads": 1,
        **dict.fromkeys(counters, 0),
        "per_thread_rate_per_s": None,
        **no_meter,
        **no_time_limit,
        **no_reports,
    }


def test_publishing_makes_no_storage_call(
    tmp_path: Path, storage: MeteredStorage, make_listener: Callable[..., Any]
) -> None:
    """Everything published comes from memory: it costs no storage transaction."""
    listener = make_listener("invoices")
    storage.create_queue("invoices")
    counts = storage.counts()
    LiveStatePublisher(tmp_path, worker="app:Billing").publish([listener])
    assert storage.counts() == counts


def test_publishing_again_replaces_the_file_atomically(
    tmp_path: Path, make_listener: Callable[..., Any]
) -> None:
    """Each publish rewrites the one file through a temporary that never stays behind."""
    now = FrozenNow()
    publisher = LiveStatePublisher(tmp_path / "run", worker="app:Billing", now=now)
    publisher.publish([make_listener("invoices")])
    now.now = T0 + timedelta(seconds=2)
    publisher.publish([make_listener("invoices")])
    assert [path.name for path in (tmp_path / "run").iterdir()] == [publisher.path.name]
    updated_at = json.loads(publisher.path.read_text())["updated_at"]
    assert updated_at == "2026-01-01T12:00:02+00:00"


def test_remove_deletes_the_file_and_tolerates_its_absence(
    tmp_path: Path, make_listener: Callable[..., Any]
) -> None:
    """At exit the process's file goes away; removing twice is harmless."""
    publisher = LiveStatePublisher(tmp_path, worker="app:Billing")
    publisher.publish([make_listener("invoices")])
    publisher.remove()
    publisher.remove()
    assert list(tmp_path.iterdir()) == []


def test_a_failing_publish_is_logged_once_and_never_raised(
    tmp_path: Path, make_listener: Callable[..., Any]
) -> None:
    """An unwritable state folder must not stop the host: one warning while the failure lasts."""
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    publisher = LiveStatePublisher(blocked, worker="app:Billing")
    with structlog.testing.capture_logs() as logs:
        publisher.publish([make_listener("invoices")])
        publisher.publish([make_listener("invoices")])
    assert [entry["event"] for entry in logs] == ["live_state_not_published"]


def test_read_returns_the_live_processes_listening_on_the_queue(
    tmp_path: Path, make_listener: Callable[..., Any]
) -> None:
    """What a publisher wrote reads back as the same state, for its queues only."""
    listener = make_listener("invoices")
    publisher = LiveStatePublisher(
        tmp_path, worker="app:Billing", storage="memory", now=FrozenNow()
    )
    publisher.publish([listener])
    write_state(tmp_path, pid=os.getppid(), queue="refunds")
    (state,) = read_live_states(tmp_path, "invoices", now=T0)
    assert state == LiveState(
        pid=os.getpid(),
        host=HOST,
        worker="app:Billing",
        storage="memory",
        updated_at=T0,
        queues=(QueueLiveState.of(listener),),
    )
    assert [state.pid for state in read_live_states(tmp_path, "refunds", now=T0)] == [os.getppid()]
    assert read_live_states(tmp_path, "orders", now=T0) == []


def test_read_skips_processes_on_another_storage_when_told_which_one(tmp_path: Path) -> None:
    """The same queue name on another account or database is another queue."""
    write_state(tmp_path, pid=os.getpid(), storage="sqlite a.db")
    write_state(tmp_path, pid=os.getppid(), storage="sqlite b.db")
    write_state(tmp_path, pid=os.getpid(), host="older", storage=None)  # unknown: not ruled out
    on_a = read_live_states(tmp_path, "invoices", storage="sqlite a.db", now=T0)
    assert {(state.host, state.storage) for state in on_a} == {
        (HOST, "sqlite a.db"),
        ("older", None),
    }
    assert len(read_live_states(tmp_path, "invoices", now=T0)) == 3


def test_read_skips_states_not_updated_within_the_staleness_limit(tmp_path: Path) -> None:
    """A process that stopped publishing (hung, or on a host we cannot check) drops out."""
    write_state(tmp_path, pid=os.getpid())
    fresh = T0 + timedelta(seconds=STALE_AFTER_S)
    stale = fresh + timedelta(seconds=1)
    assert len(read_live_states(tmp_path, "invoices", now=fresh)) == 1
    assert read_live_states(tmp_path, "invoices", now=stale) == []


def test_read_skips_this_hosts_processes_that_are_gone(tmp_path: Path, dead_pid: int) -> None:
    """A pid that no longer runs here left its file behind (e.g. SIGKILL): it is ignored; the
    same pid on another host cannot be checked and counts while fresh."""
    write_state(tmp_path, pid=dead_pid)
    write_state(tmp_path, pid=dead_pid, host="elsewhere")
    states = read_live_states(tmp_path, "invoices", now=T0)
    assert [(state.host, state.pid) for state in states] == [("elsewhere", dead_pid)]


def test_read_ignores_files_that_are_not_live_state(tmp_path: Path) -> None:
    """Foreign or damaged files, temporaries and a missing folder all read as no workers."""
    assert read_live_states(tmp_path / "missing", "invoices", now=T0) == []
    (tmp_path / "garbage.json").write_text("{not json")
    (tmp_path / "other.json").write_text('{"pid": 1}')
    (tmp_path / "list.json").write_text("[]")
    (tmp_path / f".{HOST}-1.json.x.tmp").write_text("{}")
    assert read_live_states(tmp_path, "invoices", now=T0) == []


def test_pid_is_alive_tells_running_from_finished_processes(dead_pid: int) -> None:
    """Our own pid runs; a reaped child's does not."""
    assert pid_is_alive(os.getpid())
    assert not pid_is_alive(dead_pid)


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'queues.db'}"


def status(tmp_path: Path, *args: str) -> str:
    """`cloudqueue status invoices ARGS` on a SQLite store where the queue exists."""
    with closing(SqliteQueueStorage(tmp_path / "queues.db")) as queues:
        queues.create_queue("invoices")
    env = {
        "CLOUDQUEUE_CONNECTION_STRING": sqlite_url(tmp_path),
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
    }
    result = CliRunner().invoke(cli, ["status", "invoices", *args], env=env)
    assert result.exit_code == 0, result.output
    return result.output


def test_status_lists_the_running_workers_of_the_queue(
    tmp_path: Path, storage: MeteredStorage, make_listener: Callable[..., Any]
) -> None:
    """`status --json` has a `workers` list with each live listener's threads and counters;
    workers of the same queue name on another storage are not listed."""
    listener = busy_listener(make_listener, storage, "invoices")
    here = describe_storage(sqlite_url(tmp_path))
    LiveStatePublisher(tmp_path / "run", worker="app:Billing", storage=here).publish([listener])
    elsewhere = "azure account other at https://other.queue.core.windows.net"
    write_state(tmp_path / "run", pid=os.getppid(), storage=elsewhere, updated_at=datetime.now(UTC))
    report = json.loads(status(tmp_path, "--json"))
    (worker,) = report["workers"]
    assert (worker["pid"], worker["host"], worker["worker"]) == (os.getpid(), HOST, "app:Billing")
    assert (worker["active_threads"], worker["processed"], worker["poisoned"]) == (2, 4, 1)
    assert worker["per_thread_rate_per_s"] > 0
    assert datetime.fromisoformat(worker["updated_at"]) <= datetime.now(UTC)
    text = status(tmp_path)
    assert f"{HOST}-{os.getpid()} (app:Billing): 2 thread(s), peak 2; processed 4" in text


def test_status_says_when_no_worker_runs(tmp_path: Path) -> None:
    """With no live state the JSON list is empty and the text says where it looked."""
    assert json.loads(status(tmp_path, "--json"))["workers"] == []
    assert f"no running worker publishes its state in {tmp_path / 'run'}" in status(tmp_path)
