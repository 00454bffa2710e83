"""A worker that fails some messages until its fix is "deployed", for poison-queue scenarios.

Items with ``"poison": true`` raise while the file named by ``TEST_BROKEN_FLAG`` exists; removing
the file is the fix, after which a requeued message is handled. Every handled item is logged as a
JSON ``handled`` event with its number.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import structlog

from cloudqueue.workers import QueueWorker

log = structlog.get_logger("tests.flaky_workers")

HANDLER_DELAY_S = float(os.environ.get("TEST_HANDLER_DELAY_S", "0"))


class FlakyWorker(QueueWorker[dict[str, Any]]):
    """Fails poison items while the flag file exists; handles everything else after a delay."""

    queue_name = os.environ.get("TEST_QUEUE", "work")

    def handle(self, item: dict[str, Any]) -> None:
        broken = Path(os.environ.get("TEST_BROKEN_FLAG", "/nonexistent"))
        if item.get("poison") and broken.exists():
            raise RuntimeError("cannot handle this item until the fix is deployed")
        if HANDLER_DELAY_S:
            time.sleep(HANDLER_DELAY_S)  # a slow handler, as the scenario needs
        log.info("handled", n=item["n"], pid=os.getpid())
