"""Push triggers end to end through the CLI: a worker at zero threads, `enqueue`, `trigger`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.cli import ok
from tests.support.polling import eventually
from tests.support.redis_server import RedisServer

QUEUE = "pushed"


def events(path: Path, name: str) -> list[dict[str, Any]]:
    lines = path.read_text(errors="replace").splitlines()
    return [e for e in (json.loads(x) for x in lines if x.startswith("{")) if e["event"] == name]


def test_a_worker_at_zero_threads_is_woken_by_enqueue_and_by_a_manual_trigger(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """With triggers, the idle worker stops its last thread; enqueue (which announces the work)
    and `cloudqueue trigger` each wake it to handle what is waiting."""
    env = {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'q.db'}",
        "CLOUDQUEUE_LOGGING__FORMAT": "json",
        "CLOUDQUEUE_TRIGGERS__URL": redis_server.url,
        "CLOUDQUEUE_SCALING__MIN_THREADS": "0",
        "CLOUDQUEUE_BACKOFF__MAX_IDLE_S": "0.2",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
        "TEST_QUEUE": QUEUE,
    }
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log_file:
        worker = subprocess.Popen(
            [sys.executable, "-m", "workers", "run", "tests.support.workers:RecordingWorker"],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        eventually(lambda: events(log_path, "dequeue_thread_stopped"), timeout_s=30)
        ok("enqueue", QUEUE, '{"n": 1}', env=env)
        eventually(lambda: [e["n"] for e in events(log_path, "handled")] == [1], timeout_s=30)
        # Enqueued with no trigger channel configured, then announced by hand.
        eventually(lambda: len(events(log_path, "dequeue_thread_stopped")) >= 2, timeout_s=30)
        quiet = {key: value for key, value in env.items() if key != "CLOUDQUEUE_TRIGGERS__URL"}
        quiet["CLOUDQUEUE_SCALING__MIN_THREADS"] = "1"
        ok("enqueue", QUEUE, '{"n": 2}', env=quiet)
        assert "trigger sent" in ok("trigger", QUEUE, env=env)
        eventually(lambda: [e["n"] for e in events(log_path, "handled")] == [1, 2], timeout_s=30)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
