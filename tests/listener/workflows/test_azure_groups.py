"""What the group ledger on Azure does beyond the shared specification (test_group_ledger): a
settlement that loses an If-Match race reads again and still counts exactly once, neighbours
settle in one transaction that leaves the group row alone unless it completes shards, a batch
holding duplicates or racing another writer counts each member once, the next settlements of a
group write on the rows the last transaction left (another writer's change read again, a member
added since never taken for a stray), a batch is cut to what a transaction holds, ``owed`` reads
its own small partition, never the whole table, and the workflow tables close with their
storage."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, ClassVar, cast

import pytest
from azure.data.tables import TableClient

from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.stores.azure_tables import table_options
from cloudqueue.listener.stores.connection import open_storage
from cloudqueue.listener.workflows.azure_finder import azure_result_store_for
from cloudqueue.listener.workflows.azure_group_rows import GROUP_ROW, RUN, shard_of, shard_row
from cloudqueue.listener.workflows.azure_groups import (
    GROUPS_TABLE,
    OWED_PARTITION,
    AzureGroupLedger,
)
from cloudqueue.listener.workflows.azure_results import RESULTS_TABLE
from cloudqueue.listener.workflows.azure_settlements import (
    MAX_ENTITIES,
    Member,
    in_transactions,
    settling,
)
from cloudqueue.listener.workflows.group_ledger import GroupError, GroupStatus
from cloudqueue.listener.workflows.sqlite_groups import group_ledger_for
from tests.support.azurite import AzuriteProcess
from tests.support.entra import OAuthAzurite, StorageTokenIssuer


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
    """Members 0 and 1 of a group of 2 (one shard): while one settlement's transaction is on
    its way, the other commits first, so the first finds the shard changed (412), reads again
    and is the one told it settled the last member."""
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


def test_neighbours_settle_in_one_transaction_and_complete_shards_leave_the_group_row(
    tables: Callable[[], WatchedTable],
) -> None:
    """Members in runs share shards: settling all but one member of each of two shards is one
    transaction that leaves the group row alone (no shard completes); the last two are a second
    transaction, which completes both shards and the group, told to the later settlement."""
    table = tables()
    ledger = AzureGroupLedger(table)
    ledger.open("wide", total=2 * RUN, on_complete="done")
    before = table.get_entity("wide", GROUP_ROW).metadata["etag"]
    firsts = [
        ("wide", str(n), "handled") for n in range(2 * RUN) if n not in (RUN - 1, 2 * RUN - 1)
    ]
    assert ledger.settle_many(firsts) == [None] * len(firsts)  # type: ignore[arg-type]
    assert table.transactions == 2  # the open, the settlement
    assert table.get_entity("wide", GROUP_ROW).metadata["etag"] == before
    assert table.get_entity("wide", shard_row(1))["handled"] == RUN - 1
    [early, last] = ledger.settle_many(
        [("wide", str(2 * RUN - 1), "poisoned"), ("wide", str(RUN - 1), "handled")]
    )
    assert table.transactions == 3
    assert early is None
    assert last is not None
    assert (last.handled, last.poisoned, last.completion) == (2 * RUN - 1, 1, "owed")


def test_a_batch_holding_duplicates_counts_each_member_once(
    tables: Callable[[], WatchedTable],
) -> None:
    """Members 1 and 3 of 4 settled before (by another process): a batch of all four is
    refused for each (409) and written again without it, the rows read still holding -- three
    transactions, one read -- and the counts are 4, with the completion told to the last
    member it wrote (2)."""
    table = tables()
    ledger = AzureGroupLedger(table)
    ledger.open("dup", total=4, on_complete="done")
    AzureGroupLedger(tables()).settle_many([("dup", "1", "handled"), ("dup", "3", "poisoned")])
    table.transactions, table.queries[:] = 0, []
    answers = ledger.settle_many([("dup", str(n), "handled") for n in range(4)])
    assert table.transactions == 3
    assert len(table.queries) == 1
    assert answers[:2] == [None, None]
    assert answers[3] is None
    last = answers[2]
    assert last is not None
    assert (last.handled, last.poisoned, last.pending) == (3, 1, 0)


def test_a_batch_racing_another_writer_reads_again_and_counts_once(
    tables: Callable[[], WatchedTable],
) -> None:
    """While a batch of members 0-3 of a group of 5 is on its way, another process settles
    member 2 and member 4 (the same shard): the batch finds member 2 settled (409) and its
    shard changed (412), reads again, writes 0, 1 and 3, and is the one told it settled the
    last member; the counts are 5, member 2 once."""
    first_table, second_table = tables(), tables()
    first, second = AzureGroupLedger(first_table), AzureGroupLedger(second_table)
    first.open("race", total=5, on_complete="done")
    theirs: list[GroupStatus | None] = []
    first_table.before = lambda: theirs.extend(
        second.settle_many([("race", "2", "poisoned"), ("race", "4", "handled")])
    )
    answers = first.settle_many([("race", str(n), "handled") for n in range(4)])
    assert theirs == [None, None]
    assert first_table.transactions == 4  # the open, then refused twice, then written
    assert answers[:3] == [None, None, None]
    last = answers[3]
    assert last is not None
    assert (last.handled, last.poisoned, last.pending) == (4, 1, 0)
    assert first.status("race") == last


def test_the_next_settlements_of_a_group_read_nothing(
    tables: Callable[[], WatchedTable],
) -> None:
    """After one read, each settlement of a group of 20 writes its transaction on the rows the
    previous one left (their ETags from its answer): 20 members, one read, 20 transactions,
    the last of them told it completed the group."""
    table = tables()
    ledger = AzureGroupLedger(table)
    ledger.open("kept", total=20, on_complete="done")
    table.transactions = 0
    answers = [ledger.settle("kept", str(n), "handled") for n in range(20)]
    assert len(table.queries) == 1
    assert table.transactions == 20
    assert answers[:-1] == [None] * 19
    last = answers[-1]
    assert last is not None
    assert (last.handled, last.completion) == (20, "owed")
    assert ledger.status("kept") == last


def test_rows_another_process_changed_are_read_again_and_counted_once(
    tables: Callable[[], WatchedTable],
) -> None:
    """One ledger holds a group's rows from its last transaction; another process then settles
    a member of the same shard: the first ledger's next transaction is refused (412), it reads
    again and counts its member, and the group counts both once."""
    first_table = tables()
    first, second = AzureGroupLedger(first_table), AzureGroupLedger(tables())
    first.open("moved", total=4, on_complete="done")
    first.settle("moved", "0", "handled")
    second.settle("moved", "1", "poisoned")
    first_table.transactions, first_table.queries[:] = 0, []
    assert first.settle("moved", "2", "handled") is None
    assert (first_table.transactions, len(first_table.queries)) == (2, 1)
    status = first.status("moved")
    assert status is not None
    assert (status.handled, status.poisoned, status.pending) == (2, 1, 1)


def test_a_member_added_since_the_rows_were_kept_is_not_taken_for_a_stray(
    tables: Callable[[], WatchedTable],
) -> None:
    """A ledger holds the rows of a group of 2; another process adds 2 members: the first
    ledger settles member 3 (beyond the total it holds) after reading the group again, rather
    than drop it as no member, and the group then completes."""
    ledger = AzureGroupLedger(tables())
    ledger.open("grown", total=2, on_complete="done")
    ledger.settle("grown", "0", "handled")
    AzureGroupLedger(tables()).add_members("grown", 2)
    assert ledger.settle_many([("grown", str(n), "handled") for n in (3, 2)]) == [None, None]
    last = ledger.settle("grown", "1", "handled")
    assert last is not None
    assert (last.total, last.handled, last.completion) == (4, 4, "owed")


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


def test_a_batch_is_cut_into_transactions_the_table_service_takes() -> None:
    """150 members over 10 shards are cut into two transactions, each holding at most 100 rows
    with its shards and the group row, every member in exactly one."""
    members = [Member(position, index, "handled") for position, index in enumerate(range(150))]
    cuts = in_transactions(members)
    assert len(cuts) == 2
    for cut in cuts:
        assert len(cut) + len({shard_of(member.index) for member in cut}) + 1 <= MAX_ENTITIES
    assert sorted(member.position for cut in cuts for member in cut) == list(range(150))


def test_the_workflow_tables_close_with_their_storage(
    azurite_with_tables: AzuriteProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group ledger and result store found for a storage that ``open_storage`` opened keep
    their table clients open until the storage closes, and close them then."""
    closed: list[str] = []
    close = TableClient.close

    def recorded(client: TableClient) -> None:
        closed.append(client.table_name)
        close(client)

    monkeypatch.setattr(TableClient, "close", recorded)
    storage = open_storage(azurite_with_tables.connection_string)
    ledger = group_ledger_for(storage)
    assert ledger is not None
    assert ledger.status("none") is None  # the ledger's table opens on first use
    assert azure_result_store_for(storage) is not None
    assert closed == []
    storage.close()
    assert sorted(closed) == [GROUPS_TABLE, RESULTS_TABLE]


