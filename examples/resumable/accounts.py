"""The system the intent changes: accounts with subscriptions, invoices and a profile (SQLite).

Each step's effect on one target (a subscription cancelled, an invoice archived, the profile
deleted) is one local transaction that first checks the target still needs it and records an
*effect* row alongside. Running a step again after a crash therefore skips the targets it already
handled: the step is idempotent, and every effect row is written once. The effect rows stand for
what the outside world sees (a cancellation notice, an archive copy) and let tests count them.
"""

from __future__ import annotations

import threading
from pathlib import Path

from examples.shared_sqlite import open_shared

_SCHEMA = """
CREATE TABLE IF NOT EXISTS subscriptions (
    subscription_id TEXT PRIMARY KEY, account_id TEXT NOT NULL, status TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS invoices (
    invoice_id TEXT PRIMARY KEY, account_id TEXT NOT NULL, amount_cents INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS archived_invoices (
    invoice_id TEXT PRIMARY KEY, account_id TEXT NOT NULL, amount_cents INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS profiles (account_id TEXT PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS effects (
    job_id TEXT NOT NULL, step TEXT NOT NULL, target TEXT NOT NULL);
"""
# effects has no unique key on purpose: a step that acted twice would show as two rows.


class AccountsDb:
    """The accounts database; one connection shared by a worker's threads."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._db = open_shared(path, _SCHEMA)

    def open_account(self, account_id: str, *, subscriptions: int, invoices: int) -> None:
        """Sample data: an account with its profile, active subscriptions and open invoices."""
        with self._lock, self._db:
            self._db.execute("BEGIN")
            self._db.execute("INSERT INTO profiles VALUES (?, ?)", (account_id, account_id.title()))
            self._db.executemany(
                "INSERT INTO subscriptions VALUES (?, ?, 'active')",
                [(f"{account_id}-sub-{n}", account_id) for n in range(subscriptions)],
            )
            self._db.executemany(
                "INSERT INTO invoices VALUES (?, ?, ?)",
                [(f"{account_id}-inv-{n}", account_id, 1_000 * (n + 1)) for n in range(invoices)],
            )

    def active_subscriptions(self, account_id: str) -> list[str]:
        return self._ids(
            "SELECT subscription_id FROM subscriptions WHERE account_id = ? AND status = 'active'",
            account_id,
        )

    def open_invoices(self, account_id: str) -> list[str]:
        return self._ids("SELECT invoice_id FROM invoices WHERE account_id = ?", account_id)

    def cancel_subscription(self, job_id: str, subscription_id: str) -> bool:
        """Cancel it unless already cancelled; True if this call did it."""
        return self._act(
            job_id,
            "cancel_subscriptions",
            subscription_id,
            "UPDATE subscriptions SET status = 'cancelled' "
            "WHERE subscription_id = ? AND status = 'active'",
        )

    def archive_invoice(self, job_id: str, invoice_id: str) -> bool:
        """Move it to the archive unless already moved; True if this call did it."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "INSERT INTO archived_invoices SELECT * FROM invoices WHERE invoice_id = ?",
                (invoice_id,),
            )
            moved = self._db.execute(
                "DELETE FROM invoices WHERE invoice_id = ?", (invoice_id,)
            ).rowcount
            if moved:
                self._effect(job_id, "archive_invoices", invoice_id)
            return moved == 1

    def delete_profile(self, job_id: str, account_id: str) -> bool:
        """Delete it unless already gone; True if this call did it."""
        return self._act(
            job_id, "delete_profile", account_id, "DELETE FROM profiles WHERE account_id = ?"
        )

    def has_profile(self, account_id: str) -> bool:
        return bool(self._ids("SELECT account_id FROM profiles WHERE account_id = ?", account_id))

    def effects(self, job_id: str) -> list[tuple[str, str]]:
        """Every (step, target) effect of the job, one row per time it happened."""
        with self._lock:
            rows = self._db.execute(
                "SELECT step, target FROM effects WHERE job_id = ? ORDER BY rowid", (job_id,)
            ).fetchall()
        return [(str(step), str(target)) for step, target in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _act(self, job_id: str, step: str, target: str, statement: str) -> bool:
        """Run a guarded statement and record the effect, in one transaction."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            changed = self._db.execute(statement, (target,)).rowcount
            if changed:
                self._effect(job_id, step, target)
            return changed == 1

    def _effect(self, job_id: str, step: str, target: str) -> None:
        self._db.execute("INSERT INTO effects VALUES (?, ?, ?)", (job_id, step, target))

    def _ids(self, query: str, account_id: str) -> list[str]:
        with self._lock:
            return [str(row[0]) for row in self._db.execute(query, (account_id,)).fetchall()]
