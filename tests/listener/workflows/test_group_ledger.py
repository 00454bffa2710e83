"""The group ledger on memory, SQLite and Azure (Azurite's Table service), one specification:
members counted by distinct id, a poisoned member settled too, fan-out added before the adding
member settles, and exactly one caller told it settled the last member -- among many threads
(SQLite: each its own connection, as processes; Azure: each its own table client)."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cloudqueue.listener import InMemoryQueueStorage, SqliteQueueStorage
from cloudqueue.listener.stores.azure_tables import table_from_connection_string
from cloudqueue.listener.testing import ManualClock
from cloudqueue.listener.workflows.azure_groups import AzureGroupLedger
from cloudqueue.listener.workflows.group_ledger import (
    COMPLETION_LEASE_S,
    GroupError,
    GroupLedger,
    GroupStatus,
)
from cloudqueue.listener.workflows.sqlite_groups import SqliteGroupLedger, group_ledger_for

LedgerMaker = Callable[[], GroupLedger]
"""Each call a ledger on the same store (SQLite: a new connection to the same file)."""


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["memory", "sqlite", "azure"])
def ledgers(
    request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock
) -> Iterator[LedgerMaker]:
    opened: list[SqliteQueueStorage] = []
    if request.param == "azure":
        yield from azure_ledgers(
            request.getfixturevalue("azurite_with_tables").connection_string, clock
        )
        return
    if request.param == "memory":
        storage = InMemoryQueueStorage(clock=clock)

        def memory() -> GroupLedger:
            ledger = group_ledger_for(storage)
            assert ledger is not None
            return ledger

        yield memory
        return

    def sqlite() -> GroupLedger:
        opened.append(SqliteQueueStorage(tmp_path / "q.db", clock=clock, busy_timeout_s=30))
        return SqliteGroupLedger(opened[-1])

    yield sqlite
    for storage_ in opened:
        storage_.close()


def azure_ledgers(connection_string: str, clock: ManualClock) -> Iterator[LedgerMaker]:
    """Ledgers on a table of this test's own (the session's Azurite is shared), each call a new
    client; the table is dropped afterwards."""
    table_name = f"groups{uuid.uuid4().hex[:16]}"
    clients = [table_from_connection_string(connection_string, table_name)]

    def azure() -> GroupLedger:
        clients.append(table_from_connection_string(connection_string, table_name))
        return AzureGroupLedger(clients[-1], clock=clock)

    yield azure
    clients[0].delete_table()
    for client in clients:
        client.close()


def test_members_are_counted_once_each_however_often_they_settle(ledgers: LedgerMaker) -> None:
    """Three members, the first settled three times: only the third distinct member's settlement
    answers with the final status, and the counts are 3."""
    ledger = ledgers()
    ledger.open("g1", total=3, on_complete="done")
    answers = [ledger.settle("g1", member, "handled") for member in ["0", "0", "1", "0", "1"]]
    assert answers == [None] * 5
    status = ledger.status("g1")
    assert status is not None
    assert (status.total, status.handled, status.pending, status.done) == (3, 2, 1, False)
    last = ledger.settle("g1", "2", "handled")
    assert last is not None
    assert (last.handled, last.poisoned, last.pending) == (3, 0, 0)
    assert last.done
    assert last.completion == "owed"
    assert ledger.settle("g1", "2", "handled") is None
    assert ledger.settle("g1", "1", "poisoned") is None


def test_settlements_written_together_are_answered_each_in_order(ledgers: LedgerMaker) -> None:
    """One write of five settlements -- a duplicate, a stray id, an unknown group among them --
    answers each as its own ``settle`` would: only the one that settled the last member hears
    the final status, which names that member as the last."""
    ledger = ledgers()
    ledger.open("g", total=3, on_complete="done")
    answers = ledger.settle_many(
        [
            ("g", "0", "handled"),
            ("g", "0", "poisoned"),
            ("g", "9", "handled"),
            ("nope", "0", "handled"),
            ("g", "1", "poisoned"),
        ]
    )
    assert answers == [None] * 5
    [before, last, after] = ledger.settle_many(
        [("g", "1", "handled"), ("g", "2", "handled"), ("g", "2", "handled")]
    )
    assert before is None
    assert after is None
    assert last is not None
    assert (last.handled, last.poisoned, last.completion, last.last_member) == (2, 1, "owed", "2")


def test_a_poisoned_member_counts_as_settled(ledgers: LedgerMaker) -> None:
    """A group of two with one member poisoned completes with 1 handled and 1 poisoned."""
    ledger = ledgers()
    ledger.open("g2", total=2, on_complete="done")
    assert ledger.settle("g2", "0", "poisoned") is None
    last = ledger.settle("g2", "1", "handled")
    assert last is not None
    assert (last.handled, last.poisoned) == (1, 1)


def test_ids_outside_the_group_are_not_counted(ledgers: LedgerMaker) -> None:
    """A member id beyond the group's size, or not a member number, or an unknown group,
    settles nothing: a stray message cannot complete a group early."""
    ledger = ledgers()
    ledger.open("g3", total=2, on_complete="done")
    for stray in ["2", "-1", "x", "00000000000000000001"]:
        assert ledger.settle("g3", stray, "handled") is None
    assert ledger.settle("nope", "0", "handled") is None
    assert ledger.status("g3").settled == 0  # type: ignore[union-attr]


def test_members_added_at_run_time_hold_the_group_open(ledgers: LedgerMaker) -> None:
    """Member 0 adds two members before it settles: the group completes only when those did,
    with 3 handled; adding to a complete group is refused."""
    ledger = ledgers()
    ledger.open("g4", total=1, on_complete="done")
    assert ledger.add_members("g4", 2).member_ids == ["1", "2"]
    assert ledger.settle("g4", "0", "handled") is None
    assert ledger.settle("g4", "2", "handled") is None
    last = ledger.settle("g4", "1", "handled")
    assert last is not None
    assert last.total == 3
    assert last.handled == 3
    with pytest.raises(GroupError, match="is complete"):
        ledger.add_members("g4", 1)
    with pytest.raises(GroupError, match="no group"):
        ledger.add_members("missing", 1)


def test_pending_members_are_those_not_settled_lowest_first(ledgers: LedgerMaker) -> None:
    """Of five members with 1 and 3 settled, the pending are 0, 2, 4, as many as asked; an
    unknown group and a complete one have none."""
    ledger = ledgers()
    ledger.open("g", total=5, on_complete="done")
    ledger.settle("g", "1", "handled")
    ledger.settle("g", "3", "poisoned")
    assert ledger.pending_members("g", 10) == ["0", "2", "4"]
    assert ledger.pending_members("g", 2) == ["0", "2"]
    assert ledger.pending_members("nope", 10) == []
    for member in ["0", "2", "4"]:
        ledger.settle("g", member, "handled")
    assert ledger.pending_members("g", 10) == []


def test_the_newest_groups_come_first(ledgers: LedgerMaker, clock: ManualClock) -> None:
    """Groups are listed by start, the latest first, as many as asked."""
    ledger = ledgers()
    for name in ["first", "second", "third"]:
        ledger.open(name, total=1, on_complete="done")
        clock.advance(1)
    assert [group.group_id for group in ledger.newest(2)] == ["third", "second"]
    assert [group.group_id for group in ledger.newest(10)] == ["third", "second", "first"]


def test_empty_and_repeated_groups_are_refused(ledgers: LedgerMaker) -> None:
    """Opening a group of no members, or an id twice, raises one GroupError."""
    ledger = ledgers()
    with pytest.raises(GroupError, match="at least 1 member"):
        ledger.open("g5", total=0, on_complete="done")
    ledger.open("g5", total=1, on_complete="done")
    with pytest.raises(GroupError, match="exists already"):
        ledger.open("g5", total=1, on_complete="done")


def test_an_owed_completion_stays_owed_until_marked_sent(ledgers: LedgerMaker) -> None:
    """The last settlement owes the completion; ``owed`` lists it (to another connection too)
    until ``mark_sent``."""
    ledger = ledgers()
    ledger.open("g6", total=1, on_complete="done")
    ledger.open("g7", total=2, on_complete="done")
    ledger.settle("g6", "0", "handled")
    ledger.settle("g7", "0", "handled")
    assert [group.group_id for group in ledgers().owed()] == ["g6"]
    ledger.mark_sent("g6")
    assert ledgers().owed() == []
    assert ledger.status("g6").completion == "sent"  # type: ignore[union-attr]


CROWDS = {"memory": (8, 100), "sqlite": (8, 100), "azure": (4, 32)}
"""Threads and members of the crowded group: on Azure each settlement is HTTP calls to Azurite,
so fewer -- 32 members still put two in each of the 16 shards, racing on shard and group rows."""


def test_many_threads_settling_one_group_hear_of_the_last_member_once(
    ledgers: LedgerMaker, request: pytest.FixtureRequest
) -> None:
    """Many threads (SQLite: each its own connection) each settle all members of one group, in
    their own order, a tenth poisoned: the counts are exact and exactly one settlement of them
    all was the last."""
    threads, members = CROWDS[request.node.callspec.params["ledgers"]]
    ledger = ledgers()
    ledger.open("hot", total=members, on_complete="done")
    lasts: list[GroupStatus] = []
    lock, start = threading.Lock(), threading.Barrier(threads)

    def settle_all(seed: int) -> None:
        mine = ledgers()
        order = [str(n) for n in range(members)]
        random.Random(seed).shuffle(order)
        start.wait()
        for member in order:
            last = mine.settle("hot", member, "poisoned" if int(member) % 10 == 0 else "handled")
            if last is not None:
                with lock:
                    lasts.append(last)

    settlers = [threading.Thread(target=settle_all, args=(seed,)) for seed in range(threads)]
    for thread in settlers:
        thread.start()
    for thread in settlers:
        thread.join()
    poisoned = len(range(0, members, 10))
    assert len(lasts) == 1
    assert (lasts[0].handled, lasts[0].poisoned, lasts[0].pending) == (
        members - poisoned,
        poisoned,
        0,
    )
    assert ledger.status("hot") == lasts[0]


def test_a_group_outlives_its_sqlite_connection(tmp_path: Path) -> None:
    """A group recorded through one connection is read, settled and completed through another
    opened later (a restarted process)."""
    first = SqliteQueueStorage(tmp_path / "q.db")
    SqliteGroupLedger(first).open("kept", total=2, on_complete="done")
    SqliteGroupLedger(first).settle("kept", "0", "handled")
    first.close()
    again = SqliteQueueStorage(tmp_path / "q.db")
    last = SqliteGroupLedger(again).settle("kept", "1", "poisoned")
    assert last is not None
    assert (last.handled, last.poisoned) == (1, 1)
    again.close()


def test_a_settlement_decides_under_the_write_lock_it_writes_with(tmp_path: Path) -> None:
    """Two processes settle the last two members of a group of two at once: the second waits
    for the first's transaction and reads what it wrote, so it hears it settled the last
    member. (Read outside the write lock, it would count from a stale total: no completion.)"""
    first = SqliteQueueStorage(tmp_path / "q.db", busy_timeout_s=30)
    second = SqliteQueueStorage(tmp_path / "q.db", busy_timeout_s=30)
    SqliteGroupLedger(first).open("race", total=2, on_complete="done")
    ledger = SqliteGroupLedger(second)
    waiting_for_lock = threading.Event()

    def traced(statement: str) -> None:
        if statement.startswith("BEGIN IMMEDIATE"):
            waiting_for_lock.set()

    with second.reading() as db:
        db.set_trace_callback(traced)
    answers: list[GroupStatus | None] = []
    settling = threading.Thread(
        target=lambda: answers.append(ledger.settle("race", "1", "handled"))
    )
    with first.transaction() as db:  # another process settling member 0 right now
        db.execute(
            "INSERT INTO group_members (group_id, member, outcome) VALUES ('race', 0, 'handled')"
        )
        db.execute("UPDATE message_groups SET handled = handled + 1 WHERE id = 'race'")
        settling.start()
        assert waiting_for_lock.wait(30)
    settling.join(30)
    [last] = answers
    assert last is not None
    assert (last.handled, last.pending) == (2, 0)
    first.close()
    second.close()


def test_a_member_passed_on_gets_the_same_ids_on_a_repeat(ledgers: LedgerMaker) -> None:
    """A chain step passing member 1 of 2 on as three items keeps its id and adds two members,
    once: a redelivery of the step (another connection) gets the same ids, another step of the
    chain its own, and a different count is refused."""
    ledger = ledgers()
    ledger.open("g5", total=2, on_complete="done")
    assert ledger.pass_on("g5", "1", "split", 3) == ["1", "2", "3"]
    assert ledgers().pass_on("g5", "1", "split", 3) == ["1", "2", "3"]
    assert ledger.pass_on("g5", "1", "price", 1) == ["1"]
    assert ledger.pass_on("g5", "2", "price", 2) == ["2", "4"]
    with pytest.raises(GroupError, match="passed on as 3 items before and 2 now"):
        ledger.pass_on("g5", "1", "split", 2)
    status = ledger.status("g5")
    assert status is not None
    assert (status.total, status.pending) == (5, 5)
    for member in ["0", "1", "2", "3"]:
        assert ledger.settle("g5", member, "handled") is None
    last = ledger.settle("g5", "4", "handled")
    assert last is not None
    assert (last.total, last.handled) == (5, 5)


def test_a_chain_step_repeated_after_its_group_completed_changes_nothing(
    ledgers: LedgerMaker,
) -> None:
    """A chain step's message delivered again after its group completed (a duplicate, another
    connection) gets the ids it was given and changes nothing: the counts, the end and the
    completion (owed, then sent) stay as they were, and a sent completion is not owed again."""
    ledger = ledgers()
    ledger.open("g7", total=1, on_complete="done")
    assert ledger.pass_on("g7", "0", "split", 3) == ["0", "1", "2"]
    for member in ["0", "1", "2"]:
        ledger.settle("g7", member, "handled")
    owed = ledger.status("g7")
    assert ledgers().pass_on("g7", "0", "split", 3) == ["0", "1", "2"]
    assert ledger.status("g7") == owed
    ledger.mark_sent("g7")
    sent = ledger.status("g7")
    assert ledgers().pass_on("g7", "0", "split", 3) == ["0", "1", "2"]
    assert ledger.status("g7") == sent
    assert sent is not None
    assert (sent.total, sent.handled, sent.completion) == (3, 3, "sent")
    assert ledger.owed() == []


def test_an_owed_completion_is_claimed_by_one_at_a_time(
    ledgers: LedgerMaker, clock: ManualClock
) -> None:
    """The settler of the last member (recorded as the group's ``last_member``) holds the
    claim on publishing the completion for the lease; then one ``claim`` takes it, another gets
    nothing until that claim's lease ends too (its claimant killed); a release frees it at once;
    once sent, nobody can take it."""
    ledger = ledgers()
    ledger.open("g8", total=2, on_complete="done")
    ledger.settle("g8", "1", "handled")
    assert ledger.claim("g8") is None  # pending
    ledger.settle("g8", "0", "handled")
    clock.advance(COMPLETION_LEASE_S - 1)
    assert ledgers().claim("g8") is None  # the settler's lease runs
    clock.advance(1)
    taken = ledgers().claim("g8")
    assert taken is not None
    assert (taken.group_id, taken.handled, taken.completion, taken.last_member) == (
        "g8",
        2,
        "owed",
        "0",  # whose settlement completed it: its message carries the completion
    )
    clock.advance(COMPLETION_LEASE_S - 1)
    assert ledger.claim("g8") is None
    clock.advance(1)
    assert ledger.claim("g8") is not None  # the claimant died: taken again
    ledger.release("g8")
    assert ledgers().claim("g8") is not None
    ledger.mark_sent("g8")
    clock.advance(COMPLETION_LEASE_S)
    assert ledger.claim("g8") is None
    assert ledger.claim("unknown") is None


def test_of_claimants_racing_for_a_completion_one_takes_it(
    ledgers: LedgerMaker, clock: ManualClock
) -> None:
    """Four threads (SQLite: each its own connection; Azure: its own client) claim the same
    owed completion at once after its settler's lease: exactly one takes it."""
    ledger = ledgers()
    ledger.open("g9", total=1, on_complete="done")
    ledger.settle("g9", "0", "poisoned")
    clock.advance(COMPLETION_LEASE_S)
    claimants = [ledgers() for _ in range(4)]
    start, taken = threading.Barrier(len(claimants)), []

    def claim(claimant: GroupLedger) -> None:
        start.wait()
        taken.append(claimant.claim("g9"))

    threads = [threading.Thread(target=claim, args=(claimant,)) for claimant in claimants]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [status.poisoned for status in taken if status is not None] == [1]


def test_a_file_from_before_claims_gets_its_column(tmp_path: Path, clock: ManualClock) -> None:
    """A SQLite file whose groups table has no ``claimed_until`` nor ``last_member`` (made by an
    older version) gets them when a ledger opens it: its owed completion can be claimed."""
    storage = SqliteQueueStorage(tmp_path / "q.db", clock=clock)
    with storage.transaction() as db:
        db.execute(
            "CREATE TABLE message_groups (id TEXT PRIMARY KEY, total INTEGER NOT NULL,"
            " handled INTEGER NOT NULL DEFAULT 0, poisoned INTEGER NOT NULL DEFAULT 0,"
            " started REAL NOT NULL, ended REAL, on_complete TEXT NOT NULL,"
            " completion TEXT NOT NULL DEFAULT 'pending') WITHOUT ROWID"
        )
        now = clock.now().timestamp()
        db.execute(
            "INSERT INTO message_groups VALUES ('old', 1, 1, 0, ?, ?, 'done', 'owed')",
            (now, now),
        )
    clock.advance(COMPLETION_LEASE_S)
    claimed = SqliteGroupLedger(storage).claim("old")
    assert claimed is not None
    assert (claimed.handled, claimed.last_member) == (1, None)
    storage.close()
