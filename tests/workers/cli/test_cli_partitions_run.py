"""The first-day scenarios with real `cloudqueue` processes, on SQLite and on Azurite: a worker
serves a queue as 4 partitions and `cloudqueue enqueue` without --partitions reaches it; a
producer partitions a queue before any worker did and records the layout; a worker whose
settings disagree with the recorded layout, or with partitions nobody recorded, exits 2 with
one line naming the setting."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from cloudqueue.listener.stores.connection import open_storage
from cloudqueue.listener.stores.layouts import QueueLayout, read_layout
from cloudqueue.workers.cli import cli
from tests.support.cli import cloudqueue, ok
from tests.support.polling import eventually
from tests.support.runs import WORKER, Runs, backend_environment


@pytest.fixture(params=["sqlite", "azure"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    return backend_environment(request, tmp_path)


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[Runs]:
    started = Runs(tmp_path)
    yield started
    started.kill_all()


def test_an_item_enqueued_without_partitions_reaches_a_partitioned_worker(
    env: dict[str, str], runs: Runs
) -> None:
    """The worker records 4 partitions; enqueue and status, told nothing, use them; nothing
    waits on a plain queue; a worker left at 1 partition is refused with exit code 2, also
    under a supervisor."""
    queue = env["TEST_QUEUE"]
    worker = runs.start({**env, "CLOUDQUEUE_LISTENER__PARTITIONS": "4"})
    eventually(lambda: worker.events("partition_layout_recorded"), timeout_s=30)
    ok("enqueue", queue, json.dumps({"n": 7}), env=env)
    eventually(lambda: 7 in worker.handled(), timeout_s=30)
    report = json.loads(ok("status", queue, "--json", env=env))
    assert [part["queue"] for part in report["partitions"]] == [f"{queue}-p{i}" for i in range(4)]
    assert report["plain_queue_depth"] == 0
    assert queue not in [
        row["queue"]
        for row in json.loads(ok("queues", "list", "--json", env=env))
        if "partitions" not in row
    ]

    for processes in ("1", "2"):  # a supervisor refuses before starting any child
        refused = cloudqueue("run", WORKER, "--processes", processes, env=env)
        assert refused.returncode == 2, refused.stderr
        assert f"queue {queue} is recorded as 4 partitions" in refused.stderr
        assert "set listener.partitions = 4" in refused.stderr
        assert "child_started" not in refused.stderr

    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(30) == 0


ITEMS = 12
LAYOUT_PAGE = "docs/concepts/partition-layout.md"


def items() -> str:
    return "".join(json.dumps({"n": n}) + "\n" for n in range(ITEMS))


def ok_in_process(*args: str, env: dict[str, str], stdin: str = "") -> str:
    """A command in process (click's runner: no interpreter start), exit code 0 required."""
    result = CliRunner().invoke(cli, list(args), env=env, input=stdin, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def refused(env: dict[str, str], **settings: str) -> str:
    """Run the worker (a real process) with these settings; require exit code 2 and one
    line; return it."""
    result = cloudqueue("run", WORKER, env={**env, **settings})
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def recorded(env: dict[str, str]) -> QueueLayout | None:
    storage = open_storage(env["CLOUDQUEUE_CONNECTION_STRING"])
    try:
        return read_layout(storage, env["TEST_QUEUE"])
    finally:
        storage.close()


def test_a_partitioned_producer_records_the_layout_and_only_an_agreeing_worker_starts(
    env: dict[str, str], runs: Runs
) -> None:
    """`enqueue --partitions 4` on a new queue records 4 partitions; a plain worker and a
    3-partition worker exit 2 naming listener.partitions = 4 and record nothing over it; status
    and queues list both count every message; a worker with 4 partitions then handles them all."""
    queue = env["TEST_QUEUE"]
    ok_in_process("enqueue", queue, "--partitions", "4", env=env, stdin=items())
    assert recorded(env) == QueueLayout(4)

    for count in ("1", "3"):
        line = refused(env, CLOUDQUEUE_LISTENER__PARTITIONS=count)
        assert f"queue {queue} is recorded as 4 partitions" in line
        assert "set listener.partitions = 4" in line
        assert LAYOUT_PAGE in line
    assert recorded(env) == QueueLayout(4)

    status = json.loads(ok_in_process("status", queue, "--json", env=env))
    listed = json.loads(ok_in_process("queues", "list", "--json", env=env))
    totals = [row["depth"] for row in listed if row["queue"] == queue and "partitions" in row]
    assert status["depth"] == totals[0] == ITEMS
    assert [row for row in listed if row["queue"] == queue and "partitions" not in row] == []

    worker = runs.start({**env, "CLOUDQUEUE_LISTENER__PARTITIONS": "4"})
    eventually(lambda: worker.handled() == set(range(ITEMS)), timeout_s=60)
    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(30) == 0


def test_partitions_that_no_layout_records_stop_a_worker_that_would_not_read_them(
    env: dict[str, str], runs: Runs
) -> None:
    """Partitions made without a record (by a version that recorded none): a plain worker exits
    2 naming listener.partitions = 4; a 4-partition worker records the layout and handles every
    message."""
    queue = env["TEST_QUEUE"]
    storage = open_storage(env["CLOUDQUEUE_CONNECTION_STRING"])
    try:
        for index in range(4):
            storage.create_queue(f"{queue}-p{index}")
            storage.put_message(f"{queue}-p{index}", json.dumps({"n": index}))
    finally:
        storage.close()
    assert recorded(env) is None

    line = refused(env)
    assert f"queue {queue} has 4 partitions that no layout records" in line
    assert "set listener.partitions = 4" in line
    assert LAYOUT_PAGE in line
    assert recorded(env) is None

    worker = runs.start({**env, "CLOUDQUEUE_LISTENER__PARTITIONS": "4"})
    eventually(lambda: worker.handled() == set(range(4)), timeout_s=60)
    assert recorded(env) == QueueLayout(4)
    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(30) == 0
