"""The billing pipeline example: workers killed with SIGKILL mid-run, restarted, totals exact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import pytest

from cloudqueue.listener import open_storage
from examples.billing_pipeline.config import (
    CONTROLLER,
    DONE_QUEUE,
    PROCESSOR,
    REPORTER,
    TOTALS_QUEUE,
    WORK_QUEUE,
)
from examples.billing_pipeline.initiator import prepare_queues, start_run
from examples.billing_pipeline.model import (
    PricedItem,
    RunTotals,
    expected_totals,
    price,
    run_totals,
    sample_transactions,
    split,
)
from examples.processes import kill_worker, spawn_worker, stop_worker
from tests.support.paths import REPO_ROOT
from tests.support.polling import eventually

TRANSACTIONS = 400
VISIBILITY_TIMEOUT_S = 1  # the least there is, so the killed workers' messages come back quickly


def test_the_priced_work_items_add_up_to_the_totals_of_the_transactions() -> None:
    """However the run is split, its priced items add up to the input's totals per customer."""
    transactions = sample_transactions(500, customers=7, seed=1)
    priced = [price(item) for item in split("run", transactions, per_item=3)]
    totals = run_totals("run", priced)
    assert totals.totals == expected_totals(transactions)
    assert (totals.work_items, totals.transactions) == (len(priced), 500)


def test_a_run_added_up_counts_nothing_but_its_results() -> None:
    """The totals of a run are the sums of the results given, per customer, in cents."""
    results = [
        PricedItem(item_id="r-0", run_id="r", customer="a", transactions=2, amount_cents=5),
        PricedItem(item_id="r-1", run_id="r", customer="b", transactions=1, amount_cents=7),
        PricedItem(item_id="r-2", run_id="r", customer="a", transactions=3, amount_cents=11),
    ]
    assert run_totals("r", results, poisoned=1) == RunTotals(
        run_id="r", work_items=3, poisoned=1, transactions=6, totals={"a": 16, "b": 7}
    )


def log_events(log: Path, event: str) -> list[dict[str, Any]]:
    """The JSON log lines of ``event`` a worker process wrote."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        if f'"event": "{event}"' in line:
            found.append(json.loads(line))
    return found


def worker_env(connection_string: str, state_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": connection_string,
        "CLOUDQUEUE_LISTENER__VISIBILITY_TIMEOUT_S": str(VISIBILITY_TIMEOUT_S),
        "CLOUDQUEUE_BACKOFF__MAX_IDLE_S": "0.2",
        "CLOUDQUEUE_SHUTDOWN_GRACE_S": "5",
        "CLOUDQUEUE_STATE_DIR": str(state_dir),
        "BILLING_PRICING_DELAY_S": "0.1",
    }


@pytest.mark.parametrize("backend", ["sqlite", "azure"])
def test_workers_killed_mid_run_and_restarted_still_give_the_exact_totals(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A processor killed with SIGKILL mid-item and the controller killed while it adds the run
    up, then restarted (two controllers): the run's totals, reported once, equal the totals
    computed directly from the input, each work item counted once."""
    connection_string = (
        # Tables for the group and the results, blobs for the chain's effect-once marks and
        # the idempotent handling's key ledger.
        request.getfixturevalue("azurite_factory")(blob=True, table=True).connection_string
        if backend == "azure"
        else f"sqlite:///{tmp_path / 'queues.db'}"
    )
    env = worker_env(connection_string, tmp_path / "run")
    transactions = sample_transactions(TRANSACTIONS, customers=9, seed=7)
    storage = open_storage(connection_string)
    logs: list[IO[bytes]] = []
    workers: list[subprocess.Popen[bytes]] = []

    def start(target: str, name: str, **extra: str) -> subprocess.Popen[bytes]:
        log = (tmp_path / f"{name}.log").open("wb")
        logs.append(log)
        child_env: Mapping[str, str] = {**env, **extra}
        workers.append(spawn_worker(target, env=child_env, output=log))
        return workers[-1]

    try:
        prepare_queues(storage)
        for queue in (WORK_QUEUE, DONE_QUEUE, TOTALS_QUEUE):
            storage.clear_queue(queue)  # the session's Azurite is shared with other tests
        group = start_run(storage, transactions, transactions_per_item=10)
        expected_items = group.status().total
        # Killed with items in hand (8 at a time, 100 ms each): those come back after the
        # visibility timeout, are priced again and their results stored again under their ids.
        processor = start(PROCESSOR, "processor-1")
        eventually(lambda: group.status().handled >= 5, timeout_s=30)
        kill_worker(processor)
        processor.wait(10)
        assert not group.status().done, "killed too late to test anything"
        # The first controller is killed while it handles the run's GroupDone.
        controller = start(CONTROLLER, "controller-1", BILLING_TOTALING_DELAY_S="600")
        start(PROCESSOR, "processor-2")
        totaling = tmp_path / "controller-1.log"
        eventually(lambda: log_events(totaling, "run_totaling"), timeout_s=60)
        kill_worker(controller)
        controller.wait(10)
        # Any number of controllers: two more take the redelivered GroupDone between them.
        start(CONTROLLER, "controller-2"), start(CONTROLLER, "controller-3")
        report = tmp_path / "report.log"
        start(REPORTER, "report")
        eventually(lambda: log_events(report, "run_reported"), timeout_s=60)
        (reported,) = log_events(report, "run_reported")
        assert reported["run_id"] == group.id
        assert reported["totals"] == expected_totals(transactions)
        assert (reported["work_items"], reported["poisoned"], reported["transactions"]) == (
            expected_items,
            0,
            TRANSACTIONS,
        )
        # The crashes did cause redeliveries, so the once-per-item counting was put to the test.
        repriced = log_events(tmp_path / "processor-2.log", "item_priced")
        assert any(event["attempt"] >= 2 for event in repriced)
        totaled = [
            event
            for name in ("controller-2", "controller-3")
            for event in log_events(tmp_path / f"{name}.log", "run_totaled")
        ]
        assert [event["attempt"] for event in totaled] == [2]
    finally:
        for worker in workers:
            stop_worker(worker, timeout_s=10)
        for log in logs:
            log.close()
        storage.close()


def test_the_one_command_runs_a_whole_billing_run_and_stops_by_itself(tmp_path: Path) -> None:
    """`python -m examples.billing_pipeline` on the embedded store prints progress and totals
    that match the input, stops its workers and exits 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUDQUEUE_", "BILLING_"))}
    env["PYTHONPATH"] = str(REPO_ROOT)
    finished = subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.billing_pipeline",
            "--transactions",
            "200",
            "--processors",
            "1",
        ],
        cwd=tmp_path,  # a fresh working directory: the default .cloudqueue/ store is created
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "work items priced" in finished.stdout
    assert "complete: 200 transactions" in finished.stdout
    assert "totals match the input: yes" in finished.stdout
    assert (tmp_path / ".cloudqueue" / "queues.db").exists()
