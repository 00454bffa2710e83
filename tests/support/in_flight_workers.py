"""A worker for the kill -9 test: it holds 200 messages in flight, then lets half of them finish.

Every handler writes ``started n`` to the record file, waits until ``TEST_HOLD_AT`` handlers have
started (all of them in flight at once), then -- for even ``n`` only -- writes ``completed n``
*before returning*, so the test knows which messages were handled by the time of the kill. Odd
ones never return: they are in flight when the process dies.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from cloudqueue.workers import QueueWorker

RECORD_PATH = os.environ.get("TEST_RECORD_PATH", "handled.txt")
HOLD_AT = int(os.environ.get("TEST_HOLD_AT", "200"))


def record(what: str, n: int) -> None:
    # One write of one line with O_APPEND: whole lines, even from several threads, and on disk
    # (in the page cache) before the handler returns -- kill -9 cannot take it back.
    descriptor = os.open(RECORD_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, f"{what} {n}\n".encode())
    finally:
        os.close(descriptor)


class HoldingWorker(QueueWorker[dict[str, Any]]):
    """Holds every message until HOLD_AT are in flight; completes the even ones only."""

    queue_name = os.environ.get("TEST_QUEUE", "work")

    def __init__(self) -> None:
        self._started = 0
        self._all_in: asyncio.Event | None = None

    async def handle(self, item: dict[str, Any]) -> None:
        n = int(item["n"])
        record("started", n)
        all_in = self._all_in = self._all_in or asyncio.Event()  # one event loop runs them all
        self._started += 1
        if self._started >= HOLD_AT:
            all_in.set()
        await all_in.wait()
        if n % 2:
            await asyncio.Event().wait()  # never returns: in flight when the process is killed
        record("completed", n)
