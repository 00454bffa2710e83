"""The Azure backend's own behaviour, against Azurite and the real SDK: errors translated at one
boundary without secrets, deletes that never raise for lost messages, and a retry policy that turns
an outage into a TransientStorageError within seconds.

Failures Azurite cannot produce (503, connection reset, a silent server) come from a scripted TCP
server on the loopback interface, still spoken to by the real SDK.
"""

from __future__ import annotations

import random
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from azure.core.credentials import AzureNamedKeyCredential
from azure.core.exceptions import HttpResponseError
from azure.storage.queue import QueueClient, generate_account_sas
from structlog.testing import capture_logs

from cloudqueue.listener.errors import (
    ConfigurationError,
    MessageNotFoundError,
    MessageTooLargeError,
    PopReceiptMismatchError,
    QueueNotFoundError,
    StorageError,
    TransientStorageError,
)
from cloudqueue.listener.queue_limits import MAX_MESSAGE_BYTES
from cloudqueue.listener.stores.azure_clients import (
    CONNECTION_POOL_SIZE,
    CONNECTION_TIMEOUT_S,
    READ_TIMEOUT_S,
    FastRetry,
    client_options,
)
from cloudqueue.listener.stores.azure_errors import translate_error
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from tests.support.azurite import (
    ACCOUNT_KEY,
    ACCOUNT_NAME,
    AzuriteError,
    AzuriteProcess,
    ensure_installed,
    port_accepts,
)
from tests.support.polling import eventually

LONG_S = 30
OUTAGE_DEADLINE_S = 5.0
"""How soon a call must fail once storage is gone: three sub-second retries plus slack."""


@pytest.fixture
def azure(azurite_connection_string: str) -> Iterator[AzureQueueStorage]:
    """The Azure backend on the session's Azurite."""
    storage = AzureQueueStorage.from_connection_string(azurite_connection_string)
    yield storage
    storage.close()


@pytest.fixture
def queue(azure: AzureQueueStorage, queue_name: str) -> str:
    azure.create_queue(queue_name)
    return queue_name


