"""The resumable example: a close-account job killed between and inside steps, each effect once,
resumed from the checkpoint its message carries."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import IO

import pytest

from cloudqueue.listener import Publisher, open_storage
from examples.processes import kill_worker, spawn_worker, stop_worker
from examples.resumable.accounts import AccountsDb
from examples.resumable.config import QUEUE
from examples.resumable.intent import CloseAccount
from tests.support.azurite import AzuriteProcess
from tests.support.paths import REPO_ROOT
from tests.support.polling import eventually
from tests.support.written_lines import complete_lines

WORKER = "examples.resumable.worker:CloseAccountWorker"
SUBSCRIPTIONS, INVOICES = 2, 6
CRASH_VISIBILITY_TIMEOUT_S = 1  # the least there is: a killed worker's intent returns soon
LONG_JOB_VISIBILITY_TIMEOUT_S = 2


def connection_for(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if backend == "azure":
        azurite: AzuriteProcess = request.getfixturevalue("azurite_with_tables")
        return azurite.connection_string
    return f"sqlite:///{tmp_path / 'queues.db'}"


def log_events(path: Path, event: str) -> int:
    return path.read_text(errors="replace").count(f'"event": "{event}"')


def started(path: Path, step: str) -> int:
    """How often the worker that wrote this log started the step."""
    return sum(
        '"event": "step_started"' in line and f'"step": "{step}"' in line
        for line in complete_lines(path)
    )


@pytest.mark.parametrize("backend", ["sqlite", "azure"])
def test_a_job_killed_between_steps_and_inside_a_step_resumes_with_each_effect_once(
    backend: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    """Killed (SIGKILL) right after its first step, then again half-way through archiving, the
    job resumes each time at its first unfinished step and every target is changed once."""
    connection = connection_for(backend, request, tmp_path)
    env = {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": connection,
        "CLOUDQUEUE_LISTENER__VISIBILITY_TIMEOUT_S": str(CRASH_VISIBILITY_TIMEOUT_S),
        "CLOUDQUEUE_BACKOFF__MAX_IDLE_S": "0.2",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
        "RESUMABLE_ACCOUNTS_DB": str(tmp_path / "accounts.db"),
        "RESUMABLE_STEP_DELAY_S": "0.15",
    }
    intent = CloseAccount(job_id=f"job-{uuid.uuid4().hex[:8]}", account_id="acct-1")
    accounts = AccountsDb(tmp_path / "accounts.db")
    accounts.open_account(intent.account_id, subscriptions=SUBSCRIPTIONS, invoices=INVOICES)
    storage = open_storage(connection)
    storage.create_queue(QUEUE)
    storage.clear_queue(QUEUE)
    Publisher(storage, QUEUE, CloseAccount).publish(intent)
    logs: list[IO[bytes]] = []
    workers: list[subprocess.Popen[bytes]] = []

    def start(name: str, **extra: str) -> tuple[subprocess.Popen[bytes], Path]:
        path = tmp_path / f"{name}.log"
        logs.append(path.open("wb"))
        workers.append(spawn_worker(WORKER, env={**env, **extra}, output=logs[-1]))
        return workers[-1], path

    try:
        first, first_log = start("worker-1", RESUMABLE_CRASH_AFTER_STEP="cancel_subscriptions")
        assert first.wait(30) == -9  # killed itself between step 1 and step 2
        second, second_log = start("worker-2")

        def archived() -> int:
            return INVOICES - len(accounts.open_invoices(intent.account_id))

        eventually(lambda: archived() >= 2, timeout_s=20, interval_s=0.02)
        kill_worker(second)  # in the middle of archive_invoices
        second.wait(10)
        assert 0 < archived() < INVOICES, "killed outside the step"
        _, third_log = start("worker-3")
        eventually(lambda: storage.approximate_message_count(QUEUE) == 0, timeout_s=30)
    finally:
        for worker in workers:
            stop_worker(worker, timeout_s=10)
        for log in logs:
            log.close()
    effects = accounts.effects(intent.job_id)
    assert Counter(effects).most_common(1)[0][1] == 1, "an effect happened twice"
    assert Counter(step for step, _ in effects) == {
        "cancel_subscriptions": SUBSCRIPTIONS,
        "archive_invoices": INVOICES,
        "delete_profile": 1,
    }
    assert started(first_log, "cancel_subscriptions") == 1
    assert started(second_log, "cancel_subscriptions") == 0  # done: skipped, not re-run
    assert started(second_log, "archive_invoices") == 1
    assert started(third_log, "archive_invoices") == 1  # re-run, its done targets skipped
    assert started(third_log, "cancel_subscriptions") == 0  # still skipped: the checkpoint holds
    assert log_events(third_log, "job_finished") == 1
    accounts.close()
    storage.close()


def test_a_job_longer_than_the_visibility_timeout_is_delivered_once(tmp_path: Path) -> None:
    """Visibility renewal keeps a 2.4 s job hidden past its 2 s timeout from the worker's idle
    second thread: one delivery, one finish."""
    connection = f"sqlite:///{tmp_path / 'queues.db'}"
    env = {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": connection,
        "CLOUDQUEUE_LISTENER__VISIBILITY_TIMEOUT_S": str(LONG_JOB_VISIBILITY_TIMEOUT_S),
        "CLOUDQUEUE_SCALING__MIN_THREADS": "2",  # a poller that would take the job if it showed
        "CLOUDQUEUE_BACKOFF__MAX_IDLE_S": "0.2",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
        "RESUMABLE_ACCOUNTS_DB": str(tmp_path / "accounts.db"),
        "RESUMABLE_STEP_DELAY_S": "0.3",
    }
    intent = CloseAccount(job_id="job-long", account_id="acct-long")
    accounts = AccountsDb(tmp_path / "accounts.db")
    accounts.open_account(intent.account_id, subscriptions=2, invoices=5)  # 8 targets: 2.4 s
    storage = open_storage(connection)
    storage.create_queue(QUEUE)
    Publisher(storage, QUEUE, CloseAccount).publish(intent)
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        worker = spawn_worker(WORKER, env=env, output=log)
        try:
            eventually(lambda: storage.approximate_message_count(QUEUE) == 0, timeout_s=30)
        finally:
            stop_worker(worker, timeout_s=10)
    assert started(log_path, "cancel_subscriptions") == 1
    assert log_events(log_path, "job_finished") == 1
    assert '"attempt": 2' not in log_path.read_text()
    accounts.close()
    storage.close()


def test_the_one_command_crashes_a_worker_resumes_and_checks_every_effect(tmp_path: Path) -> None:
    """`python -m examples.resumable` on the embedded store: its first worker dies after a step,
    the second resumes the jobs, every effect is counted once, and it exits 0 by itself."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUDQUEUE_", "RESUMABLE_"))}
    env |= {
        "PYTHONPATH": str(REPO_ROOT),
        "CLOUDQUEUE_LISTENER__VISIBILITY_TIMEOUT_S": "1",  # the demo's 5 s, shortened
        "RESUMABLE_STEP_DELAY_S": "0.05",
    }
    finished = subprocess.run(
        [sys.executable, "-m", "examples.resumable", "--accounts", "2", "--invoices", "2"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "worker crashed after cancel_subscriptions (exit -9)" in finished.stdout
    assert "cancel_subscriptions 3, archive_invoices 2, delete_profile 1" in finished.stdout
    assert "every step's effect happened exactly once: yes" in finished.stdout
