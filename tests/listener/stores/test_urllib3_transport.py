"""The queue clients' urllib3 transport: chosen where requests adds nothing, connections reused,
failures raised as the azure-core errors requests' transport raises."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Callable, Iterator

import pytest
import requests
from azure.core.exceptions import IncompleteReadError, ServiceResponseError
from azure.core.rest import HttpRequest

from cloudqueue.listener.errors import TransientStorageError
from cloudqueue.listener.stores.azure_clients import queue_client_options
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.stores.urllib3_transport import Urllib3Transport
from tests.support.azurite import ACCOUNT_KEY, ACCOUNT_NAME
from tests.support.entra import OAuthAzurite

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
NO_CONTENT = b"HTTP/1.1 204 No Content\r\nx-ms-request-id: r\r\nContent-Length: 0\r\n\r\n"
BODY = b"<?xml version='1.0'?>" + b"x" * 200_000
LONG_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
CUT_SHORT = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nonly this much"


@pytest.fixture(autouse=True)
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


class KeepAliveServer(socketserver.ThreadingTCPServer):
    """Answers every request on a connection with ``answer`` and keeps the connection open
    (``close_after``: closes it after answering). Counts the connections it accepted."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, answer: bytes, *, close_after: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _KeepAliveHandler)
        self.answer = answer
        self.close_after = close_after
        self.connections = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT_NAME};AccountKey={ACCOUNT_KEY};"
            f"QueueEndpoint={self.url}/{ACCOUNT_NAME};"
        )


class _KeepAliveHandler(socketserver.BaseRequestHandler):
    server: KeepAliveServer

    def handle(self) -> None:
        self.server.connections += 1  # one handler thread per connection, started in order
        received = b""
        while True:
            while b"\r\n\r\n" not in received:
                chunk = self.request.recv(65536)
                if not chunk:
                    return
                received += chunk
            received = received.partition(b"\r\n\r\n")[2]  # these requests carry no body
            self.request.sendall(self.server.answer)
            if self.server.close_after:
                self.request.shutdown(socket.SHUT_RDWR)
                return


@pytest.fixture
def server() -> Iterator[Callable[..., KeepAliveServer]]:
    """Starts KeepAliveServers in background threads; shuts them all down after the test."""
    servers: list[KeepAliveServer] = []

    def start(answer: bytes, *, close_after: bool = False) -> KeepAliveServer:
        started = KeepAliveServer(answer, close_after=close_after)
        servers.append(started)
        threading.Thread(target=started.serve_forever, daemon=True).start()
        return started

    yield start
    for started in servers:
        started.shutdown()
        started.server_close()


def transport() -> Urllib3Transport:
    return Urllib3Transport(pool_size=4, connection_timeout_s=5.0, read_timeout_s=5.0)


def test_queue_clients_use_urllib3_unless_requests_has_something_to_apply(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Clean environment: the urllib3 transport. A proxy setting, or a caller's transport option:
    requests' session, as before."""
    assert isinstance(queue_client_options()["transport"], Urllib3Transport)
    assert queue_client_options(read_timeout=1.5)["read_timeout"] == 1.5
    verify_given = queue_client_options(connection_verify=False)
    assert isinstance(verify_given["session"], requests.Session)
    assert "transport" not in verify_given
    assert queue_client_options(transport="theirs")["transport"] == "theirs"
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    proxied = queue_client_options()
    assert isinstance(proxied["session"], requests.Session)
    assert "transport" not in proxied


def test_calls_in_a_row_share_one_connection(
    server: Callable[..., KeepAliveServer],
) -> None:
    """Each answer read to its end gives the connection back to the pool for the next call."""
    service = server(NO_CONTENT)
    storage = AzureQueueStorage.from_connection_string(service.connection_string)
    try:
        for _ in range(5):
            assert storage.delete_message("q-shared", "id", "receipt")
    finally:
        storage.close()
    assert service.connections == 1


def test_a_streamed_answer_comes_in_blocks_and_frees_its_connection(
    server: Callable[..., KeepAliveServer],
) -> None:
    """With ``stream=True`` the body is read as it is iterated; read to its end, the connection
    is reused; a response closed part-read gives up its connection instead."""
    service = server(LONG_ANSWER)
    sender = transport()
    try:
        response = sender.send(HttpRequest("GET", f"{service.url}/a"), stream=True)
        blocks = list(response.iter_bytes())
        assert b"".join(blocks) == BODY
        assert len(blocks) > 1
        assert sender.send(HttpRequest("GET", f"{service.url}/b")).content == BODY
        assert service.connections == 1
        abandoned = sender.send(HttpRequest("GET", f"{service.url}/c"), stream=True)
        next(abandoned.iter_bytes())
        abandoned.close()
        assert sender.send(HttpRequest("GET", f"{service.url}/d")).content == BODY
        assert service.connections == 2
    finally:
        sender.close()


def test_a_body_cut_short_is_an_incomplete_read(server: Callable[..., KeepAliveServer]) -> None:
    """Fewer bytes than Content-Length, then a closed connection: IncompleteReadError (retried
    by the SDK), and at the storage boundary a transient error."""
    service = server(CUT_SHORT, close_after=True)
    sender = transport()
    try:
        with pytest.raises(IncompleteReadError):
            sender.send(HttpRequest("GET", f"{service.url}/short"))
        streamed = sender.send(HttpRequest("GET", f"{service.url}/short"), stream=True)
        with pytest.raises(IncompleteReadError):
            streamed.read()
    finally:
        sender.close()
    storage = AzureQueueStorage.from_connection_string(service.connection_string)
    try:
        with pytest.raises(TransientStorageError, match="IncompleteReadError"):
            storage.approximate_message_count("q-short")
    finally:
        storage.close()


def test_a_connection_closed_without_an_answer_is_a_service_response_error(
    server: Callable[..., KeepAliveServer],
) -> None:
    """The request went out and the server hung up: ServiceResponseError, as requests' gives."""
    service = server(b"", close_after=True)
    sender = transport()
    try:
        with pytest.raises(ServiceResponseError):
            sender.send(HttpRequest("GET", f"{service.url}/hang-up"))
    finally:
        sender.close()


def test_options_it_cannot_honour_are_refused_not_ignored() -> None:
    """A per-call certificate or proxy is a TypeError, not a request sent without it."""
    sender = transport()
    try:
        with pytest.raises(TypeError, match="connection_cert"):
            sender.send(HttpRequest("GET", "http://127.0.0.1:9/"), connection_cert="c.pem")
        with pytest.raises(TypeError, match="proxy"):
            sender.send(HttpRequest("GET", "http://127.0.0.1:9/"), proxies={"http": "p:1"})
    finally:
        sender.close()


def test_https_certificates_are_verified(azurite_oauth: OAuthAzurite) -> None:
    """Without its authority in the CA bundle, the TLS Azurite's certificate is refused."""
    storage = AzureQueueStorage.from_connection_string(
        f"AccountName={ACCOUNT_NAME};AccountKey={ACCOUNT_KEY};"
        f"QueueEndpoint={azurite_oauth.process.queue_url};"
    )
    try:
        with pytest.raises(TransientStorageError, match="ServiceRequestError"):
            storage.approximate_message_count("q-untrusted")
    finally:
        storage.close()
