"""kill -9 of a worker process with 200 messages in flight: nothing lost, none deleted unhandled."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from cloudqueue.listener import MessageCodec
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from tests.support.polling import eventually
from tests.support.written_lines import complete_lines

IN_FLIGHT = 200
VISIBILITY_TIMEOUT_S = 2
WORKER = "tests.support.in_flight_workers:HoldingWorker"


def recorded(path: Path, what: str) -> set[int]:
    return {int(line.split()[1]) for line in complete_lines(path) if line.startswith(f"{what} ")}


def collect_all(storage: SqliteQueueStorage, queue: str) -> set[int]:
    """Every message left in the queue, once all are visible again (each taken and kept hidden)."""
    codec: MessageCodec[dict[str, int]] = MessageCodec(dict)
    left = storage.approximate_message_count(queue)
    taken: set[int] = set()

    def take() -> bool:
        for message in storage.get_messages(queue, max_messages=32, visibility_timeout_s=300):
            taken.add(codec.decode(message.content)["n"])
        return len(taken) == left

    eventually(take, timeout_s=30)
    return taken


@pytest.mark.parametrize("event_loop", ["threads", "single"])
def test_kill_9_with_200_messages_in_flight_loses_none_and_deletes_none_unhandled(
    tmp_path: Path, event_loop: str
) -> None:
    """A worker killed while 200 messages are in flight (half completed and being deleted, half
    still running) leaves every message it did not complete in the queue: its async handlers
    awaited from dequeue threads, or fetched, handled and settled on one event loop."""
    database, record_path = tmp_path / "queues.db", tmp_path / "record.txt"
    queue = f"crash-{uuid.uuid4().hex[:12]}"
    storage = SqliteQueueStorage(database)
    storage.create_queue(queue)
    codec: MessageCodec[dict[str, int]] = MessageCodec(dict)
    for n in range(IN_FLIGHT):
        storage.put_message(queue, codec.encode({"n": n}))
    env = {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{database}",
        "CLOUDQUEUE_LISTENER__THREADS": "4",
        "CLOUDQUEUE_LISTENER__CONCURRENCY": "64",
        "CLOUDQUEUE_LISTENER__VISIBILITY_TIMEOUT_S": str(VISIBILITY_TIMEOUT_S),
        "CLOUDQUEUE_SCALING__MIN_THREADS": "4",
        "CLOUDQUEUE_SCALING__MAX_THREADS": "4",
        "CLOUDQUEUE_LISTENER__EVENT_LOOP": event_loop,
        "TEST_QUEUE": queue,
        "TEST_RECORD_PATH": str(record_path),
        "TEST_HOLD_AT": str(IN_FLIGHT),
    }
    with (tmp_path / "worker.log").open("wb") as log_file:
        worker = subprocess.Popen(
            [sys.executable, "-m", "cloudqueue", "run", WORKER],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        eventually(lambda: len(recorded(record_path, "started")) == IN_FLIGHT, timeout_s=60)
        # Kill in the middle of settling: some completed messages deleted, others not yet.
        eventually(lambda: storage.approximate_message_count(queue) < IN_FLIGHT, timeout_s=30)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
    completed = recorded(record_path, "completed")
    left = collect_all(storage, queue)
    storage.close()
    everything = set(range(IN_FLIGHT))
    assert left | completed == everything  # nothing lost
    assert everything - left <= completed  # every deleted message had been handled
    assert {n for n in everything if n % 2} <= left  # those still running are all back
    assert len(everything - left) > 0  # the kill came after some deletes
