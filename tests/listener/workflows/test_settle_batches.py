"""Settlements made side by side are written together: while one write is under way, the
settlements queued behind it go in the next write, one ledger call, and each caller hears its
own answer -- or the error of the write it was in."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from cloudqueue.listener.errors import TransientStorageError
from cloudqueue.listener.workflows.group_ledger import GroupStatus, Settled
from cloudqueue.listener.workflows.memory_groups import InMemoryGroupLedger
from cloudqueue.listener.workflows.settle_batches import SettleBatches
from tests.support.polling import eventually


class GatedLedger(InMemoryGroupLedger):
    """An in-memory ledger whose first write waits for ``gate``; it notes each write's size and
    the thread that made it, and can fail its writes."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.writing = threading.Event()
        self.writes: list[tuple[int, str]] = []
        self.failing = False

    def settle_many(
        self, settlements: Sequence[tuple[str, str, Settled]]
    ) -> list[GroupStatus | None]:
        self.writing.set()
        if not self.writes:
            assert self.gate.wait(10)
        self.writes.append((len(settlements), threading.current_thread().name))
        if self.failing:
            raise TransientStorageError("the ledger is unreachable")
        return super().settle_many(settlements)


def settle_in_threads(
    batches: SettleBatches, members: list[str], answers: dict[str, object]
) -> list[threading.Thread]:
    def settle(member: str) -> None:
        try:
            answers[member] = batches.settle("g", member, "handled")
        except TransientStorageError as error:
            answers[member] = error

    threads = [
        threading.Thread(target=settle, args=(member,), name=f"member-{member}")
        for member in members
    ]
    for thread in threads:
        thread.start()
    return threads


def test_settlements_queued_behind_a_write_go_together_in_the_next() -> None:
    """The first member's write is held; five more settle meanwhile: they are written in one
    call, by one of them, and only the last member's caller hears the group complete."""
    ledger = GatedLedger()
    ledger.open("g", total=6, on_complete="done")
    batches = SettleBatches(ledger)
    answers: dict[str, object] = {}
    (first,) = settle_in_threads(batches, ["0"], answers)
    assert ledger.writing.wait(10)
    others = settle_in_threads(batches, ["1", "2", "3", "4", "5"], answers)
    eventually(lambda: len(batches._queued) == 5)
    ledger.gate.set()
    for thread in [first, *others]:
        thread.join(10)
    assert [size for size, _ in ledger.writes] == [1, 5]
    assert ledger.writes[0][1] == "member-0"
    assert ledger.writes[1][1] != "member-0"  # the first caller left once answered
    completed = [member for member, answer in answers.items() if answer is not None]
    assert len(completed) == 1
    final = answers[completed[0]]
    assert isinstance(final, GroupStatus)
    assert (final.handled, final.pending) == (6, 0)


def test_a_failed_write_fails_every_settlement_in_it_and_the_next_write_is_tried_afresh() -> None:
    """Three settlements in a failing write each raise its error; once the ledger is back, the
    same members settle and are counted once each."""
    ledger = GatedLedger()
    ledger.open("g", total=3, on_complete="done")
    ledger.failing = True
    batches = SettleBatches(ledger)
    answers: dict[str, object] = {}
    (first,) = settle_in_threads(batches, ["0"], answers)
    assert ledger.writing.wait(10)
    others = settle_in_threads(batches, ["1", "2"], answers)
    eventually(lambda: len(batches._queued) == 2)
    ledger.gate.set()
    for thread in [first, *others]:
        thread.join(10)
    assert all(isinstance(answer, TransientStorageError) for answer in answers.values())
    assert len(answers) == 3
    ledger.failing = False
    last = [batches.settle("g", member, "handled") for member in ["0", "1", "2"]]
    assert last[:2] == [None, None]
    assert last[2] is not None
    assert (last[2].handled, last[2].pending) == (3, 0)


@pytest.mark.parametrize("most", [1, 3])
def test_many_threads_settling_one_group_are_counted_once_each(most: int) -> None:
    """Forty threads settle forty members, each twice, through writes of at most ``most``: one
    caller hears the group complete, with 40 handled."""
    ledger = InMemoryGroupLedger()
    ledger.open("g", total=40, on_complete="done")
    batches = SettleBatches(ledger, most=most)
    answers: list[GroupStatus | None] = []
    lock = threading.Lock()

    def settle(member: str) -> None:
        for _ in range(2):
            answer = batches.settle("g", member, "handled")
            with lock:
                answers.append(answer)

    threads = [threading.Thread(target=settle, args=(str(n),)) for n in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    finals = [answer for answer in answers if answer is not None]
    assert len(answers) == 80
    assert len(finals) == 1
    assert (finals[0].handled, finals[0].pending) == (40, 0)
