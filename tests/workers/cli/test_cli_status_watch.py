"""`cloudqueue status --watch`: a live view of depth, threads, rate and transactions per hour."""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import subprocess
import sys
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.workers.cli import cli
from cloudqueue.workers.host.live_state import LiveState, QueueLiveState

# The module, not the `status` command that workers.cli exports under the same name.
status_module = importlib.import_module("cloudqueue.workers.cli.status")

QUEUE = "invoices"


class RunningWorker:
    """Writes the live-state file a running worker would, advancing it on every refresh."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.processed = 100
        self.transactions = 1_000
        self.updated_at = datetime.now(UTC) - timedelta(seconds=4)
        self.waits: list[float] = []
        self.publish()

    def publish(self) -> None:
        listener = QueueLiveState(QUEUE, 3, 4, self.processed, 0, 0, 0, 2, 1.5)
        state = LiveState(
            os.getpid(),
            socket.gethostname(),
            "app:Billing",
            None,
            self.updated_at,
            (listener,),
            transactions=self.transactions,
        )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = self.state_dir / f"{state.host}-{state.pid}.json"
        path.write_text(json.dumps(state.to_json()))

    def wait(self, interval_s: float) -> None:
        """Stands in for the refresh interval: 2 s of work, 10 messages, 100 transactions."""
        self.waits.append(interval_s)
        self.processed += 10
        self.transactions += 100
        self.updated_at += timedelta(seconds=2)
        self.publish()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    with closing(SqliteQueueStorage(tmp_path / "queues.db")) as queues:
        queues.create_queue(QUEUE)
        for number in range(3):
            queues.put_message(QUEUE, str(number))
    return {
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'queues.db'}",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
    }


@pytest.fixture
def worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunningWorker:
    """A worker publishing its state; each refresh interval passes as 2 s of its work."""
    running = RunningWorker(tmp_path / "run")
    monkeypatch.setattr(status_module, "wait_s", running.wait)
    return running


def watch(env: dict[str, str], *args: str) -> str:
    result = CliRunner().invoke(cli, ["status", QUEUE, "--watch", *args], env=env)
    assert result.exit_code == 0, result.output
    return result.output


def test_each_refresh_shows_rates_measured_since_the_one_before(
    env: dict[str, str], worker: RunningWorker
) -> None:
    """10 messages and 100 transactions in 2 s: 5 msg/s and 180,000 transactions/h."""
    output = watch(env, "--count", "3", "--interval", "7")
    frames = output.strip().split("\n\n")
    assert len(frames) == 3
    assert worker.waits == [7.0, 7.0]  # between refreshes, not after the last
    assert "invoices: 3 message(s), poison: 0" in frames[0]
    assert "1 worker(s), 3 thread(s), measuring msg/s, measuring transactions/h" in frames[0]
    for frame in frames[1:]:
        assert "1 worker(s), 3 thread(s), 5.0 msg/s, 180,000 transactions/h" in frame
        assert "now 5.0 msg/s, 180,000 transactions/h" in frame


def test_json_watch_prints_one_object_per_refresh_with_totals(
    env: dict[str, str], worker: RunningWorker
) -> None:
    """JSON Lines: every refresh is one object; rates are null until measured."""
    first, second = (json.loads(line) for line in watch(env, "--json", "--count", "2").splitlines())
    assert first["totals"] == {"threads": 3, "rate_per_s": None, "transactions_per_hour": None}
    assert second["totals"] == {"threads": 3, "rate_per_s": 5.0, "transactions_per_hour": 180000}
    assert second["workers"][0]["processed"] == 110
    assert second["depth"] == 3


def test_a_rate_stands_until_the_worker_publishes_again(
    env: dict[str, str], worker: RunningWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refresh faster than the worker's publishing repeats the last rate instead of 0."""
    publishes = iter([True, False])

    def sometimes(interval_s: float) -> None:
        if next(publishes):
            worker.wait(interval_s)

    monkeypatch.setattr(status_module, "wait_s", sometimes)
    last = watch(env, "--json", "--count", "3").splitlines()[-1]
    assert json.loads(last)["totals"]["rate_per_s"] == 5.0