class RequestCounter:
    """A ``raw_response_hook`` for the SDK client: counts the HTTP responses it receives."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, response: Any) -> None:
        self.count += 1


# Translation of what Azurite answers


def test_delete_and_update_on_a_missing_queue_raise_queue_not_found(
    azure: AzureQueueStorage, queue_name: str
) -> None:
    """A missing queue is not a missing message: delete raises rather than returning False."""
    with pytest.raises(QueueNotFoundError, match=r"HTTP 404 QueueNotFound"):
        azure.delete_message(queue_name, "some-id", "some-receipt")
    with pytest.raises(QueueNotFoundError):
        azure.update_visibility(queue_name, "some-id", "some-receipt", LONG_S)


def test_delete_with_a_stale_receipt_returns_false_and_logs_why(
    azure: AzureQueueStorage, queue: str
) -> None:
    """A receipt replaced by an update no longer deletes; the backend says so in a log event."""
    azure.put_message(queue, "contested")
    (got,) = azure.get_messages(queue, max_messages=1, visibility_timeout_s=LONG_S)
    azure.update_visibility(queue, got.id, got.pop_receipt, LONG_S)
    with capture_logs() as logs:
        assert azure.delete_message(queue, got.id, got.pop_receipt) is False
    event = next(e for e in logs if e["event"] == "message_not_deleted")
    assert event["log_level"] == "warning"
    expected = {"queue": queue, "message_id": got.id, "reason": "pop_receipt_mismatch"}
    assert expected.items() <= event.items()
    assert azure.approximate_message_count(queue) == 1


def test_delete_of_a_deleted_message_logs_message_not_found(
    azure: AzureQueueStorage, queue: str
) -> None:
    """Deleting twice returns False the second time, logged as message_not_found."""
    put = azure.put_message(queue, "once")
    assert azure.delete_message(queue, put.id, put.pop_receipt) is True
    with capture_logs() as logs:
        assert azure.delete_message(queue, put.id, put.pop_receipt) is False
    event = next(e for e in logs if e["event"] == "message_not_deleted")
    assert event["reason"] == "message_not_found"


def test_update_with_a_wrong_receipt_raises_pop_receipt_mismatch(
    azure: AzureQueueStorage, queue: str
) -> None:
    """Any receipt but the latest is a mismatch (Azure's 400), a kind of MessageNotFoundError."""
    put = azure.put_message(queue, "held")
    with pytest.raises(PopReceiptMismatchError, match=r"HTTP 400 PopReceiptMismatch") as raised:
        azure.update_visibility(queue, put.id, "not-the-receipt", LONG_S)
    assert isinstance(raised.value, MessageNotFoundError)


def test_oversize_content_is_refused_before_any_request(
    azurite_connection_string: str, queue_name: str
) -> None:
    """The size is checked client-side: no request goes out, so even a missing queue says so."""
    counter = RequestCounter()
    storage = AzureQueueStorage.from_connection_string(
        azurite_connection_string, raw_response_hook=counter
    )
    try:
        with pytest.raises(MessageTooLargeError):
            storage.put_message(queue_name, "x" * (MAX_MESSAGE_BYTES + 1))
        assert counter.count == 0
    finally:
        storage.close()


def test_content_of_exactly_the_limit_is_accepted_by_azurite(
    azure: AzureQueueStorage, queue: str
) -> None:
    """Azurite's limit is 65,536 UTF-8 bytes of message text, the same as MAX_MESSAGE_BYTES."""
    content = "z" * MAX_MESSAGE_BYTES
    azure.put_message(queue, content)
    (got,) = azure.get_messages(queue, max_messages=1, visibility_timeout_s=LONG_S)
    assert got.content == content


def _raw_client(connection_string: str, queue_name: str, **options: Any) -> QueueClient:
    """An SDK client without our checks, to provoke the service's own refusals."""
    return QueueClient.from_connection_string(
        connection_string, queue_name, retry_policy=FastRetry(), **options
    )


def _service_error(call: Callable[[], object]) -> HttpResponseError:
    with pytest.raises(HttpResponseError) as raised:
        call()
    return raised.value


def test_service_refusals_translate_to_their_error_types(
    azurite_connection_string: str, queue: str
) -> None:
    """Real SDK exceptions from Azurite map to the project's types by status and error code."""
    raw = _raw_client(azurite_connection_string, queue)
    too_large = _service_error(lambda: raw.send_message("x" * (MAX_MESSAGE_BYTES + 1)))
    out_of_range = _service_error(lambda: list(raw.receive_messages(visibility_timeout=0)))
    bad_name = _raw_client(azurite_connection_string, "Bad_Name")
    invalid_name = _service_error(bad_name.create_queue)
    try:
        cases: list[tuple[HttpResponseError, type[StorageError], str]] = [
            (too_large, MessageTooLargeError, "HTTP 413 RequestBodyTooLarge"),
            (out_of_range, StorageError, "HTTP 400 OutOfRangeQueryParameterValue"),
            (invalid_name, StorageError, "HTTP 400 InvalidResourceName"),
        ]
        for sdk_error, expected_type, expected_text in cases:
            translated = translate_error(sdk_error, operation="op", queue_name=queue)
            assert type(translated) is expected_type
            assert str(translated) == f"op on queue {queue!r} failed: {expected_text}"
    finally:
        raw.close()
        bad_name.close()


def test_a_wrong_account_key_is_a_permanent_error_without_the_key(
    azurite: AzuriteProcess, queue_name: str
) -> None:
    """Authentication failure (403) is not transient, and its message does not quote the key."""
    wrong_key = "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmc="
    storage = AzureQueueStorage.from_connection_string(
        azurite.connection_string.replace(ACCOUNT_KEY, wrong_key)
    )
    try:
        with pytest.raises(StorageError, match=r"HTTP 403 AuthenticationFailed") as raised:
            storage.create_queue(queue_name)
        assert not isinstance(raised.value, TransientStorageError)
        assert wrong_key not in str(raised.value)
        assert raised.value.__suppress_context__
    finally:
        storage.close()


def test_a_get_is_one_request_even_when_the_page_comes_back_short(
    azurite_connection_string: str, queue_name: str
) -> None:
    """Asking for 32 from a queue of 3 costs one request (iterating the SDK's items costs two)."""
    counter = RequestCounter()
    storage = AzureQueueStorage.from_connection_string(
        azurite_connection_string, raw_response_hook=counter
    )
    try:
        storage.create_queue(queue_name)
        for index in range(3):
            storage.put_message(queue_name, f"m{index}")
        before = counter.count
        got = storage.get_messages(queue_name, max_messages=32, visibility_timeout_s=LONG_S)
        assert len(got) == 3
        assert counter.count - before == 1
    finally:
        storage.close()


# Outage and recovery


def test_stopped_storage_fails_fast_as_transient_and_recovers_with_its_data(
    azurite_factory: Callable[..., AzuriteProcess], tmp_path: Path, queue_name: str
) -> None:
    """With Azurite down a call fails within seconds as TransientStorageError; once Azurite is
    back on the same port (disk-backed), the same storage object reads the message put before."""
    process = azurite_factory(location=tmp_path / "azurite")
    storage = AzureQueueStorage.from_connection_string(process.connection_string)
    try:
        storage.create_queue(queue_name)
        storage.put_message(queue_name, "survives")
        process.stop()

        started = time.monotonic()
        with pytest.raises(TransientStorageError, match="ServiceRequestError"):
            storage.get_messages(queue_name, max_messages=1, visibility_timeout_s=LONG_S)
        assert time.monotonic() - started < OUTAGE_DEADLINE_S

        process.start()
        got = eventually(
            lambda: storage.get_messages(queue_name, max_messages=1, visibility_timeout_s=LONG_S)
        )
        assert [m.content for m in got] == ["survives"]
    finally:
        storage.close()


class ScriptedServer(socketserver.ThreadingTCPServer):
    """A loopback TCP server that misbehaves on purpose: it answers every request with
    ``response`` (raw HTTP bytes), or resets the connection when ``response`` is None, or stays
    silent until closed when ``response`` is ``b""``. Counts the requests it saw."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, response: bytes | None) -> None:
        super().__init__(("127.0.0.1", 0), _ScriptedHandler)
        self.response = response
        self.requests = 0
        self.closing = threading.Event()
        self._lock = threading.Lock()

    @property
    def connection_string(self) -> str:
        port = self.server_address[1]
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT_NAME};AccountKey={ACCOUNT_KEY};"
            f"QueueEndpoint=http://127.0.0.1:{port}/{ACCOUNT_NAME};"
        )

    def count_request(self) -> None:
        with self._lock:
            self.requests += 1


class _ScriptedHandler(socketserver.BaseRequestHandler):
    server: ScriptedServer

    def handle(self) -> None:
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = self.request.recv(65536)
            if not chunk:
                return
            received += chunk
        self.server.count_request()
        if self.server.response is None:
            # Linger 0: closing sends RST, a connection reset as the client sees it.
            self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            self.request.close()
        elif self.server.response == b"":
            self.server.closing.wait(30)
        else:
            self.request.sendall(self.server.response)


@pytest.fixture
def scripted_server() -> Iterator[Callable[[bytes | None], ScriptedServer]]:
    """Starts ScriptedServers in background threads; shuts them all down after the test."""
    servers: list[ScriptedServer] = []

    def start(response: bytes | None) -> ScriptedServer:
        server = ScriptedServer(response)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    yield start
    for server in servers:
        server.closing.set()
        server.shutdown()
        server.server_close()


SERVER_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nx-ms-error-code: ServerBusy\r\n"
    b"Content-Length: 0\r\nConnection: close\r\n\r\n"
)


def test_503_is_retried_three_times_within_two_seconds_then_transient(
    scripted_server: Callable[[bytes | None], ScriptedServer], queue_name: str
) -> None:
    """A busy service gets 1 + 3 quick retries, not the SDK default's 15 s waits."""
    server = scripted_server(SERVER_BUSY)
    storage = AzureQueueStorage.from_connection_string(server.connection_string)
    started = time.monotonic()
    with pytest.raises(TransientStorageError, match=r"HTTP 503 ServerBusy"):
        storage.get_messages(queue_name, max_messages=32, visibility_timeout_s=LONG_S)
    elapsed = time.monotonic() - started
    storage.close()
    assert server.requests == 4
    assert elapsed < 3.0


def test_a_connection_reset_is_transient(
    scripted_server: Callable[[bytes | None], ScriptedServer], queue_name: str
) -> None:
    """A connection torn down mid-request is retried, then reported as transient."""
    server = scripted_server(None)
    storage = AzureQueueStorage.from_connection_string(server.connection_string)
    with pytest.raises(TransientStorageError, match=r"ServiceResponseError|ServiceRequestError"):
        storage.delete_message(queue_name, "id", "receipt")
    storage.close()
    assert server.requests == 4


def test_a_silent_server_times_out_as_transient(
    scripted_server: Callable[[bytes | None], ScriptedServer], queue_name: str
) -> None:
    """With the read timeout overridden to 0.2 s, a server that never answers fails in about a
    second (four attempts), as TransientStorageError."""
    server = scripted_server(b"")
    storage = AzureQueueStorage.from_connection_string(server.connection_string, read_timeout=0.2)
    started = time.monotonic()
    with pytest.raises(TransientStorageError, match="Timeout"):
        storage.approximate_message_count(queue_name)
    assert time.monotonic() - started < OUTAGE_DEADLINE_S
    storage.close()


OPERATION_TIMED_OUT = (
    b"HTTP/1.1 500 Internal Server Error\r\nx-ms-error-code: OperationTimedOut\r\n"
    b"Content-Length: 0\r\nConnection: close\r\n\r\n"
)
NO_CONTENT = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class BigQueueServer(ScriptedServer):
    """Answers Clear Messages as Azure does for a big queue: OperationTimedOut (having deleted
    part of it) ``timeouts`` times, then 204 once nothing is left."""

    def __init__(self, timeouts: int) -> None:
        super().__init__(OPERATION_TIMED_OUT)
        self.timeouts = timeouts

    def count_request(self) -> None:
        super().count_request()
        if self.requests > self.timeouts:
            self.response = NO_CONTENT


@pytest.fixture
def big_queue_server() -> Iterator[Callable[[int], BigQueueServer]]:
    """Starts BigQueueServers in background threads; shuts them all down after the test."""
    servers: list[BigQueueServer] = []

    def start(timeouts: int) -> BigQueueServer:
        server = BigQueueServer(timeouts)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_clear_calls_again_until_a_big_queue_is_empty(
    big_queue_server: Callable[[int], BigQueueServer], queue_name: str
) -> None:
    """After each OperationTimedOut, Clear Messages is called again until one call succeeds."""
    server = big_queue_server(3)
    storage = AzureQueueStorage.from_connection_string(
        server.connection_string, retry_policy=FastRetry(retry_total=0)
    )
    with capture_logs() as logs:
        storage.clear_queue(queue_name)
    storage.close()
    assert server.requests == 4
    assert [e["attempt"] for e in logs if e["event"] == "queue_clear_continues"] == [1, 2, 3]


def test_clear_gives_up_as_transient_after_max_attempts(
    big_queue_server: Callable[[int], BigQueueServer],
    queue_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A queue that never finishes clearing ends in TransientStorageError, to be called again."""
    monkeypatch.setattr("cloudqueue.listener.stores.azure_storage.MAX_CLEAR_ATTEMPTS", 2)
    server = big_queue_server(10)
    storage = AzureQueueStorage.from_connection_string(
        server.connection_string, retry_policy=FastRetry(retry_total=0)
    )
    with pytest.raises(TransientStorageError, match="HTTP 500 OperationTimedOut"):
        storage.clear_queue(queue_name)
    storage.close()
    assert server.requests == 2


def test_errors_and_logs_never_carry_the_sas_signature(
    scripted_server: Callable[[bytes | None], ScriptedServer], queue_name: str
) -> None:
    """With a SAS connection string, neither the error nor the debug log quotes the signature."""
    server = scripted_server(None)
    sas = generate_account_sas(
        ACCOUNT_NAME,
        ACCOUNT_KEY,
        resource_types="sco",
        permission="rwdlacup",
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    signature = dict(part.split("=", 1) for part in sas.split("&"))["sig"]
    port = server.server_address[1]
    connection_string = (
        f"QueueEndpoint=http://127.0.0.1:{port}/{ACCOUNT_NAME};SharedAccessSignature={sas}"
    )
    storage = AzureQueueStorage.from_connection_string(connection_string)
    with capture_logs() as logs, pytest.raises(TransientStorageError) as raised:
        storage.get_messages(queue_name, max_messages=1, visibility_timeout_s=LONG_S)
    storage.close()
    for text in (str(raised.value), repr(raised.value), repr(storage), repr(logs)):
        assert signature not in text
        assert sas not in text


# The retry policy and client options


def test_fast_retry_backs_off_in_fractions_of_a_second_with_jitter() -> None:
    """Ceilings 0.25, 0.5, 1 s then capped at 2 s; each delay jittered into the upper half."""
    policy = FastRetry(rng=random.Random(7))
    for retry, ceiling in [(1, 0.25), (2, 0.5), (3, 1.0), (4, 2.0), (10, 2.0)]:
        delays = {policy.get_backoff_time({"count": retry}) for _ in range(50)}
        assert all(ceiling / 2 <= delay <= ceiling for delay in delays), (retry, delays)
        assert len(delays) > 1, "no jitter"
    assert policy.total_retries == 3


def test_client_options_default_to_fast_retries_bounded_timeouts_and_a_big_pool() -> None:
    """Our defaults replace the SDK's 15 s back-off, 20/60 s timeouts and 10-connection pool."""
    options = client_options()
    assert isinstance(options["retry_policy"], FastRetry)
    assert options["connection_timeout"] == CONNECTION_TIMEOUT_S == 5.0
    assert options["read_timeout"] == READ_TIMEOUT_S == 20.0
    session: requests.Session = options["session"]
    adapter = session.get_adapter("https://acct.queue.core.windows.net")
    assert adapter._pool_maxsize == CONNECTION_POOL_SIZE  # type: ignore[attr-defined]
    session.close()


def test_caller_options_win_and_a_caller_transport_gets_no_session_of_ours() -> None:
    """Overrides replace defaults; bringing a transport means we add no session beside it."""
    options = client_options(read_timeout=1.5, transport="theirs")
    assert options["read_timeout"] == 1.5
    assert "session" not in options


# Construction and description


def test_from_account_url_accepts_a_credential_object(
    azurite: AzuriteProcess, queue_name: str
) -> None:
    """An account URL plus a credential object (here a named key) works like a connection string."""
    account_url = f"http://127.0.0.1:{azurite.queue.port}/{ACCOUNT_NAME}"
    credential = AzureNamedKeyCredential(ACCOUNT_NAME, ACCOUNT_KEY)
    storage = AzureQueueStorage.from_account_url(account_url, credential)
    try:
        storage.create_queue(queue_name)
        storage.put_message(queue_name, "via url")
        assert storage.approximate_message_count(queue_name) == 1
    finally:
        storage.close()


def test_a_malformed_connection_string_is_a_configuration_error() -> None:
    """The SDK's refusal becomes ConfigurationError, without the string in the message."""
    with pytest.raises(ConfigurationError) as raised:
        AzureQueueStorage.from_connection_string("AccountKey=c2VjcmV0")
    assert "c2VjcmV0" not in str(raised.value)


def test_repr_names_account_and_endpoint_but_not_the_key(
    azure: AzureQueueStorage, queue: str
) -> None:
    """The repr helps debugging without leaking the account key."""
    text = repr(azure)
    assert f"account='{ACCOUNT_NAME}'" in text
    assert "queues=1" in text
    assert ACCOUNT_KEY not in text


def test_one_client_per_queue_even_when_threads_race_for_it(
    azure: AzureQueueStorage, queue: str
) -> None:
    """Many threads putting to one queue at once share one cached client."""
    barrier = threading.Barrier(8)

    def put(index: int) -> None:
        barrier.wait()
        azure.put_message(queue, f"m{index}")

    threads = [threading.Thread(target=put, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert azure.approximate_message_count(queue) == 8
    assert "queues=1" in repr(azure)


# The Azurite harness itself


def test_without_npm_the_harness_fails_loudly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No npm on PATH is an error that says what to install, never a silent skip."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(AzuriteError, match=r"npm .*install Node\.js"):
        ensure_installed(tmp_path)


def test_a_blob_enabled_instance_restarts_on_the_same_ports(
    azurite_factory: Callable[..., AzuriteProcess],
) -> None:
    """With blob=True both services listen and are named in the connection string; after a stop
    neither port answers, and a start brings both back on the same ports."""
    process = azurite_factory(blob=True)
    assert process.blob is not None
    ports = (process.queue.port, process.blob.port)
    assert f"BlobEndpoint=http://127.0.0.1:{ports[1]}/{ACCOUNT_NAME};" in process.connection_string
    process.stop()
    assert not any(port_accepts(port) for port in ports)
    process.start()
    assert (process.queue.port, process.blob.port) == ports
    assert all(port_accepts(port) for port in ports)
