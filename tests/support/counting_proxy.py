"""A reverse proxy that counts the requests it forwards: storage transactions, counted on the wire.

Azure bills per request (an entity-group transaction of the Table service is one request, however
many entities it holds). Counting at the socket, between the SDK and Azurite, counts what the
account would bill, whatever the client code believes it sends: retries, batches and probes
included. Each request is counted under an operation name read from its request line
(``operation_of``); ``FaultProxy`` without faults does the forwarding.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.support.fault_proxy import FaultProxy

_REQUEST_LINE = re.compile(rb"^([A-Z]+) (\S+) HTTP/1\.[01]")


def operation_of(request: bytes, service: str) -> str:
    """A short name of what a request to an Azure Storage ``service`` (``queue``, ``table``,
    ``blob``) does, e.g. ``queue put`` or ``table batch``.

    Queue service: message gets, puts, deletes and updates (other calls by method); Table
    service: batches (entity-group transactions), entity reads, queries, inserts, updates and
    deletes, and table creation.
    """
    match = _REQUEST_LINE.match(request)
    if match is None:
        return f"{service} unparsed"
    method, target = match.group(1).decode(), match.group(2).decode()
    path = target.partition("?")[0].rstrip("/")
    if service == "table":
        return f"table {_table_operation(method, path)}"
    if service == "queue" and (path.endswith("/messages") or "/messages/" in path):
        kinds = {"GET": "get", "POST": "put", "DELETE": "delete", "PUT": "update"}
        return f"queue {kinds.get(method, method)}"
    return f"{service} {method}"


def _table_operation(method: str, path: str) -> str:
    if path.endswith("/$batch"):
        return "batch"
    if path.endswith("Tables") or path.endswith("Tables()"):
        return "create" if method == "POST" else f"tables {method}"
    if path.endswith("()") or "(" not in path:
        return {"GET": "query", "POST": "insert"}.get(method, method)
    return {"GET": "read", "DELETE": "delete"}.get(method, "update")


@dataclass
class CountingProxy(FaultProxy):
    """Forwards every request to ``upstream_port`` and counts it by ``operation_of``; the
    requests ``keep`` picks are kept whole, in order (``kept``), for a test to read."""

    service: str = "queue"
    keep: Callable[[bytes], bool] | None = None
    counted: Counter[str] = field(default_factory=Counter)
    kept: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._counting = threading.Lock()

    def start(self) -> CountingProxy:
        super().start()
        return self

    def counts(self) -> Counter[str]:
        """The requests forwarded so far, by operation (a copy)."""
        with self._counting:
            return Counter(self.counted)

    def reset(self) -> None:
        with self._counting:
            self.counted.clear()
            self.kept.clear()

    async def _answer(self, request: bytes, writer: asyncio.StreamWriter) -> bool:
        with self._counting:
            self.counted[operation_of(request, self.service)] += 1
            if self.keep is not None and self.keep(request):
                self.kept.append(request)
        return await super()._answer(request, writer)