def test_ctrl_c_between_refreshes_ends_the_view_cleanly(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """KeyboardInterrupt while waiting: exit code 0, the frame shown, no "Aborted!"."""

    def interrupted(interval_s: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(status_module, "wait_s", interrupted)
    output = watch(env)
    assert output.count("invoices: 3 message(s)") == 1
    assert "Aborted" not in output


def test_ctrl_c_before_the_first_refresh_ends_the_view_cleanly(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The early window: Ctrl-C while settings load and storage opens exits 0 too, no "Aborted!"."""

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(status_module, "opened_storage", interrupted)
    result = CliRunner().invoke(cli, ["status", QUEUE, "--watch"], env=env)
    assert (result.exit_code, result.output) == (0, "\n")


# A shell runs a background job of a script with SIGINT ignored, and the job's children inherit
# that: Python then installs no handler of its own, and a watch ignored every Ctrl-C (a test suite
# started that way saw this test hang for 30 s).
INHERITED_DISPOSITIONS = {
    "default": [],
    "ignored": ["sh", "-c", 'trap "" INT; exec "$0" "$@"'],
}


@pytest.mark.parametrize("inherited", sorted(INHERITED_DISPOSITIONS))
def test_a_real_sigint_stops_a_watch_with_exit_code_0(env: dict[str, str], inherited: str) -> None:
    """The real command, interrupted during its refresh interval, exits 0 without a traceback,
    also when started with SIGINT ignored."""
    command = [
        sys.executable,
        "-m",
        "cloudqueue.workers",
        "status",
        QUEUE,
        "--watch",
        "--interval",
        "600",
    ]
    process = subprocess.Popen(
        [*INHERITED_DISPOSITIONS[inherited], *command],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("invoices: 3 message(s)")
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode == 0
    assert "Traceback" not in stderr


def test_without_watch_status_prints_one_report_without_rates(env: dict[str, str]) -> None:
    """Plain `status` prints one report without rates, as before."""
    result = CliRunner().invoke(cli, ["status", QUEUE], env=env)
    assert result.exit_code == 0
    assert result.output.startswith("invoices: 3 message(s), poison: 0\n")
    assert "msg/s" not in result.output


@pytest.mark.parametrize("option", [["--count", "2"], ["--interval", "5"]])
def test_watch_options_without_watch_are_refused_not_ignored(
    env: dict[str, str], option: list[str]
) -> None:
    """--count or --interval alone is a usage error (exit 2) naming --watch."""
    result = CliRunner().invoke(cli, ["status", QUEUE, *option], env=env)
    assert result.exit_code == 2
    assert "only apply with --watch" in result.output


def test_live_state_carries_the_process_transactions_and_reads_files_without_them() -> None:
    """`transactions` round-trips through the file; files of older processes read as None."""
    state = LiveState(1, "h", "w", None, datetime.now(UTC), (), transactions=42)
    assert LiveState.from_json(state.to_json()).transactions == 42
    older = {key: value for key, value in state.to_json().items() if key != "transactions"}
    assert LiveState.from_json(older).transactions is None


def test_a_worker_host_counts_the_storage_transactions_it_makes(queue_name: str) -> None:
    """What `status --watch` turns into transactions per hour: every storage call is counted."""
    from cloudqueue.listener import InMemoryQueueStorage
    from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost

    class Idle(QueueWorker[str]):
        queue_name = "idle"

        def handle(self, item: str) -> None:
            pass

    storage = InMemoryQueueStorage()
    host = WorkerHost([Idle], CloudQueueSettings(shutdown_grace_s=5), storage=storage)
    host.start()
    host.stop()
    # At least the start's create_queue for the queue and for its poison queue.
    assert host.storage.transactions >= 2
