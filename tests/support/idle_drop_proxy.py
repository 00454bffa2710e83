"""A counting proxy whose client connections die when left idle, as Azure's do.

Azure closes a connection idle for about 15 s (azure-sdk-for-python#26332); a load balancer or NAT
on the way may instead forget it without a word, and the client learns so only when its next
request on it is reset. Azurite behind the plain proxies never does either: the proxy keeps every
client connection open (it opens a fresh one upstream per request). Two ways to drop, after
``idle_s`` without a request:

* ``close``: the proxy closes the connection (FIN), as a server ending an idle keep-alive does;
* ``silent``: the proxy keeps the socket but resets it when the next request arrives on it, as a
  middlebox that forgot the connection does; that request is not forwarded, so not counted.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Literal

from tests.support.counting_proxy import CountingProxy
from tests.support.fault_proxy import _read_request, _reset

DropMode = Literal["close", "silent"]


@dataclass
class IdleDropProxy(CountingProxy):
    """``CountingProxy`` dropping client connections idle for ``idle_s`` (``drop`` says how)."""

    idle_s: float = 15.0
    drop: DropMode = "silent"
    dropped: int = 0
    """Connections dropped so far (closed, or reset at the request that found them gone)."""

    def start(self) -> IdleDropProxy:
        super().start()
        return self

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        last_request = time.monotonic()
        try:
            while request := await self._next_request(reader):
                if self.drop == "silent" and time.monotonic() - last_request > self.idle_s:
                    self.dropped += 1
                    _reset(writer)
                    return
                if not await self._answer(request, writer):
                    return
                last_request = time.monotonic()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client went away, or the proxy is stopping
        finally:
            writer.close()

    async def _next_request(self, reader: asyncio.StreamReader) -> bytes | None:
        """The next request; None when the client closed, or (``close``) the idle time passed."""
        if self.drop == "silent":
            return await _read_request(reader)
        try:
            return await asyncio.wait_for(_read_request(reader), self.idle_s)
        except TimeoutError:
            self.dropped += 1
            return None
