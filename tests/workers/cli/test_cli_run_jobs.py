"""`cloudqueue run` with periodic jobs: beside a queue worker in one process, shown by
`cloudqueue status` and counted in /metrics; a bad job refused with one line and exit 2."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from tests.support.azurite import free_port
from tests.support.cli import cloudqueue, ok
from tests.support.polling import eventually
from tests.support.runs import Run, Runs, run_environment
from tests.support.scrape import scrape

JOB = "tests.support.jobs:EveryTwoSeconds"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return run_environment(f"sqlite:///{tmp_path / 'queues.db'}", tmp_path)


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[Runs]:
    started = Runs(tmp_path)
    yield started
    started.kill_all()


def test_a_job_beside_a_queue_worker_runs_shows_in_status_is_counted_and_drains(
    env: dict[str, str], runs: Runs
) -> None:
    """One process handles the queue and fires the job; `status` shows the job's last and next
    firing; /metrics counts its runs; SIGTERM drains both and exits 0."""
    port = free_port()
    ok("enqueue", env["TEST_QUEUE"], env=env, stdin=json.dumps({"n": 1}))
    run: Run = runs.start(env, JOB, "--metrics-port", str(port))  # beside the recording worker
    eventually(lambda: run.handled() == {1} and run.events("job_finished"), timeout_s=30)

    def shown_job() -> dict[str, Any]:
        [job] = json.loads(ok("status", "--json", env=env))["jobs"]
        assert job["last_fired"] is not None  # once the process has published since it fired
        return cast(dict[str, Any], job)

    job = eventually(shown_job, timeout_s=10)
    assert job["job"] == JOB
    assert job["schedule"] == "every 2 s"
    assert job["next_firing"] > job["last_fired"]
    assert "every 2 s" in ok("status", env=env)
    key = ("cloudqueue_job_runs_total", frozenset({("job", JOB), ("outcome", "succeeded")}))
    eventually(lambda: scrape(port).get(key, 0) >= 1, timeout_s=10)
    run.process.send_signal(signal.SIGTERM)
    assert run.process.wait(30) == 0
    assert run.events("host_stopped")[0]["drained"] is True


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('cron = "*/5 25 * * *"', "Bad: cron '*/5 25 * * *': field 2 (hour) '25' is not valid"),
        ("every_s = 0", "Bad: every_s must be a positive number of seconds, not 0"),
        ('every_s = 5\ncron = "* * * * *"', "Bad must set exactly one of every_s"),
        ('every_s = 5\nmissed = "twice"', "missed must be 'skip' or 'run_once', not 'twice'"),
    ],
)
def test_a_bad_job_exits_2_with_one_line_before_anything_starts(
    tmp_path: Path, env: dict[str, str], body: str, message: str
) -> None:
    """The error names the job and the field; no worker or job starts."""
    attributes = "".join(f"    {line}\n" for line in body.splitlines())
    source = f"from cloudqueue.workers import PeriodicJob\n\nclass Bad(PeriodicJob):\n{attributes}"
    (tmp_path / "bad_jobs.py").write_text(source + "\n    def run(self, tick):\n        pass\n")
    result = cloudqueue("run", "bad_jobs:Bad", env=env, cwd=tmp_path)
    assert result.returncode == 2
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert message in line
    assert "host_started" not in result.stdout + result.stderr
