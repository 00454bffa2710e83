"""Waiting for a condition in tests that run on real time (Azurite): poll it against a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(check: Callable[[], T], *, timeout_s: float = 10, interval_s: float = 0.05) -> T:
    """Call ``check`` until it returns something truthy, and return that; fail at the deadline.

    ``check`` may be a predicate (``lambda: count() == 0``) or a fetch whose empty result means "not
    yet" (``lambda: storage.get_messages(...)``). An AssertionError it raises also means "not yet";
    the last one is re-raised if the deadline passes.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            result = check()
        except AssertionError:
            if time.monotonic() >= deadline:
                raise
        else:
            if result:
                return result
            if time.monotonic() >= deadline:
                raise AssertionError(f"not true within {timeout_s} s; last result: {result!r}")
        # Polling against a deadline, not waiting for a condition: the check decides.
        time.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))
