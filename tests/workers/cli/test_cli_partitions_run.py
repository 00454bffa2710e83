"""The first-day scenario with real `cloudqueue` processes: a worker serves a queue as 4
partitions; `cloudqueue enqueue` without --partitions reaches it; a worker whose setting
disagrees with the recorded layout refuses to start. On SQLite and on Azurite."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

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
