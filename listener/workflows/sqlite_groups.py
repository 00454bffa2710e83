"""The group ledger in the queues' SQLite file (``cloudqueue.listener.workflows.group_ledger``).

Four tables beside the queues: ``message_groups`` (a row per group: its counts, times,
completion state, the member that completed it, and until when a claim on publishing it runs,
``claimed_until``: NULL while only the settler of its last member holds it), ``group_members``
(a row per settled member, primary key group and member: ``INSERT OR IGNORE`` finds a
duplicate), ``group_chains`` (a row per member a chain step passed on, with the members it added
for the step's items: a redelivery gets the same ids) and
``group_additions`` (a row per named addition of members at run time, with its first id, count
and whether its members were all put: a redelivered handler's addition gets the same ids). Each
step is one ``BEGIN IMMEDIATE`` transaction on the store's own connection, so the member's mark,
the count and the owed completion are written together or not at all: a process killed at any
point leaves either the whole step or none.

``group_ledger_for`` finds the ledger that goes with a storage object, as ``key_ledger_for`` does
for keys: one per in-memory store, the tables of the SQLite file, and for an Azure storage the
account's Table service (``cloudqueue.listener.workflows.azure_finder``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from sqlite3 import Connection as Sqlite

from cloudqueue.listener.stores.embedded_ledgers import EmbeddedLedgers
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.workflows.group_ledger import (
    COMPLETION_LEASE_S,
    Addition,
    GroupError,
    GroupLedger,
    GroupStatus,
    Settled,
    lease_end,
)
from cloudqueue.listener.workflows.group_rules import (
    added_again,
    check_count,
    member_ids,
    open_group,
    passed_again,
    unsettled_ids,
)
from cloudqueue.listener.workflows.memory_groups import InMemoryGroupLedger
from cloudqueue.listener.workflows.sqlite_settlements import settle_together

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS message_groups (
        id TEXT PRIMARY KEY,
        total INTEGER NOT NULL,
        handled INTEGER NOT NULL DEFAULT 0,
        poisoned INTEGER NOT NULL DEFAULT 0,
        started REAL NOT NULL,
        ended REAL,
        on_complete TEXT NOT NULL,
        completion TEXT NOT NULL DEFAULT 'pending',
        claimed_until REAL,
        last_member TEXT
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS group_members (
        group_id TEXT NOT NULL,
        member INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        PRIMARY KEY (group_id, member)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS group_chains (
        group_id TEXT NOT NULL,
        member TEXT NOT NULL,
        step TEXT NOT NULL,
        first_added INTEGER NOT NULL,
        count INTEGER NOT NULL,
        PRIMARY KEY (group_id, member, step)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS group_additions (
        group_id TEXT NOT NULL,
        name TEXT NOT NULL,
        first_added INTEGER NOT NULL,
        count INTEGER NOT NULL,
        put INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (group_id, name)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS message_groups_owed ON message_groups (completion)",
)
_COLUMNS = "id, total, handled, poisoned, started, ended, on_complete, completion, last_member"


class SqliteGroupLedger:
    """Groups in the queues' SQLite file, each change one write transaction."""

    def __init__(self, database: SqliteQueueStorage, *, owns: bool = False) -> None:
        """``owns``: close ``database`` with the ledger (it was opened for it)."""
        self._database = database
        self._clock = database.clock
        self._owns = owns
        with database.transaction() as db:
            for statement in _SCHEMA:
                db.execute(statement)
            _add_claims(db)

    def open(self, group_id: str, *, total: int, on_complete: str) -> GroupStatus:
        check_count(total, "a group")
        with self._database.transaction() as db:
            if _read(db, group_id) is not None:
                raise GroupError(f"group {group_id!r} exists already")
            now = self._clock.now()
            db.execute(
                "INSERT INTO message_groups (id, total, started, on_complete) VALUES (?, ?, ?, ?)",
                (group_id, total, now.timestamp(), on_complete),
            )
            return GroupStatus(group_id, total, 0, 0, now, None, on_complete)

    def add_members(self, group_id: str, count: int, *, by: str | None = None) -> Addition:
        check_count(count, "an addition")
        with self._database.transaction() as db:
            earlier = None if by is None else _addition(db, group_id, by)
            if earlier is not None:
                return added_again(earlier, count, group_id)
            group = open_group(_read(db, group_id), group_id)
            db.execute(
                "UPDATE message_groups SET total = total + ? WHERE id = ?", (count, group_id)
            )
            if by is not None:
                db.execute(
                    "INSERT INTO group_additions (group_id, name, first_added, count)"
                    " VALUES (?, ?, ?, ?)",
                    (group_id, by, group.total, count),
                )
            return Addition(member_ids(group.total, count))

    def mark_added(self, group_id: str, by: str) -> None:
        with self._database.transaction() as db:
            db.execute(
                "UPDATE group_additions SET put = 1 WHERE group_id = ? AND name = ?",
                (group_id, by),
            )

    def pass_on(self, group_id: str, member_id: str, step: str, count: int) -> list[str]:
        check_count(count, "a chain step's items")
        with self._database.transaction() as db:
            row = db.execute(
                "SELECT first_added, count FROM group_chains"
                " WHERE group_id = ? AND member = ? AND step = ?",
                (group_id, member_id, step),
            ).fetchone()
            if row is not None:  # a repeat, answered even once the group completed
                first, earlier = int(row[0]), int(row[1])
                ids = [member_id, *member_ids(first, earlier - 1)]
                return passed_again(ids, count, group_id, member_id)
            group = open_group(_read(db, group_id), group_id)
            db.execute(
                "INSERT INTO group_chains (group_id, member, step, first_added, count)"
                " VALUES (?, ?, ?, ?, ?)",
                (group_id, member_id, step, group.total, count),
            )
            db.execute(
                "UPDATE message_groups SET total = total + ? WHERE id = ?", (count - 1, group_id)
            )
            return [member_id, *member_ids(group.total, count - 1)]

    def settle(self, group_id: str, member_id: str, outcome: Settled) -> GroupStatus | None:
        return self.settle_many([(group_id, member_id, outcome)])[0]

    def settle_many(
        self, settlements: Sequence[tuple[str, str, Settled]]
    ) -> list[GroupStatus | None]:
        with self._database.transaction() as db:
            return settle_together(db, settlements, read=_read, now=self._clock.now)

    def status(self, group_id: str) -> GroupStatus | None:
        with self._database.reading() as db:
            return _read(db, group_id)

    def owed(self) -> list[GroupStatus]:
        with self._database.reading() as db:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM message_groups WHERE completion = 'owed'"
            ).fetchall()
        return [_status(row) for row in rows]

    def claim(self, group_id: str) -> GroupStatus | None:
        """One conditional UPDATE: of two claimants, the second finds the claim running."""
        now = self._clock.now()
        with self._database.transaction() as db:
            taken = db.execute(
                "UPDATE message_groups SET claimed_until = ? WHERE id = ?"
                " AND completion = 'owed' AND COALESCE(claimed_until, ended + ?) <= ?",
                (lease_end(now).timestamp(), group_id, COMPLETION_LEASE_S, now.timestamp()),
            ).rowcount
            return _read(db, group_id) if taken else None

    def release(self, group_id: str) -> None:
        with self._database.transaction() as db:
            db.execute(
                "UPDATE message_groups SET claimed_until = ? WHERE id = ? AND completion = 'owed'",
                (self._clock.now().timestamp(), group_id),
            )

    def pending_members(self, group_id: str, limit: int) -> list[str]:
        with self._database.reading() as db:
            group = _read(db, group_id)
            if group is None or group.pending == 0:
                return []
            settled = {
                int(row[0])
                for row in db.execute(
                    "SELECT member FROM group_members WHERE group_id = ?", (group_id,)
                )
            }
        return unsettled_ids(group.total, settled, limit)

    def newest(self, limit: int) -> list[GroupStatus]:
        with self._database.reading() as db:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM message_groups ORDER BY started DESC LIMIT ?", (limit,)
            ).fetchall()
        return [_status(row) for row in rows]

    def mark_sent(self, group_id: str) -> None:
        with self._database.transaction() as db:
            db.execute(
                "UPDATE message_groups SET completion = 'sent'"
                " WHERE id = ? AND completion = 'owed'",
                (group_id,),
            )

    def close(self) -> None:
        if self._owns:
            self._database.close()

    def __repr__(self) -> str:
        return f"SqliteGroupLedger({self._database!r})"


