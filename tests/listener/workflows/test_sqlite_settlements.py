"""Members settled together on SQLite cost a few statements per group, not a few per member, and
are answered as if settled one by one (the shared specification is ``test_group_ledger``)."""

from __future__ import annotations

from pathlib import Path

from cloudqueue.listener import SqliteQueueStorage
from cloudqueue.listener.workflows.group_ledger import Settled
from cloudqueue.listener.workflows.sqlite_groups import SqliteGroupLedger


def test_a_batch_of_one_groups_members_is_a_few_statements(tmp_path: Path) -> None:
    """Fifty members of one group settled in one write run a read of the group, a read of its
    marks, one insert and one update inside the transaction, whatever their number."""
    storage = SqliteQueueStorage(tmp_path / "q.db")
    ledger = SqliteGroupLedger(storage)
    ledger.open("g", total=60, on_complete="done")
    statements: list[str] = []
    with storage.reading() as db:
        db.set_trace_callback(statements.append)
    ledger.settle_many([("g", str(member), "handled") for member in range(50)])
    with storage.reading() as db:
        db.set_trace_callback(None)
    inside = [s for s in statements if not s.startswith(("BEGIN", "COMMIT"))]
    assert len(inside) == 4
    assert ledger.status("g").handled == 50  # type: ignore[union-attr]
    storage.close()


def test_a_large_batch_over_two_groups_is_answered_member_by_member(tmp_path: Path) -> None:
    """700 members of two interleaved groups, a duplicate among them, in one write (more than
    one statement's parameters): each group completes once, at its own last member."""
    storage = SqliteQueueStorage(tmp_path / "q.db")
    ledger = SqliteGroupLedger(storage)
    ledger.open("a", total=350, on_complete="done")
    ledger.open("b", total=349, on_complete="done")
    settlements: list[tuple[str, str, Settled]] = [
        (group, str(member), "handled") for member in range(350) for group in ("a", "b")
    ]
    settlements.insert(10, ("a", "3", "poisoned"))  # a redelivery of member 3 of a
    answers = ledger.settle_many(settlements)
    completed = [
        (settlement[0], answer.last_member, answer.handled, answer.poisoned)
        for settlement, answer in zip(settlements, answers, strict=True)
        if answer is not None
    ]
    assert completed == [("b", "348", 349, 0), ("a", "349", 350, 0)]
    assert {group.group_id for group in ledger.owed()} == {"a", "b"}
    storage.close()
