"""The group ledger in memory (``memory://``): a dict under one lock, for this process only."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.workflows.group_ledger import (
    Addition,
    GroupError,
    GroupStatus,
    Settled,
    claimable,
    lease_end,
)
from cloudqueue.listener.workflows.group_rules import (
    added_again,
    check_count,
    counted,
    member_ids,
    member_index,
    open_group,
    passed_again,
    unsettled_ids,
)


class InMemoryGroupLedger:
    """Groups in a dict under one lock, for this process only (``memory://``)."""

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._groups: dict[str, GroupStatus] = {}
        self._settled: dict[str, set[int]] = {}
        self._passed: dict[tuple[str, str, str], list[str]] = {}
        self._added: dict[tuple[str, str], Addition] = {}
        self._claims: dict[str, datetime] = {}
        """Until when an owed completion is claimed (beyond its settler's lease)."""
        self._lock = threading.Lock()

    def open(self, group_id: str, *, total: int, on_complete: str) -> GroupStatus:
        check_count(total, "a group")
        with self._lock:
            if group_id in self._groups:
                raise GroupError(f"group {group_id!r} exists already")
            opened = GroupStatus(group_id, total, 0, 0, self._clock.now(), None, on_complete)
            self._groups[group_id], self._settled[group_id] = opened, set()
            return opened

    def add_members(self, group_id: str, count: int, *, by: str | None = None) -> Addition:
        check_count(count, "an addition")
        with self._lock:
            earlier = None if by is None else self._added.get((group_id, by))
            if earlier is not None:
                return added_again(earlier, count, group_id)
            group = open_group(self._groups.get(group_id), group_id)
            self._groups[group_id] = replace(group, total=group.total + count)
            added = Addition(member_ids(group.total, count))
            if by is not None:
                self._added[(group_id, by)] = added
            return added

    def mark_added(self, group_id: str, by: str) -> None:
        with self._lock:
            added = self._added.get((group_id, by))
            if added is not None:
                self._added[(group_id, by)] = replace(added, put=True)

    def pass_on(self, group_id: str, member_id: str, step: str, count: int) -> list[str]:
        check_count(count, "a chain step's items")
        with self._lock:
            earlier = self._passed.get((group_id, member_id, step))
            if earlier is not None:  # a repeat, answered even once the group completed
                return passed_again(earlier, count, group_id, member_id)
            group = open_group(self._groups.get(group_id), group_id)
            added = member_ids(group.total, count - 1)
            self._groups[group_id] = replace(group, total=group.total + count - 1)
            passed = self._passed[(group_id, member_id, step)] = [member_id, *added]
            return passed

    def settle(self, group_id: str, member_id: str, outcome: Settled) -> GroupStatus | None:
        return self.settle_many([(group_id, member_id, outcome)])[0]

    def settle_many(
        self, settlements: Sequence[tuple[str, str, Settled]]
    ) -> list[GroupStatus | None]:
        with self._lock:
            return [self._settle(*settlement) for settlement in settlements]

    def _settle(self, group_id: str, member_id: str, outcome: Settled) -> GroupStatus | None:
        """One settlement, under the lock."""
        group = self._groups.get(group_id)
        index = None if group is None else member_index(member_id, group.total)
        if group is None or index is None or index in self._settled[group_id]:
            return None
        self._settled[group_id].add(index)
        group = counted(group, outcome)
        if group.pending == 0:
            ended = self._clock.now()
            group = replace(group, ended=ended, completion="owed", last_member=str(index))
        self._groups[group_id] = group
        return group if group.done else None

    def status(self, group_id: str) -> GroupStatus | None:
        with self._lock:
            return self._groups.get(group_id)

    def owed(self) -> list[GroupStatus]:
        with self._lock:
            return [group for group in self._groups.values() if group.completion == "owed"]

    def claim(self, group_id: str) -> GroupStatus | None:
        with self._lock:
            group, now = self._groups.get(group_id), self._clock.now()
            if group is None or not claimable(group, self._claims.get(group_id), now):
                return None
            self._claims[group_id] = lease_end(now)
            return group

    def release(self, group_id: str) -> None:
        with self._lock:
            self._claims[group_id] = self._clock.now()

    def pending_members(self, group_id: str, limit: int) -> list[str]:
        with self._lock:
            group, settled = self._groups.get(group_id), self._settled.get(group_id, set())
            total = 0 if group is None else group.total
            return unsettled_ids(total, settled, limit)

    def newest(self, limit: int) -> list[GroupStatus]:
        with self._lock:
            groups = sorted(self._groups.values(), key=lambda group: group.started, reverse=True)
            return groups[:limit]

    def mark_sent(self, group_id: str) -> None:
        with self._lock:
            group = self._groups.get(group_id)
            if group is not None and group.done:
                self._groups[group_id] = replace(group, completion="sent")
                self._claims.pop(group_id, None)

    def close(self) -> None:
        """Nothing to release."""

    def __repr__(self) -> str:
        return f"InMemoryGroupLedger(groups={len(self._groups)})"


__all__ = ["InMemoryGroupLedger"]
