"""`cloudqueue run` on a terminal: a live status line per queue, unless told not to."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

from tests.support.cli import Terminal, ok, plain
from tests.support.polling import eventually

WORKER = "tests.support.workers:RecordingWorker"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'queues.db'}",
        "CLOUDQUEUE_BACKOFF__MAX_IDLE_S": "0.2",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
        "TEST_QUEUE": f"work-{uuid.uuid4().hex[:12]}",
        "TERM": "xterm-256color",
    }
    env.pop("CLOUDQUEUE_LOGGING__FORMAT", None)  # auto: console lines on a terminal
    return env


def _run_on_terminal(
    env: dict[str, str], *options: str, until: Callable[[str], bool]
) -> tuple[int, str]:
    """Run the worker on a terminal with 3 items until ``until(text)``, then SIGTERM it."""
    items = "\n".join(json.dumps({"n": n}) for n in range(3))
    ok("enqueue", env["TEST_QUEUE"], env=env, stdin=items)
    terminal = Terminal()
    process = subprocess.Popen(
        [sys.executable, "-m", "cloudqueue", "run", WORKER, *options],
        stdin=terminal.slave,
        stdout=terminal.slave,
        stderr=terminal.slave,
        env=env,
    )
    try:
        eventually(lambda: until(plain(terminal.shown())), timeout_s=60)
    finally:
        process.send_signal(signal.SIGTERM)
        returncode = process.wait(timeout=60)
    return returncode, plain(terminal.output())


def test_run_on_a_terminal_shows_depth_threads_and_processed_live(tmp_path: Path) -> None:
    """The status line counts the handled items; log lines still print, above it."""
    env = _env(tmp_path)
    returncode, text = _run_on_terminal(env, until=lambda text: "processed 3" in text)
    assert returncode == 0, text[-3000:]
    status = [line for line in text.splitlines() if env["TEST_QUEUE"] in line and "threads" in line]
    assert any("processed 3" in line for line in status), text[-3000:]
    assert any("depth" in line for line in status)
    assert text.count("handled") >= 3  # the worker's own log lines were not swallowed


def test_run_with_no_progress_prints_log_lines_only(tmp_path: Path) -> None:
    """`--no-progress` keeps the terminal to log lines: no status line is drawn."""
    returncode, text = _run_on_terminal(
        _env(tmp_path), "--no-progress", until=lambda text: text.count("handled") >= 3
    )
    assert returncode == 0, text[-3000:]
    assert "· in flight" not in text
    assert text.count("handled") >= 3
