"""`cloudqueue run` with ``listener.event_loop = "single"``: a real process on the embedded store,
its live state read by `status`, drained by SIGTERM; a plain handler refused at load."""

from __future__ import annotations

import signal
from pathlib import Path

from cloudqueue.workers.host.live_state import read_live_states
from tests.support.cli import cloudqueue
from tests.support.polling import eventually
from tests.support.runs import Runs, enqueue_numbered, queue_depth, run_environment

ASYNC_WORKER = "tests.support.workers:AsyncRecordingWorker"
JOB = "tests.support.jobs:EveryTwoSeconds"


def test_sigterm_drains_the_event_loop_worker_and_exits_0(tmp_path: Path) -> None:
    """Mid-burst, the live state shows its handled messages and a periodic job beside it
    fires; SIGTERM ends fetching, lets the started handlers finish and exits 0: every message
    handled once or still queued."""
    env = run_environment(f"sqlite:///{tmp_path / 'queues.db'}", tmp_path)
    env["CLOUDQUEUE_LISTENER__EVENT_LOOP"] = "single"
    enqueue_numbered(env, 60)
    runs = Runs(tmp_path)
    try:
        run = runs.start(env, JOB, worker=ASYNC_WORKER, delay_s=0.05)
        eventually(lambda: len(run.handled()) >= 5, timeout_s=60)
        [started] = run.events("host_started")
        assert started["event_loop_queues"] == [env["TEST_QUEUE"]]
        state_dir = Path(env["CLOUDQUEUE_STATE_DIR"])
        eventually(
            lambda: (
                [s.queues[0].processed for s in read_live_states(state_dir, env["TEST_QUEUE"])]
                >= [1]
            )
        )
        eventually(lambda: run.events("job_ran"), timeout_s=10)  # every 2 s
        run.process.send_signal(signal.SIGTERM)
        assert run.process.wait(60) == 0
    finally:
        runs.kill_all()
    handled = run.handled()
    assert len(run.events("handled")) == len(handled)  # none twice
    assert len(handled) + queue_depth(env) == 60  # none lost
    assert list(state_dir.glob("*.json")) == []


def test_a_plain_handler_on_the_event_loop_exits_2_in_one_line(tmp_path: Path) -> None:
    """Refused at load, before any queue is read: exit code 2, one line naming the setting."""
    env = run_environment(f"sqlite:///{tmp_path / 'queues.db'}", tmp_path)
    env["CLOUDQUEUE_LISTENER__EVENT_LOOP"] = "single"
    result = cloudqueue("run", "tests.support.workers:RecordingWorker", env=env)
    assert result.returncode == 2
    [line] = [text for text in result.stderr.splitlines() if "event_loop" in text]
    assert "async def handle" in line


def test_a_misspelt_event_loop_exits_2_naming_the_setting_and_its_choices(tmp_path: Path) -> None:
    """`single` misspelt is refused before anything starts: exit code 2, one line naming the
    setting and the two values it takes."""
    env = run_environment(f"sqlite:///{tmp_path / 'queues.db'}", tmp_path)
    env["CLOUDQUEUE_LISTENER__EVENT_LOOP"] = "singel"
    result = cloudqueue("run", ASYNC_WORKER, env=env)
    assert result.returncode == 2
    [line] = [text for text in result.stderr.splitlines() if "event_loop" in text]
    assert "'threads'" in line
    assert "'single'" in line
