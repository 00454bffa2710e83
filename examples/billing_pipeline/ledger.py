"""The controller's SQLite ledger: one row per priced work item, totals per customer.

Exactly-once *effect* over at-least-once delivery: the row's primary key is the work item's id,
and a result is recorded with ``INSERT ... ON CONFLICT DO NOTHING``. A result delivered twice (a
processor redelivered its work item, or the controller crashed after recording but before the
message was deleted) finds its row already there and changes nothing. Totals are sums over the
rows, so they count every item exactly once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from examples.billing_pipeline.model import PricedItem
from examples.shared_sqlite import open_shared

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    expected_items INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS priced_items (
    item_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    customer TEXT NOT NULL,
    transactions INTEGER NOT NULL,
    amount_cents INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS priced_items_by_run ON priced_items (run_id, customer);
"""


@dataclass(frozen=True)
class Progress:
    """How many of a run's work items the ledger holds."""

    recorded: int
    expected: int

    @property
    def complete(self) -> bool:
        return self.expected > 0 and self.recorded >= self.expected


class BillingLedger:
    """The ledger file; safe to share between the threads of one process and between processes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db = open_shared(path, _SCHEMA)  # WAL: readers (progress) never block the writer

    def start_run(self, run_id: str, expected_items: int) -> None:
        """Record how many work items make the run complete (before any is published)."""
        with self._lock:
            self._db.execute(
                "INSERT INTO runs (run_id, expected_items) VALUES (?, ?)", (run_id, expected_items)
            )

    def record(self, result: PricedItem) -> bool:
        """Record one priced item; False if it was already recorded (a duplicate delivery)."""
        with self._lock:
            cursor = self._db.execute(
                "INSERT INTO priced_items (item_id, run_id, customer, transactions, amount_cents) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (item_id) DO NOTHING",
                (
                    result.item_id,
                    result.run_id,
                    result.customer,
                    result.transactions,
                    result.amount_cents,
                ),
            )
            return cursor.rowcount == 1

    def progress(self, run_id: str) -> Progress:
        with self._lock:
            expected = self._db.execute(
                "SELECT expected_items FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            (recorded,) = self._db.execute(
                "SELECT COUNT(*) FROM priced_items WHERE run_id = ?", (run_id,)
            ).fetchone()
        return Progress(recorded=int(recorded), expected=int(expected[0]) if expected else 0)

    def totals(self, run_id: str) -> dict[str, int]:
        """Each customer's total in cents for the run, from the recorded items."""
        with self._lock:
            rows = self._db.execute(
                "SELECT customer, SUM(amount_cents) FROM priced_items WHERE run_id = ? "
                "GROUP BY customer",
                (run_id,),
            ).fetchall()
        return {customer: int(cents) for customer, cents in rows}

    def transactions(self, run_id: str) -> int:
        """How many transactions the recorded items cover."""
        with self._lock:
            (count,) = self._db.execute(
                "SELECT COALESCE(SUM(transactions), 0) FROM priced_items WHERE run_id = ?",
                (run_id,),
            ).fetchone()
        return int(count)

    def close(self) -> None:
        with self._lock:
            self._db.close()