def test_a_member_whose_shard_row_is_missing_is_not_written_uncounted() -> None:
    """Rows read without the member's shard (a damaged group) raise a StorageError -- the
    member is retried -- rather than create its row with no count beside it."""
    head = {"group": "g", "etag": "e", "shards_done": 0, "handled_done": 0, "poisoned_done": 0}
    with pytest.raises(StorageError, match="no shard 0"):
        settling("g", head, [], [Member(0, 3, "handled")], datetime.now(UTC))


def test_a_chain_step_repeated_after_its_group_completed_gets_its_ids(
    tables: Callable[[], WatchedTable],
) -> None:
    """A chain step redelivered after its chained members settled the group's last member is
    answered the ids it was given, not refused as adding to a complete group (it would give its
    message up to the poison queue); a member never passed on is refused."""
    ledger = AzureGroupLedger(tables())
    ledger.open("g8", total=1, on_complete="done")
    assert ledger.pass_on("g8", "0", "split", 2) == ["0", "1"]
    assert ledger.settle_many([("g8", "0", "handled"), ("g8", "1", "handled")])[1] is not None
    assert AzureGroupLedger(tables()).pass_on("g8", "0", "split", 2) == ["0", "1"]
    with pytest.raises(GroupError, match="is complete"):
        ledger.pass_on("g8", "0", "price", 1)


