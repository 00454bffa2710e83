"""The billing pipeline example: workers killed with SIGKILL mid-run, restarted, totals exact."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest

from cloudqueue.listener import open_storage
from examples.billing_pipeline.config import CONTROLLER, PROCESSOR, RESULTS_QUEUE, WORK_QUEUE
from examples.billing_pipeline.initiator import prepare_queues, start_run
from examples.billing_pipeline.ledger import BillingLedger
from examples.billing_pipeline.model import (
    PricedItem,
    expected_totals,
    price,
    sample_transactions,
    split,
)
from examples.processes import kill_worker, spawn_worker, stop_worker
from tests.support.paths import REPO_ROOT
from tests.support.polling import eventually

TRANSACTIONS = 400
VISIBILITY_TIMEOUT_S = 1  # the least there is, so the killed workers' messages come back quickly


def test_pricing_the_work_items_gives_the_totals_of_the_transactions() -> None:
    """However the run is split, the priced items add up to the input's totals per customer."""
    transactions = sample_transactions(500, customers=7, seed=1)
    by_customer: dict[str, int] = {}
    for item in split("run", transactions, per_item=3):
        result = price(item)
        by_customer[result.customer] = by_customer.get(result.customer, 0) + result.amount_cents
    assert by_customer == expected_totals(transactions)


def test_a_result_delivered_twice_is_recorded_once(tmp_path: Path) -> None:
    """The ledger's upsert keyed by item id ignores a second copy of a result."""
    ledger = BillingLedger(tmp_path / "ledger.db")
    ledger.start_run("r", expected_items=1)
    result = PricedItem(item_id="r-0", run_id="r", customer="c", transactions=2, amount_cents=5)
    assert ledger.record(result) is True
    assert ledger.record(result) is False
    assert ledger.totals("r") == {"c": 5}
    assert ledger.progress("r").complete
    ledger.close()


def duplicates_ignored(log: Path) -> int:
    return log.read_text(errors="replace").count('"event": "duplicate_result_ignored"')


def worker_env(connection_string: str, ledger: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": connection_string,
        "CLOUDQUEUE_LISTENER__VISIBILITY_TIMEOUT_S": str(VISIBILITY_TIMEOUT_S),
        "CLOUDQUEUE_BACKOFF__MAX_IDLE_S": "0.2",
        "CLOUDQUEUE_SHUTDOWN_GRACE_S": "5",
        "CLOUDQUEUE_STATE_DIR": str(ledger.parent / "run"),
        "BILLING_LEDGER": str(ledger),
        "BILLING_PRICING_DELAY_S": "0.02",
    }


@pytest.mark.parametrize("backend", ["sqlite", "azure"])
def test_workers_killed_mid_run_and_restarted_still_give_the_exact_totals(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A processor and the controller killed with SIGKILL mid-run, then restarted: the ledger's
    totals equal the totals computed directly from the input, each work item counted once."""
    connection_string = (
        # The Azurite the resumable example's tests need too: one start serves both.
        request.getfixturevalue("azurite_with_tables").connection_string
        if backend == "azure"
        else f"sqlite:///{tmp_path / 'queues.db'}"
    )
    ledger_file = tmp_path / "ledger.db"
    env = worker_env(connection_string, ledger_file)
    transactions = sample_transactions(TRANSACTIONS, customers=9, seed=7)
    storage = open_storage(connection_string)
    ledger = BillingLedger(ledger_file)
    logs: list[IO[bytes]] = []
    workers: list[subprocess.Popen[bytes]] = []

    def start(target: str, name: str) -> subprocess.Popen[bytes]:
        log = (tmp_path / f"{name}.log").open("wb")
        logs.append(log)
        workers.append(spawn_worker(target, env=env, output=log))
        return workers[-1]

    try:
        prepare_queues(storage)
        for queue in (WORK_QUEUE, RESULTS_QUEUE):
            storage.clear_queue(queue)  # the session's Azurite is shared with other tests
        run_id = start_run(storage, ledger, transactions, transactions_per_item=10)
        expected_items = ledger.progress(run_id).expected
        # The processor is killed first, with results out for work it has not finished (a work
        # message is deleted once all its items are priced): those items are priced again, and
        # their second results meet the controller's deduplication. Killed while the controller
        # ran beside it, it could finish first on a loaded machine and leave nothing to redo.
        processor = start(PROCESSOR, "processor-1")
        eventually(lambda: storage.approximate_message_count(RESULTS_QUEUE) >= 5, timeout_s=30)
        kill_worker(processor)
        processor.wait(10)
        assert storage.approximate_message_count(WORK_QUEUE), "killed too late to test anything"
        controller = start(CONTROLLER, "controller-1")
        eventually(lambda: ledger.progress(run_id).recorded >= 5, timeout_s=30)
        kill_worker(controller)
        controller.wait(10)
        assert not ledger.progress(run_id).complete, "killed too late to test anything"
        start(PROCESSOR, "processor-2"), start(CONTROLLER, "controller-2")
        eventually(lambda: ledger.progress(run_id).complete, timeout_s=60)
        assert ledger.totals(run_id) == expected_totals(transactions)
        assert ledger.progress(run_id).recorded == expected_items
        assert ledger.transactions(run_id) == TRANSACTIONS
        # The crash did cause redeliveries, so the ledger's deduplication was put to the test.
        assert duplicates_ignored(tmp_path / "controller-2.log") >= 1
    finally:
        for worker in workers:
            stop_worker(worker, timeout_s=10)
        for log in logs:
            log.close()
        ledger.close()
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
    assert "work items priced and recorded" in finished.stdout
    assert "complete: 200 transactions" in finished.stdout
    assert "totals match the input: yes" in finished.stdout
    assert (tmp_path / ".cloudqueue" / "queues.db").exists()