def _add_claims(db: Sqlite) -> None:
    """The ``claimed_until`` and ``last_member`` columns in a file made before they were kept."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(message_groups)")}
    for column, kind in (("claimed_until", "REAL"), ("last_member", "TEXT")):
        if column not in columns:
            db.execute(f"ALTER TABLE message_groups ADD COLUMN {column} {kind}")


def _addition(db: Sqlite, group_id: str, by: str) -> Addition | None:
    row = db.execute(
        "SELECT first_added, count, put FROM group_additions WHERE group_id = ? AND name = ?",
        (group_id, by),
    ).fetchone()
    return None if row is None else Addition(member_ids(int(row[0]), int(row[1])), bool(row[2]))


def _read(db: Sqlite, group_id: str) -> GroupStatus | None:
    row = db.execute(f"SELECT {_COLUMNS} FROM message_groups WHERE id = ?", (group_id,)).fetchone()
    return None if row is None else _status(row)


def _status(row: tuple[object, ...]) -> GroupStatus:
    group_id, total, handled, poisoned, started, ended, on_complete, completion, last = row
    return GroupStatus(
        str(group_id),
        int(str(total)),
        int(str(handled)),
        int(str(poisoned)),
        datetime.fromtimestamp(float(str(started)), UTC),
        None if ended is None else datetime.fromtimestamp(float(str(ended)), UTC),
        str(on_complete),
        "owed" if completion == "owed" else "sent" if completion == "sent" else "pending",
        None if last is None else str(last),
    )


_LEDGERS: EmbeddedLedgers[GroupLedger] = EmbeddedLedgers(
    lambda clock: InMemoryGroupLedger(clock=clock), SqliteGroupLedger
)


def group_ledger_for(storage: QueueStorage) -> GroupLedger | None:
    """The group ledger in the same store as ``storage`` (seen through metering and partitioning
    wrappers): one per in-memory store, tables of the SQLite file, the Table service of an Azure
    account ``open_storage`` opened (``azure_finder``); None for any other storage."""
    ledger = _LEDGERS.for_storage(storage)
    if ledger is None:
        from cloudqueue.listener.workflows.azure_finder import azure_group_ledger_for

        ledger = azure_group_ledger_for(storage)
    return ledger


__all__ = ["SqliteGroupLedger", "group_ledger_for"]
