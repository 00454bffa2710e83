"""The worker of the idempotency kill -9 test: each handler records ``started n pid`` as it
begins and ``returned n pid`` just before it returns, each one line written with O_APPEND (whole
lines, in the order they happened, and on disk before the process can be killed)."""

from __future__ import annotations

import os
import time
from typing import Any

from cloudqueue.workers import QueueWorker

RECORD_PATH = os.environ.get("TEST_RECORD_PATH", "record.txt")
HANDLER_S = float(os.environ.get("TEST_HANDLER_DELAY_S", "0.05"))


def record(what: str, n: int) -> None:
    descriptor = os.open(RECORD_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, f"{what} {n} {os.getpid()}\n".encode())
    finally:
        os.close(descriptor)


class CrashKeysWorker(QueueWorker[dict[str, Any]]):
    """Handles ``{"id": n}`` items keyed by ``id`` (carried by ``enqueue --key id``)."""

    queue_name = os.environ.get("TEST_QUEUE", "work")

    def handle(self, item: dict[str, Any]) -> None:
        n = int(item["id"])
        record("started", n)
        time.sleep(HANDLER_S)  # the handler's own work: a kill may fall inside it
        record("returned", n)
