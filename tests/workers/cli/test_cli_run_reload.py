"""`cloudqueue run --reload`: a real worker process restarted on new code when its file changes."""

from __future__ import annotations

import json
import os
import signal
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import ok
from tests.support.polling import eventually
from tests.support.runs import Run, run_environment, start_cloudqueue

WORKER = """
import structlog

from cloudqueue.workers import QueueWorker

log = structlog.get_logger("reload_worker")


class Greeter(QueueWorker[dict]):
    queue_name = "greetings"

    def handle(self, item: dict) -> None:
        log.info("handled", n=item["n"], version={version})
"""


def write_worker(folder: Path, version: int) -> None:
    (folder / "reload_worker.py").write_text(textwrap.dedent(WORKER.format(version=version)))


@pytest.fixture
def reloading(tmp_path: Path) -> Iterator[tuple[Run, dict[str, str]]]:
    """`cloudqueue run --reload reload_worker:Greeter` on SQLite in a project folder."""
    write_worker(tmp_path, 1)
    env = run_environment(f"sqlite:///{tmp_path / 'queues.db'}", tmp_path)
    log_path = tmp_path / "run.log"
    process = start_cloudqueue(  # its own session: teardown kills the child too
        ["run", "--reload", "reload_worker:Greeter"], env=env, log_path=log_path, cwd=tmp_path
    )
    run = Run(process, log_path)
    yield run, env
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)


def handled_versions(run: Run) -> dict[int, int]:
    return {int(e["n"]): int(e["version"]) for e in run.events("handled")}


def test_a_change_to_the_worker_file_restarts_it_and_the_new_code_handles_the_next_item(
    reloading: tuple[Run, dict[str, str]], tmp_path: Path
) -> None:
    """Item 1 is handled by version 1; after the file changes, item 2 by version 2."""
    run, env = reloading
    ok("enqueue", "greetings", json.dumps({"n": 1}), env=env)
    eventually(lambda: handled_versions(run).get(1) == 1, timeout_s=60)
    [enabled] = run.events("reload_enabled")
    assert "development only" in enabled["note"]
    write_worker(tmp_path, 2)
    eventually(lambda: len(run.events("child_started")) == 2, timeout_s=60)
    ok("enqueue", "greetings", json.dumps({"n": 2}), env=env)
    eventually(lambda: handled_versions(run).get(2) == 2, timeout_s=60)
    assert run.events("source_changed")
    run.process.send_signal(signal.SIGTERM)  # the parent drains its child and exits
    assert run.process.wait(60) == 0
