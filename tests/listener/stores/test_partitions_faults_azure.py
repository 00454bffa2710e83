"""One account of a partitioned queue goes down mid-drain: the others keep draining, and the lost
one resumes after its restart with nothing lost (two Azurite instances standing for two accounts).
"""

from __future__ import annotations

import threading
from pathlib import Path

from cloudqueue.listener import CloudQueueListener, CloudQueueLocation
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.wire.codec import MessageCodec
from tests.support.azurite import AzuriteFactory
from tests.support.polling import eventually

PER_PARTITION = 40


def fill(storage: AzureQueueStorage, queue: str, numbers: range) -> None:
    codec = MessageCodec(int)
    for number in numbers:
        storage.put_message(queue, codec.encode(number))


def test_a_stopped_account_pauses_only_its_partition_and_loses_nothing(
    azurite_connection_string: str,
    azurite_factory: AzuriteFactory,
    tmp_path: Path,
    queue_name: str,
) -> None:
    """While account B is down, partition p0 on account A drains to the end; after B restarts
    its partition p1 drains too, every message handled and no queue left holding any.

    Account A is the session's Azurite; B is one of its own, kept on disk over the restart."""
    second = azurite_factory(location=tmp_path / "account-b")
    account_a = AzureQueueStorage.from_connection_string(azurite_connection_string)
    account_b = AzureQueueStorage.from_connection_string(second.connection_string)
    storage = PartitionedQueueStorage([account_a, account_b], {queue_name: 2})
    storage.create_queue(queue_name)
    on_a, on_b = range(PER_PARTITION), range(1000, 1000 + PER_PARTITION)
    fill(account_a, f"{queue_name}-p0", on_a)
    fill(account_b, f"{queue_name}-p1", on_b)
    handled: set[int] = set()
    lock = threading.Lock()
    gate = threading.Event()

    def handle(number: int) -> None:
        with lock:
            handled.add(number)
            pause = len(handled) >= 5
        if pause:  # mid-drain: every thread holds here until account B is down
            gate.wait(30)

    listener: CloudQueueListener[int] = CloudQueueListener(
        storage,
        CloudQueueLocation(queue_name, visibility_timeout_s=3),
        int,
        dequeue_batch_size=4,
        dequeue_interval_s=0.1,
        max_error_delay_s=0.5,
    )
    listener.subscribe(handle)
    listener.start_listener(2)
    try:
        eventually(lambda: len(handled) >= 5)
        second.stop()
        gate.set()
        eventually(lambda: set(on_a) <= handled, timeout_s=60)
        eventually(lambda: account_a.approximate_message_count(f"{queue_name}-p0") == 0)
        assert not set(on_b) <= handled  # B's partition really waited for its account
        second.start()
        eventually(lambda: set(on_b) <= handled, timeout_s=60)
        eventually(lambda: storage.approximate_message_count(queue_name) == 0, timeout_s=30)
    finally:
        listener.stop(timeout_s=10)
        storage.close()
    assert handled == set(on_a) | set(on_b)
