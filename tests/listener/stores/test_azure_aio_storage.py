"""The aio store's connections against Azurite: one loop, one pool, and dropped connections;
and which stores have an event-loop side at all."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AccessToken

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.stores.async_storage import async_storage_for
from cloudqueue.listener.stores.azure_aio_storage import AioAzureQueueStorage
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from tests.support.azurite import AzuriteProcess
from tests.support.entra import OAuthAzurite, StorageTokenIssuer
from tests.support.polling import eventually
from tests.support.scripted_proxy import ScriptedProxy


@pytest.fixture
def proxy(azurite: AzuriteProcess) -> Iterator[ScriptedProxy]:
    running = ScriptedProxy(azurite.services[0].port).start()
    yield running
    running.stop()


def store_through(
    proxy: ScriptedProxy, azurite: AzuriteProcess, **options: Any
) -> AioAzureQueueStorage:
    port = azurite.services[0].port
    connection = azurite.connection_string.replace(f"127.0.0.1:{port}", f"127.0.0.1:{proxy.port}")
    return AioAzureQueueStorage.beside(
        AzureQueueStorage.from_connection_string(connection), **options
    )


def test_calls_on_several_queues_share_one_connection(
    proxy: ScriptedProxy, azurite: AzuriteProcess, queue_name: str
) -> None:
    """Sequential calls on a queue and its poison queue go over one pooled connection."""

    async def calls() -> None:
        store = store_through(proxy, azurite)
        for name in (queue_name, f"{queue_name}-poison"):
            await store.create_queue(name)
            await store.put_message(name, "hello")
            assert (
                len(await store.get_messages(name, max_messages=32, visibility_timeout_s=30)) == 1
            )
        await store.aclose()

    asyncio.run(calls())
    assert proxy.connections == 1


@pytest.mark.parametrize("fault", ["reset_before", "busy_503"])
def test_a_dropped_or_refused_request_on_a_pooled_connection_is_retried(
    proxy: ScriptedProxy, azurite: AzuriteProcess, queue_name: str, fault: str
) -> None:
    """A pooled connection reset by the server as a request arrives (or a 503) costs a quick
    retry on a fresh connection, never a failed call: the get still takes the message."""

    async def calls() -> list[str]:
        store = store_through(proxy, azurite)
        await store.create_queue(queue_name)
        await store.put_message(queue_name, "after the drop")
        proxy.then(fault)
        got = await store.get_messages(queue_name, max_messages=32, visibility_timeout_s=30)
        await store.aclose()
        return [message.content for message in got]

    assert asyncio.run(calls()) == ["after the drop"]
    assert proxy.injected[fault] == 1


def test_an_idle_connection_is_closed_by_the_client_and_the_next_call_reconnects(
    proxy: ScriptedProxy, azurite: AzuriteProcess, queue_name: str
) -> None:
    """A worker idle past the keep-alive closes its connection itself (before a server would drop
    it) and its next poll opens a fresh one, without an error."""

    async def calls() -> int:
        store = store_through(proxy, azurite, keepalive_s=0.2)
        await store.create_queue(queue_name)
        # Polled from a thread: the loop stays free to run its keep-alive timer.
        await asyncio.to_thread(eventually, lambda: proxy.closed >= 1)
        count = await store.approximate_message_count(queue_name)
        await store.aclose()
        return count

    assert asyncio.run(calls()) == 0
    assert proxy.connections == 2


def test_a_store_open_on_one_loop_refuses_another_until_closed(
    azurite: AzuriteProcess, queue_name: str
) -> None:
    """A session belongs to its loop: a call from a second loop is refused with a plain error,
    and once closed on its own loop the store opens on the next one."""
    store = AioAzureQueueStorage.beside(
        AzureQueueStorage.from_connection_string(azurite.connection_string)
    )
    first = asyncio.new_event_loop()
    try:
        first.run_until_complete(store.create_queue(queue_name))
        with pytest.raises(RuntimeError, match="another event loop"):
            asyncio.run(store.approximate_message_count(queue_name))
        first.run_until_complete(store.aclose())
    finally:
        first.close()

    async def on_a_new_loop() -> int:
        count = await store.approximate_message_count(queue_name)
        await store.aclose()
        return count

    assert asyncio.run(on_a_new_loop()) == 0


def test_the_threaded_stores_entra_id_credential_signs_for_the_aio_clients(
    trusted_azurite_oauth: OAuthAzurite, queue_name: str
) -> None:
    """Beside a store signed in with a synchronous token credential (as the ``credential``
    setting opens one), the aio store signs with that same credential: Azurite in OAuth mode
    takes its calls, and the token came from it, fetched off the loop's thread."""
    issuer = CallingThreads()
    storage = AzureQueueStorage.from_account_url(trusted_azurite_oauth.process.queue_url, issuer)
    aio = AioAzureQueueStorage.beside(
        storage, connection_verify=str(trusted_azurite_oauth.ca_bundle)
    )

    async def round_trip() -> list[str]:
        try:
            await aio.create_queue(queue_name)
            await aio.put_message(queue_name, "signed")
            got = await aio.get_messages(queue_name, max_messages=1, visibility_timeout_s=30)
            return [message.content for message in got]
        finally:
            await aio.aclose()

    assert asyncio.run(round_trip()) == ["signed"]
    storage.close()
    assert issuer.issued
    assert threading.get_ident() not in issuer.threads


class CallingThreads(StorageTokenIssuer):
    """Tokens for Azurite, noting which threads asked for them."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[int] = set()

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.threads.add(threading.get_ident())
        return super().get_token(*scopes, **kwargs)


def test_a_store_wrapping_others_has_no_event_loop_side_yet(tmp_path: Path) -> None:
    """A partitioned store (here over SQLite; over Azure it would make blocking HTTP calls on the
    loop) is refused with a message naming the way out, not called directly."""
    parts = [SqliteQueueStorage(tmp_path / "a.db"), SqliteQueueStorage(tmp_path / "b.db")]
    partitioned = PartitionedQueueStorage(parts, {"work": 2})
    with pytest.raises(ConfigurationError, match="dequeue threads"):
        async_storage_for(partitioned)
    partitioned.close()
