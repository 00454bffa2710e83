"""Which rows one entity-group transaction writes to settle members of a group on Azure
(``azure_groups.AzureGroupLedger.settle_many``), decided from the group's rows as read: rows in,
operations out, no I/O.

A transaction settles several members of one group at once: it *creates* each member's row (one
that exists fails the whole transaction with 409: that member settled before), *updates* each
shard they fall in with its new counts, ``If-Match`` the shard as read (412: another writer
counted there meanwhile), and, when it completes shards, the group row, ``If-Match`` too: the
completed shards' counts move to the group row, and the transaction that completes the last
shard records the completion *owed*. Of two writers racing to complete the last shards, one
finds the group row changed and reads again, so exactly one transaction -- and in it one
settlement, the caller's last -- hears "last".

A transaction holds at most ``MAX_ENTITIES`` rows: members are cut into transactions, the
members of one shard together (members in runs share shards: ``azure_group_rows``), each
transaction keeping room for its shards and the group row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.workflows.azure_group_rows import (
    GROUP_ROW,
    SHARDS,
    Shard,
    final_status,
    members_of_shard,
    shard_of,
    shard_row,
)
from cloudqueue.listener.workflows.group_ledger import GroupStatus, Settled
from cloudqueue.listener.workflows.group_rules import member_index
from cloudqueue.listener.workflows.table_calls import update_if_match

__all__ = ["MAX_ENTITIES", "Member", "Settling", "by_group", "in_transactions", "settling"]

MAX_ENTITIES = 100
"""Rows one entity-group transaction may hold (the Table service's limit)."""


@dataclass(frozen=True, slots=True)
class Member:
    """A settlement asked for: the member's number, how it settled, and its place in the call."""

    position: int
    index: int
    outcome: Settled


@dataclass(frozen=True, slots=True)
class Settling:
    """One transaction: its operations (first each member's create, in the order of
    ``members``), and the group's final status when it completes the group."""

    operations: list[tuple[Any, ...]]
    members: list[Member]
    last: GroupStatus | None

    @property
    def last_position(self) -> int:
        """The place in the call of the settlement told it settled the last member."""
        return max(member.position for member in self.members)


def by_group(settlements: Sequence[tuple[str, str, Settled]]) -> dict[str, list[Member]]:
    """The settlements by group, each member once (a repeat in the same call, a duplicate, and
    an id that is no member number are answered None without a write)."""
    groups: dict[str, list[Member]] = {}
    seen: set[tuple[str, int]] = set()
    for position, (group_id, member_id, outcome) in enumerate(settlements):
        index = member_index(member_id, 10**12)
        if index is None or (group_id, index) in seen:
            continue
        seen.add((group_id, index))
        groups.setdefault(group_id, []).append(Member(position, index, outcome))
    return groups


def in_transactions(members: list[Member]) -> list[list[Member]]:
    """``members`` cut into transactions of at most ``MAX_ENTITIES`` rows (theirs, their
    shards', the group row's), the members of one shard together."""
    cuts: list[list[Member]] = []
    current: list[Member] = []
    shards: set[int] = set()
    for member in sorted(members, key=lambda member: (shard_of(member.index), member.index)):
        touched = shards | {shard_of(member.index)}
        if current and len(current) + 1 + len(touched) + 1 > MAX_ENTITIES:
            cuts.append(current)
            current, touched = [], {shard_of(member.index)}
        current.append(member)
        shards = touched
    return [*cuts, current] if current else cuts


def settling(
    partition: str, head: dict[str, Any], shards: list[Shard], members: list[Member], now: datetime
) -> Settling:
    """The transaction settling ``members`` (none settled before, as far as the rows read tell)
    on the group row ``head`` and its ``shards`` as read."""
    missing = {shard_of(member.index) for member in members} - {shard.shard for shard in shards}
    if missing:  # never a member's row without its count
        raise StorageError(f"group row {head['group']!r} has no shard {min(missing)}")
    operations: list[tuple[Any, ...]] = [
        ("create", {"PartitionKey": partition, "RowKey": str(m.index), "outcome": m.outcome})
        for m in members
    ]
    completed: list[tuple[int, int]] = []
    for shard in shards:
        mine = [member.outcome for member in members if shard_of(member.index) == shard.shard]
        if not mine:
            continue
        handled = shard.handled + mine.count("handled")
        poisoned = shard.poisoned + mine.count("poisoned")
        row = shard_row(shard.shard)
        counts = {"handled": handled, "poisoned": poisoned}
        operations.append(update_if_match(partition, row, shard.etag, **counts))
        if handled + poisoned == members_of_shard(shard.shard, shard.total):
            completed.append((handled, poisoned))
    if not completed:
        return Settling(operations, members, None)
    done = {
        "shards_done": int(head["shards_done"]) + len(completed),
        "handled_done": int(head["handled_done"]) + sum(handled for handled, _ in completed),
        "poisoned_done": int(head["poisoned_done"]) + sum(poisoned for _, poisoned in completed),
    }
    if done["shards_done"] < SHARDS:
        operations.append(update_if_match(partition, GROUP_ROW, str(head["etag"]), **done))
        return Settling(operations, members, None)
    last = max(members, key=lambda member: member.position)  # the settlement told "last"
    closing = {**done, "ended": now, "completion": "owed", "last_member": str(last.index)}
    operations.append(update_if_match(partition, GROUP_ROW, str(head["etag"]), **closing))
    return Settling(operations, members, final_status(head | closing, now))
