"""The contract runs on every backend twice: as one plain queue (K = 1) and as a logical queue of
three partitions spread over two accounts of that backend (K = 3); and once more on the async
stores an event-loop worker awaits (``azure-aio``: the aio SDK; ``sqlite-aio``: the SQLite store
called directly), their message operations awaited through ``BlockingAsyncStorage``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudqueue.listener.stores.async_storage import async_storage_for
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from tests.conftest import BACKENDS, make_storage
from tests.support.blocking_async_storage import BlockingAsyncStorage

PARTITION_COUNTS = [1, 3]

ASYNC_BACKENDS = ["azure-aio", "sqlite-aio"]
"""Plain queues only: partitioning sits above the message operations an async store awaits."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "one_physical_queue: the behaviour of a single physical queue (K = 1 only)"
    )
    config.addinivalue_line(
        "markers",
        "waits_out_a_timeout: waits ~1 s for a timeout or TTL (K = 3 on the in-memory store only)",
    )


CONTRACT_DIR = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect, not skip, the K = 3 runs of tests that state single-queue behaviour (one get
    taking 32 of 40 messages: a partitioned get takes from one partition), and the K = 3 runs of
    the ~1 s timeout tests except on the in-memory store: what partitioning adds to them
    (redelivery found by gets in turn) is the same on every backend, whose own timing the K = 1
    runs prove; this keeps the K = 3 contract's added time near 25 s."""
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        # The hook sees every test of the session: only this folder's `storage` is (backend, K).
        param = callspec.params.get("storage") if callspec else None
        backend, partitions = (
            param if CONTRACT_DIR in item.path.parents and isinstance(param, tuple) else ("", 1)
        )
        single = item.get_closest_marker("one_physical_queue") is not None
        waits = item.get_closest_marker("waits_out_a_timeout") is not None and backend != "memory"
        (dropped if partitions > 1 and (single or waits) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(
    params=[(backend, k) for backend in BACKENDS for k in PARTITION_COUNTS]
    + [(backend, 1) for backend in ASYNC_BACKENDS],
    ids=lambda param: f"{param[0]}-k{param[1]}",
)
def storage(
    request: pytest.FixtureRequest, tmp_path: Path, queue_name: str
) -> Iterator[QueueStorage]:
    """Each backend in turn, plain or as the test's queue partitioned over two accounts."""
    backend, partitions = request.param
    if backend in ASYNC_BACKENDS:
        admin = make_storage(backend.removesuffix("-aio"), request, tmp_path)
        awaited = BlockingAsyncStorage(async_storage_for(admin), admin)
        yield awaited
        awaited.close()
        return
    first = make_storage(backend, request, tmp_path)
    if partitions == 1:
        yield first
        first.close()
        return
    second_path = tmp_path / "second"
    second_path.mkdir()
    accounts = [first, make_storage(backend, request, second_path)]
    partitioned = PartitionedQueueStorage(accounts, {queue_name: partitions})
    yield partitioned
    partitioned.close()
