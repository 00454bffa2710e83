"""Progress on Azurite, its requests counted by a proxy: a report rides the next renewal's
update-message request, which carries the message's new text; it adds no request."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from cloudqueue.listener import CloudQueueListener, CloudQueueLocation, current_envelope
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from tests.support.azurite import AzuriteProcess
from tests.support.counting_proxy import CountingProxy
from tests.support.polling import eventually

VISIBILITY_TIMEOUT_S = 2  # renewed every second: the shortest cadence


def is_update(request: bytes) -> bool:
    """An update-message request (a PUT naming a pop receipt): a renewal, or a write of a
    message's text."""
    request_line = request.split(b"\r\n", 1)[0]
    return request_line.startswith(b"PUT ") and b"popreceipt=" in request_line


@pytest.fixture
def counted(azurite: AzuriteProcess) -> Iterator[tuple[CountingProxy, AzureQueueStorage]]:
    port = azurite.services[0].port
    proxy = CountingProxy(port, keep=is_update)
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
    updates = proxy.kept  # the handler returned: its message was deleted, not updated
    assert len(updates) == listener.visibility_renewals
    assert b"1 of 4 parts" in updates[0]
    assert all(b"1 of 4 parts" not in update for update in updates[1:])  # written once
