"""A proxy in front of Azurite whose faults come from a script, not from chance, and which counts
the client connections it accepted: for tests of what one connection pool does when the server
drops a connection (an idle one dropped as a request arrives on it)."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from tests.support.fault_proxy import FaultProxy


@dataclass
class ScriptedProxy(FaultProxy):
    """``FaultProxy`` answering request n with the n-th scripted fault ("forward" once it ends)."""

    script: deque[str] = field(default_factory=deque)
    connections: int = 0
    """Client connections accepted so far (a pooled client reuses one for sequential calls)."""
    closed: int = 0
    """Client connections that have ended (closed by the client, or reset by a fault)."""

    def start(self) -> ScriptedProxy:
        super().start()
        return self

    def then(self, *faults: str) -> None:
        """Add faults for the next requests: "reset_before", "reset_after", "busy_503"."""
        self._loop.call_soon_threadsafe(self.script.extend, faults)

    def _choose(self) -> str:
        if not self.script:
            return "forward"
        fault = self.script.popleft()
        self.injected[fault] += 1
        return fault

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await super()._client(reader, writer)
        finally:
            self.closed += 1
