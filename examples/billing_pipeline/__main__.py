"""``python -m examples.billing_pipeline``: one billing run through the whole pipeline.

Sends a run (10,000 transactions by default) as one group, starts the processors and the
controller as ``cloudqueue run`` child processes, runs the report step in this process, prints
the group's progress until the run's totals are reported, prints them, checks them against the
totals computed directly from the input, and stops the workers. Exit code 0 when they match.
"""

from __future__ import annotations

import argparse
import queue
import sys
import time
from collections.abc import Sequence
from typing import ClassVar

import structlog

from cloudqueue import CloudQueueSettings
from cloudqueue.listener import GroupHandle
from cloudqueue.workers import WorkerHost, open_storage_from_settings
from examples.billing_pipeline.config import CONTROLLER, PROCESSOR
from examples.billing_pipeline.initiator import prepare_queues, start_run
from examples.billing_pipeline.model import RunTotals, expected_totals, sample_transactions
from examples.billing_pipeline.workers import ReportWorker
from examples.processes import spawn_worker, stop_worker

log = structlog.get_logger(__name__)

PROGRESS_INTERVAL_S = 1.0
SHOWN_CUSTOMERS = 10


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m examples.billing_pipeline")
    parser.add_argument("--transactions", type=int, default=10_000, help="size of the run")
    parser.add_argument("--customers", type=int, default=50)
    parser.add_argument("--processors", type=int, default=2, help="pricing worker processes")
    parser.add_argument("--seed", type=int, default=2014, help="makes the run reproducible")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="give up after this long")
    return parser.parse_args(argv)


class ReportHere(ReportWorker):
    """The report step in this process: hands each run's totals to the launcher."""

    received: ClassVar[queue.Queue[RunTotals]] = queue.Queue()

    def handle(self, totals: RunTotals) -> None:
        self.received.put(totals)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    transactions = sample_transactions(args.transactions, customers=args.customers, seed=args.seed)
    settings = CloudQueueSettings()
    storage = open_storage_from_settings(settings)
    print(f"store: {storage!r}")  # the repr holds no secret
    try:
        prepare_queues(storage)
        group = start_run(storage, transactions)
        workers = [spawn_worker(PROCESSOR) for _ in range(args.processors)]
        workers.append(spawn_worker(CONTROLLER))
        host = WorkerHost([ReportHere], settings)
        host.start()
        try:
            totals = wait_for_totals(group, timeout_s=args.timeout_s)
        finally:
            host.stop()
            for worker in workers:
                stop_worker(worker)
        if totals is None:
            print(f"run {group.id} did not complete within {args.timeout_s:.0f} s", file=sys.stderr)
            return 1
        return report(totals, expected_totals(transactions))
    finally:
        storage.close()


def wait_for_totals(group: GroupHandle, *, timeout_s: float) -> RunTotals | None:
    """Print the group's progress every second until the run's totals are reported."""
    started = time.monotonic()
    while (elapsed_s := time.monotonic() - started) < timeout_s:
        status = group.status()
        print(
            f"[{elapsed_s:5.1f} s] run {group.id}: {status.handled}/{status.total} "
            "work items priced",
            flush=True,
        )
        try:
            # Waits a second for the report: a progress display's pace, not a test's wait.
            totals = ReportHere.received.get(timeout=PROGRESS_INTERVAL_S)
        except queue.Empty:
            continue
        if totals.run_id == group.id:
            return totals
        log.info("earlier_run_reported", run_id=totals.run_id)  # left in the store before
    return None


def report(totals: RunTotals, expected: dict[str, int]) -> int:
    """Print the run's totals and whether they equal the input's; 0 if they do."""
    by_customer = totals.totals
    print(
        f"run {totals.run_id} complete: {totals.transactions} transactions in "
        f"{totals.work_items} work items, {totals.poisoned} poisoned"
    )
    for customer in sorted(by_customer)[:SHOWN_CUSTOMERS]:
        print(f"  {customer}: {by_customer[customer] / 100:>12,.2f}")
    if len(by_customer) > SHOWN_CUSTOMERS:
        print(f"  ... and {len(by_customer) - SHOWN_CUSTOMERS} more customers")
    print(f"  total: {sum(by_customer.values()) / 100:,.2f} over {len(by_customer)} customers")
    matches = by_customer == expected
    print("totals match the input: " + ("yes" if matches else "NO"))
    return 0 if matches else 1


if __name__ == "__main__":
    sys.exit(main())
