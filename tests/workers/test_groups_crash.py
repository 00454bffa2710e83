"""kill -9 during a group, on SQLite: two ``cloudqueue run`` processes handle a group of 200
members (10 poisoned on purpose), one is killed twice mid-run and restarted; the completion worker
receives exactly one ``GroupDone``, with 190 handled and 10 poisoned, after every member's first
handling ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from cloudqueue.listener import Publisher, SqliteQueueStorage
from tests.support.polling import eventually
from tests.support.written_lines import complete_lines, log_events

MEMBERS = 200
KILLS = 2
WORKERS = [
    "tests.support.crash_group_workers:GroupMembers",
    "tests.support.crash_group_workers:GroupFinisher",
]


def test_a_group_survives_kill_9_with_exactly_one_completion(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """200 members: a process killed alone, then one killed while another handles beside it,
    then restarted beside that one: one GroupDone of 190 + 10."""
    database, record_path = tmp_path / "queues.db", tmp_path / "record.txt"
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{database}",
        "CLOUDQUEUE_LOGGING__FORMAT": "json",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
        "CLOUDQUEUE_BACKOFF__MAX_IDLE_S": "0.2",
        "CLOUDQUEUE_LISTENER__VISIBILITY_TIMEOUT_S": "2",
        "CLOUDQUEUE_SCALING__MAX_THREADS": "2",
        "CLOUDQUEUE_LISTENER__CONCURRENCY": "1",
        "TEST_RECORD_PATH": str(record_path),
        "TEST_HANDLER_DELAY_S": "0.1",
    }
    storage = SqliteQueueStorage(database)
    for queue in ("members", "members-done"):
        storage.create_queue(queue)
    items = [{"n": n} for n in range(MEMBERS)]
    group = Publisher(storage, "members", dict).send_group(items, on_complete="members-done")

    def start(name: str) -> subprocess.Popen[bytes]:
        with (tmp_path / f"{name}.log").open("ab") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", "cloudqueue", "run", *WORKERS],
                env=env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        processes.append(process)
        return process

    def events(what: str) -> list[list[str]]:
        return [line.split() for line in complete_lines(record_path) if line.startswith(what)]

    def handled_by(process: subprocess.Popen[bytes]) -> int:
        return sum(1 for event in events("returned") if event[-1] == str(process.pid))

    steady: subprocess.Popen[bytes] | None = None
    for kill in range(KILLS):
        victim = start(f"victim{kill}")
        if kill == KILLS - 1:  # the last victim dies while another process handles beside it
            steady = start("steady")
        # Killed once it has handled members of its own, while its handlers run.
        eventually(lambda: handled_by(victim) >= 10, timeout_s=120)  # noqa: B023
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(10)
    assert steady is not None
    last = start("restarted")
    for name in ("steady", "restarted"):  # a SIGTERM before its handlers are set would kill it
        eventually(lambda: log_events(tmp_path / f"{name}.log", "host_started"), timeout_s=60)  # noqa: B023
    eventually(lambda: events("done") != [], timeout_s=180)
    eventually(lambda: storage.approximate_message_count("members-done") == 0, timeout_s=60)
    for process in (steady, last):
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0

    [done] = events("done")
    assert done[1:3] == ["190", "10"]
    status = group.status()
    assert (status.handled, status.poisoned, status.completion) == (190, 10, "sent")
    lines = list(complete_lines(record_path))
    done_at = lines.index(" ".join(done))
    first_end: dict[int, int] = {}
    for at, line in enumerate(lines):
        what, *fields = line.split()
        if what in ("returned", "poisoned"):
            first_end.setdefault(int(fields[0]), at)
    assert sorted(first_end) == list(range(MEMBERS))
    assert max(first_end.values()) < done_at  # the completion came after every member's end
    storage.close()
