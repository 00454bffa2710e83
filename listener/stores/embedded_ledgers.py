"""Finding the ledger of one kind (keys, groups) that goes with an embedded storage object, seen
through metering and partitioning wrappers: one per in-memory store, so that a publisher and a
listener sharing an ``InMemoryQueueStorage`` share its ledger too; a new one over the SQLite file's
connection (its tables are the shared state)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

from cloudqueue.listener.clock import Clock
from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.stores.forwarding import ForwardingStorage
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage

L = TypeVar("L")


class EmbeddedLedgers(Generic[L]):
    """The ledgers of one kind in the embedded stores."""

    def __init__(
        self, memory: Callable[[Clock], L], sqlite: Callable[[SqliteQueueStorage], L]
    ) -> None:
        self._memory = memory
        self._sqlite = sqlite
        self._per_store: weakref.WeakKeyDictionary[InMemoryQueueStorage, L] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def for_storage(self, storage: QueueStorage) -> L | None:
        """The ledger in the same embedded store as ``storage``; None for any other storage."""
        inner = innermost_storage(storage)
        if isinstance(inner, InMemoryQueueStorage):
            with self._lock:
                ledger = self._per_store.get(inner)
                if ledger is None:
                    ledger = self._per_store[inner] = self._memory(inner.clock)
                return ledger
        if isinstance(inner, SqliteQueueStorage):
            return self._sqlite(inner)
        return None

    def required(self, storage: QueueStorage, refusal: str) -> L:
        """``for_storage(storage)``; ConfigurationError saying ``refusal`` when there is none."""
        ledger = self.for_storage(storage)
        if ledger is None:
            raise ConfigurationError(refusal)
        return ledger


def innermost_storage(storage: QueueStorage) -> QueueStorage:
    """The store under any metering and partitioning wrappers (a partitioned store's first)."""
    while True:
        if isinstance(storage, ForwardingStorage):
            storage = storage.inner
        elif isinstance(storage, PartitionedQueueStorage):
            storage = storage.accounts[0]
        else:
            return storage


__all__ = ["EmbeddedLedgers", "innermost_storage"]
