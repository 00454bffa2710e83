"""Settling many group members in one SQLite transaction, a few statements per group.

``SqliteGroupLedger.settle_many`` gets the settlements that finished together
(``cloudqueue.listener.workflows.settle_batches``), often dozens of one group. Settled one by one
they cost four statements each (read the group, insert the mark, count it, read again), and each
statement hands the GIL back and waits for it again while the storage's one connection, and so
every dequeue thread of the process, waits behind it: at 10,000 members that was most of what a
group added to its members' drain. Here each group of the batch costs one read of its row, one
read of which of its members are marked already, one insert of the new marks and one update of
its counts, all inside the caller's write transaction, so the answers are those of settling the
members one by one in order: a member marked before or earlier in the batch is a duplicate
(None), and the member that settles the last one gets the group's final status.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from sqlite3 import Connection as Sqlite
from typing import TypeVar

from cloudqueue.listener.workflows.group_ledger import GroupStatus, Settled
from cloudqueue.listener.workflows.group_rules import member_index

Settlement = tuple[str, str, Settled]
"""``(group_id, member_id, outcome)``, as ``GroupLedger.settle_many`` takes them."""
T = TypeVar("T")
_MOST_PER_STATEMENT = 300
"""Members per statement: three parameters each, within SQLite's oldest limit of 999."""
Reader = Callable[[Sqlite, str], GroupStatus | None]
"""Reads a group's row in the transaction (``sqlite_groups``)."""


@dataclass
class _Tally:
    """One group's settlements in this batch: its marks, the new ones, and its counts after
    them (counted here, and the status made once, for the member that settles the last)."""

    group: GroupStatus
    marked: set[int]
    rows: list[tuple[str, int, str]] = field(default_factory=list)
    handled: int = 0
    poisoned: int = 0
    ended: float | None = None
    """When its last member settled in this batch (epoch seconds, as the row keeps it)."""

    def __post_init__(self) -> None:
        self.handled, self.poisoned = self.group.handled, self.group.poisoned

    def count(self, outcome: Settled) -> bool:
        """Count one more member settled as ``outcome``: True when none is left pending."""
        if outcome == "handled":
            self.handled += 1
        else:
            self.poisoned += 1
        return self.handled + self.poisoned >= self.group.total


def settle_together(
    db: Sqlite, settlements: Sequence[Settlement], *, read: Reader, now: Callable[[], datetime]
) -> list[GroupStatus | None]:
    """``settle`` for each settlement in order, written inside the caller's transaction."""
    tallies = _tallies(db, settlements, read)
    answers = [_settle(tallies, *settlement, now=now) for settlement in settlements]
    for tally in tallies.values():
        if tally.rows:
            _write(db, tally)
    return answers


def _tallies(db: Sqlite, settlements: Sequence[Settlement], read: Reader) -> dict[str, _Tally]:
    """Each known group of the batch, with which of the batch's members it has marked."""
    members: dict[str, list[str]] = {}
    for group_id, member_id, _ in settlements:  # one pass: a batch may hold several groups
        members.setdefault(group_id, []).append(member_id)
    tallies: dict[str, _Tally] = {}
    for group_id, ids in members.items():
        group = read(db, group_id)
        if group is not None:
            indexes = {member_index(member_id, group.total) for member_id in ids}
            tallies[group_id] = _Tally(group, _marked(db, group_id, indexes))
    return tallies


def _marked(db: Sqlite, group_id: str, indexes: Iterable[int | None]) -> set[int]:
    """Which of ``indexes`` (None: not a member) the group has marked settled."""
    wanted = sorted(index for index in indexes if index is not None)
    marked: set[int] = set()
    for part in _parts(wanted):
        marks = ", ".join("?" * len(part))
        rows = db.execute(
            f"SELECT member FROM group_members WHERE group_id = ? AND member IN ({marks})",
            (group_id, *part),
        )
        marked.update(int(row[0]) for row in rows)
    return marked


def _settle(
    tallies: dict[str, _Tally],
    group_id: str,
    member_id: str,
    outcome: Settled,
    *,
    now: Callable[[], datetime],
) -> GroupStatus | None:
    """One settlement counted in its group's tally: the final status when it was the last."""
    tally = tallies.get(group_id)
    index = None if tally is None else member_index(member_id, tally.group.total)
    if tally is None or index is None or index in tally.marked:
        return None  # unknown, a stray id, or settled before: a redelivery or a duplicate
    tally.marked.add(index)
    tally.rows.append((group_id, index, outcome))
    if not tally.count(outcome):
        return None
    tally.ended = now().timestamp()
    tally.group = replace(
        tally.group,
        handled=tally.handled,
        poisoned=tally.poisoned,
        ended=datetime.fromtimestamp(tally.ended, UTC),  # as a read of the row gives it
        completion="owed",
        last_member=str(index),
    )
    return tally.group


def _write(db: Sqlite, tally: _Tally) -> None:
    """The group's new marks and counts: one insert, one update (its row was read in this
    transaction, which holds the write lock: the counts are written as the tally leaves them)."""
    for part in _parts(tally.rows):
        values = ", ".join("(?, ?, ?)" for _ in part)
        db.execute(
            f"INSERT INTO group_members (group_id, member, outcome) VALUES {values}",
            [value for row in part for value in row],
        )
    group = tally.group
    db.execute(
        "UPDATE message_groups SET handled = ?, poisoned = ?,"
        " ended = ?, completion = ?, last_member = ? WHERE id = ?",
        (
            tally.handled,
            tally.poisoned,
            tally.ended,
            group.completion,
            group.last_member,
            group.group_id,
        ),
    )


def _parts(values: Sequence[T]) -> Iterator[Sequence[T]]:
    """``values`` in runs that keep a statement within SQLite's oldest limit of 999 parameters."""
    for start in range(0, len(values), _MOST_PER_STATEMENT):
        yield values[start : start + _MOST_PER_STATEMENT]


__all__ = ["Settlement", "settle_together"]
