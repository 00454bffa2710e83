"""``python -m examples.billing_pipeline``: one billing run through the whole pipeline.

Publishes a run (10,000 transactions by default), starts the processors and the controller as
``cloudqueue run`` child processes, prints progress until the controller has recorded every work
item, prints the totals, checks them against the totals computed directly from the input, and
stops the workers. Exit code 0 when the totals match.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from cloudqueue import CloudQueueSettings
from cloudqueue.workers import open_storage_from_settings
from examples.billing_pipeline.announcing import announcer_from
from examples.billing_pipeline.config import CONTROLLER, PROCESSOR, ledger_path
from examples.billing_pipeline.initiator import prepare_queues, start_run
from examples.billing_pipeline.ledger import BillingLedger
from examples.billing_pipeline.model import expected_totals, sample_transactions
from examples.processes import spawn_worker, stop_worker

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


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settings = CloudQueueSettings()
    transactions = sample_transactions(args.transactions, customers=args.customers, seed=args.seed)
    storage = open_storage_from_settings(settings)
    print(f"queues: {storage!r}; ledger: {ledger_path().resolve()}")  # the repr holds no secret
    ledger = BillingLedger(ledger_path())
    try:
        prepare_queues(storage)
        announcer = announcer_from(settings)
        run_id = start_run(storage, ledger, transactions, announcer=announcer)
        if announcer is not None:
            announcer.channel.close()
        workers = [spawn_worker(PROCESSOR) for _ in range(args.processors)]
        workers.append(spawn_worker(CONTROLLER))
        try:
            done = wait_for_run(ledger, run_id, timeout_s=args.timeout_s)
        finally:
            for worker in workers:
                stop_worker(worker)
        if not done:
            print(f"run {run_id} did not complete within {args.timeout_s:.0f} s", file=sys.stderr)
            return 1
        return report(ledger, run_id, expected_totals(transactions))
    finally:
        ledger.close()
        storage.close()


def wait_for_run(ledger: BillingLedger, run_id: str, *, timeout_s: float) -> bool:
    """Print progress every second until the ledger holds every work item of the run."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        progress = ledger.progress(run_id)
        elapsed_s = time.monotonic() - started
        print(
            f"[{elapsed_s:5.1f} s] run {run_id}: {progress.recorded}/{progress.expected} "
            "work items priced and recorded",
            flush=True,
        )
        if progress.complete:
            return True
        time.sleep(PROGRESS_INTERVAL_S)  # a progress display, not a wait for a test condition
    return False


def report(ledger: BillingLedger, run_id: str, expected: dict[str, int]) -> int:
    """Print the run's totals and whether they equal the input's; 0 if they do."""
    totals = ledger.totals(run_id)
    print(f"run {run_id} complete: {ledger.transactions(run_id)} transactions")
    for customer in sorted(totals)[:SHOWN_CUSTOMERS]:
        print(f"  {customer}: {totals[customer] / 100:>12,.2f}")
    if len(totals) > SHOWN_CUSTOMERS:
        print(f"  ... and {len(totals) - SHOWN_CUSTOMERS} more customers")
    print(f"  total: {sum(totals.values()) / 100:,.2f} over {len(totals)} customers")
    matches = totals == expected
    print("totals match the input: " + ("yes" if matches else "NO"))
    return 0 if matches else 1


if __name__ == "__main__":
    sys.exit(main())
