"""`cloudqueue run` as operators use it: real processes, real signals, messages counted."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from cloudqueue.workers.api.worker import QueueWorker
from cloudqueue.workers.cli.run import announce_concurrency
from cloudqueue.workers.settings import CloudQueueSettings
from tests.support.cli import ok
from tests.support.polling import eventually
from tests.support.runs import Run, Runs, backend_environment, enqueue_numbered, queue_depth
from tests.support.workers import AsyncRecordingWorker, RecordingWorker

SUPERVISOR_EVENTS = {"child_started", "child_exited", "child_kill", "supervisor_signal"}


@pytest.fixture(params=["sqlite", "azure"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The environment of a worker on the embedded store or on Azurite."""
    return backend_environment(request, tmp_path)


@pytest.fixture
def start(env: dict[str, str], tmp_path: Path) -> Iterator[Any]:
    """Starts `cloudqueue run ...` processes that are always ended at teardown."""
    runs = Runs(tmp_path)

    def launch(*args: str, delay_s: float = 0.0) -> Run:
        return runs.start(env, *args, delay_s=delay_s)

    yield launch
    runs.kill_all()


def test_sigterm_mid_burst_exits_0_and_every_message_is_handled_or_still_queued(
    env: dict[str, str], start: Any
) -> None:
    """Each message is either handled (and deleted) or back in the queue: none lost, none twice."""
    enqueue_numbered(env, 60)
    run = start(delay_s=0.05)
    eventually(lambda: len(run.handled()) >= 5, timeout_s=60)
    run.process.send_signal(signal.SIGTERM)
    assert run.process.wait(60) == 0
    handled = run.handled()
    assert 5 <= len(handled) <= 60
    assert len(run.events("handled")) == len(handled)  # no duplicates within the run
    assert len(handled) + queue_depth(env) == 60


def test_a_second_signal_exits_at_once_and_the_message_stays(
    env: dict[str, str], start: Any
) -> None:
    """While a handler is stuck, SIGTERM twice ends the process now; its message is not lost."""
    enqueue_numbered(env, 1)
    run = start(delay_s=120)
    eventually(lambda: run.events("handling"), timeout_s=60)
    run.process.send_signal(signal.SIGTERM)
    eventually(lambda: run.events("shutdown_requested"), timeout_s=10)
    run.process.send_signal(signal.SIGTERM)
    assert run.process.wait(10) == 128 + signal.SIGTERM
    assert run.handled() == set()
    assert queue_depth(env) == 1
    state_dir = Path(env["CLOUDQUEUE_STATE_DIR"])
    assert list(state_dir.glob("*.json")) == []  # no stale live state for `status` to skip


def test_two_processes_share_a_burst(env: dict[str, str], start: Any, tmp_path: Path) -> None:
    """--processes 2: both children handle messages; SIGTERM drains both and exits 0."""
    # Every handler holds until the test releases them, and a child holds at most 4 threads x 4
    # messages: the first child up cannot drain the burst before the second one starts (under
    # load it did, when the burst was only slow).
    gate = tmp_path / "release"
    items = "\n".join(json.dumps({"n": n, "until": str(gate)}) for n in range(80))
    ok("enqueue", env["TEST_QUEUE"], env=env, stdin=items)
    run = start(
        "--processes",
        "2",
        "--set",
        "listener.dequeue_batch_size=4",
        "--set",
        "listener.concurrency=1",
        "--set",
        "scaling.max_threads=4",
    )
    eventually(lambda: len({e["pid"] for e in run.events("handling")}) == 2, timeout_s=120)
    gate.touch()
    eventually(lambda: len(run.handled()) == 80, timeout_s=120)
    assert len({e["pid"] for e in run.events("handled")}) == 2
    children = [e for e in run.events() if e["event"] not in SUPERVISOR_EVENTS]
    assert {e.get("child") for e in children} == {0, 1}  # every child's line names its slot
    run.process.send_signal(signal.SIGTERM)
    assert run.process.wait(60) == 0


def test_a_killed_child_is_restarted(env: dict[str, str], start: Any) -> None:
    """kill -9 of a child: the supervisor starts a new one in its slot and keeps serving."""
    run = start("--processes", "2")
    eventually(lambda: len(run.events("host_started")) == 2, timeout_s=60)
    victim = run.events("child_started")[0]["pid"]
    os.kill(victim, signal.SIGKILL)
    eventually(lambda: len(run.events("child_started")) == 3, timeout_s=30)
    eventually(lambda: len(run.events("host_started")) == 3, timeout_s=60)
    enqueue_numbered(env, 10)
    eventually(lambda: len(run.handled()) == 10, timeout_s=60)
    run.process.send_signal(signal.SIGTERM)
    assert run.process.wait(60) == 0


@pytest.mark.parametrize(
    ("worker", "overrides", "at_most"),
    [
        (RecordingWorker, {}, 8 * 16),
        (RecordingWorker, {"listener": {"concurrency": 1}}, 16),
        (RecordingWorker, {"listener": {"concurrency": 1}, "scaling": {"max_threads": 1}}, None),
        (AsyncRecordingWorker, {}, None),
    ],
)
def test_a_sync_handler_is_said_to_run_concurrently_naming_the_settings(
    worker: type[QueueWorker[Any]], overrides: dict[str, dict[str, int]], at_most: int | None
) -> None:
    """A plain def handle that may run more than once at a time gets one short debug line saying
    how many and which settings change it; one at a time, or an async handler, gets none."""
    settings = CloudQueueSettings.model_construct().for_worker(overrides)
    with capture_logs() as records:
        announce_concurrency("app:Worker", worker, settings)
    said = [r for r in records if r["event"] == "sync_handler_concurrency"]
    assert [r["at_most"] for r in said] == ([] if at_most is None else [at_most])
    for record in said:
        assert record["log_level"] == "debug"  # not a line at every start of every run
        assert "listener.concurrency" in record["hint"]
        assert "thread-safe" in record["hint"]
        assert len(record["hint"]) <= 80


def test_the_handle_docstring_says_a_plain_handler_runs_concurrently() -> None:
    """Help on QueueWorker.handle names the concurrency and the setting that limits it."""
    assert "several threads at once" in str(QueueWorker.handle.__doc__)
    assert "listener.concurrency" in str(QueueWorker.handle.__doc__)
