"""A repeated put of a stored-payload message: the copy of handled work is dropped, not poisoned.

An SDK retry of a put that had in fact succeeded leaves two messages naming one payload. On each
pair of queue and payload store (memory, SQLite with its folder, Azure queues with blobs on
Azurite), every check uses a freshly opened payload store, as another worker process would.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryPayloadStore,
    InMemoryQueueStorage,
    MessageCodec,
    PayloadStore,
    Publisher,
    QueueStorage,
    SqliteQueueStorage,
    open_payload_store,
    poison_queue_name,
)
from tests.support.azurite import AzuriteFactory
from tests.support.event_loop_consumer import ONE_TASK, Consuming, LoopConsumer
from tests.support.polling import eventually


@dataclass
class Backend:
    queues: QueueStorage
    open_payloads: Callable[[], PayloadStore]
    """Opens the payload store anew, as a separate worker process would."""


@pytest.fixture(params=["memory", "sqlite", "azure"])
def backend(request: pytest.FixtureRequest, tmp_path: Path, queue_name: str) -> Iterator[Backend]:
    """A queue storage and its payload store, of each kind."""
    if request.param == "memory":
        shared = InMemoryPayloadStore()
        backend = Backend(InMemoryQueueStorage(), lambda: shared)
    elif request.param == "sqlite":
        connection = f"sqlite:///{tmp_path}/queues.db"
        backend = Backend(
            SqliteQueueStorage(tmp_path / "queues.db"), lambda: open_payload_store(connection)
        )
    else:
        from cloudqueue.listener.stores.azure_storage import AzureQueueStorage

        factory: AzuriteFactory = request.getfixturevalue("azurite_factory")
        connection = factory(blob=True).connection_string
        backend = Backend(
            AzureQueueStorage.from_connection_string(connection),
            lambda: open_payload_store(connection),
        )
    backend.queues.create_queue(queue_name)
    yield backend
    backend.queues.close()


def handle_all(
    backend: Backend, queue_name: str, handler: Callable[[bytes], Any], kind: str = "threads"
) -> None:
    """Run a one-thread listener (or the event-loop consumer of the handler made ``async def``,
    ``kind="event_loop"``), with its own payload store, until the queue is empty."""
    listener: Consuming
    if kind == "event_loop":

        async def handle(item: bytes) -> None:
            handler(item)

        options = {"payload_store": backend.open_payloads(), "scaling": ONE_TASK}
        listener = LoopConsumer(backend.queues, queue_name, handle, MessageCodec(bytes), **options)
        listener.start()
    else:
        threaded: CloudQueueListener[bytes] = CloudQueueListener(
            backend.queues,
            CloudQueueLocation(queue_name),
            bytes,
            payload_store=backend.open_payloads(),
            dequeue_interval_s=0.05,
        )
        threaded.subscribe(handler)
        threaded.start_listener(1)
        listener = threaded
    try:
        eventually(lambda: backend.queues.approximate_message_count(queue_name) == 0, timeout_s=30)
    finally:
        assert listener.stop(10)


def poison_count(backend: Backend, queue_name: str) -> int:
    backend.queues.create_queue(poison_queue_name(queue_name))
    return backend.queues.approximate_message_count(poison_queue_name(queue_name))


# The event-loop consumer on the embedded stores only: on Azurite it would cost an account more.
ON_EACH = [(store, "threads") for store in ("memory", "sqlite", "azure")] + [
    (store, "event_loop") for store in ("memory", "sqlite")
]


@pytest.mark.parametrize(("backend", "kind"), ON_EACH, indirect=["backend"])
def test_the_repeated_copy_of_a_handled_message_is_dropped_with_an_info_event(
    backend: Backend, queue_name: str, kind: str
) -> None:
    """The first copy is handled; the second, arriving after its payload was retired, is deleted
    with a ``duplicate_dropped`` event and never reaches the poison queue (by either consumer)."""
    item = random.Random(1).randbytes(100 * 1024)
    publisher = Publisher(backend.queues, queue_name, bytes, payload_store=backend.open_payloads())
    publisher.publish(item)
    [sent] = backend.queues.peek_messages(queue_name, max_messages=1)
    received: list[bytes] = []
    handle_all(backend, queue_name, received.append, kind)
    backend.queues.put_message(queue_name, sent.content)  # what the SDK's repeated put left
    with capture_logs() as records:
        handle_all(backend, queue_name, received.append, kind)
    assert received == [item]
    assert poison_count(backend, queue_name) == 0
    [dropped] = [r for r in records if r["event"] == "duplicate_dropped"]
    assert dropped["log_level"] == "info"
    assert dropped["payload"] in sent.content


def test_a_payload_that_was_lost_not_handled_is_still_poisoned(
    backend: Backend, queue_name: str
) -> None:
    """Only a payload retired after its work was done counts as a duplicate: a deleted one is
    ``payload_missing`` as before."""
    payloads = backend.open_payloads()
    Publisher(backend.queues, queue_name, bytes, payload_store=payloads).publish(
        random.Random(2).randbytes(100 * 1024)
    )
    for name in payloads.names():  # type: ignore[attr-defined]
        payloads.delete(name)
    handle_all(backend, queue_name, lambda _: None)
    assert poison_count(backend, queue_name) == 1
