"""Claims on publishing a group's owed completion on Azure (``GroupLedger.claim`` and ``release``
of ``azure_groups.AzureGroupLedger``): the group row's ``claimed_until``, changed ``If-Match`` the
row as read, so that of two claimants the second finds the row changed, reads it again and sees
the claim running. The settler of the last member holds the claim from the ``ended`` its
transaction wrote, with no write of its own (``group_ledger.claimable``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cloudqueue.listener.workflows.azure_group_rows import GROUP_ROW, completion_of, final_status
from cloudqueue.listener.workflows.group_ledger import GroupStatus, claimable, lease_end
from cloudqueue.listener.workflows.table_calls import quoted_key, read_row, submit, update_if_match

if TYPE_CHECKING:
    from azure.data.tables import TableClient

__all__ = ["claim_completion", "release_completion"]

READS = 3
"""Group rows read by one claim: a row that changed after its read was claimed or marked sent
by another, which the next read shows; a row changing on every read is left as held."""


def claim_completion(table: TableClient, group_id: str, now: datetime) -> GroupStatus | None:
    """The group's final status when this call took the claim on its owed completion."""
    partition = quoted_key(group_id)
    for _ in range(READS):
        head = read_row(table, partition, GROUP_ROW)
        owed = None if head is None else _owed(head)
        if head is None or owed is None or not claimable(owed, _claimed_until(head), now):
            return None
        until = lease_end(now)
        change = update_if_match(partition, GROUP_ROW, head["etag"], claimed_until=until)
        if submit(table, [change], "claim a group's completion") is None:
            return owed
    return None


def release_completion(table: TableClient, group_id: str, now: datetime) -> None:
    """The claim ends ``now``, if the completion is still owed (a row changed meanwhile was
    claimed or sent by another: it is left as it is)."""
    partition = quoted_key(group_id)
    head = read_row(table, partition, GROUP_ROW)
    if head is not None and completion_of(head) == "owed":
        change = update_if_match(partition, GROUP_ROW, head["etag"], claimed_until=now)
        submit(table, [change], "release a group's completion")


def _owed(head: dict[str, Any]) -> GroupStatus | None:
    """The final status of a group row whose completion is owed (every shard complete: its
    counts are on the row), else None."""
    ended = head.get("ended")
    if completion_of(head) != "owed" or ended is None:
        return None
    return final_status(head, _utc(ended))


def _claimed_until(head: dict[str, Any]) -> datetime | None:
    until = head.get("claimed_until")
    return None if until is None else _utc(until)


def _utc(value: datetime) -> datetime:
    """The SDK's datetime subclass as a plain aware UTC datetime."""
    return datetime.fromtimestamp(value.timestamp(), UTC)
