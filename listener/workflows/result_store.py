"""The result store: what a handler returned, kept under its message's key for a time to live.

A worker that keeps results (``keep_results``) stores its handler's return value, as JSON text,
under the message's key before the message is deleted; a producer's handle waits for it
(``result(timeout)``) and an aggregating step reads a group's results together
(``for_group``). Storing is idempotent: a redelivered message stores its value again under the
same key, which replaces the first copy.

Stores, as for groups: memory (this process), SQLite (a table in the queues' file), Azure (the
account's Table service, one row per result: partition key the group id, or the key itself for a
result outside any group, so that ``for_group`` is one partition query).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

__all__ = ["ResultStore"]


class ResultStore(Protocol):
    """Handlers' results by message key, in the queue's own store."""

    def put(self, key: str, value: str, *, ttl_s: float, group_id: str | None = None) -> None:
        """Keep ``value`` (JSON text) under ``key`` for ``ttl_s`` seconds, replacing what the
        key held; ``group_id`` when the message was a member of that group."""

    def get(self, key: str) -> str | None:
        """The value kept under ``key``; None when there is none (yet) or it expired."""

    def for_group(self, group_id: str) -> Iterator[tuple[str, str]]:
        """``(key, value)`` of every unexpired result of the group's members."""

    def close(self) -> None:
        """Release connections."""
