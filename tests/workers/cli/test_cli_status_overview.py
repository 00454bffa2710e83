"""`cloudqueue status` with no queue: every queue of the store, with the workers running on it."""

from __future__ import annotations

import importlib
import json
import os
import socket
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from cloudqueue.listener.stores.layouts import QueueLayout, record_layout
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.workers.cli import cli
from cloudqueue.workers.host.live_state import LiveState, QueueLiveState


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """invoices (3 messages, 1 poisoned) with a worker on it; orders as 4 partitions holding 2,
    and 1 on a plain orders queue beside them."""
    with closing(SqliteQueueStorage(tmp_path / "q.db")) as storage:
        for name in ("invoices", "invoices-poison"):
            storage.create_queue(name)
        for text in "abc":
            storage.put_message("invoices", text)
        storage.put_message("invoices-poison", "bad")
        orders = PartitionedQueueStorage([storage], {"orders": 4})
        orders.create_queue("orders")
        record_layout(storage, "orders", QueueLayout(4))
        orders.put_message("orders", "1")
        orders.put_message("orders", "2")
        storage.create_queue("orders")
        storage.put_message("orders", "stranded")
    state_dir = tmp_path / "run"
    state_dir.mkdir()
    state = LiveState(
        os.getpid(),
        socket.gethostname(),
        "app:Billing",
        None,
        datetime.now(UTC),
        (QueueLiveState("invoices", 2, 2, 10, 0, 1, 0, 0, None),),
    )
    (state_dir / f"{state.host}-{state.pid}.json").write_text(json.dumps(state.to_json()))
    return {
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'q.db'}",
        "CLOUDQUEUE_STATE_DIR": str(state_dir),
    }


def status(env: dict[str, str], *args: str) -> str:
    result = CliRunner().invoke(cli, ["status", *args], env=env)
    assert result.exit_code == 0, result.output
    return result.output


def test_every_queue_has_its_depths_partitions_and_workers_in_json(env: dict[str, str]) -> None:
    """One entry per logical queue (partitions and poison queues folded in), with its workers."""
    report = json.loads(status(env, "--json"))
    rows = {row["queue"]: row for row in report["queues"]}
    assert sorted(rows) == ["invoices", "orders"]
    invoices, orders = rows["invoices"], rows["orders"]
    assert (invoices["depth"], invoices["poison_depth"], invoices["partitions"]) == (3, 1, 1)
    assert [(w["worker"], w["active_threads"], w["processed"]) for w in invoices["workers"]] == [
        ("app:Billing", 2, 10)
    ]
    assert (orders["depth"], orders["poison_depth"], orders["partitions"]) == (2, 0, 4)
    assert orders["workers"] == []
    assert orders["plain_queue_depth"] == 1


def test_the_text_is_a_table_with_a_row_per_queue(env: dict[str, str]) -> None:
    """A header, a row per queue naming its workers, and the stray plain queue's warning."""
    lines = status(env).splitlines()
    assert lines[0].split() == ["QUEUE", "DEPTH", "POISON", "PARTITIONS", "WORKERS"]
    assert lines[1].split()[:4] == ["invoices", "3", "1", "1"]
    assert "(app:Billing): 2 thread(s), processed 10" in lines[1]
    assert lines[2].split()[:6] == ["orders", "2", "0", "4", "none", "running"]
    assert "the plain queue orders beside the partitions holds 1 message(s)" in lines[3]


def test_watch_without_a_queue_refreshes_the_overview(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--watch without a queue shows the table of every queue at each refresh, a new message
    counted at the next one."""
    refreshes: list[float] = []

    def enqueue_between(interval_s: float) -> None:
        refreshes.append(interval_s)
        with closing(SqliteQueueStorage(tmp_path / "q.db")) as store:
            store.put_message("invoices", "d")

    monkeypatch.setattr(
        importlib.import_module("cloudqueue.workers.cli.status"), "wait_s", enqueue_between
    )
    output = status(env, "--watch", "--count", "2", "--interval", "5")
    tables = [line for line in output.splitlines() if line.startswith("invoices")]
    assert [row.split()[1] for row in tables] == ["3", "4"]
    assert refreshes == [5.0]


def test_partitions_without_a_queue_is_refused(env: dict[str, str]) -> None:
    """--partitions without a queue is a usage error, not an overview that ignores it."""
    result = CliRunner().invoke(cli, ["status", "--partitions", "2"], env=env)
    assert result.exit_code == 2
    assert "--partitions needs a QUEUE" in result.output
