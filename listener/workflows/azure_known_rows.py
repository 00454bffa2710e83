"""The group rows and shards a process settles members on, as its own transactions left them:
the next settlement of the same group skips its read (``azure_groups``).

An entity-group transaction's answer carries the new ETag of every row it wrote, one per
operation, in their order. The rows a settlement read, merged with what each later transaction
of this process wrote and the ETags it returned, are then exactly the rows in the table -- until
another writer (another process, an addition of members) changes one. The copy need not know
when: every row a settlement decides by is written ``If-Match`` as held (the shards it counts
in, the group row when it completes shards), so a row changed meanwhile refuses the transaction
(412) and the rows are read again, as without a copy. The one value decided by without an
``If-Match`` of its own is the group row's total, which tells a member from a stray: a member
at or beyond the total held is never judged by the copy (``covers``), its rows are read first.

Settled one transaction after another, a group's members then cost one call each transaction
instead of two (a read of 17 rows and the transaction), on the client's CPU as on the service.
Kept for the ``MOST`` groups used last; a group leaves once complete, and when a transaction's
outcome is unknown (it failed in flight).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cloudqueue.listener.workflows.azure_group_rows import (
    BEFORE_MEMBERS,
    GROUP_ROW,
    Shard,
    completion_of,
)
from cloudqueue.listener.workflows.table_calls import Rejection, table_call, transact

if TYPE_CHECKING:
    from azure.data.tables import TableClient

__all__ = ["MOST", "GroupRows", "KnownRows", "Rows", "covers", "split"]

MOST = 256
"""Groups whose rows are kept (a listener settles members of a few at a time)."""

Rows = dict[str, dict[str, Any]]
"""A group's group row and shards by row key, each with its ``etag``."""

GroupRows = tuple[dict[str, Any] | None, list[Shard]]
"""A group's group row (None: no such group) and its shards."""


class KnownRows:
    """Reads of a group's rows, and the rows last read or written of the groups settled last."""

    def __init__(self, table: TableClient, *, most: int = MOST) -> None:
        self.most = most
        self._table = table
        self._groups: OrderedDict[str, Rows] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, partition: str) -> GroupRows:
        """The group row and its shards, in one query (their keys sort before the members'),
        kept while the group is pending."""
        with table_call("read a group"):
            rows = [
                {**row, "etag": row.metadata["etag"]}
                for row in self._table.query_entities(
                    "PartitionKey eq @group and RowKey lt @members",
                    parameters={"group": partition, "members": BEFORE_MEMBERS},
                )
            ]
        head, shards = split(rows)
        if head is not None and completion_of(head) == "pending":
            self._keep(partition, {str(row["RowKey"]): row for row in rows})
        else:
            self.forget(partition)
        return head, shards

    def for_members(self, partition: str, indexes: Sequence[int]) -> GroupRows:
        """The group's rows as last known, read when none are kept that can judge these
        member numbers (``covers``)."""
        kept = self._rows(partition)
        if kept is not None and covers(kept[GROUP_ROW], indexes):
            return split(list(kept.values()))
        return self.read(partition)

    def transact(
        self, partition: str, operations: list[tuple[Any, ...]], operation: str
    ) -> tuple[Rejection, int] | None:
        """``table_calls.submit``, merging what was written into the kept rows; a transaction
        that failed in flight may have been written: its group is read next time."""
        try:
            outcome = transact(self._table, operations, operation)
        except BaseException:
            self.forget(partition)
            raise
        if isinstance(outcome, tuple):
            return outcome
        self._written(partition, operations, outcome)
        return None

    def forget(self, partition: str) -> None:
        with self._lock:
            self._groups.pop(partition, None)

    def _rows(self, partition: str) -> Rows | None:
        with self._lock:
            rows = self._groups.get(partition)
            if rows is None:
                return None
            self._groups.move_to_end(partition)
            return {key: dict(row) for key, row in rows.items()}

    def _keep(self, partition: str, rows: Rows) -> None:
        with self._lock:
            self._groups[partition] = rows
            self._groups.move_to_end(partition)
            while len(self._groups) > self.most:
                self._groups.popitem(last=False)

    def _written(
        self,
        partition: str,
        operations: Sequence[tuple[Any, ...]],
        answers: Sequence[Mapping[str, Any]],
    ) -> None:
        """Merge the updates of kept rows with their new ETags (``answers``: one per operation).
        A kept row updated with no ETag in the answer cannot be matched again: the group is
        read next time; one that completed is not kept."""
        with self._lock:
            rows = self._groups.get(partition)
            if rows is None:
                return
            for (kind, entity, *_), answer in zip(operations, answers, strict=True):
                key = str(entity["RowKey"])
                if kind != "update" or key not in rows:
                    continue
                etag = answer.get("etag")
                if etag is None:
                    del self._groups[partition]
                    return
                rows[key] = {**rows[key], **entity, "etag": str(etag)}
            if completion_of(rows[GROUP_ROW]) != "pending":
                del self._groups[partition]


def covers(head: Mapping[str, Any], indexes: Sequence[int]) -> bool:
    """Whether a group row as kept can judge these member numbers: all below its total (one at
    or beyond it may have been added since: read the rows before calling it a stray)."""
    total = int(head["total"])
    return all(index < total for index in indexes)


def split(rows: list[dict[str, Any]]) -> GroupRows:
    """The group row and the shards among a group's rows."""
    head = next((row for row in rows if row["RowKey"] == GROUP_ROW), None)
    return head, [Shard.of(row) for row in rows if row["RowKey"] != GROUP_ROW]
