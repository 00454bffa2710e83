"""Periodic jobs across real `cloudqueue run` processes sharing one store (SQLite, and Azurite
with its blob service for the blob-lease ledger): each tick fires once, and a holder killed
with SIGKILL hands the next tick to the other process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest

from tests.support.azurite import REPO_ROOT, AzuriteProcess
from tests.support.polling import eventually
from tests.support.runs import Run, run_environment

JOB = "tests.support.jobs:EveryTwoSeconds"
WINDOW_S = 13


@pytest.fixture(scope="module")
def azurite_blobs() -> Iterator[AzuriteProcess]:
    """Azurite with queues and blobs: the job ledger is a blob under a blob lease."""
    with AzuriteProcess(REPO_ROOT, blob=True) as process:
        yield process


@pytest.fixture(params=["sqlite", "azure"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    if request.param == "sqlite":
        connection_string = f"sqlite:///{tmp_path / 'queues.db'}"
    else:
        connection_string = request.getfixturevalue("azurite_blobs").connection_string
    return {**run_environment(connection_string, tmp_path), "TEST_JOB_RUN_S": "1.0"}


@pytest.fixture
def fleet(env: dict[str, str], tmp_path: Path) -> Iterator[list[Run]]:
    """Two `cloudqueue run JOB` processes, each with its own state folder, always ended."""
    runs = []
    for index in range(2):
        log_path = tmp_path / f"run{index}.log"
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", "workers", "run", JOB],
                env={**env, "CLOUDQUEUE_STATE_DIR": str(tmp_path / f"state{index}")},
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        runs.append(Run(process, log_path))
    yield runs
    for run in runs:
        if run.process.poll() is None:
            os.killpg(run.process.pid, signal.SIGKILL)
        run.process.wait(10)


def fired(runs: list[Run]) -> list[tuple[datetime, int]]:
    """Every (tick, index of the process) that ran, in tick order."""
    return sorted(
        (datetime.fromisoformat(event["tick"]), index)
        for index, run in enumerate(runs)
        for event in run.events("job_ran")
    )


def test_two_processes_fire_each_tick_once_and_a_killed_holder_hands_over(
    fleet: list[Run],
) -> None:
    """Over 13 s, 5-7 firings in all, none twice and none skipped, although the process running
    a tick halfway through is killed with SIGKILL: the next tick fires on the other one."""
    eventually(lambda: all(run.events("host_started") for run in fleet), timeout_s=60)
    up = datetime.now(UTC)
    end = up + timedelta(seconds=WINDOW_S)

    def fired_since(moment: datetime) -> list[tuple[datetime, int]]:
        return [(tick, index) for tick, index in fired(fleet) if tick >= moment]

    killed_tick, holder = eventually(
        lambda: fired_since(up + timedelta(seconds=WINDOW_S / 2)), timeout_s=WINDOW_S
    )[0]
    os.killpg(fleet[holder].process.pid, signal.SIGKILL)  # mid-run: its run takes 1 s
    fleet[holder].process.wait(10)
    eventually(lambda: fired_since(end), timeout_s=WINDOW_S, interval_s=0.2)
    window = [tick for tick, _ in fired(fleet) if up <= tick < end]
    assert 5 <= len(window) <= 7
    after = [(tick, index) for tick, index in fired(fleet) if tick > killed_tick]
    assert after[0] == (killed_tick + timedelta(seconds=2), 1 - holder)
    ticks = [tick for tick, _ in fired(fleet)]
    assert len(ticks) == len(set(ticks))  # no tick twice, in either process
    assert all(b - a == timedelta(seconds=2) for a, b in pairwise(ticks))  # and none lost
