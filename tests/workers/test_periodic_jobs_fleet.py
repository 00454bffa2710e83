"""Periodic jobs across real `cloudqueue run` processes sharing one store (SQLite, and Azurite
with its blob service for the blob-lease ledger): each tick fires once, and a holder killed
with SIGKILL after a renewal hands the next tick to the other process."""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Iterator
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import ContainerClient
from structlog.testing import capture_logs

from cloudqueue.listener.stores.azure_ticks import JOBS_CONTAINER, AzureTickLedger
from cloudqueue.listener.stores.connection import open_tick_ledger
from cloudqueue.listener.stores.tick_ledger import JobRecord, TickLedger
from tests.support.azurite import REPO_ROOT, AzuriteProcess
from tests.support.polling import eventually
from tests.support.runs import Run, run_environment, start_cloudqueue

JOB = "tests.support.jobs:EveryTwoSeconds"


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
    return {**run_environment(connection_string, tmp_path), "TEST_JOB_RUN_S": "1.6"}


@pytest.fixture
def fleet(env: dict[str, str], tmp_path: Path) -> Iterator[list[Run]]:
    """Two `cloudqueue run JOB` processes, each with its own state folder, always ended."""
    runs = []
    for index in range(2):
        log_path = tmp_path / f"run{index}.log"
        process = start_cloudqueue(
            ["run", JOB],
            env={**env, "CLOUDQUEUE_STATE_DIR": str(tmp_path / f"state{index}")},
            log_path=log_path,
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


def lease_past_next_tick(ledger: TickLedger, tick: datetime) -> bool:
    """Whether the holder of ``tick`` has renewed its lease past the next tick."""
    record = ledger.record(JOB)
    next_tick = tick + timedelta(seconds=2)
    return record.last_tick == tick and (record.lease_until or next_tick) > next_tick


def test_a_holder_killed_after_a_renewal_loses_no_tick_and_fires_none_twice(
    fleet: list[Run], env: dict[str, str]
) -> None:
    """Every 2 s with runs of 1.6 s, the process running a tick is killed with SIGKILL after a
    renewal carried its lease past the next tick: that tick fires on the other process when the
    dead lease ends, and every later tick on time -- none lost, none twice."""
    eventually(lambda: all(run.events("host_started") for run in fleet), timeout_s=60)
    up = datetime.now(UTC)

    def fired_since(moment: datetime) -> list[tuple[datetime, int]]:
        return [(tick, index) for tick, index in fired(fleet) if tick >= moment]

    ledger = open_tick_ledger(env["CLOUDQUEUE_CONNECTION_STRING"])
    try:
        for attempt in range(3):  # a loaded machine may see a run end before its renewal
            since = up + timedelta(seconds=2 + 2 * attempt)
            killed_tick, holder = eventually(partial(fired_since, since), timeout_s=10)[0]
            with suppress(AssertionError):
                eventually(partial(lease_past_next_tick, ledger, killed_tick), timeout_s=1.5)
                break
        else:
            pytest.fail("no run of 3 renewed its lease past the next tick")
        os.killpg(fleet[holder].process.pid, signal.SIGKILL)  # mid-run, after a renewal
        fleet[holder].process.wait(10)
        assert ledger.record(JOB).holder is not None  # killed before it released its lease
    finally:
        ledger.close()
    eventually(lambda: fired_since(killed_tick + timedelta(seconds=6)), timeout_s=15)
    after = [(tick, index) for tick, index in fired(fleet) if tick > killed_tick]
    assert after[0] == (killed_tick + timedelta(seconds=2), 1 - holder)
    ticks = [tick for tick, _ in fired(fleet)]
    assert len(ticks) == len(set(ticks))  # no tick twice, in either process
    assert all(b - a == timedelta(seconds=2) for a, b in pairwise(ticks))  # and none lost


def test_the_blob_ledger_claims_a_tick_once_and_holds_the_lease_until_released(
    azurite_blobs: AzuriteProcess,
) -> None:
    """On Azure the record is blob metadata: one claim per tick, a live lease refuses the next
    tick to others, renewal belongs to the holder, and release frees the job."""
    ledger = AzureTickLedger.from_connection_string(azurite_blobs.connection_string)
    job, tick = f"tests:Job{uuid.uuid4().hex[:8]}", datetime(2026, 1, 1, tzinfo=UTC)
    try:
        assert ledger.record(job) == JobRecord()
        assert ledger.claim(job, tick, holder="a", lease_s=60).fired
        assert not ledger.claim(job, tick, holder="b", lease_s=60).fired
        later = tick + timedelta(seconds=2)
        assert not ledger.claim(job, later, holder="b", lease_s=60).fired  # a's lease is live
        assert (
            ledger.renew(job, holder="b", lease_s=60),
            ledger.renew(job, holder="a", lease_s=60),
        ) == (False, True)
        ledger.release(job, holder="a")
        assert ledger.claim(job, later, holder="b", lease_s=60).fired
        assert ledger.record(job).last_tick == later
    finally:
        ledger.close()


class RecordingPause:
    """A sleeper that pauses for real and says when a change had to wait for the blob lease."""

    def __init__(self) -> None:
        self.waited = threading.Event()

    def wait(self, stop_event: threading.Event, delay_s: float) -> bool:
        self.waited.set()
        return stop_event.wait(delay_s)


def test_a_blob_ledger_change_waits_while_another_process_holds_the_blob_lease(
    azurite_blobs: AzuriteProcess,
) -> None:
    """The blob lease is the mutex: a claim made while another holds it waits, and goes through
    once it is released."""
    pause = RecordingPause()
    connection_string = azurite_blobs.connection_string
    ledger = AzureTickLedger.from_connection_string(connection_string, sleeper=pause)
    job, tick = f"tests:Job{uuid.uuid4().hex[:8]}", datetime(2026, 1, 1, tzinfo=UTC)
    container = ContainerClient.from_connection_string(connection_string, JOBS_CONTAINER)
    try:
        ledger.release(job, holder="nobody")  # creates the blob
        other = container.get_blob_client(job).acquire_lease(lease_duration=15)
        claims: list[bool] = []
        claiming = threading.Thread(
            target=lambda: claims.append(ledger.claim(job, tick, holder="a", lease_s=5).fired)
        )
        claiming.start()
        assert pause.waited.wait(10)
        assert claims == []
        other.release()
        claiming.join(10)
        assert claims == [True]
    finally:
        container.close()
        ledger.close()


def test_a_blob_lease_held_past_any_change_is_broken_and_the_claim_goes_through(
    azurite_blobs: AzuriteProcess,
) -> None:
    """A holder killed inside a change leaves the blob leased for 15 s: after two seconds of
    retries the lease is broken (logged), and the stale holder's own write would fail."""
    connection_string = azurite_blobs.connection_string
    ledger = AzureTickLedger.from_connection_string(connection_string)
    job, tick = f"tests:Job{uuid.uuid4().hex[:8]}", datetime(2026, 1, 1, tzinfo=UTC)
    container = ContainerClient.from_connection_string(connection_string, JOBS_CONTAINER)
    try:
        ledger.release(job, holder="nobody")  # creates the blob
        blob = container.get_blob_client(job)
        dead = blob.acquire_lease(lease_duration=15)  # and never released
        with capture_logs() as logs:
            assert ledger.claim(job, tick, holder="a", lease_s=5).fired
        assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
            "job_ledger_lease_broken"
        ]
        with pytest.raises(HttpResponseError):
            blob.set_blob_metadata({"last_tick": "stale"}, lease=dead)
        assert ledger.record(job).last_tick == tick
    finally:
        container.close()
        ledger.close()


def test_a_tick_on_two_processes_costs_eleven_blob_transactions(
    azurite_blobs: AzuriteProcess,
) -> None:
    """The figure on the periodic jobs page: the winner's claim (4) and release (4), the
    loser's refused claim (3); a renewal by the holder 4 more."""
    requests: list[str] = []

    def count(response: Any) -> None:
        requests.append(response.http_request.method)

    connection_string = azurite_blobs.connection_string
    one, other = (
        AzureTickLedger.from_connection_string(connection_string, raw_response_hook=count)
        for _ in range(2)
    )
    job, tick = f"tests:Job{uuid.uuid4().hex[:8]}", datetime(2026, 1, 1, tzinfo=UTC)
    try:
        one.release(job, holder="nobody")  # creates the blob: once in a job's life
        requests.clear()
        assert one.claim(job, tick, holder="one", lease_s=60).fired
        assert not other.claim(job, tick, holder="other", lease_s=60).fired
        one.release(job, holder="one")
        assert len(requests) == 11
        requests.clear()
        assert other.claim(job, tick + timedelta(seconds=2), holder="other", lease_s=60).fired
        requests.clear()
        assert other.renew(job, holder="other", lease_s=60)
        assert len(requests) == 4
    finally:
        one.close()
        other.close()
