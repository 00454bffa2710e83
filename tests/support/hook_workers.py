"""Workers with ``startup`` / ``shutdown`` hooks, in-process and under `cloudqueue run`, and the
local HTTP server their handlers call.

``SessionWorker`` opens one ``aiohttp.ClientSession`` in its async ``startup``, every async handler
GETs the server through it, and ``shutdown`` closes it. ``FailingStartup`` raises in ``startup``.
Their queue and the server's address come from the environment when the CLI starts them.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import aiohttp
import structlog

from cloudqueue.workers import QueueWorker

log = structlog.get_logger("tests.hook_workers")


class SessionWorker(QueueWorker[dict[str, Any]]):
    """One client session for all its handlers, opened and closed on their event loop."""

    queue_name = os.environ.get("TEST_QUEUE", "work")

    def __init__(self, base_url: str | None = None) -> None:
        self.base_url = base_url or os.environ.get("TEST_HTTP_URL", "")
        self.session: aiohttp.ClientSession | None = None
        self.loops: set[asyncio.AbstractEventLoop] = set()

    async def startup(self) -> None:
        self.session = aiohttp.ClientSession(self.base_url)
        self.loops.add(asyncio.get_running_loop())
        log.info("session_opened", pid=os.getpid())

    async def handle(self, item: dict[str, Any]) -> None:
        assert self.session is not None, "startup did not run"
        async with self.session.get(f"/items/{item['n']}") as response:
            response.raise_for_status()
        self.loops.add(asyncio.get_running_loop())
        log.info("handled", n=item["n"], pid=os.getpid())

    async def shutdown(self) -> None:
        assert self.session is not None
        await self.session.close()
        self.loops.add(asyncio.get_running_loop())
        log.info("session_closed", pid=os.getpid())


class FailingStartup(QueueWorker[dict[str, Any]]):
    """Its database is unreachable: ``startup`` raises, so it must never take a message."""

    queue_name = os.environ.get("TEST_QUEUE", "work")

    def startup(self) -> None:
        raise ConnectionRefusedError("database at db:5432 refused the connection")

    def handle(self, item: dict[str, Any]) -> None:
        log.info("handled", n=item["n"], pid=os.getpid())


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: a hundred requests per test


@contextmanager
def http_server() -> Iterator[str]:
    """A local HTTP server answering every GET with 200; its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
