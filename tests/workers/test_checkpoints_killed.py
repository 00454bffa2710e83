"""kill -9 inside a checkpointed step, on SQLite and on Azurite: real ``cloudqueue run``
processes; the redelivery resumes at the step that was killed, never re-running the ones
checkpointed before it. While the step runs, ``cloudqueue status`` shows its progress. The same
for an ``async def`` handler, on dequeue threads and on the single event loop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cloudqueue.listener import Publisher, open_storage
from tests.support.azurite import AzuriteProcess
from tests.support.cli_fork import RunningProcess
from tests.support.polling import eventually
from tests.support.runs import start_run
from tests.support.written_lines import complete_lines

HANDLERS = {
    "sync": ("ThreeCheckpointedSteps", "threads"),
    "async-on-threads": ("AsyncThreeCheckpointedSteps", "threads"),
    "async-single-loop": ("AsyncThreeCheckpointedSteps", "single"),
}
"""The worker class in ``tests.support.checkpoint_workers`` and ``listener.event_loop``."""


def connection_for(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if backend == "azure":
        azurite: AzuriteProcess = request.getfixturevalue("azurite")
        return azurite.connection_string
    return f"sqlite:///{tmp_path / 'queues.db'}"


@pytest.mark.parametrize("handler", list(HANDLERS))
@pytest.mark.parametrize("backend", ["sqlite", "azure"])
def test_a_job_killed_in_step_3_resumes_at_step_3(
    backend: str,
    handler: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    queue_name: str,
    processes: list[RunningProcess],
) -> None:
    """Steps 1 and 2 run once; step 3 starts in the killed process (``status`` showing it at
    2/3) and again, on the redelivery (dequeue count 2), in the next one, which finishes the
    job; the message is deleted."""
    connection = connection_for(backend, request, tmp_path)
    record_path = tmp_path / "record.txt"
    worker, event_loop = HANDLERS[handler]
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "CLOUDQUEUE_CONNECTION_STRING": connection,
        "CLOUDQUEUE_LISTENER__VISIBILITY_TIMEOUT_S": "1",  # the killed job's message returns soon
        "CLOUDQUEUE_BACKOFF__MAX_IDLE_S": "0.2",
        "CLOUDQUEUE_LISTENER__EVENT_LOOP": event_loop,
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
        "TEST_QUEUE": queue_name,
        "TEST_RECORD_PATH": str(record_path),
    }
    storage = open_storage(connection)
    storage.create_queue(queue_name)
    Publisher(storage, queue_name, dict).publish({"job": "three steps"})

    def start(name: str, **extra: str) -> RunningProcess:
        return start_run(
            processes,
            [f"tests.support.checkpoint_workers:{worker}"],
            {**env, **extra},
            tmp_path / f"{name}.log",
        )

    def events() -> list[list[str]]:
        return [line.split()[:-1] for line in complete_lines(record_path)]

    victim = start("victim", TEST_HANG_IN_STEP="3")
    eventually(lambda: ["started", "3", "1"] in events(), timeout_s=60)

    def progress_shown() -> list[tuple[float, str]]:
        shown = subprocess.run(
            [sys.executable, "-m", "cloudqueue", "status", queue_name, "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        workers = json.loads(shown.stdout)["workers"]
        return [(r["fraction"], r["detail"]) for w in workers for r in w["progress"]]

    # The victim publishes its live state every 2 s; the report is in the next one.
    assert eventually(progress_shown, timeout_s=30) == [(2 / 3, "step 3 of 3")]
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(10)
    start("successor")
    eventually(lambda: ["finished"] in events(), timeout_s=60)
    eventually(lambda: storage.approximate_message_count(queue_name) == 0, timeout_s=30)
    assert events() == [
        ["started", "1", "1"],
        ["done", "1"],
        ["started", "2", "1"],
        ["done", "2"],
        ["started", "3", "1"],
        ["started", "3", "2"],
        ["done", "3"],
        ["finished"],
    ]
    storage.close()
