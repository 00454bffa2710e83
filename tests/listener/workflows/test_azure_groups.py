"""What the group ledger on Azure does beyond the shared specification (test_group_ledger): a
settlement that loses an If-Match race reads again and still counts exactly once, members that
complete no shard leave the group row alone (the counter is sharded), and ``owed`` reads its own
small partition, never the whole table."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from azure.data.tables import TableClient

from cloudqueue.listener.stores.azure_tables import table_options
from cloudqueue.listener.workflows.azure_group_rows import GROUP_ROW, SHARDS, shard_row
from cloudqueue.listener.workflows.azure_groups import OWED_PARTITION, AzureGroupLedger
from cloudqueue.listener.workflows.group_ledger import GroupStatus
from tests.support.azurite import AzuriteProcess


class WatchedTable(TableClient):
    """The real table client, recording its transactions and queries, and running ``before``
    (once) just before its next transaction is sent: another writer getting in between."""

    transactions: int = 0
    queries: list[str]
    before: Callable[[], None] | None = None

    def submit_transaction(self, *args: Any, **kwargs: Any) -> Any:
        self.transactions += 1
        before, self.before = self.before, None
        if before is not None:
            before()
        return super().submit_transaction(*args, **kwargs)

    def query_entities(self, query_filter: str, **kwargs: Any) -> Any:
        self.queries.append(query_filter)
        return super().query_entities(query_filter, **kwargs)


@pytest.fixture
def tables(azurite_with_tables: AzuriteProcess) -> Iterator[Callable[[], WatchedTable]]:
    """Clients of one new table (the session's Azurite is shared), dropped afterwards."""
    name, made = f"groups{uuid.uuid4().hex[:16]}", []

    def table() -> WatchedTable:
        client = cast(
            WatchedTable,
            WatchedTable.from_connection_string(
                azurite_with_tables.connection_string, name, **table_options()
            ),
        )
        client.queries = []
        made.append(client)
        return client

    table().create_table()
    yield table
    made[0].delete_table()
    for client in made:
        client.close()


def test_a_settlement_that_loses_the_race_reads_again_and_counts_once(
    tables: Callable[[], WatchedTable],
) -> None:
    """Members 0 and 1 of a group of 2 each complete their shard: while one settlement's
    transaction is on its way, the other commits first, so the first finds the group row
    changed (412), reads again and is the one told it settled the last member."""
    first_table, second_table = tables(), tables()
    first, second = AzureGroupLedger(first_table), AzureGroupLedger(second_table)
    first.open("race", total=2, on_complete="done")
    seconds: list[GroupStatus | None] = []
    first_table.before = lambda: seconds.append(second.settle("race", "1", "handled"))
    last = first.settle("race", "0", "poisoned")
    assert seconds == [None]
    assert first_table.transactions == 3  # open, the lost try, the try that counted
    assert last is not None
    assert (last.handled, last.poisoned, last.completion) == (1, 1, "owed")
    assert first.status("race") == last


def test_members_completing_no_shard_leave_the_group_row_alone(
    tables: Callable[[], WatchedTable],
) -> None:
    """In a group of 3 x SHARDS members, settling the first SHARDS (one per shard, none
    completing its shard) changes only shard rows: the group row keeps its ETag."""
    table = tables()
    ledger = AzureGroupLedger(table)
    ledger.open("wide", total=3 * SHARDS, on_complete="done")
    before = table.get_entity("wide", GROUP_ROW).metadata["etag"]
    for member in range(SHARDS):
        assert ledger.settle("wide", str(member), "handled") is None
    assert table.get_entity("wide", GROUP_ROW).metadata["etag"] == before
    assert table.get_entity("wide", shard_row(5))["handled"] == 1
    assert ledger.status("wide").handled == SHARDS  # type: ignore[union-attr]


def test_owed_reads_its_own_partition_and_the_groups_it_names(
    tables: Callable[[], WatchedTable],
) -> None:
    """With 5 groups, one complete: ``owed`` queries the owed partition and that group's rows
    only; once marked sent, the owed partition is empty."""
    table = tables()
    ledger = AzureGroupLedger(table)
    for n in range(5):
        ledger.open(f"g{n}", total=2, on_complete="done")
    ledger.settle("g3", "0", "handled")
    ledger.settle("g3", "1", "handled")
    table.queries.clear()
    assert [group.group_id for group in ledger.owed()] == ["g3"]
    assert all("PartitionKey eq @" in query for query in table.queries)
    assert len(table.queries) == 2
    ledger.mark_sent("g3")
    assert list(table.query_entities(f"PartitionKey eq '{OWED_PARTITION}'")) == []
    assert ledger.owed() == []
