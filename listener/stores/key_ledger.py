"""The key ledger of the embedded stores: in memory, and a table in the queues' SQLite file.

Both change a record in one atomic step (a lock; one ``BEGIN IMMEDIATE`` transaction) with the
decisions of ``cloudqueue.listener.stores.key_records``. Expired records are removed without a scan
per message: in memory from a heap ordered by expiry (each record popped once, when it has passed);
in SQLite by one indexed delete at most every ``SWEEP_INTERVAL_S``.

``key_ledger_for`` finds the ledger that goes with an embedded storage object, so a publisher
and a listener sharing one in-memory store share its ledger too; the Azure ledger is opened
from the connection string (``cloudqueue.listener.stores.key_connection.open_key_ledger``).
"""

from __future__ import annotations

import heapq
import threading
from datetime import UTC, datetime
from sqlite3 import Connection as Sqlite

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.stores.embedded_ledgers import EmbeddedLedgers
from cloudqueue.listener.stores.key_records import (
    EMPTY,
    Decide,
    KeyLedger,
    KeyRecord,
    R,
    RecordKind,
)
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.listener.stores.sqlite_tables import SqliteTables
from cloudqueue.listener.stores.storage import QueueStorage

_Ident = tuple[str, str, str]


class InMemoryKeyLedger:
    """Records in a dict under a lock, for this process only (``memory://``)."""

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._records: dict[_Ident, KeyRecord] = {}
        self._expiries: list[tuple[datetime, _Ident]] = []
        self._lock = threading.Lock()

    def change(self, queue: str, kind: RecordKind, key: str, decide: Decide[R]) -> R:
        ident = (queue, kind, key)
        with self._lock:
            now = self._clock.now()
            self._expire(now)
            new, answer = decide(self._records.get(ident, EMPTY).live(now), now)
            if new is not None:
                self._write(ident, new)
            return answer

    def record(self, queue: str, kind: RecordKind, key: str) -> KeyRecord:
        with self._lock:
            return self._records.get((queue, kind, key), EMPTY).live(self._clock.now())

    def counts_by_queue(self) -> dict[str, int]:
        return {}  # no billed transactions

    def close(self) -> None:
        """Nothing to release."""

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def _write(self, ident: _Ident, record: KeyRecord) -> None:
        expires = record.expires()
        if expires is None:
            self._records.pop(ident, None)
            return
        self._records[ident] = record
        heapq.heappush(self._expiries, (expires, ident))

    def _expire(self, now: datetime) -> None:
        """Drop the records whose every time has passed: only heap entries already due are
        looked at (a record rewritten since has a later entry of its own)."""
        expiries = self._expiries
        while expiries and expiries[0][0] <= now:
            _, ident = heapq.heappop(expiries)
            record = self._records.get(ident)
            if record is not None and (record.expires() or now) <= now:
                del self._records[ident]

    def __repr__(self) -> str:
        return f"InMemoryKeyLedger(records={len(self)})"


_COLUMNS = ("done_until", "cancelled_until", "handling_until", "handling_by")
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS message_keys (
        queue TEXT NOT NULL,
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        done_until REAL,
        cancelled_until REAL,
        handling_until REAL,
        handling_by TEXT,
        expires_at REAL NOT NULL,
        PRIMARY KEY (queue, kind, key)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS message_keys_by_expiry ON message_keys (expires_at)",
)


class SqliteKeyLedger(SqliteTables):
    """A row per queue and key in the queues' SQLite file, changed in one write transaction."""

    def __init__(self, database: SqliteQueueStorage, *, owns: bool = False) -> None:
        """``owns``: close ``database`` with the ledger (it was opened for it)."""
        super().__init__(database, _SCHEMA, owns=owns)

    def change(self, queue: str, kind: RecordKind, key: str, decide: Decide[R]) -> R:
        with self._database.transaction() as db:
            now = self._clock.now()
            self._sweep_if_due(db, now)
            new, answer = decide(_read_row(db, (queue, kind, key)).live(now), now)
            if new is not None:
                _write_row(db, (queue, kind, key), new)
            return answer

    def record(self, queue: str, kind: RecordKind, key: str) -> KeyRecord:
        with self._database.reading() as db:
            return _read_row(db, (queue, kind, key)).live(self._clock.now())

    def counts_by_queue(self) -> dict[str, int]:
        return {}  # no billed transactions

    def _sweep_if_due(self, db: Sqlite, now: datetime) -> None:
        if self._sweep_due():
            db.execute("DELETE FROM message_keys WHERE expires_at <= ?", (now.timestamp(),))

    def __repr__(self) -> str:
        return f"SqliteKeyLedger({self._database!r})"


def _read_row(db: Sqlite, ident: _Ident) -> KeyRecord:
    row = db.execute(
        f"SELECT {', '.join(_COLUMNS)} FROM message_keys WHERE queue = ? AND kind = ? AND key = ?",
        ident,
    ).fetchone()
    if row is None:
        return EMPTY
    done, cancelled, handling, handling_by = row
    return KeyRecord(_time(done), _time(cancelled), _time(handling), handling_by)


def _write_row(db: Sqlite, ident: _Ident, record: KeyRecord) -> None:
    expires = record.expires()
    if expires is None:
        db.execute("DELETE FROM message_keys WHERE queue = ? AND kind = ? AND key = ?", ident)
        return
    db.execute(
        f"INSERT OR REPLACE INTO message_keys (queue, kind, key, {', '.join(_COLUMNS)}, "
        "expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            *ident,
            _seconds(record.done_until),
            _seconds(record.cancelled_until),
            _seconds(record.handling_until),
            record.handling_by,
            expires.timestamp(),
        ),
    )


def _seconds(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def _time(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


_LEDGERS: EmbeddedLedgers[KeyLedger] = EmbeddedLedgers(
    lambda clock: InMemoryKeyLedger(clock=clock), SqliteKeyLedger
)


def key_ledger_for(storage: QueueStorage) -> KeyLedger | None:
    """The ledger in the same embedded store as ``storage`` (seen through metering and
    partitioning wrappers): one per in-memory store, a table of the SQLite file. None for any
    other storage (open Azure's from its connection string)."""
    return _LEDGERS.for_storage(storage)


def required_ledger(storage: QueueStorage) -> KeyLedger:
    """``key_ledger_for(storage)``; ConfigurationError when there is none to find."""
    ledger = key_ledger_for(storage)
    if ledger is None:
        raise ConfigurationError(
            "no key ledger goes with this storage: pass ledger=open_key_ledger(connection_string)"
        )
    return ledger


__all__ = [
    "InMemoryKeyLedger",
    "SqliteKeyLedger",
    "key_ledger_for",
    "required_ledger",
]
