"""The HTTP endpoint: ``/metrics`` for Prometheus, ``/healthz`` and ``/readyz`` for probes.

prometheus_client's WSGI app renders the exposition format; the probes are two more routes of
the same WSGI app, served by the standard library's ``wsgiref`` on a thread per request, so a
slow scrape never holds up a probe. Red probes answer 503 with their reasons, one a line.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import structlog
from prometheus_client import CollectorRegistry, make_wsgi_app

from workers.observability.health import ProbeResult, Probes

log = structlog.get_logger(__name__)

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    """Scrapes and probes every few seconds would flood stderr; the access log stays off."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


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
    """Serves the app on ``host:port`` (port 0 picks a free one) from a daemon thread."""

    def __init__(self, app: WsgiApp, *, host: str, port: int) -> None:
        self._server = make_server(
            host, port, app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler
        )
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
