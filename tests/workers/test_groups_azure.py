"""Groups on Azure (Azurite's queues and Table service) in a running host: a storage opened with
``open_storage`` finds its group ledger in the account's Table service, so ``send_group`` works
there, members handled, poisoned on purpose and added at run time all settle, and the completion
worker gets exactly one ``GroupDone``; a chain inside a group completes it after its last step.
Without the ``tables`` extra or a table endpoint, one clear line says what is missing."""

from __future__ import annotations

import re
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener import PermanentFailure, Publisher
from cloudqueue.listener.errors import ConfigurationError, MissingExtraError, StorageError
from cloudqueue.listener.stores.connection import open_storage
from cloudqueue.listener.workflows.azure_groups import AzureGroupLedger
from cloudqueue.listener.workflows.group_done import GroupDone
from cloudqueue.listener.workflows.group_ledger import GroupError
from cloudqueue.listener.workflows.sqlite_groups import group_ledger_for
from cloudqueue.workers import QueueWorker
from cloudqueue.workers.host.host import WorkerHost
from cloudqueue.workers.settings import CloudQueueSettings
from tests.support.azurite import AzuriteFactory, AzuriteProcess
from tests.support.chain_workers import (
    LINES,
    ORDERS,
    Done,
    Order,
    Price,
    Split,
    Total,
    events,
    expected_totals,
    totals,
)
from tests.support.entra import CREDENTIAL_PATH, OAuthAzurite
from tests.support.keyed_workers import drained, host_settings, hosting
from tests.support.polling import eventually
from tests.support.written_lines import complete_lines


def test_a_group_sent_on_azure_completes_once(azurite_with_tables: AzuriteProcess) -> None:
    """20 members, 2 raising PermanentFailure, member 7 adding 2 more at run time, handled by a
    real host on Azurite: one ``GroupDone`` of 20 handled and 2 poisoned, after every handler."""
    connection_string = azurite_with_tables.connection_string
    storage = open_storage(connection_string)
    members, finished = f"m{uuid.uuid4().hex[:12]}", f"f{uuid.uuid4().hex[:12]}"
    handled: list[int] = []
    done: list[tuple[GroupDone, int]] = []
    lock = threading.Lock()

    class Members(QueueWorker[dict[str, Any]]):
        queue_name = members

        def handle(self, item: dict[str, Any]) -> None:
            if item["n"] % 10 == 3:
                raise PermanentFailure("poisoned on purpose")
            if item["n"] == 7:
                Publisher(storage, members, dict).add_to_group([{"n": 100 + n} for n in range(2)])
            with lock:
                handled.append(item["n"])

    class Finisher(QueueWorker[GroupDone]):
        queue_name = finished  # no idempotent handling (no blob service): a copy would show

        def handle(self, item: GroupDone) -> None:
            with lock:
                done.append((item, len(handled)))

    for queue in (members, finished):
        storage.create_queue(queue)
    group = Publisher(storage, members, dict).send_group(
        [{"n": n} for n in range(20)], on_complete=Finisher
    )
    settings = CloudQueueSettings.model_validate(
        {"connection_string": connection_string, "shutdown_grace_s": 10}
        | {"backoff": {"max_idle_s": 0.2}}
    )
    with hosting(Members, storage, settings), hosting(Finisher, storage, settings):
        eventually(lambda: len(done) == 1, timeout_s=60)
        drained(storage, finished, lambda: True, timeout_s=30)
        drained(storage, members, lambda: True, timeout_s=30)
        status = group.status()
    [(completion, handled_before)] = done
    assert (completion.group_id, completion.handled, completion.poisoned) == (group.id, 20, 2)
    assert handled_before == 20
    assert (status.pending, status.completion) == (0, "sent")
    storage.close()


def test_a_storage_not_opened_by_open_storage_has_no_group_ledger(
    azurite_with_tables: AzuriteProcess,
) -> None:
    """An Azure storage built from its class directly names no way to its Table service:
    ``send_group`` says to open it with ``open_storage``."""
    from cloudqueue.listener.stores.azure_storage import AzureQueueStorage

    storage = AzureQueueStorage.from_connection_string(azurite_with_tables.connection_string)
    with pytest.raises(GroupError, match="open_storage"):
        Publisher(storage, "members", dict).send_group([{"n": 1}], on_complete="done")
    storage.close()


