"""A worker whose idle connections the server side dropped picks up the next message without an
error, on the single event loop as on threads (issue 41: azure-sdk-for-python#26332)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener import Publisher
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost
from tests.support.azurite import AzuriteProcess
from tests.support.idle_drop_proxy import IdleDropProxy
from tests.support.polling import eventually

SERVER_IDLE_S = 0.2
"""The proxy forgets a connection idle this long; the worker polls less often than that."""
QUIET_POLLS = {"min_idle_s": 0.3, "max_idle_s": 0.35, "delta_backoff_s": 0.01}


@pytest.fixture
def proxy(azurite: AzuriteProcess) -> Iterator[IdleDropProxy]:
    running = IdleDropProxy(azurite.queue.port, idle_s=SERVER_IDLE_S, drop="silent").start()
    yield running
    running.stop()


def worker_on(queue: str, path: str, handled: list[str]) -> type[QueueWorker[dict[str, str]]]:
    class Noting(QueueWorker[dict[str, str]]):
        queue_name = queue
        settings: ClassVar[dict[str, Any]] = {"listener": {"event_loop": path}}

        async def handle(self, item: dict[str, str]) -> None:
            handled.append(item["text"])

    return Noting


@pytest.mark.parametrize("path", ["threads", "single"])
def test_a_poll_on_a_connection_the_server_dropped_reconnects_without_an_error(
    azurite: AzuriteProcess,
    proxy: IdleDropProxy,
    queue_name: str,
    path: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every idle poll finds its pooled connection dropped (reset as the request arrives, as
    after a server's idle timeout the client did not see): the worker goes on polling on fresh
    connections, logs no warning or error, and the next message put is handled."""
    port = azurite.queue.port
    through = azurite.connection_string.replace(f"127.0.0.1:{port}", f"127.0.0.1:{proxy.port}")
    handled: list[str] = []
    settings = CloudQueueSettings.model_validate(
        {"connection_string": through, "backoff": QUIET_POLLS, "shutdown_grace_s": 5}
    )
    producer = AzureQueueStorage.from_connection_string(azurite.connection_string)
    caplog.set_level(logging.WARNING)
    with capture_logs() as logs:
        host = WorkerHost([worker_on(queue_name, path, handled)], settings)
        host.start()
        try:
            eventually(lambda: proxy.dropped >= 2)
            Publisher(producer, queue_name, dict).publish({"text": "after the drops"})
            eventually(lambda: handled == ["after the drops"])
        finally:
            assert host.stop()
            producer.close()
    loud = [entry for entry in logs if entry["log_level"] in ("warning", "error", "critical")]
    assert loud == []
    assert [record.getMessage() for record in caplog.records] == []
