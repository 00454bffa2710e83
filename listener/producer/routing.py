"""Which partition of a logical queue a published item goes to, and an item's key.

Without a key, messages go round-robin over the partitions, spreading load evenly. With a key
(a callable of the item, or the name of one of its fields or keys), every item with the same key
goes to the same partition, in every process (``partition_for_key`` hashes with BLAKE2b), so the
items of one customer stay together -- though Azure queues keep no order even within one queue.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from cloudqueue.listener.stores.partition_names import partition_for_key, partition_queue_names
from cloudqueue.listener.wire.keys import key_text

T = TypeVar("T")

ItemKey = Callable[[T], object] | str
"""How to find an item's key: a function of the item (None: it has none), or the name of a
field (or mapping key)."""

PartitionKey = Callable[[T], object] | str
"""The older name of ``ItemKey``."""


def key_of_item(item: T, key: ItemKey[T]) -> str | None:
    """The item's key as text (None when a key function gives none); ValueError naming the
    field when the item has no such field, or when the key is not a valid one."""
    value = _value(item, key)
    return None if value is None else key_text(value)


def _value(item: T, key: ItemKey[T]) -> object:
    if callable(key):
        return key(item)
    if isinstance(item, Mapping):
        if key not in item:
            raise ValueError(f"item has no key {key!r} to take its key from")
        return item[key]
    if not hasattr(item, key):
        raise ValueError(f"item has no field {key!r} to take its key from")
    return getattr(item, key)


class PartitionRouter(Generic[T]):
    """Chooses the physical queue for each message of one logical queue."""

    def __init__(self, queue_name: str, partitions: int, key: ItemKey[T] | None = None) -> None:
        self.queue_names = partition_queue_names(queue_name, partitions)
        self.key = key
        self._turn = itertools.count()
        self._lock = threading.Lock()

    @property
    def keyed(self) -> bool:
        return self.key is not None

    def next_queue(self) -> str:
        """The next partition in turn (round-robin)."""
        with self._lock:
            return self.queue_names[next(self._turn) % len(self.queue_names)]

    def queue_for(self, item: T) -> str:
        """The partition for ``item``: its key's, or the next in turn when there is no key."""
        if self.key is None:
            return self.next_queue()
        return self.queue_for_key(self.key_of(item))

    def queue_for_key(self, key: str | None) -> str:
        """The partition of ``key``; the next in turn for None."""
        if key is None or len(self.queue_names) == 1:
            return self.next_queue() if key is None else self.queue_names[0]
        return self.queue_names[partition_for_key(key, len(self.queue_names))]

    def key_of(self, item: T) -> str:
        """The item's routing key as text (any text: it is only hashed); ValueError naming the
        field when the item has none."""
        key = self.key
        if key is None:
            raise ValueError("this publisher routes round-robin: it has no partition key")
        return str(_value(item, key))
