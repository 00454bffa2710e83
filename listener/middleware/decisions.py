"""Counting the decisions the shipped middleware make (``duplicate_skipped``, ``cancelled``,
``key_busy``, ...): in the middleware itself, and in whatever the host passes (its metrics)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

Count = Callable[[str], None]
"""Told each decision's name as it is made (a host counts them in its metrics)."""


class Decisions:
    """Thread-safe counts of decisions by name, passed on to ``count`` as they happen."""

    def __init__(self, count: Count | None = None) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._count = count

    def add(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1
        if self._count is not None:
            self._count(name)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def __repr__(self) -> str:
        return f"Decisions({self.snapshot()})"


__all__ = ["Count", "Decisions"]
