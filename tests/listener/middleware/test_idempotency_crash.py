"""kill -9 of a worker with idempotent handling, several times during one drain, on SQLite and
Azurite: a key whose completion was recorded before a crash is never handled again, and a key
whose handler the crash interrupted (or whose completion it beat) is handled at most once more
per crash.

Each crash freezes the worker first (SIGSTOP), reads which keys the store has recorded as done,
then kills it (SIGKILL): so what the store held at the instant of the crash is known exactly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from cloudqueue.listener.stores.key_connection import open_key_ledger
from tests.support.azurite import AzuriteProcess
from tests.support.cli_fork import RunningProcess
from tests.support.polling import eventually
from tests.support.runs import start_run
from tests.support.written_lines import complete_lines

KEYS = 120
COPIES = 2
KILLS = 3
WORKER = "tests.support.crash_keys_worker:CrashKeysWorker"


@pytest.fixture(params=["sqlite", "azure"])
def connection_string(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'queues.db'}"
    azurite: AzuriteProcess = request.getfixturevalue("azurite_with_blobs")
    return azurite.connection_string


def lines(path: Path) -> list[tuple[str, int, int]]:
    found = []
    for line in complete_lines(path):
        what, n, pid = line.split()
        found.append((what, int(n), int(pid)))
    return found


def test_a_drain_killed_three_times_handles_each_recorded_key_exactly_once(
    connection_string: str, tmp_path: Path, processes: list[RunningProcess]
) -> None:
    """120 keys, each enqueued twice, drained by a worker killed three times mid-drain."""
    queue, record_path = f"crash-{uuid.uuid4().hex[:10]}", tmp_path / "record.txt"
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "CLOUDQUEUE_CONNECTION_STRING": connection_string,
        "CLOUDQUEUE_LOGGING__FORMAT": "json",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
        "CLOUDQUEUE_BACKOFF__MAX_IDLE_S": "0.2",
        "CLOUDQUEUE_IDEMPOTENCY__WINDOW_S": "3600",
        "CLOUDQUEUE_LISTENER__VISIBILITY_TIMEOUT_S": "2",
        "CLOUDQUEUE_SCALING__MAX_THREADS": "2",
        "TEST_QUEUE": queue,
        "TEST_RECORD_PATH": str(record_path),
    }
    items = "\n".join(json.dumps({"id": n}) for n in range(KEYS) for _ in range(COPIES))
    subprocess.run(
        [sys.executable, "-m", "cloudqueue", "enqueue", queue, "--key", "id"],
        input=items.encode(),
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    ledger = open_key_ledger(connection_string)

    def done_keys() -> set[int]:
        return {n for n in range(KEYS) if ledger.record(queue, "key", str(n)).done_until}

    def start(index: int) -> RunningProcess:
        return start_run(processes, [WORKER], env, tmp_path / f"run{index}.log")

    def returns() -> int:
        return sum(1 for what, *_ in lines(record_path) if what == "returned")

    recorded_at_kill: list[set[int]] = []
    for index in range(KILLS):
        target = returns() + 15
        process = start(index)
        # Kill once it has made progress of its own, while handlers are running.
        eventually(lambda: returns() >= target, timeout_s=90)  # noqa: B023 - called at once
        os.killpg(process.pid, signal.SIGSTOP)  # frozen: the store holds what it held now
        recorded_at_kill.append(done_keys())
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
    last = start(KILLS)
    eventually(
        lambda: {n for what, n, _ in lines(record_path) if what == "returned"} == set(range(KEYS)),
        timeout_s=180,
    )
    last.send_signal(signal.SIGTERM)
    assert last.wait(60) == 0
    ledger.close()

    events = lines(record_path)
    run_of = {pid: index for index, pid in enumerate(p.pid for p in processes)}
    returned = Counter(n for what, n, _ in events if what == "returned")
    assert set(returned) == set(range(KEYS))  # every key completed
    for kill, recorded in enumerate(recorded_at_kill):
        # Exactly once: a key recorded before this crash is never started by a later run.
        later = {n for what, n, pid in events if what == "started" and run_of[pid] > kill}
        assert not recorded & later, f"recorded before crash {kill}, handled again"
    for n, count in returned.items():
        # At most once more per crash that found it started (in its handler, or its completion
        # not yet recorded).
        interrupted = sum(
            1
            for kill, recorded in enumerate(recorded_at_kill)
            if n not in recorded
            and any(what == "started" and m == n and run_of[pid] == kill for what, m, pid in events)
        )
        assert count <= 1 + interrupted, f"key {n} returned {count} times"
    assert sum(returned.values()) > KEYS or any(recorded_at_kill)  # the kills fell mid-drain
