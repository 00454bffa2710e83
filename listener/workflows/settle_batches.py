"""Concurrent settlements of group members written together: one ledger write for many members.

Every member's settlement is a write to the group ledger, made before its message is deleted. On
SQLite a write is a commit, and a commit waits for the disk (an fsync: milliseconds, ten times
the rest of the step); on Azure it is a read and an entity-group transaction per group
(``azure_groups``). Handlers finish side by side on many threads, so their settlements are
written the way databases group their commits: the first caller to find no write under way
writes every settlement queued by then in one ``settle_many`` (one transaction), and the
callers that queued meanwhile wait for its answer. A caller whose settlement was still
queued when a write ended becomes the next writer, so nobody waits for a stream of others.

Each caller still returns only once its own member is recorded, with its own answer: the order
"recorded, then deleted" holds for every message (``cloudqueue.listener.workflows.completion``).
A write that fails fails every settlement in it, and each of their messages is retried.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.workflows.group_ledger import GroupLedger, GroupStatus, Settled

__all__ = ["SettleBatches"]


class _Latch:
    """``threading.Event``'s ``set``, ``is_set`` and one ``wait``, on a bare lock held until it
    is set: an Event is a Condition, whose every wait makes a lock of its own, and a drain makes
    one per member. A settlement is set by one thread at a time (its batch's writer, or the one
    that hands it the next write), and waited for by its own caller only."""

    __slots__ = ("_gate", "_set")

    def __init__(self) -> None:
        self._gate = threading.Lock()
        self._gate.acquire()
        self._set = False

    def set(self) -> None:
        if not self._set:
            self._set = True
            self._gate.release()

    def is_set(self) -> bool:
        return self._set

    def wait(self) -> None:
        self._gate.acquire()


@dataclass(slots=True)
class _Settlement:
    group_id: str
    member_id: str
    outcome: Settled
    answered: _Latch = field(default_factory=_Latch)
    answer: GroupStatus | None = None
    error: Exception | None = None
    writes_next: bool = False


class SettleBatches:
    """Settles members through ``ledger.settle_many``, one write for all queued meanwhile."""

    def __init__(self, ledger: GroupLedger, *, most: int = 100) -> None:
        """``most``: settlements per write (Azure's entity-group transaction holds 100)."""
        self.ledger = ledger
        self.most = most
        self._queued: list[_Settlement] = []
        self._writing = False
        self._lock = threading.Lock()

    def settle(self, group_id: str, member_id: str, outcome: Settled) -> GroupStatus | None:
        """``GroupLedger.settle``'s answer for this member, written with whatever else is queued."""
        mine = _Settlement(group_id, member_id, outcome)
        with self._lock:
            self._queued.append(mine)
            writes = not self._writing
            self._writing = True
        if not writes:
            mine.answered.wait()
            if not mine.writes_next:
                return _answer_of(mine)
        self._write_until_answered(mine)
        return _answer_of(mine)

    def _write_until_answered(self, mine: _Settlement) -> None:
        while not mine.answered.is_set() or mine.writes_next:
            mine.writes_next = False
            with self._lock:
                batch, self._queued = self._queued[: self.most], self._queued[self.most :]
            self._write(batch)
            with self._lock:
                if not self._queued:
                    self._writing = False
                elif mine.answered.is_set():  # hand the next write to one still waiting
                    following = self._queued[0]
                    following.writes_next = True
                    following.answered.set()

    def _write(self, batch: list[_Settlement]) -> None:
        try:
            answers = self.ledger.settle_many(
                [(each.group_id, each.member_id, each.outcome) for each in batch]
            )
        except BaseException as error:  # every caller in the batch hears of it and retries
            for each in batch:
                each.error = error if isinstance(error, Exception) else _interrupted()
            if not isinstance(error, Exception):
                raise
        else:
            for each, answer in zip(batch, answers, strict=True):
                each.answer = answer
        finally:
            for each in batch:
                each.answered.set()


def _interrupted() -> Exception:
    return StorageError("the settlement write was interrupted")


def _answer_of(settlement: _Settlement) -> GroupStatus | None:
    if settlement.error is not None:
        raise settlement.error
    return settlement.answer
