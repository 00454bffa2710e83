"""Which items of a ``publish_many`` call share a message: packed per key and per partition.

Items are buffered per destination -- their message key and, when routed by key, their
partition -- so every message goes where all its items belong and carries their one key
(``cloudqueue.listener.wire.keys``); items without a key and not routed by one share one buffer,
whose messages go round-robin. A buffer is packed whenever ``PENDING_BYTES`` of encoded text wait,
so a stream of items of any length is sent with bounded memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from cloudqueue.listener.wire.packing import PlannedMessage, message_bytes, plan_batches

T = TypeVar("T")

PENDING_BYTES = 1024 * 1024
"""In batch mode, items are packed whenever this much encoded text is waiting."""

Destination = tuple[str | None, str | None]
"""A message's key (None: none) and queue (None: the next partition in turn)."""


def packed_per_destination(
    items: Iterable[T],
    *,
    destination: Callable[[T], tuple[str | None, str]],
    encode: Callable[[T], str],
    routed_by_key: bool,
) -> Iterator[tuple[Destination, list[PlannedMessage]]]:
    """The planned messages of ``items`` (read lazily, in order), with where each run goes.

    ``destination`` gives an item's key and queue; ``routed_by_key`` says whether an item
    without a carried key still has a queue of its own (a routing-only partition key)."""
    buffers: dict[Destination, _Pending] = {}
    for item in items:
        carried, target = destination(item)
        into = (carried, target if carried is not None or routed_by_key else None)
        pending = buffers.setdefault(into, _Pending())
        pending.add(encode(item))
        if pending.bytes >= PENDING_BYTES:
            planned = plan_batches(pending.texts, key=carried)
            yield into, planned[:-1]
            buffers[into] = _Pending(planned[-1].texts)  # room for the next items
    for into, pending in buffers.items():
        yield into, plan_batches(pending.texts, key=into[0])


class _Pending:
    """Encoded items waiting to be packed, and their size in bytes."""

    def __init__(self, texts: list[str] | None = None) -> None:
        self.texts: list[str] = []
        self.bytes = 0
        for text in texts or []:
            self.add(text)

    def add(self, text: str) -> None:
        self.texts.append(text)
        self.bytes += message_bytes(text)


__all__ = ["PENDING_BYTES", "Destination", "packed_per_destination"]
