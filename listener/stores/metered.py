"""Counting storage transactions: what a listener costs, per operation.

Azure bills every storage call (an empty get included). ``MeteredStorage`` wraps any
``QueueStorage`` and counts its calls by operation and by queue, so a process can report its own
cost and the benchmarks can compare polling strategies in transactions rather than guesses.
``MeteredPayloadStore`` does the same for the blob calls of large payloads, attributed to the
queue that names them (``<queue>/<id>``).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Protocol, TypeVar

from cloudqueue.listener.stores.forwarding import ForwardingStorage
from cloudqueue.listener.stores.payload_store import PayloadStore
from cloudqueue.listener.stores.storage import QueueStorage

R = TypeVar("R")


class MeteredStorage(ForwardingStorage):
    """A QueueStorage that counts the calls it passes on (one call = one billed transaction)."""

    def __init__(self, inner: QueueStorage) -> None:
        super().__init__(inner)
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def _call(self, queue_name: str, operation: str, call: Callable[[], R]) -> R:
        self.count(queue_name, operation)
        return call()

    def count(self, queue_name: str, operation: str) -> None:
        """Count one call made past this wrapper on the same account (the event loop's
        awaitable calls, ``cloudqueue.listener.stores.async_metered``)."""
        with self._lock:
            self._counts[queue_name, operation] += 1

    @property
    def transactions(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def counts(self) -> dict[str, int]:
        """Calls by operation, over every queue."""
        totals: Counter[str] = Counter()
        for (_, operation), count in self.counts_by_queue_and_operation().items():
            totals[operation] += count
        return dict(totals)

    def counts_by_queue(self) -> dict[str, int]:
        """Calls per queue name (``""`` for calls naming none, such as listing queues)."""
        totals: Counter[str] = Counter()
        for (queue_name, _), count in self.counts_by_queue_and_operation().items():
            totals[queue_name] += count
        return dict(totals)

    def counts_by_queue_and_operation(self) -> dict[tuple[str, str], int]:
        """Calls by (queue name, operation); ``list_queues`` has no queue: ``""``."""
        with self._lock:
            return dict(self._counts)

    def __repr__(self) -> str:
        return f"MeteredStorage({self.inner!r}, transactions={self.transactions})"


class CountsByQueue(Protocol):
    """Billed calls beside the queue calls, per queue: a ``MeteredPayloadStore``'s, or a key
    ledger's (``cloudqueue.listener.stores.key_records.KeyLedger``)."""

    def counts_by_queue(self) -> dict[str, int]: ...


def blob_counts(
    payloads: CountsByQueue | None, key_ledger: CountsByQueue | None
) -> dict[str, CountsByQueue]:
    """A host's billed blob calls by the operation label they are counted under: the payload
    store's (``payload_blob``) and the key ledger's (``key_record_blob``), those it has."""
    sources = {"payload_blob": payloads, "key_record_blob": key_ledger}
    return {operation: source for operation, source in sources.items() if source is not None}


class MeteredPayloadStore:
    """A PayloadStore that counts its calls (blob transactions) per queue."""

    def __init__(self, inner: PayloadStore) -> None:
        self.inner = inner
        self._by_queue: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _tick(self, name: str) -> None:
        queue_name = name.partition("/")[0]
        with self._lock:
            self._by_queue[queue_name] += 1

    def counts_by_queue(self) -> dict[str, int]:
        with self._lock:
            return dict(self._by_queue)

    def put(self, name: str, data: bytes) -> None:
        self._tick(name)
        self.inner.put(name, data)

    def get(self, name: str, *, max_bytes: int | None = None) -> bytes:
        self._tick(name)
        return self.inner.get(name, max_bytes=max_bytes)

    def delete(self, name: str) -> None:
        self._tick(name)
        self.inner.delete(name)

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"MeteredPayloadStore({self.inner!r})"
