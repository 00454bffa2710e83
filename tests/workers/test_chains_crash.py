"""kill -9 inside a chain, on SQLite through ``cloudqueue run``: the process handling ``Price``
is killed right after a line's chained send to ``Total`` and before that line's delete; once
restarted, the line is priced again and its send is skipped, so every total is exact and each
line reaches ``Total`` once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from cloudqueue.listener import Publisher, SqliteQueueStorage
from tests.support.chain_workers import (
    LINES,
    ORDERS,
    Order,
    Price,
    Split,
    Total,
    events,
    expected_totals,
    totals,
)
from tests.support.polling import eventually
from tests.support.written_lines import log_events

WORKERS = [f"tests.support.chain_workers:{worker.__name__}" for worker in (Split, Price, Total)]


def test_a_step_killed_after_its_send_sends_nothing_twice(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """The first run dies by SIGKILL after one chained send; the second finishes the chain: the
    killed line was priced twice, totalled once, and every order's total is exact."""
    database, record_path = tmp_path / "queues.db", tmp_path / "record.txt"
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{database}",
        "CLOUDQUEUE_LOGGING__FORMAT": "json",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
        "CLOUDQUEUE_BACKOFF__MAX_IDLE_S": "0.2",
        "CLOUDQUEUE_LISTENER__VISIBILITY_TIMEOUT_S": "2",
        "TEST_RECORD_PATH": str(record_path),
    }
    storage = SqliteQueueStorage(database)
    storage.create_queue(Split.queue_name)
    Publisher(storage, Split.queue_name, Order, key="order").publish_many(ORDERS)

    def start(name: str, **extra: str) -> subprocess.Popen[bytes]:
        with (tmp_path / f"{name}.log").open("ab") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", "cloudqueue", "run", *WORKERS],
                env={**env, **extra},
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        processes.append(process)
        return process

    victim = start("victim", TEST_KILL_MARKER=str(tmp_path / "killed"))
    assert victim.wait(120) == -signal.SIGKILL
    [killed] = events(record_path, "killed")
    survivor = start("survivor")
    eventually(lambda: log_events(tmp_path / "survivor.log", "host_started"), timeout_s=60)
    eventually(
        lambda: (
            len(events(record_path, "priced")) >= LINES
            and all(
                storage.approximate_message_count(queue) == 0
                for queue in (Split.queue_name, Price.queue_name, Total.queue_name)
            )
        ),
        timeout_s=120,
    )
    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(60) == 0
    storage.close()

    assert killed  # the message id of the line killed after its send
    assert len(events(record_path, "pricing")) > LINES  # the killed line was priced again
    assert len(events(record_path, "priced")) == LINES
    assert totals(record_path) == expected_totals()
