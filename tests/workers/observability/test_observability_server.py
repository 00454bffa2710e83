"""The metrics and probes endpoint holds up against idle, half-sent and misaddressed requests."""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator

import pytest

from cloudqueue.listener.testing import ManualClock
from cloudqueue.workers.observability.health import Heartbeats, ProcessProbes, Reachability
from cloudqueue.workers.observability.metrics import WorkerMetrics
from cloudqueue.workers.observability.server import ObservabilityServer, observability_app
from tests.support.polling import eventually
from tests.support.scrape import get

CAP = 4
HALF_SENT = 40
HALF_REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # no blank line: never ends


def serve(host: str = "127.0.0.1", **limits: float) -> ObservabilityServer:
    probes = ProcessProbes(
        stall_after_s=10, heartbeats=Heartbeats(ManualClock()), reachability=Reachability()
    )
    app = observability_app(WorkerMetrics().registry, probes)
    return ObservabilityServer(app, host=host, port=0, **limits).start()  # type: ignore[arg-type]


@pytest.fixture
def bounded() -> Iterator[ObservabilityServer]:
    server = serve(max_connections=CAP, read_timeout_s=0.5)
    yield server
    server.close()


def closed_by_server(connection: socket.socket) -> bool:
    """Whether the server has answered or hung up (recv does not block: nothing yet is False)."""
    try:
        connection.recv(4096)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


def test_half_sent_requests_hold_at_most_the_cap_of_threads_and_probes_still_answer(
    bounded: ObservabilityServer,
) -> None:
    """40 clients that never finish their request: no more than 4 threads, each freed by the
    read timeout, the rest refused at once; /healthz answers again."""
    before = threading.active_count()
    peak = before
    clients = [socket.create_connection(("127.0.0.1", bounded.port)) for _ in range(HALF_SENT)]
    try:
        for client in clients:
            client.sendall(HALF_REQUEST)
            client.setblocking(False)

        def all_hung_up() -> bool:
            nonlocal peak
            peak = max(peak, threading.active_count())
            return all(closed_by_server(client) for client in clients)

        eventually(all_hung_up, interval_s=0.01)
        assert peak - before <= CAP
        assert eventually(lambda: get(bounded.port, "/healthz")[0] == 200)
    finally:
        for client in clients:
            client.close()


def status_for_host(port: int, host_header: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/healthz", headers={"Host": host_header})
        return connection.getresponse().status
    finally:
        connection.close()


def test_bound_to_loopback_it_answers_only_to_loopback_host_names(
    bounded: ObservabilityServer,
) -> None:
    """DNS rebinding: a page of evil.example resolving to 127.0.0.1 gets 421, not the metrics."""
    assert status_for_host(bounded.port, "evil.example") == 421
    assert status_for_host(bounded.port, f"evil.example:{bounded.port}") == 421
    for name in ("localhost", "127.0.0.1", "[::1]"):
        assert status_for_host(bounded.port, f"{name}:{bounded.port}") == 200


def test_bound_to_every_interface_it_answers_any_host_for_kubernetes_probes() -> None:
    """0.0.0.0 in a pod: the kubelet and Prometheus address it by the pod's IP."""
    server = serve("0.0.0.0")
    try:
        assert status_for_host(server.port, "10.1.2.3:9100") == 200
    finally:
        server.close()
