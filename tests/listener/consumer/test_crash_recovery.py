"""`kill -9` of a worker mid-burst, then a restart: nothing lost, few duplicates, quick recovery."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from tests.support.cli_fork import RunningProcess
from tests.support.polling import eventually
from tests.support.runs import start_cloudqueue
from tests.support.written_lines import log_events

BURST = 200
MAX_THREADS = 4
CONCURRENCY = 2
"""Messages each dequeue task of the event-loop consumer keeps in handling at once."""
VISIBILITY_TIMEOUT_S = 10
"""A third of the default: what the test shows is "about one timeout", and it waits one out."""


def handled(path: Path) -> list[int]:
    return [int(e["n"]) for e in log_events(path, "handled")]


COMMANDS = {
    "threads": ["cloudqueue", "run", "tests.support.workers:RecordingWorker"],
    # The same worker's async twin, on one event loop (listener.event_loop, set below).
    "event_loop": ["cloudqueue", "run", "tests.support.workers:AsyncRecordingWorker"],
}


def queue_depth(env: dict[str, str]) -> int:
    storage = AzureQueueStorage.from_connection_string(env["CLOUDQUEUE_CONNECTION_STRING"])
    try:
        return storage.approximate_message_count(env["TEST_QUEUE"])
    finally:
        storage.close()


def start(env: dict[str, str], log_path: Path, path: str = "threads") -> RunningProcess:
    module, *args = COMMANDS[path]
    return start_cloudqueue(args, env=env, log_path=log_path, module=module)


@pytest.mark.parametrize("path", ["threads", "event_loop"])
def test_a_killed_worker_loses_nothing_and_its_messages_return_within_one_timeout(
    azurite_connection_string: str, tmp_path: Path, path: str
) -> None:
    """After kill -9, a restarted worker handles every message; duplicates stay within what the
    dead worker held, and its messages come back after about one visibility timeout; SIGTERM
    then ends the second one cleanly (exit 0). On dequeue threads and on the event-loop
    consumer, each holding one message per slot: ``CONCURRENCY`` per thread or task."""
    env = {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": azurite_connection_string,
        "CLOUDQUEUE_LOGGING__FORMAT": "json",
        "CLOUDQUEUE_SCALING__MAX_THREADS": str(MAX_THREADS),
        "CLOUDQUEUE_LISTENER__VISIBILITY_TIMEOUT_S": str(VISIBILITY_TIMEOUT_S),
        "CLOUDQUEUE_BACKOFF__MAX_IDLE_S": "0.5",
        "TEST_QUEUE": f"crash-{uuid.uuid4().hex[:12]}",
        "TEST_HANDLER_DELAY_S": "0.05",
    }
    # The in-flight bound, and so the duplicates' bound, is set here: on threads too, whose
    # default (8 slots a thread, grown as handlers wait) let a kill leave 12 handled and undeleted.
    env["CLOUDQUEUE_LISTENER__CONCURRENCY"] = str(CONCURRENCY)
    if path == "event_loop":
        env["CLOUDQUEUE_LISTENER__EVENT_LOOP"] = "single"
    items = "\n".join(json.dumps({"n": n}) for n in range(BURST))
    subprocess.run(
        [sys.executable, "-m", "cloudqueue", "enqueue", env["TEST_QUEUE"]],
        input=items.encode(),
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first = start(env, first_log, path)
    try:
        eventually(lambda: len(handled(first_log)) >= 30, timeout_s=60)
        os.killpg(first.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        first.wait(10)
        second = start(env, second_log, path)
        try:
            eventually(
                lambda: set(handled(first_log)) | set(handled(second_log)) == set(range(BURST)),
                timeout_s=VISIBILITY_TIMEOUT_S + 60,
            )
            recovered_s = time.monotonic() - killed_at
            # Handled by the dead process but not deleted, some come back only after their
            # timeout: the second handles and deletes them before it is stopped.
            eventually(lambda: queue_depth(env) == 0, timeout_s=VISIBILITY_TIMEOUT_S + 30)
        finally:
            second.send_signal(signal.SIGTERM)
            assert second.wait(60) == 0
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    duplicates = set(handled(first_log)) & set(handled(second_log))
    held = MAX_THREADS * CONCURRENCY
    assert len(duplicates) <= held  # at most one handled-but-not-deleted per slot
    assert recovered_s < VISIBILITY_TIMEOUT_S * 1.5  # about one timeout, not 10 minutes
    status = subprocess.run(
        [sys.executable, "-m", "cloudqueue", "status", env["TEST_QUEUE"], "--json"],
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert json.loads(status.stdout)["depth"] == 0
