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

from listener.stores.payload_store import PayloadStore
from listener.stores.storage import QueueMessage, QueueStorage


class MeteredStorage:
    """A QueueStorage that counts the calls it passes on (one call = one billed transaction)."""

    def __init__(self, inner: QueueStorage) -> None:
        self.inner = inner
        self._counts: Counter[tuple[str, str]] = Counter()
        self._last_depths: dict[str, int] = {}
        self._lock = threading.Lock()

    def _tick(self, operation: str, queue_name: str = "") -> None:
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

    def create_queue(self, queue_name: str) -> None:
        self._tick("create_queue", queue_name)
        self.inner.create_queue(queue_name)

    def get_messages(
        self, queue_name: str, *, max_messages: int, visibility_timeout_s: int
    ) -> list[QueueMessage]:
        self._tick("get_messages", queue_name)
        return self.inner.get_messages(
            queue_name, max_messages=max_messages, visibility_timeout_s=visibility_timeout_s
        )

    def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        self._tick("delete_message", queue_name)
        return self.inner.delete_message(queue_name, message_id, pop_receipt)

    def put_message(
        self,
        queue_name: str,
        content: str,
        *,
        time_to_live_s: int | None = None,
        visibility_delay_s: int = 0,
    ) -> QueueMessage:
        self._tick("put_message", queue_name)
        return self.inner.put_message(
            queue_name,
            content,
            time_to_live_s=time_to_live_s,
            visibility_delay_s=visibility_delay_s,
        )

    def update_visibility(
        self, queue_name: str, message_id: str, pop_receipt: str, visibility_timeout_s: int
    ) -> str:
        self._tick("update_visibility", queue_name)
        return self.inner.update_visibility(
            queue_name, message_id, pop_receipt, visibility_timeout_s
        )

    def approximate_message_count(self, queue_name: str) -> int:
        self._tick("approximate_message_count", queue_name)
        depth = self.inner.approximate_message_count(queue_name)
        with self._lock:
            self._last_depths[queue_name] = depth
        return depth

    def last_depth(self, queue_name: str) -> int | None:
        """The depth the last count returned (None before any): shown without a new transaction."""
        with self._lock:
            return self._last_depths.get(queue_name)

    def peek_messages(self, queue_name: str, *, max_messages: int) -> list[QueueMessage]:
        self._tick("peek_messages", queue_name)
        return self.inner.peek_messages(queue_name, max_messages=max_messages)

    def list_queues(self, prefix: str = "") -> list[str]:
        self._tick("list_queues")
        return self.inner.list_queues(prefix)

    def clear_queue(self, queue_name: str) -> None:
        self._tick("clear_queue", queue_name)
        self.inner.clear_queue(queue_name)

    def delete_queue(self, queue_name: str) -> None:
        self._tick("delete_queue", queue_name)
        self.inner.delete_queue(queue_name)

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"MeteredStorage({self.inner!r}, transactions={self.transactions})"


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

    def get(self, name: str) -> bytes:
        self._tick(name)
        return self.inner.get(name)

    def delete(self, name: str) -> None:
        self._tick(name)
        self.inner.delete(name)

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"MeteredPayloadStore({self.inner!r})"
