"""The result stores of the embedded stores (``cloudqueue.listener.workflows.result_store``): in
memory, and a table in the queues' SQLite file.

A result lives ``ttl_s`` seconds after it was put. An expired result reads as absent at once; it is
removed by a sweep at most every ``SWEEP_INTERVAL_S`` (one indexed delete on SQLite, one pass over
the dict in memory), never by a scan per read.

``result_store_for`` finds the store that goes with an embedded storage object, as
``group_ledger_for`` does for groups: one per in-memory store, the table of the SQLite file; None
for any other storage (Azure's Table service plugs in beside these).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.stores.embedded_ledgers import EmbeddedLedgers
from cloudqueue.listener.stores.key_records import SWEEP_INTERVAL_S
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.listener.stores.sqlite_tables import SqliteTables
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.workflows.result_store import ResultStore


def check_ttl(ttl_s: float) -> float:
    """A time to live must be a finite number of seconds above 0."""
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float):
        raise ValueError(f"a result's time to live must be a number of seconds, got {ttl_s!r}")
    if not (math.isfinite(ttl_s) and ttl_s > 0):
        raise ValueError(f"a result's time to live must be above 0 s and finite, got {ttl_s!r}")
    return float(ttl_s)


@dataclass(frozen=True, slots=True)
class _Kept:
    value: str
    group_id: str | None
    expires_at: float
    """Seconds since the epoch, on the store's clock."""


class InMemoryResultStore:
    """Results in a dict under a lock, for this process only (``memory://``)."""

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._kept: dict[str, _Kept] = {}
        self._lock = threading.Lock()
        self._next_sweep = 0.0

    def put(self, key: str, value: str, *, ttl_s: float, group_id: str | None = None) -> None:
        expires_at = self._now() + check_ttl(ttl_s)
        with self._lock:
            self._sweep_if_due()
            self._kept[key] = _Kept(value, group_id, expires_at)

    def get(self, key: str) -> str | None:
        now = self._now()
        with self._lock:
            kept = self._kept.get(key)
        return None if kept is None or kept.expires_at <= now else kept.value

    def for_group(self, group_id: str) -> Iterator[tuple[str, str]]:
        now = self._now()
        with self._lock:
            found = [
                (key, kept.value)
                for key, kept in self._kept.items()
                if kept.group_id == group_id and kept.expires_at > now
            ]
        return iter(sorted(found))

    def close(self) -> None:
        """Nothing to release."""

    def __len__(self) -> int:
        """Results held, expired ones not swept yet included."""
        with self._lock:
            return len(self._kept)

    def _now(self) -> float:
        return self._clock.now().timestamp()

    def _sweep_if_due(self) -> None:
        if self._clock.monotonic() < self._next_sweep:
            return
        self._next_sweep = self._clock.monotonic() + SWEEP_INTERVAL_S
        now = self._now()
        for key in [key for key, kept in self._kept.items() if kept.expires_at <= now]:
            del self._kept[key]

    def __repr__(self) -> str:
        return f"InMemoryResultStore(results={len(self)})"


_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS message_results (
        key TEXT PRIMARY KEY,
        group_id TEXT,
        value TEXT NOT NULL,
        expires_at REAL NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS message_results_by_group ON message_results (group_id)",
    "CREATE INDEX IF NOT EXISTS message_results_by_expiry ON message_results (expires_at)",
)


class SqliteResultStore(SqliteTables):
    """A row per key in the queues' SQLite file; a put replaces the key's row."""

    def __init__(self, database: SqliteQueueStorage, *, owns: bool = False) -> None:
        """``owns``: close ``database`` with the store (it was opened for it)."""
        super().__init__(database, _SCHEMA, owns=owns)

    def put(self, key: str, value: str, *, ttl_s: float, group_id: str | None = None) -> None:
        expires_at = self._now() + check_ttl(ttl_s)
        with self._database.transaction() as db:
            if self._sweep_due():
                db.execute("DELETE FROM message_results WHERE expires_at <= ?", (self._now(),))
            db.execute(
                "INSERT OR REPLACE INTO message_results (key, group_id, value, expires_at)"
                " VALUES (?, ?, ?, ?)",
                (key, group_id, value, expires_at),
            )

    def get(self, key: str) -> str | None:
        with self._database.reading() as db:
            row = db.execute(
                "SELECT value FROM message_results WHERE key = ? AND expires_at > ?",
                (key, self._now()),
            ).fetchone()
        return None if row is None else str(row[0])

    def for_group(self, group_id: str) -> Iterator[tuple[str, str]]:
        with self._database.reading() as db:
            rows = db.execute(
                "SELECT key, value FROM message_results WHERE group_id = ? AND expires_at > ?"
                " ORDER BY key",
                (group_id, self._now()),
            ).fetchall()
        return iter([(str(key), str(value)) for key, value in rows])

    def rows(self) -> int:
        """Rows in the table, expired ones not swept yet included."""
        with self._database.reading() as db:
            return int(db.execute("SELECT count(*) FROM message_results").fetchone()[0])

    def _now(self) -> float:
        return self._clock.now().timestamp()

    def __repr__(self) -> str:
        return f"SqliteResultStore({self._database!r})"


_STORES: EmbeddedLedgers[ResultStore] = EmbeddedLedgers(
    lambda clock: InMemoryResultStore(clock=clock), SqliteResultStore
)


def result_store_for(storage: QueueStorage) -> ResultStore | None:
    """The result store in the same embedded store as ``storage`` (seen through metering and
    partitioning wrappers): one per in-memory store, a table of the SQLite file; None for any
    other storage (Azure's Table service: see ``result_store``)."""
    return _STORES.for_storage(storage)


def required_result_store(storage: QueueStorage) -> ResultStore:
    """``result_store_for(storage)``; ConfigurationError when there is none to find."""
    return _STORES.required(storage, _ELSEWHERE)


_ELSEWHERE = (
    "results are kept in the embedded stores (SQLite, memory) for now: "
    "Azure Table storage comes later"
)


__all__ = [
    "InMemoryResultStore",
    "SqliteResultStore",
    "check_ttl",
    "required_result_store",
    "result_store_for",
]