def test_passing_on_does_not_lose_its_race_to_a_settlement_of_another_shard(
    tables: Callable[[], WatchedTable],
) -> None:
    """While a chain step's transaction is on its way, another process settles a member of
    another shard (no shard completes): the step's merge of the shards' totals does not depend
    on their ETags, so it is written at once, and the group counts both."""
    first_table, second_table = tables(), tables()
    first, second = AzureGroupLedger(first_table), AzureGroupLedger(second_table)
    first.open("busy", total=3 * RUN, on_complete="done")
    settled: list[GroupStatus | None] = []
    first_table.before = lambda: settled.append(second.settle("busy", str(2 * RUN), "handled"))
    assert first.pass_on("busy", "0", "split", 3) == ["0", str(3 * RUN), str(3 * RUN + 1)]
    assert settled == [None]
    assert first_table.transactions == 2  # the open, the pass
    status = first.status("busy")
    assert status is not None
    assert (status.total, status.handled) == (3 * RUN + 2, 1)


class ClosingCredential(StorageTokenIssuer):
    """Azurite's token credential, recording whether it was closed."""

    made: ClassVar[list[ClosingCredential]] = []

    def __init__(self) -> None:
        super().__init__()
        self.closed = False
        self.made.append(self)

    def close(self) -> None:
        self.closed = True


def test_the_token_credentials_of_the_workflow_tables_close_with_their_storage(
    trusted_azurite_oauth: OAuthAzurite,
) -> None:
    """A storage signed in with a Microsoft Entra ID credential (Azurite in OAuth mode): the
    credentials opened for its result store's and group ledger's table clients (closing a
    client leaves its credential open) are closed when the storage closes, not before."""
    ClosingCredential.made.clear()
    azurite = trusted_azurite_oauth.process
    storage = open_storage(
        f"QueueEndpoint={azurite.queue_url};TableEndpoint={azurite.table_url}",
        credential=f"{__name__}:ClosingCredential",
    )
    queues = len(ClosingCredential.made)  # the queue client's own
    assert azure_result_store_for(storage) is not None
    ledger = group_ledger_for(storage)
    assert ledger is not None
    assert ledger.status("none") is None  # the ledger's table opens on first use
    tables = ClosingCredential.made[queues:]
    assert [credential.closed for credential in tables] == [False, False]
    storage.close()
    assert [credential.closed for credential in tables] == [True, True]
