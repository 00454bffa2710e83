"""A worker that may not create queues: listener.create_queues = false with a SAS lacking create.

The SAS below is what a least-privilege worker gets: read (queue depth, peek), process (get and
delete messages), update (visibility renewal) and add (to -poison); not create, write or delete,
so creating (or deleting) a queue is refused.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.storage.queue import AccountSasPermissions, ResourceTypes, generate_account_sas
from structlog.testing import capture_logs

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    MessageCodec,
    poison_queue_name,
)
from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.workers.settings import ListenerSettings
from tests.support.azurite import ACCOUNT_KEY, ACCOUNT_NAME, AzuriteProcess
from tests.support.event_loop_consumer import ONE_TASK, LoopConsumer
from tests.support.polling import eventually


def _messages_only_connection_string(azurite: AzuriteProcess) -> str:
    sas = generate_account_sas(
        ACCOUNT_NAME,
        ACCOUNT_KEY,
        resource_types=ResourceTypes(container=True, object=True),
        # No create, write or delete: it may not create, change or delete queues.
        permission=AccountSasPermissions(read=True, add=True, update=True, process=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    return f"QueueEndpoint={azurite.queue_url};SharedAccessSignature={sas}"


def test_create_queues_is_on_by_default() -> None:
    """Workers keep creating their queues unless told not to."""
    assert ListenerSettings().create_queues is True


def test_a_worker_without_the_create_permission_handles_and_poisons(
    azurite: AzuriteProcess,
) -> None:
    """With create_queues=False the worker never tries to create; get, delete, update and add to
    -poison are all it needs."""
    queue = f"leastpriv-{uuid.uuid4().hex[:12]}"
    admin = AzureQueueStorage.from_connection_string(azurite.connection_string)
    admin.create_queue(queue)
    admin.create_queue(poison_queue_name(queue))
    worker_storage = AzureQueueStorage.from_connection_string(
        _messages_only_connection_string(azurite)
    )
    with pytest.raises(StorageError, match="403"):
        worker_storage.create_queue(f"{queue}-other")  # the SAS really lacks create
    codec = MessageCodec(dict)
    admin.put_message(queue, codec.encode({"n": 1}))
    admin.put_message(queue, "not an item")
    handled: list[dict[str, Any]] = []
    listener: CloudQueueListener[dict[str, Any]] = CloudQueueListener(
        worker_storage,
        CloudQueueLocation(queue, visibility_timeout_s=2),
        dict,
        dequeue_interval_s=0.05,
        create_queues=False,
    )
    listener.subscribe(handled.append)
    with capture_logs() as logs:
        listener.start_listener(1)
        try:
            eventually(lambda: handled == [{"n": 1}], timeout_s=30)
            eventually(lambda: admin.approximate_message_count(poison_queue_name(queue)) == 1)
            eventually(lambda: admin.approximate_message_count(queue) == 0)
        finally:
            assert listener.stop(30)
            worker_storage.close()
            admin.close()
    assert "queue_creation_failed" not in [entry["event"] for entry in logs]


def test_the_event_loop_reads_two_queues_without_the_create_permission(
    azurite: AzuriteProcess,
) -> None:
    """The single loop on the aio SDK with the same SAS: ``create_queues=False`` tries no create
    (which would be refused), and two queues are read as one, each unreadable message moved to
    the poison queue of the queue it came from."""
    urgent, normal = (f"leastpriv-{uuid.uuid4().hex[:12]}-{n}" for n in ("u", "n"))
    admin = AzureQueueStorage.from_connection_string(azurite.connection_string)
    for queue in (urgent, normal):
        admin.create_queue(queue)
        admin.create_queue(poison_queue_name(queue))
        admin.put_message(queue, MessageCodec(dict).encode({"queue": queue}))
    admin.put_message(normal, "not an item")
    worker_storage = AzureQueueStorage.from_connection_string(
        _messages_only_connection_string(azurite)
    )
    handled: list[dict[str, Any]] = []

    async def handle(item: dict[str, Any]) -> None:
        handled.append(item)

    consumer = LoopConsumer(
        worker_storage,
        urgent,
        handle,
        MessageCodec(dict),
        scaling=ONE_TASK,
        create_queues=False,
        lower_queues=(normal,),
    )
    with capture_logs() as logs:
        consumer.start()
        try:
            eventually(lambda: len(handled) == 2, timeout_s=30)
            eventually(lambda: admin.approximate_message_count(poison_queue_name(normal)) == 1)
        finally:
            assert consumer.stop(30)
            worker_storage.close()
    assert sorted(item["queue"] for item in handled) == sorted([urgent, normal])
    assert admin.approximate_message_count(poison_queue_name(urgent)) == 0
    assert [admin.approximate_message_count(queue) for queue in (urgent, normal)] == [0, 0]
    admin.close()
    assert "queue_creation_failed" not in [entry["event"] for entry in logs]
