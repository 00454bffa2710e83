"""The group ledger on Azure: the ``cloudqueuegroups`` table of the queues' account (the Table
service, the ``tables`` extra), each change one entity-group transaction in the group's partition.

The rows are laid out in ``azure_group_rows``: a group row, ``SHARDS`` counter rows, a row per
settled member, a row per member a chain step passed on. ``settle_many`` takes the group row and
its shards as this ledger's last transaction on the group left them (``azure_known_rows``: the
ETags it returned), else reads them (one query), then settles the members of one group in one
transaction (``azure_settlements``): each member's row *created* (a 409 names a member that
settled before: it is left out and the rest written again, the rows held still holding), the
shards they fall in *updated If-Match* with their new counts (a 412: another writer counted there
meanwhile: read again, try again), and the group row when shards complete -- the last of them
owing the completion, to exactly one settlement. ``settle`` is ``settle_many`` of one.

Rate: every row of a group is in one partition, and Azure's published target for one partition
is 2,000 entities per second. Settled one by one, a member writes 2 entities (its row and its
shard): about 1,000 settlements per second for one group. Settled together, as a listener's
settlements are (``settle_batches``), a transaction of n neighbours writes n + 1 or n + 2 rows:
close to 2,000 members per second; many groups, in their own partitions, scale past that. The
shards keep that rate from being spent on lost If-Match races between processes.

Owed completions are also indexed in a small partition of their own (``$owed``, one row per
group), written *before* the transaction that may owe the completion (a transaction holds one
partition only) and deleted when the completion is marked sent. ``owed()``, which every listener
calls at start, then reads that partition and the groups it names, never the whole table. An entry
whose transaction lost its race stays until the group completes (its last shard completes in
any case) and then leaves with ``mark_sent``; without the index each start would scan every
group the account ever ran.

Claims on publishing an owed completion (``claim``, ``release``) change the group row's
``claimed_until`` If-Match (``azure_claims``).
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
from cloudqueue.listener.workflows.azure_claims import claim_completion, release_completion
from cloudqueue.listener.workflows.azure_group_rows import (
    BEFORE_MEMBERS,
    GROUP_ROW,
    Shard,
    addition_key,
    addition_of,
    addition_row,
    chain_row,
    completion_of,
    done_counts,
    new_rows,
    shard_row,
    status_of,
)
from cloudqueue.listener.workflows.azure_known_rows import KnownRows
from cloudqueue.listener.workflows.azure_settlements import (
    Member,
    by_group,
    in_transactions,
    settling,
)
from cloudqueue.listener.workflows.group_ledger import Addition, GroupError, GroupStatus, Settled
from cloudqueue.listener.workflows.group_rules import (
    added_again,
    check_count,
    member_ids,
    open_group,
    passed_again,
    unsettled_ids,
)
from cloudqueue.listener.workflows.table_calls import (
    quoted_key,
    read_row,
    submit,
    table_call,
    update_if_match,
    update_merged,
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
        self._known = KnownRows(table)

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
            group, head, shards = self._read_open(group_id)
            changes = _grown(head, shards, count)
            if by is not None:
                changes.append(("create", addition_row(partition, by, group.total, count)))
            rejection = submit(self._table, changes, "add group members")
            self._known.forget(partition)  # grown: every shard's ETag changed
            if rejection is None:
                return Addition(member_ids(group.total, count))
        raise _contended(group_id)

    def mark_added(self, group_id: str, by: str) -> None:
        row = {"PartitionKey": quoted_key(group_id), "RowKey": addition_key(by), "put": True}
        with table_call("mark a group addition put"):
            self._table.upsert_entity(row)

    def settle(self, group_id: str, member_id: str, outcome: Settled) -> GroupStatus | None:
        return self.settle_many([(group_id, member_id, outcome)])[0]

    def settle_many(
        self, settlements: Sequence[tuple[str, str, Settled]]
    ) -> list[GroupStatus | None]:
        """The members of each group settled in as few transactions as hold them (one for up
        to about 97 neighbours), in the order of the groups' first settlements. A failure part
        way leaves the transactions before it written: retried, their members are duplicates,
        and a completion one of them owed is found owed on the redelivery (``owed``)."""
        answers: list[GroupStatus | None] = [None] * len(settlements)
        for group_id, members in by_group(settlements).items():
            for cut in in_transactions(members):
                settled = self._settle_together(group_id, cut)
                if settled is not None:
                    answers[settled[0]] = settled[1]
        return answers

    def pass_on(self, group_id: str, member_id: str, step: str, count: int) -> list[str]:
        """A row per member and step (``chain_row``) created in the transaction that adds the
        step's other items to the group: a repeat finds it (409) and is given the same ids."""
        check_count(count, "a chain step's items")
        partition = quoted_key(group_id)
        chain = {"PartitionKey": partition, "RowKey": chain_row(member_id, step), "count": count}
        for _ in range(MAX_TRIES):
            try:
                group, head, shards = self._read_open(group_id)
            except GroupError:  # a repeat is answered even once the group completed
                earlier = self._passed_before(group_id, member_id, step, count)
                if earlier is None:
                    raise
                return earlier
            passing = [("create", chain | {"first_added": group.total})]
            if count > 1:
                passing += _grown(head, shards, count - 1)
            rejection = submit(self._table, passing, "pass a group member on")
            self._known.forget(partition)
            if rejection is None:
                return [member_id, *member_ids(group.total, count - 1)]
            if rejection == ("exists", 0):
                earlier = self._passed_before(group_id, member_id, step, count)
                if earlier is not None:
                    return earlier
        raise _contended(group_id)

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

    def claim(self, group_id: str) -> GroupStatus | None:
        return claim_completion(self._table, group_id, self._clock.now())

    def release(self, group_id: str) -> None:
        release_completion(self._table, group_id, self._clock.now())

    def mark_sent(self, group_id: str) -> None:
        partition = quoted_key(group_id)
        for _ in range(MAX_TRIES):
            head = read_row(self._table, partition, GROUP_ROW)
            if head is None or completion_of(head) != "owed":
                break
            change = update_if_match(partition, GROUP_ROW, head["etag"], completion="sent")
            if submit(self._table, [change], "mark a group's completion sent") is None:
                break
        self._unindex(group_id)

    def close(self) -> None:
        self._table.close()

    def _settle_together(
        self, group_id: str, members: list[Member]
    ) -> tuple[int, GroupStatus] | None:
        """Settle ``members`` (they fit one transaction) once each; when that settled the
        group's last member, the final status and the place of the settlement to tell."""
        partition, lost = quoted_key(group_id), 0
        head, shards = self._known.for_members(partition, [member.index for member in members])
        while lost < MAX_TRIES:
            if head is None or completion_of(head) != "pending":
                return None  # an unknown group, or a complete one: every member settled before
            total = int(head["total"])
            members = [member for member in members if member.index < total]  # strays out
            if not members:
                return None
            plan = settling(partition, head, shards, members, self._clock.now())
            if plan.last is not None:
                self._index_owed(group_id)
            rejection = self._known.transact(partition, plan.operations, "settle group members")
            if rejection is None:
                return None if plan.last is None else (plan.last_position, plan.last)
            why, index = rejection
            if why == "exists" and index < len(members):  # settled before: a duplicate
                members = members[:index] + members[index + 1 :]
                continue  # nothing was written: the rows read still hold
            lost += 1
            head, shards = self._read_group(partition)
        raise _contended(group_id)

    def _passed_before(
        self, group_id: str, member_id: str, step: str, count: int
    ) -> list[str] | None:
        """The ids a member's chain step was given when it was passed on before; None when it
        was not."""
        row = read_row(self._table, quoted_key(group_id), chain_row(member_id, step))
        if row is None:
            return None
        first = [member_id, *member_ids(int(row["first_added"]), int(row["count"]) - 1)]
        return passed_again(first, count, group_id, member_id)

    def _read_open(self, group_id: str) -> tuple[GroupStatus, dict[str, Any], list[Shard]]:
        """A group open to more members, with its group row and shards as read; GroupError
        when it is unknown or complete."""
        head, shards = self._read_group(quoted_key(group_id))
        if head is None:
            raise GroupError(f"no group {group_id!r}")
        return open_group(status_of(head, shards), group_id), head, shards

    def _read_group(self, partition: str) -> tuple[dict[str, Any] | None, list[Shard]]:
        return self._known.read(partition)

    def _index_owed(self, group_id: str) -> None:
        entry = {"PartitionKey": OWED_PARTITION, "RowKey": quoted_key(group_id), "group": group_id}
        with table_call("index an owed group completion"):
            self._table.upsert_entity(entry)

    def _unindex(self, group_id: str) -> None:
        with table_call("unindex a sent group completion"):
            self._table.delete_entity(OWED_PARTITION, quoted_key(group_id))

    def __repr__(self) -> str:
        return f"AzureGroupLedger(table={GROUPS_TABLE!r})"


def _grown(head: dict[str, Any], shards: list[Shard], count: int) -> list[tuple[Any, ...]]:
    """The updates giving a group ``count`` more members: its total on the group row, ``If-Match``
    as read, with its complete shards recounted, and on every shard merged whatever it holds.

    Only the group row's If-Match must hold: the merge changes each shard's ETag, so a
    settlement that read a shard before fails its own If-Match and reads the new total, and one
    that wrote first completed no shard unless it updated the group row too, which fails this
    transaction. Matching every shard as well would lose the race to any settlement."""
    partition, total = quoted_key(str(head["group"])), int(head["total"]) + count
    grown = [Shard(s.shard, total, s.handled, s.poisoned, s.etag) for s in shards]
    done = done_counts(grown)
    changes = [update_if_match(partition, GROUP_ROW, str(head["etag"]), total=total, **done)]
    changes += [update_merged(partition, shard_row(s.shard), total=total) for s in shards]
    return changes


def _contended(group_id: str) -> errors.TransientStorageError:
    return errors.TransientStorageError(
        f"group {group_id!r} changed by others {MAX_TRIES} times in a row"
    )