def test_the_ledger_of_an_azure_storage_is_found_once_and_opened_on_first_use(
    azurite_with_tables: AzuriteProcess,
) -> None:
    """Found twice through ``open_storage``'s storage, the ledger is one object; its repr shows
    the Azure ledger only once it was used."""
    storage = open_storage(azurite_with_tables.connection_string)
    ledger = group_ledger_for(storage)
    assert ledger is not None
    assert ledger is group_ledger_for(storage)
    assert AzureGroupLedger.__name__ not in repr(ledger)
    assert ledger.status(f"g{uuid.uuid4().hex}") is None
    assert AzureGroupLedger.__name__ in repr(ledger)
    storage.close()


def test_without_the_tables_extra_groups_on_azure_say_what_to_install(
    azurite_with_tables: AzuriteProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With azure-data-tables not importable: ``send_group`` raises one MissingExtraError naming
    ``pip install 'cloudqueue[tables]'``; a listener's start logs it once and returns no owed
    completions; a member's settlement raises it as a StorageError (the member is retried)."""
    monkeypatch.setitem(sys.modules, "azure.data.tables", None)
    storage = open_storage(azurite_with_tables.connection_string)
    install = re.escape("pip install 'cloudqueue[tables]'")
    with pytest.raises(MissingExtraError, match=install):
        Publisher(storage, "members", dict).send_group([{"n": 1}], on_complete="done")
    ledger = group_ledger_for(storage)
    assert ledger is not None
    with capture_logs() as logs:
        assert ledger.owed() == []
        assert ledger.owed() == []
    assert [log["event"] for log in logs] == ["groups_unavailable"]
    assert "cloudqueue[tables]" in logs[0]["reason"]
    with pytest.raises(StorageError, match=install):
        ledger.settle("g", "0", "handled")
    storage.close()


def test_a_queue_only_connection_string_names_the_missing_table_endpoint(
    azurite: AzuriteProcess,
) -> None:
    """A connection string that lists its endpoints without a TableEndpoint (Azurite serving
    queues only): ``send_group`` says to add one, without a call to a wrong host."""
    storage = open_storage(azurite.connection_string)
    with pytest.raises(ConfigurationError, match="TableEndpoint="):
        Publisher(storage, "members", dict).send_group([{"n": 1}], on_complete="done")
    storage.close()


def test_groups_sign_in_with_a_token_where_the_queues_do(
    trusted_azurite_oauth: OAuthAzurite,
) -> None:
    """A storage opened from endpoints and a Microsoft Entra ID credential (Azurite in OAuth mode
    over HTTPS, no key anywhere) finds its group ledger in the Table service signed in alike: a
    group sent there settles and completes."""
    azurite = trusted_azurite_oauth.process
    endpoints = f"QueueEndpoint={azurite.queue_url};TableEndpoint={azurite.table_url}"
    storage = open_storage(endpoints, credential=CREDENTIAL_PATH)
    members = f"m{uuid.uuid4().hex[:12]}"
    storage.create_queue(members)
    group = Publisher(storage, members, dict).send_group([{"n": 0}, {"n": 1}], on_complete="done")
    ledger = group_ledger_for(storage)
    assert ledger is not None
    assert ledger.settle(group.id, "0", "handled") is None
    last = ledger.settle(group.id, "1", "poisoned")
    assert last is not None
    assert (last.handled, last.poisoned, group.status().completion) == (1, 1, "owed")
    storage.close()


def test_a_chain_inside_a_group_completes_it_once_on_azure(
    azurite_factory: AzuriteFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six orders sent as a group on Azurite (tables for the group, blobs for the chain's
    effect-once marks): ``Split`` passes each order's membership on as its three lines
    (``pass_on`` in the Table service), through ``Price`` to ``Total``; one ``GroupDone``
    counting the 18 lines handled, after every total, and the exact totals."""
    record_path = tmp_path / "record.txt"
    monkeypatch.setenv("TEST_RECORD_PATH", str(record_path))
    connection_string = azurite_factory(blob=True, table=True).connection_string
    storage = open_storage(connection_string)
    storage.create_queue(Split.queue_name)
    group = Publisher(storage, Split.queue_name, Order, key="order").send_group(
        ORDERS, on_complete=Done
    )
    settings = host_settings(connection_string=connection_string)  # type: ignore[arg-type]
    host = WorkerHost([Split, Price, Total, Done], settings, storage=storage)
    host.start()
    try:
        eventually(lambda: group.status().completion == "sent", timeout_s=60)
        status = group.status()  # read while the host's store is open: it closes it
    finally:
        host.stop()
    lines = complete_lines(record_path)
    done_at = next(n for n, line in enumerate(lines) if line.startswith("done "))
    assert sum(line.startswith("priced ") for line in lines[:done_at]) == LINES
    assert events(record_path, "done") == [[str(LINES), "0"]]
    assert (status.total, status.handled, status.poisoned) == (LINES, LINES, 0)
    assert totals(record_path) == expected_totals()
