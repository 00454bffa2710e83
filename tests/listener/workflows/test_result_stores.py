"""The result stores of memory and SQLite keep one value per key for its time to live: a put
replaces, an expired result reads as absent and is swept, and a group's results are found by
its id (the contract of ``cloudqueue.listener.workflows.result_store``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudqueue.listener import InMemoryQueueStorage, SqliteQueueStorage
from cloudqueue.listener.stores.key_records import SWEEP_INTERVAL_S
from cloudqueue.listener.testing import ManualClock
from cloudqueue.listener.workflows.result_store import ResultStore
from cloudqueue.listener.workflows.result_stores import (
    InMemoryResultStore,
    SqliteResultStore,
    result_store_for,
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["memory", "sqlite"])
def store(
    request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock
) -> Iterator[ResultStore]:
    if request.param == "memory":
        yield InMemoryResultStore(clock=clock)
        return
    database = SqliteQueueStorage(tmp_path / "q.db", clock=clock)
    kept = SqliteResultStore(database, owns=True)
    yield kept
    kept.close()


def held(store: ResultStore) -> int:
    """Results held, expired ones not swept yet included."""
    return store.rows() if isinstance(store, SqliteResultStore) else len(store)  # type: ignore[arg-type]


def test_a_put_value_is_read_back_and_a_second_put_replaces_it(store: ResultStore) -> None:
    """One value per key: the second put of a key (a redelivery) replaces the first."""
    assert store.get("k") is None
    store.put("k", '{"total":1}', ttl_s=60)
    store.put("k", '{"total":2}', ttl_s=60)
    assert store.get("k") == '{"total":2}'
    assert held(store) == 1


def test_an_expired_result_reads_as_absent_and_is_swept(
    store: ResultStore, clock: ManualClock
) -> None:
    """Past its time to live a result reads as None at once; the next sweep removes its row."""
    store.put("old", "1", ttl_s=60)
    clock.advance(59)
    assert store.get("old") == "1"
    clock.advance(1)
    assert store.get("old") is None
    assert held(store) == 1  # read as absent, not yet removed
    clock.advance(SWEEP_INTERVAL_S)
    store.put("new", "2", ttl_s=60)
    assert held(store) == 1
    assert store.get("new") == "2"


def test_a_groups_results_are_found_by_its_id_unexpired_only(
    store: ResultStore, clock: ManualClock
) -> None:
    """``for_group`` gives the (key, value) of the group's members, none of other groups'
    or of results outside a group, and none expired."""
    store.put("g-1", "1", ttl_s=60, group_id="g")
    store.put("g-0", "0", ttl_s=60, group_id="g")
    store.put("short", "9", ttl_s=5, group_id="g")
    store.put("h-0", "5", ttl_s=60, group_id="h")
    store.put("alone", "7", ttl_s=60)
    clock.advance(10)
    assert list(store.for_group("g")) == [("g-0", "0"), ("g-1", "1")]
    assert list(store.for_group("nobody")) == []


@pytest.mark.parametrize("ttl_s", [0, -1, float("inf"), float("nan")])
def test_a_time_to_live_that_is_no_positive_finite_number_is_refused(
    store: ResultStore, ttl_s: float
) -> None:
    """A put with such a time to live raises ValueError and keeps nothing."""
    with pytest.raises(ValueError, match="time to live"):
        store.put("k", "1", ttl_s=ttl_s)
    assert store.get("k") is None


def test_the_finder_gives_the_store_of_the_same_embedded_store(tmp_path: Path) -> None:
    """One result store per in-memory store; the SQLite file's table, seen by every opener of
    the file; none for a storage that is not embedded."""
    memory = InMemoryQueueStorage()
    assert result_store_for(memory) is result_store_for(memory)
    assert result_store_for(memory) is not result_store_for(InMemoryQueueStorage())
    path = tmp_path / "q.db"
    first, second = SqliteQueueStorage(path), SqliteQueueStorage(path)
    try:
        writer, reader = result_store_for(first), result_store_for(second)
        assert writer is not None
        assert reader is not None
        writer.put("k", '"v"', ttl_s=60)
        assert reader.get("k") == '"v"'
    finally:
        first.close()
        second.close()
    assert result_store_for(object()) is None  # type: ignore[arg-type]
