"""CloudQueueListener against Azurite: the real SDK, real HTTP, real outages."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    MessageCodec,
    PoisonRecord,
    poison_queue_name,
)
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from tests.support.azurite import AzuriteFactory
from tests.support.polling import eventually


@pytest.fixture
def azure(azurite_connection_string: str) -> Iterator[AzureQueueStorage]:
    storage = AzureQueueStorage.from_connection_string(azurite_connection_string)
    yield storage
    storage.close()


def test_a_burst_is_drained_by_several_threads_with_poison_for_bad_input(
    azure: AzureQueueStorage, queue_name: str
) -> None:
    """Four threads drain 100 items exactly once each; a malformed message is poisoned."""
    azure.create_queue(queue_name)
    codec = MessageCodec(dict)
    for number in range(100):
        azure.put_message(queue_name, codec.encode({"n": number}))
    azure.put_message(queue_name, "{not base64")
    seen: list[int] = []
    lock = threading.Lock()

    def record(item: dict[str, int]) -> None:
        with lock:
            seen.append(item["n"])

    listener: CloudQueueListener[dict[str, int]] = CloudQueueListener(
        azure, CloudQueueLocation(queue_name), dict, dequeue_interval_s=0.05
    )
    listener.subscribe(record)
    listener.start_listener(4)
    try:
        eventually(lambda: listener.messages_processed == 100, timeout_s=60)
        eventually(lambda: azure.approximate_message_count(queue_name) == 0, timeout_s=10)
    finally:
        assert listener.stop(30)
    assert sorted(seen) == list(range(100))
    poisoned = azure.get_messages(
        poison_queue_name(queue_name), max_messages=32, visibility_timeout_s=30
    )
    assert [PoisonRecord.from_json(m.content).reason for m in poisoned] == ["undecodable"]


def test_the_listener_survives_azurite_stopping_and_restarting(
    azurite_factory: AzuriteFactory, tmp_path: Path, queue_name: str
) -> None:
    """A storage outage leaves every dequeue thread alive; work resumes when storage is back."""
    azurite = azurite_factory(location=tmp_path / "azurite")
    storage = AzureQueueStorage.from_connection_string(azurite.connection_string)
    handled: list[str] = []
    listener: CloudQueueListener[str] = CloudQueueListener(
        storage,
        CloudQueueLocation(queue_name),
        str,
        dequeue_interval_s=0.05,
        max_error_delay_s=0.5,
    )
    listener.subscribe(handled.append)
    listener.start_listener(2)
    codec = MessageCodec(str)
    try:
        storage.put_message(queue_name, codec.encode("before"))
        eventually(lambda: handled == ["before"], timeout_s=30)
        azurite.stop()
        errors_before = listener.dequeue_errors
        eventually(lambda: listener.dequeue_errors >= errors_before + 2, timeout_s=30)
        assert listener.active_dequeue_tasks == 2
        azurite.start()
        storage.put_message(queue_name, codec.encode("after"))
        eventually(lambda: handled == ["before", "after"], timeout_s=30)
        assert listener.active_dequeue_tasks == 2
    finally:
        assert listener.stop(30)
        storage.close()
