"""Real `cloudqueue run` processes for tests: their environment, start, logs and teardown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.cli import ok
from tests.support.cli_fork import ForkedProcess, RunningProcess, interpreter_agrees
from tests.support.written_lines import log_events

WORKER = "tests.support.workers:RecordingWorker"


def run_environment(connection_string: str, tmp_path: Path) -> dict[str, str]:
    """A worker's environment: JSON logs, quick idle back-off, its own state folder and queue."""
    return {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": connection_string,
        "CLOUDQUEUE_LOGGING__FORMAT": "json",
        "CLOUDQUEUE_BACKOFF__MAX_IDLE_S": "0.2",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
        "TEST_QUEUE": f"work-{uuid.uuid4().hex[:12]}",
    }


def backend_environment(request: Any, tmp_path: Path) -> dict[str, str]:
    """``run_environment`` on the backend a test is parametrised with: "sqlite" or "azure"
    (Azurite, from the session's ``azurite_connection_string`` fixture)."""
    if request.param == "sqlite":
        connection_string = f"sqlite:///{tmp_path / 'queues.db'}"
    else:
        connection_string = request.getfixturevalue("azurite_connection_string")
    return run_environment(connection_string, tmp_path)


def enqueue_numbered(env: dict[str, str], count: int) -> None:
    """Put ``{"n": 0}`` ... ``{"n": count - 1}`` on the environment's queue with the CLI."""
    items = "\n".join(json.dumps({"n": n}) for n in range(count))
    ok("enqueue", env["TEST_QUEUE"], env=env, stdin=items)


def queue_depth(env: dict[str, str]) -> int:
    """The environment's queue depth, as `cloudqueue status --json` reports it."""
    return int(json.loads(ok("status", env["TEST_QUEUE"], "--json", env=env))["depth"])


def start_run(
    processes: list[RunningProcess], args: list[str], env: dict[str, str], log_path: Path
) -> RunningProcess:
    """``cloudqueue run ARGS`` in a session of its own (a kill reaches its children), its output
    appended to ``log_path``, noted in ``processes`` for the teardown to kill."""
    process = start_cloudqueue(["run", *args], env=env, log_path=log_path)
    processes.append(process)
    return process


def start_cloudqueue(
    args: list[str],
    *,
    env: dict[str, str],
    log_path: Path,
    cwd: Path | None = None,
    module: str = "cloudqueue",
) -> RunningProcess:
    """``python -m MODULE ARGS`` (``cloudqueue`` by default) running in a session of its own,
    stdout and stderr appended to ``log_path``: forked warm (``tests.support.cli_fork``) unless
    ``env`` needs a new interpreter."""
    if interpreter_agrees(env):
        return ForkedProcess(args, env, cwd or Path.cwd(), log_path, module)
    with log_path.open("ab") as log_file:
        return subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=cwd,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@dataclass
class Run:
    """A running `cloudqueue run` whose JSON log lines go to a file."""

    process: RunningProcess
    log_path: Path

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        return log_events(self.log_path, name)

    def handled(self) -> set[int]:
        return {int(e["n"]) for e in self.events("handled")}


class Runs:
    """Starts `cloudqueue run WORKER ...` processes in ``folder``; ``kill_all`` ends them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.started: list[Run] = []

    def start(
        self, env: dict[str, str], *args: str, delay_s: float = 0.0, worker: str = WORKER
    ) -> Run:
        """A new process of the recording worker (or ``worker``), its handler waiting
        ``delay_s`` per item."""
        log_path = self.folder / f"run{len(self.started)}.log"
        log_path.write_bytes(b"")
        process = start_cloudqueue(  # its own session: teardown kills the children too
            ["run", worker, *args],
            env={**env, "TEST_HANDLER_DELAY_S": str(delay_s)},
            log_path=log_path,
        )
        run = Run(process, log_path)
        self.started.append(run)
        return run

    def kill_all(self) -> None:
        for run in self.started:
            if run.process.poll() is None:
                os.killpg(run.process.pid, signal.SIGKILL)
            run.process.wait(10)
