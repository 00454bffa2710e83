"""The rows of one group in the ``cloudqueuegroups`` table (``azure_groups``), and the arithmetic
of its sharded counter.

Partition key: the group id (percent-encoded). Rows, ``$`` sorting before the members' digits:

* ``$group``, the group row: ``group`` (its id as given), ``total``, ``on_complete``, ``started``,
  ``ended``, ``completion``, ``last_member`` (whose settlement completed it), ``claimed_until``
  (a claim on publishing the completion owed, ``azure_claims``), and what the *complete* shards
  hold: ``shards_done``, ``handled_done``, ``poisoned_done``;
* ``$group-00`` ... ``$group-15``, the counter's shards: ``total`` (the group's, copied on each
  so that a settlement's ``If-Match`` on its shard also holds the total it decided by),
  ``handled``, ``poisoned`` of the shard's members: runs of ``RUN`` consecutive members, dealt to
  the shards in turn (members 0-15 to shard 0, 16-31 to shard 1, ... 256-271 to shard 0 again);
* one row per settled member, row key its member id, with its ``outcome``;
* one row per member a chain step passed on (``chain_row``: ``chain:<member>:<step>``, after the
  members' digits), with the ``count`` of items it was passed on as and the number of the
  first member that added (``first_added``): a redelivered step is given the same ids;
* one row per named addition of members at run time (``add:<name>``, after the members' digits):
  its ``first`` member number, ``count`` and whether they were all ``put``.

A shard is *complete* when every one of its members settled; the group is complete when all its
shards are. Only the settlement that completes a shard touches the group row, so the group row
takes ``SHARDS`` writes per group, not one per member.

Why runs and not a member's number modulo ``SHARDS``: members are sent in order and a listener
gets them about in order, 32 at a time, so the settlements one process writes together are
neighbours. In runs they fall in one or two shards: one transaction with one or two ``If-Match``
updates settles them all, and two processes, working on different stretches of the group, touch
different shards. Dealt one by one, every batch would touch all 16 shards, and any two batches
written at once would collide.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from cloudqueue.listener.workflows.group_ledger import Addition, Completion, GroupStatus
from cloudqueue.listener.workflows.group_rules import member_ids

SHARDS = 16
"""Counter rows per group: 16 writers of one group proceed without a lost If-Match race
between them (a transaction holds at most 100 rows: ``add_members`` writes all shards and the
group row in one)."""

RUN = 16
"""Consecutive members per shard before the next shard takes over (see the module)."""

GROUP_ROW = "$group"
BEFORE_MEMBERS = "0"
"""Member rows' keys are digits: every key below ``"0"`` is the group row or a shard."""


def shard_row(shard: int) -> str:
    return f"{GROUP_ROW}-{shard:02d}"


def chain_row(member_id: str, step: str) -> str:
    return f"chain:{quote(member_id, safe='')}:{quote(step, safe='')}"


def shard_of(index: int) -> int:
    return (index // RUN) % SHARDS


def members_of_shard(shard: int, total: int) -> int:
    """How many of members ``0 .. total-1`` fall in ``shard``."""
    cycles, rest = divmod(total, RUN * SHARDS)
    return cycles * RUN + min(RUN, max(0, rest - shard * RUN))


@dataclass(frozen=True, slots=True)
class Shard:
    """One counter row as read."""

    shard: int
    total: int
    handled: int
    poisoned: int
    etag: str

    @classmethod
    def of(cls, row: dict[str, Any]) -> Shard:
        return cls(
            int(row["RowKey"].rsplit("-", 1)[1]),
            int(row["total"]),
            int(row["handled"]),
            int(row["poisoned"]),
            str(row["etag"]),
        )

    @property
    def complete(self) -> bool:
        return self.handled + self.poisoned == members_of_shard(self.shard, self.total)


def new_rows(group: GroupStatus, partition: str) -> list[dict[str, Any]]:
    """The group row and its shards, for a group just opened."""
    empty = sum(members_of_shard(s, group.total) == 0 for s in range(SHARDS))
    head = {
        "PartitionKey": partition,
        "RowKey": GROUP_ROW,
        "group": group.group_id,
        "total": group.total,
        "on_complete": group.on_complete,
        "started": group.started,
        "completion": "pending",
        "shards_done": empty,
        "handled_done": 0,
        "poisoned_done": 0,
    }
    shards = [
        {"PartitionKey": partition, "RowKey": shard_row(s), "total": group.total}
        | {"handled": 0, "poisoned": 0}
        for s in range(SHARDS)
    ]
    return [head, *shards]


def done_counts(shards: list[Shard]) -> dict[str, int]:
    """The group row's counts of complete shards, recounted from all of them."""
    complete = [shard for shard in shards if shard.complete]
    return {
        "shards_done": len(complete),
        "handled_done": sum(shard.handled for shard in complete),
        "poisoned_done": sum(shard.poisoned for shard in complete),
    }


def status_of(head: dict[str, Any], shards: list[Shard]) -> GroupStatus:
    """A group's status from its group row and shards (as read together)."""
    ended = head.get("ended")
    return GroupStatus(
        str(head["group"]),
        int(head["total"]),
        sum(shard.handled for shard in shards),
        sum(shard.poisoned for shard in shards),
        _utc(head["started"]),
        None if ended is None else _utc(ended),
        str(head["on_complete"]),
        completion_of(head),
        _last_member(head),
    )


def final_status(head: dict[str, Any], ended: datetime) -> GroupStatus:
    """The status of a group whose last shard completes with ``head`` (its new counts)."""
    return GroupStatus(
        str(head["group"]),
        int(head["total"]),
        int(head["handled_done"]),
        int(head["poisoned_done"]),
        _utc(head["started"]),
        ended,
        str(head["on_complete"]),
        "owed",
        _last_member(head),
    )


def _last_member(head: dict[str, Any]) -> str | None:
    last = head.get("last_member")
    return None if last is None else str(last)


def completion_of(head: dict[str, Any]) -> Completion:
    state = head.get("completion")
    return "owed" if state == "owed" else "sent" if state == "sent" else "pending"


def addition_key(name: str) -> str:
    """The row key of a named addition: ``add:`` sorts after the members' digits."""
    return f"add:{quote(name, safe='')}"


def addition_row(partition: str, name: str, first: int, count: int) -> dict[str, Any]:
    """The row recording an addition of ``count`` members from number ``first``."""
    row = {"PartitionKey": partition, "RowKey": addition_key(name)}
    return row | {"first": first, "count": count, "put": False}


def addition_of(row: dict[str, Any]) -> Addition:
    return Addition(member_ids(int(row["first"]), int(row["count"])), bool(row["put"]))


def _utc(value: datetime) -> datetime:
    """The SDK's datetime subclass as a plain aware UTC datetime."""
    return datetime.fromtimestamp(value.timestamp(), UTC)


__all__ = [
    "BEFORE_MEMBERS",
    "GROUP_ROW",
    "RUN",
    "SHARDS",
    "Shard",
    "addition_key",
    "addition_of",
    "addition_row",
    "chain_row",
    "completion_of",
    "done_counts",
    "final_status",
    "members_of_shard",
    "new_rows",
    "shard_of",
    "shard_row",
    "status_of",
]
