"""A fault-injecting reverse proxy for Azurite, on 127.0.0.1, for reliability tests.

It forwards each HTTP request to the upstream (Azurite) and, with the configured probabilities,
answers 503 ServerBusy without forwarding, resets the connection before forwarding, resets it
*after* forwarding (the request happened but the client never hears so: a put that "timed out"
yet took place), or delays the request. Decisions come from a seeded random source, so a run's
fault pattern is repeatable. It runs its own asyncio loop on a background thread.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
from collections import Counter
from dataclasses import dataclass, field

HEADER_END = b"\r\n\r\n"
BUSY_BODY = (
    b'<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code>'
    b"<Message>Injected by the fault proxy.</Message></Error>"
)


@dataclass
class Faults:
    """Probabilities per request, each in [0, 1]; their sum must stay <= 1."""

    busy_503: float = 0.0
    reset_before: float = 0.0
    reset_after: float = 0.0
    latency: float = 0.0
    latency_s: float = 0.2


@dataclass
class FaultProxy:
    """Listen on a free loopback port and forward to ``upstream_port``, injecting faults."""

    upstream_port: int
    faults: Faults = field(default_factory=Faults)
    seed: int = 1
    injected: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="fault-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self.port = 0

    def start(self) -> FaultProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fault proxy did not start")
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _shutdown(self) -> None:
        """Close the listening socket and end every open client connection cleanly."""
        if self._server is not None:
            self._server.close()
        current = asyncio.current_task()
        pending = [task for task in asyncio.all_tasks() if task is not current]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        self.port = listener.getsockname()[1]
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._client, sock=listener)
        )
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    def _choose(self) -> str:
        roll = self._rng.random()
        for name, chance in (
            ("busy_503", self.faults.busy_503),
            ("reset_before", self.faults.reset_before),
            ("reset_after", self.faults.reset_after),
            ("latency", self.faults.latency),
        ):
            if roll < chance:
                self.injected[name] += 1
                return name
            roll -= chance
        return "forward"

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while request := await _read_request(reader):
                if not await self._answer(request, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # The proxy's stop: ending the task normally, as Python 3.11's stream callback
            # reads a cancelled task's exception and prints a traceback for each connection.
            pass
        finally:
            writer.close()

    async def _answer(self, request: bytes, writer: asyncio.StreamWriter) -> bool:
        """Handle one request; False when the client connection must end here."""
        fault = self._choose()
        if fault == "reset_before":
            _reset(writer)
            return False
        if fault == "busy_503":
            writer.write(_busy_response())
            await writer.drain()
            return True
        if fault == "latency":
            await asyncio.sleep(self.faults.latency_s)
        response = await self._forward(request)
        if fault == "reset_after":
            _reset(writer)
            return False
        writer.write(response)
        await writer.drain()
        return True

    async def _forward(self, request: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        try:
            writer.write(_with_connection_close(request))
            await writer.drain()
            return _keep_alive(await reader.read(-1))
        finally:
            writer.close()


async def _read_request(reader: asyncio.StreamReader) -> bytes | None:
    try:
        head = await reader.readuntil(HEADER_END)
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return head + body


def _with_connection_close(request: bytes) -> bytes:
    head, _, body = request.partition(HEADER_END)
    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")]
    return b"\r\n".join([*lines, b"Connection: close"]) + HEADER_END + body


def _keep_alive(response: bytes) -> bytes:
    head, _, body = response.partition(HEADER_END)
    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")]
    return b"\r\n".join(lines) + HEADER_END + body


def _busy_response() -> bytes:
    head = (
        "HTTP/1.1 503 The server is busy.\r\n"
        "Content-Type: application/xml\r\n"
        "x-ms-error-code: ServerBusy\r\n"
        f"Content-Length: {len(BUSY_BODY)}\r\n\r\n"
    )
    return head.encode() + BUSY_BODY


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST rather than FIN, as a dropped connection looks to the client."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
