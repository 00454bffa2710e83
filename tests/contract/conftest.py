"""The contract runs on every backend twice: as one plain queue (K = 1) and as a logical queue of
three partitions spread over two accounts of that backend (K = 3)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from listener.stores.partitioned import PartitionedQueueStorage
from listener.stores.storage import QueueStorage
from tests.conftest import BACKENDS, make_storage

PARTITION_COUNTS = [1, 3]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "one_physical_queue: the behaviour of a single physical queue (K = 1 only)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect, not skip, the K = 3 runs of tests that state single-queue behaviour (one get
    taking 32 of 40 messages: a partitioned get takes from one partition)."""
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        single = item.get_closest_marker("one_physical_queue") is not None
        callspec = getattr(item, "callspec", None)
        partitions = callspec.params.get("storage", ("", 1))[1] if callspec else 1
        (dropped if single and partitions > 1 else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(
    params=[(backend, k) for backend in BACKENDS for k in PARTITION_COUNTS],
    ids=lambda param: f"{param[0]}-k{param[1]}",
)
def storage(
    request: pytest.FixtureRequest, tmp_path: Path, queue_name: str
) -> Iterator[QueueStorage]:
    """Each backend in turn, plain or as the test's queue partitioned over two accounts."""
    backend, partitions = request.param
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
