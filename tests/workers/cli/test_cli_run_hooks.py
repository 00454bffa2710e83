"""`cloudqueue run` with lifecycle hooks and load-time checks, as real processes on SQLite.

An async ``startup`` opens the session a hundred async handlers use and ``shutdown`` closes it
at SIGTERM; a raising ``startup`` exits non-zero in one line with no message taken, alone and
under ``--processes 2`` (no restart loop); the worker class mistakes that would fail every
message exit 2 with one line before anything starts.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudqueue.workers.host.child_slot import STARTUP_FAILED_EXIT_CODE
from tests.support.cli import cloudqueue
from tests.support.hook_workers import http_server
from tests.support.polling import eventually
from tests.support.runs import enqueue_numbered, queue_depth, run_environment
from tests.support.written_lines import log_events

SESSION_WORKER = "tests.support.hook_workers:SessionWorker"
FAILING_WORKER = "tests.support.hook_workers:FailingStartup"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return run_environment(f"sqlite:///{tmp_path / 'queues.db'}", tmp_path)


@pytest.fixture
def base_url() -> Iterator[str]:
    with http_server() as url:
        yield url


def test_an_async_startup_session_serves_a_hundred_handlers_and_is_closed_at_sigterm(
    env: dict[str, str], base_url: str, tmp_path: Path
) -> None:
    """Opened once before the first message, used by every handler, closed after the drain;
    the process exits 0 and nothing warns of an unclosed session."""
    enqueue_numbered(env, 100)
    log_path = tmp_path / "run.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-X", "dev", "-m", "cloudqueue.workers", "run", SESSION_WORKER],
            env={**env, "TEST_HTTP_URL": base_url},
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        eventually(lambda: len(log_events(log_path, "handled")) == 100, timeout_s=60)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        process.kill()
    names = [event["event"] for event in log_events(log_path)]
    assert names.count("session_opened") == names.count("session_closed") == 1
    assert names.index("session_opened") < names.index("handled")
    last_handled = len(names) - 1 - names[::-1].index("handled")
    assert last_handled < names.index("session_closed") < names.index("host_stopped")
    assert "Unclosed" not in log_path.read_text()  # -X dev shows ResourceWarnings
    assert queue_depth(env) == 0


def test_a_raising_startup_exits_non_zero_in_one_line_taking_no_message(
    env: dict[str, str],
) -> None:
    """One error line with the exception and where it was raised, no traceback; the message
    stays in the queue."""
    enqueue_numbered(env, 1)
    result = cloudqueue("run", FAILING_WORKER, env=env)
    assert result.returncode == STARTUP_FAILED_EXIT_CODE
    errors = [json.loads(line) for line in result.stderr.splitlines() if '"error"' in line]
    [failed] = [event for event in errors if event["level"] == "error"]
    assert failed["event"] == "startup_failed"
    assert failed["error"] == "ConnectionRefusedError: database at db:5432 refused the connection"
    assert "Traceback" not in result.stderr
    assert '"handled"' not in result.stderr
    assert queue_depth(env) == 1


def test_a_raising_startup_under_two_processes_is_not_restarted_and_the_parent_fails(
    env: dict[str, str],
) -> None:
    """Each child starts once; the supervisor restarts neither and exits with the same code."""
    enqueue_numbered(env, 1)
    result = cloudqueue("run", FAILING_WORKER, "--processes", "2", env=env)
    assert result.returncode == STARTUP_FAILED_EXIT_CODE
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert [e["event"] for e in events].count("child_started") == 2
    assert any(e["event"] == "child_startup_failed" for e in events)
    assert "Traceback" not in result.stderr
    assert queue_depth(env) == 1


HEADER = "from typing import Any\nfrom cloudqueue.workers import QueueWorker\n\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "class Bad(QueueWorker):\n    queue_name = 'q'\n    def handle(self, item): pass\n",
            "'bad_worker:Bad' has no item type: declare it as class Bad(QueueWorker[Item])",
        ),
        (
            "class Bad(QueueWorker[dict[str, Any]]):\n    queue_name = 'q'\n"
            "    def handle(self, to, subject): pass\n",
            "'bad_worker:Bad': handle(self, to, subject) must take one item, "
            "as def handle(self, item)",
        ),
        (
            "class Bad(QueueWorker[dict[str, Any]]):\n    queue_name = 'q'\n"
            "    def handle(self, item): pass\n    def handle_batch(self, items): pass\n",
            "'bad_worker:Bad' defines both handle and handle_batch",
        ),
        (
            "class Bad(QueueWorker[dict[str, Any]]):\n    queue_name = 'q'\n"
            "    settings = {'scalling': {'max_threads': 2}}\n    def handle(self, item): pass\n",
            "unknown setting scalling.max_threads in settings of bad_worker:Bad: "
            "did you mean scaling.max_threads?",
        ),
        (
            "class Bad(QueueWorker[dict[str, Any]]):\n    queue_name = 'q'\n"
            "    async def on_start_async(self): pass\n    def handle(self, item): pass\n",
            "'bad_worker:Bad' defines on_start_async, which is never called: "
            "define async def startup(self) instead",
        ),
        (
            "class Bad(QueueWorker[dict[str, Any]]):\n    queue_name = 'q'\n"
            "    then = 'Next'\n    def handle(self, item): return item\n",
            "'bad_worker:Bad': then must be the next step's worker class (a QueueWorker "
            "subclass), got 'Next'",
        ),
    ],
    ids=[
        "no-item-type",
        "celery-style-handle",
        "both-handlers",
        "misspelt-section",
        "hook",
        "then",
    ],
)
def test_a_worker_class_mistake_exits_2_with_one_line_before_anything_starts(
    tmp_path: Path, env: dict[str, str], body: str, message: str
) -> None:
    """The error names the worker and what to write instead; no queue is touched."""
    (tmp_path / "bad_worker.py").write_text(HEADER + body)
    result = cloudqueue("run", "bad_worker:Bad", env=env, cwd=tmp_path)
    assert result.returncode == 2
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert message in line
    assert "store_opened" not in result.stdout + result.stderr
