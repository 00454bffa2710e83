"""Progress on Azurite, its requests counted by a proxy: a report rides the next renewal's
update-message request, which carries the message's new text; it adds no request."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from cloudqueue.listener import CloudQueueListener, CloudQueueLocation, current_envelope
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from tests.support.azurite import AzuriteProcess
from tests.support.fault_proxy import FaultProxy
from tests.support.polling import eventually

VISIBILITY_TIMEOUT_S = 2  # renewed every second: the shortest cadence


@dataclass
class CountingProxy(FaultProxy):
    """Forwards every request unchanged and keeps the update-message requests (a PUT naming a
    pop receipt): renewals, and writes of a message's text."""

    updates: list[bytes] = field(default_factory=list)

    async def _answer(self, request: bytes, writer: asyncio.StreamWriter) -> bool:
        request_line = request.split(b"\r\n", 1)[0]
        if request_line.startswith(b"PUT ") and b"popreceipt=" in request_line:
            self.updates.append(request)
        return await super()._answer(request, writer)


@pytest.fixture
def counted(azurite: AzuriteProcess) -> Iterator[tuple[CountingProxy, AzureQueueStorage]]:
    port = azurite.services[0].port
    proxy = CountingProxy(port)
    proxy.start()
    through = azurite.connection_string.replace(f"127.0.0.1:{port}", f"127.0.0.1:{proxy.port}")
    storage = AzureQueueStorage.from_connection_string(through)
    yield proxy, storage
    storage.close()
    proxy.stop()


def test_a_report_rides_the_next_renewal_request(
    counted: tuple[CountingProxy, AzureQueueStorage], queue_name: str
) -> None:
    """The message's update requests are exactly its renewals (the handler reported at once, a
    second before the first renewal was due), and the first carries the report in its body."""
    proxy, storage = counted
    storage.create_queue(queue_name)
    storage.put_message(queue_name, "a long job")
    reported, finish = threading.Event(), threading.Event()

    def handle(_: str) -> None:
        current_envelope().progress(0.25, "1 of 4 parts")
        reported.set()
        finish.wait(30)

    listener: CloudQueueListener[str] = CloudQueueListener(
        storage, CloudQueueLocation(queue_name, visibility_timeout_s=VISIBILITY_TIMEOUT_S), str
    )
    listener.subscribe(handle)
    listener.start_listener(1)
    try:
        assert reported.wait(30)
        eventually(lambda: listener.visibility_renewals >= 2, timeout_s=20)
        finish.set()
        eventually(lambda: listener.messages_processed == 1)
    finally:
        finish.set()
        listener.stop(timeout_s=10)
    updates = proxy.updates  # the handler returned: its message was deleted, not updated
    assert len(updates) == listener.visibility_renewals
    assert b"1 of 4 parts" in updates[0]
    assert all(b"1 of 4 parts" not in update for update in updates[1:])  # written once
