"""Looking into a payload store in tests: which payloads are still live (not tombstones)."""

from __future__ import annotations

from typing import Protocol

from cloudqueue.listener.wire.payload import TOMBSTONE


class ListablePayloads(Protocol):
    def names(self) -> list[str]: ...

    def get(self, name: str) -> bytes: ...


def live_payloads(store: ListablePayloads) -> list[str]:
    """The stored names whose content is a payload, not the tombstone of a handled message."""
    return [name for name in store.names() if store.get(name) != TOMBSTONE]
