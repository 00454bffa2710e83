"""``python -m examples.resumable``: close a few accounts, with a worker crash in the middle.

Opens sample accounts, enqueues one close-account intent per account, and starts a worker that
kills itself (SIGKILL) right after its first completed step. A second worker is started at once;
the intents reappear after the visibility timeout, each carrying its checkpoint, and it resumes
every job at its first unfinished step. Prints the running jobs' progress as ``cloudqueue status``
reads it (the worker's live state), then checks that every step's effect happened exactly once.
``--no-crash`` skips the crash. Exit code 0 when the check passes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from cloudqueue import CloudQueueSettings, Publisher
from cloudqueue.listener import QueueStorage
from cloudqueue.workers import open_storage_from_settings, running_progress
from examples.processes import spawn_worker, stop_worker
from examples.resumable.accounts import AccountsDb
from examples.resumable.config import CRASH_AFTER_ENV, QUEUE, accounts_path
from examples.resumable.intent import STEPS, CloseAccount

WORKER = "examples.resumable.worker:CloseAccountWorker"
VISIBILITY_ENV = "CLOUDQUEUE_LISTENER__VISIBILITY_TIMEOUT_S"
DEMO_VISIBILITY_TIMEOUT_S = "5"  # short, so the crashed worker's intents come back quickly
PROGRESS_INTERVAL_S = 1.0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m examples.resumable")
    parser.add_argument("--accounts", type=int, default=3)
    parser.add_argument("--subscriptions", type=int, default=3, help="per account")
    parser.add_argument("--invoices", type=int, default=5, help="per account")
    parser.add_argument("--no-crash", action="store_true", help="run without the worker crash")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="give up after this long")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settings = CloudQueueSettings()
    storage = open_storage_from_settings(settings)
    print(f"queue: {storage!r}; accounts: {accounts_path().resolve()}")  # the repr holds no secret
    accounts = AccountsDb(accounts_path())
    try:
        intents = enqueue_intents(storage, accounts, args)
        done = run_workers(storage, settings.state_dir, crash=not args.no_crash, args=args)
        if not done:
            print(f"the jobs did not finish within {args.timeout_s:.0f} s", file=sys.stderr)
            return 1
        return report(accounts, intents, args)
    finally:
        accounts.close()
        storage.close()


def enqueue_intents(
    storage: QueueStorage, accounts: AccountsDb, args: argparse.Namespace
) -> list[CloseAccount]:
    """Open fresh sample accounts and enqueue an intent to close each."""
    run = uuid.uuid4().hex[:6]
    intents = [
        CloseAccount(job_id=f"close-{run}-{n}", account_id=f"acct-{run}-{n}")
        for n in range(args.accounts)
    ]
    for intent in intents:
        accounts.open_account(
            intent.account_id, subscriptions=args.subscriptions, invoices=args.invoices
        )
    storage.create_queue(QUEUE)
    Publisher(storage, QUEUE, CloseAccount).publish_many(intents)
    print(f"enqueued {len(intents)} close-account intents: {', '.join(STEPS)}")
    return intents


def run_workers(
    storage: QueueStorage, state_dir: Path, *, crash: bool, args: argparse.Namespace
) -> bool:
    """Run the worker (crashing the first one, if asked) until every job is done."""
    env = {VISIBILITY_ENV: DEMO_VISIBILITY_TIMEOUT_S, **os.environ}
    env.pop(CRASH_AFTER_ENV, None)
    started = time.monotonic()
    if crash:
        first = spawn_worker(WORKER, env={**env, CRASH_AFTER_ENV: STEPS[0]})
        code = first.wait(args.timeout_s)
        print(
            f"[{time.monotonic() - started:5.1f} s] worker crashed after {STEPS[0]} "
            f"(exit {code}); starting a new one: the intents reappear after the visibility "
            f"timeout ({env[VISIBILITY_ENV]} s)",
            flush=True,
        )
    worker = spawn_worker(WORKER, env=env)
    try:
        while time.monotonic() - started < args.timeout_s:
            # Deleted only after the last step: an empty queue means every intent is settled.
            if storage.approximate_message_count(QUEUE) == 0:
                return True
            print_progress(state_dir, time.monotonic() - started)
            time.sleep(PROGRESS_INTERVAL_S)  # a progress display, not a test's wait
        return False
    finally:
        stop_worker(worker)


def print_progress(state_dir: Path, elapsed_s: float) -> None:
    """One line: the running jobs' last progress reports, from the workers' live state."""
    reports = sorted(running_progress(state_dir), key=lambda report: report.detail)
    shown = "  ".join(f"{r.detail} ({r.fraction:.0%})" for r in reports) or "none running"
    print(f"[{elapsed_s:5.1f} s] jobs  {shown}", flush=True)


def report(accounts: AccountsDb, intents: list[CloseAccount], args: argparse.Namespace) -> int:
    """Count each job's effects per step; 0 if every target was changed exactly once."""
    expected = {"cancel_subscriptions": args.subscriptions, "archive_invoices": args.invoices}
    expected["delete_profile"] = 1
    exact = True
    for intent in intents:
        effects = accounts.effects(intent.job_id)
        once = all(n == 1 for n in Counter(effects).values())
        per_step = Counter(step for step, _ in effects)
        exact = exact and once and per_step == expected
        shown = ", ".join(f"{step} {per_step[step]}" for step in STEPS)
        print(f"{intent.job_id}: {shown}" + ("" if once else "  (SOME TWICE)"))
    print("every step's effect happened exactly once: " + ("yes" if exact else "NO"))
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
