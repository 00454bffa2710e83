"""One listener drains a partitioned queue on every store: K = 1 and K = 3 over two accounts.

Real time, real threads: waits poll with a deadline. A failing item is poisoned at its first
delivery, so the poison path is covered without waiting for retries.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import SecretStr, ValidationError

from cloudqueue.listener import CloudQueueListener, CloudQueueLocation, InMemoryQueueStorage
from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.poison.record import read_record
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.producer.publisher import Publisher
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost
from tests.conftest import BACKENDS, make_storage
from tests.support.polling import eventually

ITEMS = 30
FAILING = 7


@pytest.fixture(
    params=[(backend, k) for backend in BACKENDS for k in (1, 3)],
    ids=lambda param: f"{param[0]}-k{param[1]}",
)
def store(
    request: pytest.FixtureRequest, tmp_path: Path, queue_name: str
) -> Iterator[QueueStorage]:
    """The backend plain (K = 1) or with the test's queue over 3 partitions on two accounts."""
    backend, partitions = request.param
    first = make_storage(backend, request, tmp_path)
    storage: QueueStorage = first
    if partitions > 1:
        (tmp_path / "second").mkdir()
        second = make_storage(backend, request, tmp_path / "second")
        storage = PartitionedQueueStorage([first, second], {queue_name: partitions})
    yield storage
    storage.close()


def test_a_listener_handles_every_message_of_every_partition_and_poisons_in_one_place(
    store: QueueStorage, queue_name: str
) -> None:
    """All items are handled once, the failing one is in <queue>-poison naming its partition."""
    store.create_queue(queue_name)
    store.create_queue(poison_queue_name(queue_name))
    Publisher(store, queue_name, dict).publish_many({"n": n} for n in range(ITEMS))
    handled: list[int] = []

    def handle(item: dict[str, int]) -> None:
        if item["n"] == FAILING:
            raise ValueError("refused")
        handled.append(item["n"])

    listener: CloudQueueListener[dict[str, int]] = CloudQueueListener(
        store,
        CloudQueueLocation(queue_name),
        dict,
        dequeue_interval_s=0.05,
        delivery=DeliveryPolicy(max_dequeue_count=1),
    )
    listener.subscribe(handle)
    listener.start_listener(2)
    try:
        eventually(lambda: listener.messages_poisoned == 1 and len(handled) == ITEMS - 1)
        eventually(lambda: store.approximate_message_count(queue_name) == 0)
    finally:
        assert listener.stop(timeout_s=10)
    assert sorted(handled) == [n for n in range(ITEMS) if n != FAILING]
    [poisoned] = store.peek_messages(poison_queue_name(queue_name), max_messages=32)
    record = read_record(poisoned.content)
    assert record is not None
    partitioned = isinstance(store, PartitionedQueueStorage)
    assert (record.partition or "").startswith(f"{queue_name}-p") == partitioned


class Sharded(QueueWorker[dict[str, int]]):
    queue_name = "sharded"
    settings: ClassVar[dict[str, dict[str, Any]]] = {"listener": {"partitions": 3}}
    done: ClassVar[list[int]] = []

    def handle(self, item: dict[str, int]) -> None:
        self.done.append(item["n"])


class Unsharded(QueueWorker[dict[str, int]]):
    queue_name = "unsharded"

    def handle(self, item: dict[str, int]) -> None:
        """Nothing to do."""


def test_a_host_reads_the_partitions_its_worker_settings_name() -> None:
    """listener.partitions = 3 makes the host create and drain sharded-p0..p2."""
    storage = InMemoryQueueStorage()
    host = WorkerHost([Sharded, Unsharded], CloudQueueSettings(shutdown_grace_s=5), storage=storage)
    host.start()
    try:
        assert storage.list_queues("sharded") == [
            "sharded-p0",
            "sharded-p1",
            "sharded-p2",
            "sharded-poison",
        ]
        assert storage.list_queues("unsharded") == ["unsharded", "unsharded-poison"]
        sharded_storage = host.hosted[0].listener.storage
        Publisher(sharded_storage, "sharded", dict).publish_many({"n": n} for n in range(9))
        assert [storage.approximate_message_count(f"sharded-p{i}") for i in range(3)] != [0, 0, 0]
        eventually(lambda: sorted(Sharded.done) == list(range(9)))
    finally:
        assert host.stop()


def test_without_partitions_the_host_reads_its_storage_unwrapped() -> None:
    """With K = 1 everywhere and no further accounts, listeners use the host's storage itself."""
    host = WorkerHost([Unsharded], CloudQueueSettings(), storage=InMemoryQueueStorage())
    assert host.hosted[0].listener.storage is host.storage


def test_a_bad_partition_account_is_refused_without_quoting_it() -> None:
    """A further account that cannot be parsed fails validation naming its position, not its
    text (a connection string is a secret)."""
    secret = "DefaultEndpointsProtocol=https;AccountKey=c2VjcmV0LWtleQ=="  # no AccountName
    with pytest.raises(ValidationError) as raised:
        CloudQueueSettings(partition_accounts=[SecretStr(secret)])
    assert "partition account 1" in str(raised.value)
    assert "c2VjcmV0LWtleQ" not in str(raised.value)


def test_the_host_closes_the_further_accounts_it_opened(tmp_path: Path) -> None:
    """A partition account opened from the settings is closed when the host stops."""
    settings = CloudQueueSettings(
        shutdown_grace_s=5, partition_accounts=[SecretStr(f"sqlite:///{tmp_path / 'b.db'}")]
    )
    host = WorkerHost([Sharded], settings, storage=InMemoryQueueStorage())
    partitioned = host.hosted[0].listener.storage
    assert isinstance(partitioned, PartitionedQueueStorage)
    further = partitioned.accounts[1]
    further.create_queue("still-open")
    host.start()
    assert host.stop()
    with pytest.raises(Exception, match="closed"):
        further.create_queue("after-stop")
