"""A worker whose handler is pure-Python CPU work, for ``bench_processes``.

``CPU_WORKER_MS`` (default 2) is how long each message keeps the interpreter busy.
"""

from __future__ import annotations

import os
import time
from typing import Any

from cloudqueue.workers.api.worker import QueueWorker

WORK_S = float(os.environ.get("CPU_WORKER_MS", "2")) / 1000


def burn(seconds: float) -> int:
    """Arithmetic in the interpreter (it holds the GIL) for about ``seconds`` of thread CPU."""
    total = 0
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        for number in range(200):
            total += number * number
    return total


class CpuWorker(QueueWorker[dict[str, Any]]):
    queue_name = "bench"

    def handle(self, item: dict[str, Any]) -> None:
        burn(WORK_S)
