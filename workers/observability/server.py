"""The HTTP endpoint: ``/metrics`` for Prometheus, ``/healthz`` and ``/readyz`` for probes.

prometheus_client's WSGI app renders the exposition format; the probes are two more routes of
the same WSGI app, served by the standard library's ``wsgiref`` on a thread per connection, so a
slow scrape never holds up a probe. Red probes answer 503 with their reasons, one a line.

What a client may cost is bounded (anyone who can reach the port is a client):

* at most ``max_connections`` connections are served at once, each on its own thread; one more
  is answered ``503`` and closed at once by the accepting thread, so idle or half-sent
  connections never grow the thread count past the cap;
* a connection that sends nothing (or does not read its answer) for ``read_timeout_s`` is closed,
  which frees its slot: scrapers and probes send their request in one packet;
* bound to a specific address (loopback by default), only requests whose ``Host`` names loopback
  or that address are answered (``421`` otherwise), so a web page cannot read the metrics by
  rebinding a DNS name to 127.0.0.1. Bound to every interface (``0.0.0.0`` or ``::``, as in a
  Kubernetes pod, where the kubelet and Prometheus use the pod's IP), any ``Host`` is answered:
  who can reach the port is then the network's decision; the two bounds above still hold.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

import structlog
from prometheus_client import CollectorRegistry, make_wsgi_app

from cloudqueue.workers.observability.health import ProbeResult, Probes
from cloudqueue.workers.observability.host_names import host_name, is_loopback

log = structlog.get_logger(__name__)

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


MAX_CONNECTIONS = 16
READ_TIMEOUT_S = 5.0
EVERY_INTERFACE = frozenset({"", "0.0.0.0", "::"})  # noqa: S104 (names to compare, not a bind)
_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class _BoundedWSGIServer(ThreadingMixIn, WSGIServer):
    """A thread per connection, at most ``max_connections`` of them; the rest refused at once."""

    daemon_threads = True
    request_queue_size = 64  # connections waiting to be accepted, refused or not

    def __init__(self, *args: Any, max_connections: int, read_timeout_s: float) -> None:
        super().__init__(*args)
        self.read_timeout_s = read_timeout_s
        self._slots = threading.BoundedSemaphore(max_connections)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            _refuse_busy(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # starts the connection's thread
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A failed connection is logged, never printed to stderr by socketserver."""
        log.warning("observability_request_failed", exc_info=True)


def _refuse_busy(request: Any) -> None:
    """Answer 503 without reading the request (the answer fits any socket buffer)."""
    try:
        request.setblocking(False)
        request.send(_BUSY)
    except OSError:
        pass  # the client is gone, or its buffer is full: closing is answer enough


class _QuietHandler(WSGIRequestHandler):
    """Scrapes and probes every few seconds would flood stderr; the access log stays off."""

    server: _BoundedWSGIServer

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.read_timeout_s)

    def handle(self) -> None:
        try:
            super().handle()
        except TimeoutError:
            self.close_connection = True  # silent past the read timeout: hang up, free the slot

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _host_checked(app: WsgiApp, bound_host: str) -> WsgiApp:
    """``app`` behind the Host check described in the module docstring."""
    if bound_host in EVERY_INTERFACE:
        return app
    bound = host_name(bound_host)

    def checked(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        name = host_name(environ.get("HTTP_HOST"))
        if is_loopback(name) or name == bound:
            return app(environ, start_response)
        return _answer(start_response, "421 Misdirected Request", "unknown host name\n")

    return checked


def observability_app(registry: CollectorRegistry, probes: Probes) -> WsgiApp:
    """Route ``/healthz`` and ``/readyz`` to the probes, ``/metrics`` to prometheus_client."""
    metrics_app: WsgiApp = make_wsgi_app(registry)
    routes: dict[str, Callable[[], ProbeResult]] = {
        "/healthz": probes.liveness,
        "/readyz": probes.readiness,
    }

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics_app(environ, start_response)
        probe = routes.get(path)
        if probe is None:
            return _answer(start_response, "404 Not Found", "not found: try /metrics\n")
        result = probe()
        if result.ok:
            return _answer(start_response, "200 OK", "ok\n")
        return _answer(
            start_response,
            "503 Service Unavailable",
            "".join(f"{reason}\n" for reason in result.reasons),
        )

    return app


def _answer(start_response: StartResponse, status: str, body: str) -> list[bytes]:
    data = body.encode()
    start_response(
        status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))]
    )
    return [data]


class ObservabilityServer:
    """Serves the app on ``host:port`` (port 0 picks a free one) from a daemon thread, within
    the bounds the module docstring describes."""

    def __init__(
        self,
        app: WsgiApp,
        *,
        host: str,
        port: int,
        max_connections: int = MAX_CONNECTIONS,
        read_timeout_s: float = READ_TIMEOUT_S,
    ) -> None:
        self._server = _BoundedWSGIServer(
            (host, port),
            _QuietHandler,
            max_connections=max_connections,
            read_timeout_s=read_timeout_s,
        )
        self._server.set_app(_host_checked(app, host))
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="cloudqueue-observability", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def start(self) -> ObservabilityServer:
        self._thread.start()
        log.info("observability_serving", port=self.port, paths=["/metrics", "/healthz", "/readyz"])
        return self

    def close(self) -> None:
        started = self._thread.is_alive()  # shutdown() waits for serve_forever: none if not started
        if started:
            self._server.shutdown()
        self._server.server_close()
        if started:
            self._thread.join(5)

    def __repr__(self) -> str:
        return f"ObservabilityServer(port={self.port})"
