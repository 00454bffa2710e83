"""The result store on Azure (Azurite's Table service): a result read back by its key and with
its group, replaced when stored again, absent once expired and then swept, any key however
written, the largest value kept whole and one byte more refused with one clear error."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from cloudqueue.listener.errors import ConfigurationError, MessageTooLargeError
from cloudqueue.listener.stores.azure_tables import table_from_connection_string
from cloudqueue.listener.stores.connection import open_storage
from cloudqueue.listener.stores.key_records import SWEEP_INTERVAL_S
from cloudqueue.listener.testing import ManualClock
from cloudqueue.listener.workflows.azure_finder import azure_result_store, azure_result_store_for
from cloudqueue.listener.workflows.azure_results import MAX_RESULT_BYTES, AzureResultStore
from tests.support.azurite import AzuriteProcess
from tests.support.polling import eventually


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(azurite_with_tables: AzuriteProcess, clock: ManualClock) -> Iterator[AzureResultStore]:
    """A store on a table of this test's own (the session's Azurite is shared)."""
    name = f"results{uuid.uuid4().hex[:16]}"
    table = table_from_connection_string(azurite_with_tables.connection_string, name)
    yield AzureResultStore(table, clock=clock)
    table.delete_table()
    table.close()


def test_results_are_read_by_key_and_by_group(store: AzureResultStore) -> None:
    """Two members' results and one outside the group: ``get`` finds each by key, ``for_group``
    the members' only; storing a key again replaces its value."""
    store.put("a/1?#", '{"total": 1}', ttl_s=60, group_id="run/7")
    store.put("b" * 256, '{"total": 2}', ttl_s=60, group_id="run/7")
    store.put("c", '"alone"', ttl_s=60)
    store.put("a/1?#", '{"total": 10}', ttl_s=60, group_id="run/7")
    assert store.get("a/1?#") == '{"total": 10}'
    assert store.get("c") == '"alone"'
    assert store.get("missing") is None
    assert sorted(store.for_group("run/7")) == [
        ("a/1?#", '{"total": 10}'),
        ("b" * 256, '{"total": 2}'),
    ]
    assert list(store.for_group("run/8")) == []


def test_expired_results_read_as_absent_and_are_swept(
    store: AzureResultStore, clock: ManualClock
) -> None:
    """After its time to live a result is gone from ``get`` and ``for_group``; the sweep deletes
    the expired rows (a member's two) and keeps the live one."""
    store.put("old", "1", ttl_s=10, group_id="g")
    store.put("new", "2", ttl_s=100, group_id="g")
    clock.advance(11)
    assert store.get("old") is None
    assert list(store.for_group("g")) == [("new", "2")]
    assert store.sweep() == 2
    assert store.get("new") == "2"
    assert store.sweep() == 0


def test_a_put_starts_the_sweep_when_it_is_due(store: AzureResultStore, clock: ManualClock) -> None:
    """A put after the sweep interval deletes what expired, in the background."""
    store.put("old", "1", ttl_s=1)
    clock.advance(SWEEP_INTERVAL_S + 1)
    store.put("new", "2", ttl_s=SWEEP_INTERVAL_S)
    eventually(lambda: store.sweep() == 0 and store.get("new") == "2", timeout_s=30)


def test_the_largest_result_is_kept_whole_and_a_larger_one_refused(
    store: AzureResultStore,
) -> None:
    """A value of exactly the limit in UTF-8 bytes (multi-byte characters across the 64 KiB
    parts) reads back equal; one byte more raises MessageTooLargeError naming the limit."""
    largest = ("é" * (MAX_RESULT_BYTES // 2))[: MAX_RESULT_BYTES // 2]
    assert len(largest.encode()) == MAX_RESULT_BYTES
    store.put("large", largest, ttl_s=60, group_id="big")
    assert store.get("large") == largest
    assert list(store.for_group("big")) == [("large", largest)]
    with pytest.raises(MessageTooLargeError, match=f"{MAX_RESULT_BYTES:,} bytes"):
        store.put("larger", largest + "x", ttl_s=60)


def test_the_finder_opens_the_account_the_connection_string_names(
    azurite_with_tables: AzuriteProcess,
) -> None:
    """``azure_result_store(connection_string)`` stores in that account's Table service; a
    string naming no Azure account is refused."""
    store = azure_result_store(azurite_with_tables.connection_string)
    key = uuid.uuid4().hex
    store.put(key, "[1, 2]", ttl_s=60)
    assert azure_result_store(azurite_with_tables.connection_string).get(key) == "[1, 2]"
    store.close()
    with pytest.raises(ConfigurationError, match="Azure Storage account"):
        azure_result_store("memory://")


def test_a_storage_opened_by_open_storage_finds_its_result_store(
    azurite_with_tables: AzuriteProcess,
) -> None:
    """One result store per storage object, in its account's Table service; none for a storage
    ``open_storage`` did not open on Azure."""
    storage = open_storage(azurite_with_tables.connection_string)
    store = azure_result_store_for(storage)
    assert store is not None
    assert azure_result_store_for(storage) is store
    key = uuid.uuid4().hex
    store.put(key, "7", ttl_s=60, group_id="found")
    assert azure_result_store(azurite_with_tables.connection_string).get(key) == "7"
    assert azure_result_store_for(open_storage("memory://")) is None
    storage.close()
