"""The group ledger on Azure: the ``cloudqueuegroups`` table of the queues' account (the Table
service, the ``tables`` extra), each change one entity-group transaction in the group's partition.

The rows are laid out in ``azure_group_rows``: a group row, ``SHARDS`` counter rows, a row per
settled member. ``settle`` reads the member's shard (one point read), then writes in one
transaction the member's row (*create*: a 409 means it settled before, a duplicate, and nothing of
the transaction is written) and the shard's new count (*update If-Match*: a 412 means another
member of the shard settled meanwhile: read again, try again). The settlement that completes its
shard also updates the group row with ``If-Match`` in the same transaction, and the one that
completes the last shard records there the completion *owed* and the group's end: of two
settlements racing to be last, one finds the group row changed and reads again, so exactly one
hears "last".

Rate: every row of a group is in one partition, and Azure's published target for one partition
is 2,000 entities per second. A settlement writes 2 entities (member and shard) and reads 1, so
one group sustains about 1,000 settlements per second on Azure's target (about 660 if reads count
alike); many groups, in their own partitions, scale past that. The shards keep that rate from
being spent on lost If-Match races: one counter row would let only one of the settlements read
at the same moment win, the others reading and writing again.

Owed completions are also indexed in a small partition of their own (``$owed``, one row per
group), written *before* the transaction that may owe the completion (a transaction holds one
partition only) and deleted when the completion is marked sent. ``owed()``, which every listener
calls at start, then reads that partition and the groups it names, never the whole table. An entry
whose transaction lost its race stays until the group completes (its last shard completes in
any case) and then leaves with ``mark_sent``; without the index each start would scan every
group the account ever ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cloudqueue.listener import errors
from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.stores.azure_tables import (
    table_from_account_url,
    table_from_connection_string,
)
from cloudqueue.listener.workflows.azure_group_rows import (
    BEFORE_MEMBERS,
    GROUP_ROW,
    SHARDS,
    Shard,
    addition_key,
    addition_of,
    addition_row,
    completion_of,
    done_counts,
    final_status,
    members_of_shard,
    new_rows,
    shard_of,
    shard_row,
    status_of,
)
from cloudqueue.listener.workflows.group_ledger import (
    Addition,
    GroupError,
    GroupStatus,
    Settled,
    added_again,
    check_count,
    member_ids,
    member_index,
    open_group,
    unsettled_ids,
)
from cloudqueue.listener.workflows.table_calls import (
    if_match,
    quoted_key,
    read_row,
    submit,
    table_call,
)

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential
    from azure.data.tables import TableClient

__all__ = ["GROUPS_TABLE", "MAX_TRIES", "OWED_PARTITION", "AzureGroupLedger"]

GROUPS_TABLE = "cloudqueuegroups"
OWED_PARTITION = "$owed"
MAX_TRIES = 50
"""Transactions lost to other writers before a change gives up (TransientStorageError: the
member's message is then retried later)."""


class AzureGroupLedger:
    """Groups in the account's Table service, each change one entity-group transaction."""

    def __init__(self, table: TableClient, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._table = table
        self._clock = clock

    @classmethod
    def from_connection_string(cls, connection_string: str, **overrides: Any) -> AzureGroupLedger:
        return cls(table_from_connection_string(connection_string, GROUPS_TABLE, **overrides))

    @classmethod
    def from_account_url(cls, account_url: str, credential: TokenCredential) -> AzureGroupLedger:
        """Connect to a table service URL with a token credential (Microsoft Entra ID)."""
        return cls(table_from_account_url(account_url, GROUPS_TABLE, credential))

    def open(self, group_id: str, *, total: int, on_complete: str) -> GroupStatus:
        check_count(total, "a group")
        group = GroupStatus(group_id, total, 0, 0, self._clock.now(), None, on_complete)
        rows = new_rows(group, quoted_key(group_id))
        if submit(self._table, [("create", row) for row in rows], "open a group") is not None:
            raise GroupError(f"group {group_id!r} exists already")
        return group

    def add_members(self, group_id: str, count: int, *, by: str | None = None) -> Addition:
        check_count(count, "an addition")
        partition = quoted_key(group_id)
        for _ in range(MAX_TRIES):
            earlier = None if by is None else read_row(self._table, partition, addition_key(by))
            if earlier is not None:  # a repeat, or another adder's create won the race
                return added_again(addition_of(earlier), count, group_id)
            head, shards = self._read_group(partition)
            if head is None:
                raise GroupError(f"no group {group_id!r}")
            group = open_group(status_of(head, shards), group_id)
            total = group.total + count
            grown = [Shard(s.shard, total, s.handled, s.poisoned, s.etag) for s in shards]
            # Every shard's total is merged without If-Match; only the group row's must hold.
            # The merge changes each shard's ETag, so a settlement that read a shard before it
            # fails its own If-Match and reads the new total; one that wrote first completed
            # no shard unless it updated the group row too, which fails this transaction.
            # Matching every shard as well lost the race to any settlement of the group (7
            # tries per addition on average, up to 36, in the kill -9 test on Azurite).
            changes = [_update(partition, GROUP_ROW, head, total=total, **done_counts(grown))]
            changes += [_merged(partition, shard_row(s.shard), total=total) for s in shards]
            if by is not None:
                changes.append(("create", addition_row(partition, by, group.total, count)))
            if submit(self._table, changes, "add group members") is None:
                return Addition(member_ids(group.total, count))
        raise _contended(group_id)

    def mark_added(self, group_id: str, by: str) -> None:
        row = {"PartitionKey": quoted_key(group_id), "RowKey": addition_key(by), "put": True}
        with table_call("mark a group addition put"):
            self._table.upsert_entity(row)

    def settle(self, group_id: str, member_id: str, outcome: Settled) -> GroupStatus | None:
        index = member_index(member_id, 10**12)
        if index is None:
            return None
        for _ in range(MAX_TRIES):
            row = read_row(self._table, quoted_key(group_id), shard_row(shard_of(index)))
            if row is None or member_index(member_id, int(row["total"])) is None:
                return None  # an unknown group, or a stray member id
            changes, last = self._settlement(group_id, member_id, outcome, row)
            rejection = submit(self._table, changes, "settle a group member")
            if rejection is None:
                return last
            if rejection == ("exists", 0):
                return None  # settled before: a redelivery or a duplicate
        raise _contended(group_id)

    def settle_many(
        self, settlements: Sequence[tuple[str, str, Settled]]
    ) -> list[GroupStatus | None]:
        """One transaction per settlement, in order (members of one shard could share one: not
        built). A failure part way leaves the first recorded; retried, each is a duplicate, and
        a completion it owed is found owed on the redelivery."""
        return [self.settle(*settlement) for settlement in settlements]

    def pass_on(self, group_id: str, member_id: str, step: str, count: int) -> list[str]:
        raise GroupError(
            f"group {group_id!r}: a chain step inside a group is not built on Azure yet "
            "(its member would never settle): send the next step's items outside the group"
        )

    def status(self, group_id: str) -> GroupStatus | None:
        head, shards = self._read_group(quoted_key(group_id))
        return None if head is None else status_of(head, shards)

    def pending_members(self, group_id: str, limit: int) -> list[str]:
        """One query of the group's member rows (a command's read, not a worker's)."""
        group = self.status(group_id)
        if group is None or group.pending == 0:
            return []
        with table_call("read a group's members"):
            settled = {
                int(row["RowKey"])
                for row in self._table.query_entities(
                    "PartitionKey eq @group and RowKey ge @members",
                    parameters={"group": quoted_key(group_id), "members": BEFORE_MEMBERS},
                    select=["RowKey"],
                )
                if str(row["RowKey"]).isdigit()
            }
        return unsettled_ids(group.total, settled, limit)

    def newest(self, limit: int) -> list[GroupStatus]:
        """A scan of the table for group rows (billed per page it reads: a command's or the
        dashboard's read, never a worker's), then each listed group's counts."""
        with table_call("list groups"):
            heads = list(
                self._table.query_entities("RowKey eq @row", parameters={"row": GROUP_ROW})
            )
        heads.sort(key=lambda head: head["started"], reverse=True)
        listed = (self.status(str(head["group"])) for head in heads[:limit])
        return [group for group in listed if group is not None]

    def owed(self) -> list[GroupStatus]:
        with table_call("list owed groups"):
            entries = list(
                self._table.query_entities(
                    "PartitionKey eq @owed", parameters={"owed": OWED_PARTITION}
                )
            )
        owed = []
        for entry in entries:
            status = self.status(str(entry["group"]))
            if status is not None and status.completion == "owed":
                owed.append(status)
            elif status is not None and status.completion == "sent":
                self._unindex(status.group_id)
        return owed

    def mark_sent(self, group_id: str) -> None:
        partition = quoted_key(group_id)
        for _ in range(MAX_TRIES):
            head = read_row(self._table, partition, GROUP_ROW)
            if head is None or completion_of(head) != "owed":
                break
            change = _update(partition, GROUP_ROW, head, completion="sent")
            if submit(self._table, [change], "mark a group's completion sent") is None:
                break
        self._unindex(group_id)

    def close(self) -> None:
        self._table.close()

    def _settlement(
        self, group_id: str, member_id: str, outcome: Settled, row: dict[str, Any]
    ) -> tuple[list[tuple[Any, ...]], GroupStatus | None]:
        """The transaction that settles the member whose shard was read as ``row``, and the
        group's final status when it settles the group's last member."""
        partition, shard = quoted_key(group_id), Shard.of(row)
        member = {"PartitionKey": partition, "RowKey": str(int(member_id)), "outcome": outcome}
        counted = {outcome: getattr(shard, outcome) + 1}
        changes = [("create", member), _update(partition, row["RowKey"], row, **counted)]
        if shard.handled + shard.poisoned + 1 < members_of_shard(shard.shard, shard.total):
            return changes, None
        change, last = self._shard_done(group_id, shard, outcome)
        return [*changes, change], last

    def _shard_done(
        self, group_id: str, shard: Shard, outcome: Settled
    ) -> tuple[tuple[Any, ...], GroupStatus | None]:
        """The group row's update for a settlement that completes ``shard``, and the group's
        final status when it completes the group too (its completion then indexed as owed)."""
        partition = quoted_key(group_id)
        head = read_row(self._table, partition, GROUP_ROW)
        if head is None:
            raise errors.StorageError(f"group {group_id!r} has shards but no group row")
        counts = {
            "shards_done": int(head["shards_done"]) + 1,
            "handled_done": int(head["handled_done"]) + shard.handled + (outcome == "handled"),
            "poisoned_done": int(head["poisoned_done"]) + shard.poisoned + (outcome == "poisoned"),
        }
        if counts["shards_done"] < SHARDS:
            return _update(partition, GROUP_ROW, head, **counts), None
        self._index_owed(group_id)
        ended = self._clock.now()
        closing = {**counts, "ended": ended, "completion": "owed"}
        return _update(partition, GROUP_ROW, head, **closing), final_status(head | closing, ended)

    def _read_group(self, partition: str) -> tuple[dict[str, Any] | None, list[Shard]]:
        """The group row and its shards, in one query (their keys sort before the members')."""
        with table_call("read a group"):
            rows = [
                {**row, "etag": row.metadata["etag"]}
                for row in self._table.query_entities(
                    "PartitionKey eq @group and RowKey lt @members",
                    parameters={"group": partition, "members": BEFORE_MEMBERS},
                )
            ]
        head = next((row for row in rows if row["RowKey"] == GROUP_ROW), None)
        return head, [Shard.of(row) for row in rows if row["RowKey"] != GROUP_ROW]

    def _index_owed(self, group_id: str) -> None:
        entry = {"PartitionKey": OWED_PARTITION, "RowKey": quoted_key(group_id), "group": group_id}
        with table_call("index an owed group completion"):
            self._table.upsert_entity(entry)

    def _unindex(self, group_id: str) -> None:
        with table_call("unindex a sent group completion"):
            self._table.delete_entity(OWED_PARTITION, quoted_key(group_id))

    def __repr__(self) -> str:
        return f"AzureGroupLedger(table={GROUPS_TABLE!r})"


def _update(partition: str, row: str, read: dict[str, Any], **values: Any) -> tuple[Any, ...]:
    """A transaction's update of ``row``'s ``values``, applied only if it is still as ``read``."""
    entity = {"PartitionKey": partition, "RowKey": row, **values}
    return ("update", entity, if_match(str(read["etag"])))


def _merged(partition: str, row: str, **values: Any) -> tuple[Any, ...]:
    """A transaction's update of ``row``'s ``values``, whatever the row holds meanwhile."""
    from azure.data.tables import UpdateMode

    return (
        "update",
        {"PartitionKey": partition, "RowKey": row, **values},
        {"mode": UpdateMode.MERGE},
    )


def _contended(group_id: str) -> errors.TransientStorageError:
    return errors.TransientStorageError(
        f"group {group_id!r} changed by others {MAX_TRIES} times in a row"
    )
