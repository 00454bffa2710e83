"""The Azure backend reads proxy, CA bundle and netrc settings once, at open, and honours them."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudqueue.listener.stores.azure_aio_storage import AioAzureQueueStorage
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.stores.http_session import ca_bundle, requests_reads_environment
from tests.support.azurite import AzuriteProcess
from tests.support.forward_proxy import ForwardProxy

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture
def proxy(azurite: AzuriteProcess, monkeypatch: pytest.MonkeyPatch) -> Iterator[ForwardProxy]:
    """A counting forward proxy to Azurite, and an environment with no proxy setting yet."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    forward = ForwardProxy(upstream_port=azurite.queue.port).start()
    yield forward
    forward.stop()


def put_and_get(connection_string: str, queue: str) -> None:
    storage = AzureQueueStorage.from_connection_string(connection_string)
    try:
        storage.create_queue(queue)
        storage.put_message(queue, "hello")
        assert [
            m.content for m in storage.get_messages(queue, max_messages=1, visibility_timeout_s=5)
        ] == ["hello"]
    finally:
        storage.close()


def test_http_proxy_set_at_start_carries_every_request(
    proxy: ForwardProxy, azurite_connection_string: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With HTTP_PROXY set when the storage opens, its requests go through that proxy."""
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    put_and_get(azurite_connection_string, "proxied")
    assert proxy.forwarded >= 3


def test_no_proxy_naming_the_host_bypasses_the_proxy(
    proxy: ForwardProxy, azurite_connection_string: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NO_PROXY naming the storage host sends its requests direct, as requests always did."""
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    put_and_get(azurite_connection_string, "bypassed")
    assert proxy.forwarded == 0


def test_proxy_settings_are_read_when_the_storage_opens(
    proxy: ForwardProxy, azurite_connection_string: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no proxy setting at open, the storage does not look again on each request."""
    storage = AzureQueueStorage.from_connection_string(azurite_connection_string)
    try:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        storage.create_queue("direct")
        storage.put_message("direct", "hello")
    finally:
        storage.close()
    assert proxy.forwarded == 0


async def put_and_get_on_a_loop(
    connection_string: str, queue: str, *, proxy_set_after_open: str | None = None
) -> None:
    """As ``put_and_get``, on the event loop's store (the aio clients); ``HTTP_PROXY`` set to
    ``proxy_set_after_open`` once its session is open."""
    sync_storage = AzureQueueStorage.from_connection_string(connection_string)
    storage = AioAzureQueueStorage.beside(sync_storage)
    try:
        await storage.create_queue(queue)
        if proxy_set_after_open is not None:
            os.environ["HTTP_PROXY"] = proxy_set_after_open  # monkeypatch undoes it
        await storage.put_message(queue, "hello")
        got = await storage.get_messages(queue, max_messages=1, visibility_timeout_s=5)
        assert [m.content for m in got] == ["hello"]
    finally:
        await storage.aclose()
        sync_storage.close()


def test_an_event_loop_store_opened_with_http_proxy_set_uses_it(
    proxy: ForwardProxy, azurite_connection_string: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With HTTP_PROXY set when the aio clients' session opens, their requests go through it."""
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    asyncio.run(put_and_get_on_a_loop(azurite_connection_string, "aio-proxied"))
    assert proxy.forwarded >= 3


def test_an_event_loop_store_reads_proxy_settings_when_its_session_opens(
    proxy: ForwardProxy, azurite_connection_string: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no proxy setting when the aio clients' session opens, it does not look again on each
    request (aiohttp's ``trust_env`` reads the whole environment per request)."""
    monkeypatch.setenv("HTTP_PROXY", "")  # restored or removed after the test
    later = f"http://127.0.0.1:{proxy.port}"
    asyncio.run(
        put_and_get_on_a_loop(azurite_connection_string, "aio-direct", proxy_set_after_open=later)
    )
    assert proxy.forwarded == 0


@pytest.mark.parametrize(
    ("environ", "netrc", "reads"),
    [
        ({}, False, False),
        ({"PATH": "/usr/bin", "NO_PROXY": "127.0.0.1"}, False, False),
        ({"https_proxy": "http://proxy:3128"}, False, True),
        ({"HTTP_PROXY": "http://proxy:3128"}, False, True),
        ({"REQUESTS_CA_BUNDLE": "/etc/ca.pem"}, False, False),
        ({"NETRC": "/etc/netrc"}, False, True),
        ({}, True, True),
    ],
)
def test_environment_settings_that_keep_requests_looking(
    environ: dict[str, str], netrc: bool, reads: bool, tmp_path: Path
) -> None:
    """A proxy or a netrc file keeps requests' per-request lookups on; a CA bundle does not."""
    if netrc:
        (tmp_path / ".netrc").write_text("machine example.com login a password b\n")
    assert requests_reads_environment(environ, home=tmp_path) is reads


def test_the_ca_bundle_is_the_one_requests_would_read() -> None:
    """REQUESTS_CA_BUNDLE wins over CURL_CA_BUNDLE; with neither, requests' own bundle."""
    both = {"REQUESTS_CA_BUNDLE": "/a.pem", "CURL_CA_BUNDLE": "/b.pem"}
    assert ca_bundle(both) == "/a.pem"
    assert ca_bundle({"CURL_CA_BUNDLE": "/b.pem"}) == "/b.pem"
    assert ca_bundle({"REQUESTS_CA_BUNDLE": ""}) is None


@pytest.mark.parametrize("transport", ["urllib3", "requests"])
def test_plain_http_requests_do_not_look_up_the_ca_bundle(
    transport: str,
    azurite_connection_string: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """A CA bundle set for https costs plain-http requests (Azurite) no file-system look-up, on
    either transport the queue clients may use."""
    bundle = tmp_path / "ca.pem"
    bundle.write_text("")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))
    if transport == "requests":  # a proxy setting keeps requests; NO_PROXY sends Azurite direct
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    storage = AzureQueueStorage.from_connection_string(azurite_connection_string)
    looked_up: list[str] = []
    isdir = os.path.isdir

    def counting_isdir(path: Any) -> bool:
        looked_up.append(str(path))
        return isdir(path)

    monkeypatch.setattr(os.path, "isdir", counting_isdir)  # requests calls os.path.isdir
    try:
        storage.create_queue(f"plain-{transport}")
        storage.put_message(f"plain-{transport}", "hello")
        assert storage.get_messages(f"plain-{transport}", max_messages=1, visibility_timeout_s=5)
    finally:
        storage.close()
    assert str(bundle) not in looked_up
