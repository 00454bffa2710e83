"""Which tick of a periodic job has fired, and who runs it now: the ``TickLedger`` protocol.

Every process that hosts a job claims each tick; the ledger lets exactly one claim succeed. A
record per job holds the last tick fired and the lease of the process running it::

    claim(tick)   fired when tick > last_tick and no other holder's lease is live;
                  then last_tick = tick, holder = me, lease_until = now + lease_s
    claim(tick, handover=True)
                  the retry of a tick that a live lease refused, made when that lease ends:
                  fired only when the lease expired unreleased (its holder died or stalled)
    renew()       while the run lasts, lease_until moves on (False: the lease went to another)
    release()     the run ended: the lease is free for the next tick

The tick is recorded before the job runs, in the same atomic step that takes the lease, so a tick
never fires twice -- not even when a holder loses its lease mid-run: the next holder claims only
later ticks. A holder killed mid-run keeps nothing: its lease expires after ``lease_s`` and the
next tick fires elsewhere -- on time when the lease ended before it, and else (a renewal had
carried the lease past it) at the lease's end, through the handover claim: the process that the
dead lease refused retries once, when the lease ends, and fires the tick unless the lease was
renewed (the holder lives and still runs: the tick is skipped, runs never overlap) or released
(the run ended: the tick came while it ran, and is skipped too). (The price of recording first:
a process killed between its claim and its run loses that one tick.) A lease still live refuses
the next claim, so a job never overlaps itself across processes.

Three implementations, one per store, opened from the same connection string as the queues
(``open_tick_ledger``): memory (a lock), SQLite (a row per job, changed in one write
transaction) and Azure (``cloudqueue.listener.stores.azure_ticks``: a blob per job, changed under a
blob lease). The decisions themselves are the pure functions below, shared by all three.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from sqlite3 import Connection as Sqlite
from typing import Protocol

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage


@dataclass(frozen=True, slots=True)
class JobRecord:
    """What the ledger keeps per job."""

    last_tick: datetime | None = None
    holder: str | None = None
    """The process running the last tick, until it releases or its lease expires."""
    lease_until: datetime | None = None

    def to_fields(self) -> dict[str, str]:
        """As text fields (blob metadata, or the SQLite row's columns)."""
        return {
            name: value.isoformat() if isinstance(value, datetime) else value
            for name, value in (
                ("last_tick", self.last_tick),
                ("holder", self.holder),
                ("lease_until", self.lease_until),
            )
            if value is not None
        }

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> JobRecord:
        """Parse ``to_fields``; a field that is absent or unreadable counts as empty."""
        return cls(
            last_tick=_moment(fields.get("last_tick")),
            holder=fields.get("holder") or None,
            lease_until=_moment(fields.get("lease_until")),
        )


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to a claim: whether this process fires the tick, and the record after it."""

    fired: bool
    record: JobRecord


class TickLedger(Protocol):
    """Claims of ticks of periodic jobs, one record per job name."""

    def claim(
        self, job: str, tick: datetime, *, holder: str, lease_s: float, handover: bool = False
    ) -> Claim:
        """Fire ``tick`` for ``holder`` if it is the first to claim it and no lease is live
        (with ``handover``: only if the last holder's lease expired without being released)."""

    def renew(self, job: str, *, holder: str, lease_s: float) -> bool:
        """Extend the holder's lease; False when the record names another holder now."""

    def release(self, job: str, *, holder: str) -> None:
        """End the holder's lease (nothing happens when another holder has it)."""

    def record(self, job: str) -> JobRecord:
        """The job's record (empty when it never fired)."""

    def close(self) -> None:
        """Release connections."""


def claimed(
    record: JobRecord,
    tick: datetime,
    holder: str,
    lease_s: float,
    now: datetime,
    *,
    handover: bool = False,
) -> Claim:
    """The claim rule: a later tick than any fired, and no other holder's live lease; for a
    handover, moreover a lease left behind (expired, never released) by another holder."""
    if record.last_tick is not None and tick <= record.last_tick:
        return Claim(False, record)
    if record.holder not in (None, holder) and not _expired(record, now):
        return Claim(False, record)
    if handover and record.holder in (None, holder):
        return Claim(False, record)
    return Claim(True, JobRecord(tick, holder, now + timedelta(seconds=lease_s)))


def renewed(record: JobRecord, holder: str, lease_s: float, now: datetime) -> JobRecord | None:
    """The record with the holder's lease extended; None when another holder has it."""
    if record.holder != holder:
        return None
    return replace(record, lease_until=now + timedelta(seconds=lease_s))


def released(record: JobRecord, holder: str) -> JobRecord | None:
    """The record without the holder's lease; None when there is nothing of its to release."""
    if record.holder != holder:
        return None
    return replace(record, holder=None, lease_until=None)


def _expired(record: JobRecord, now: datetime) -> bool:
    return record.lease_until is None or record.lease_until <= now


def _moment(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class InMemoryTickLedger:
    """Records in a dict under a lock: the processes' jobs share nothing (``memory://``)."""

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._records: dict[str, JobRecord] = {}
        self._lock = threading.Lock()

    def claim(
        self, job: str, tick: datetime, *, holder: str, lease_s: float, handover: bool = False
    ) -> Claim:
        with self._lock:
            now = self._clock.now()
            claim = claimed(self.record(job), tick, holder, lease_s, now, handover=handover)
            self._records[job] = claim.record
            return claim

    def renew(self, job: str, *, holder: str, lease_s: float) -> bool:
        with self._lock:
            record = renewed(self.record(job), holder, lease_s, self._clock.now())
            if record is not None:
                self._records[job] = record
            return record is not None

    def release(self, job: str, *, holder: str) -> None:
        with self._lock:
            record = released(self.record(job), holder)
            if record is not None:
                self._records[job] = record

    def record(self, job: str) -> JobRecord:
        return self._records.get(job, JobRecord())

    def close(self) -> None:
        """Nothing to release."""

    def __repr__(self) -> str:
        return f"InMemoryTickLedger(jobs={len(self._records)})"


_FIELDS = ("last_tick", "holder", "lease_until")
_TABLE = """CREATE TABLE IF NOT EXISTS job_ticks (
    job TEXT PRIMARY KEY,
    last_tick TEXT,
    holder TEXT,
    lease_until TEXT
) WITHOUT ROWID"""


class SqliteTickLedger:
    """A row per job in the queues' SQLite file, read and changed in one write transaction."""

    def __init__(self, database: SqliteQueueStorage, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._database = database
        self._clock = clock
        with database.transaction() as db:
            db.execute(_TABLE)

    def claim(
        self, job: str, tick: datetime, *, holder: str, lease_s: float, handover: bool = False
    ) -> Claim:
        with self._database.transaction() as db:
            now = self._clock.now()
            claim = claimed(_read_row(db, job), tick, holder, lease_s, now, handover=handover)
            _write_row(db, job, claim.record)
            return claim

    def renew(self, job: str, *, holder: str, lease_s: float) -> bool:
        with self._database.transaction() as db:
            record = renewed(_read_row(db, job), holder, lease_s, self._clock.now())
            if record is not None:
                _write_row(db, job, record)
            return record is not None

    def release(self, job: str, *, holder: str) -> None:
        with self._database.transaction() as db:
            record = released(_read_row(db, job), holder)
            if record is not None:
                _write_row(db, job, record)

    def record(self, job: str) -> JobRecord:
        with self._database.transaction() as db:
            return _read_row(db, job)

    def close(self) -> None:
        self._database.close()

    def __repr__(self) -> str:
        return f"SqliteTickLedger({self._database!r})"


def _read_row(db: Sqlite, job: str) -> JobRecord:
    row = db.execute(f"SELECT {', '.join(_FIELDS)} FROM job_ticks WHERE job = ?", (job,)).fetchone()
    if row is None:
        return JobRecord()
    return JobRecord.from_fields(
        {name: value for name, value in zip(_FIELDS, row, strict=True) if value}
    )


def _write_row(db: Sqlite, job: str, record: JobRecord) -> None:
    fields = record.to_fields()
    db.execute(
        "INSERT OR REPLACE INTO job_ticks (job, last_tick, holder, lease_until)"
        " VALUES (?, ?, ?, ?)",
        (job, fields.get("last_tick"), fields.get("holder"), fields.get("lease_until")),
    )
