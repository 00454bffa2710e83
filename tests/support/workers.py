"""Workers that the CLI tests run in real subprocesses.

They log each handled item as a JSON event with the process id, so a test can count what was
handled and by which process. Their pace comes from the environment, since the CLI starts them.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import structlog

from cloudqueue.workers import QueueWorker

log = structlog.get_logger("tests.workers")

HANDLER_DELAY_S = float(os.environ.get("TEST_HANDLER_DELAY_S", "0"))
START_CPU_S = float(os.environ.get("TEST_START_CPU_S", "0"))


def busy_for(seconds: float) -> None:
    """Keep one core busy, as a worker warming a cache or loading a model at start does."""
    until = time.process_time() + seconds
    while time.process_time() < until:
        pass


def hold_until(gate: str, deadline_s: float = 120.0) -> None:
    """Hold a handler until the file ``gate`` exists (the test releases it), as a long job
    whose end the test decides does; bounded, so a forgotten gate cannot hang a run."""
    until = time.monotonic() + deadline_s
    while not os.path.exists(gate) and time.monotonic() < until:
        time.sleep(0.02)  # the handler's own work, not a test waiting for a condition


class RecordingWorker(QueueWorker[dict[str, Any]]):
    """Logs `handled` with the item's number and its own pid, after an optional delay (the
    environment's, or the item's own ``delay_s``), or held until the item's ``until`` file
    exists."""

    queue_name = os.environ.get("TEST_QUEUE", "work")

    def on_start(self, listener: Any) -> None:
        busy_for(START_CPU_S)

    def handle(self, item: dict[str, Any]) -> None:
        log.info("handling", n=item["n"], pid=os.getpid())
        delay_s = float(item.get("delay_s", HANDLER_DELAY_S))  # an item may ask for its own
        if delay_s:
            time.sleep(delay_s)  # a slow handler, as the scenario needs
        if "until" in item:
            hold_until(item["until"])
        log.info("handled", n=item["n"], pid=os.getpid())


class AsyncRecordingWorker(QueueWorker[dict[str, Any]]):
    """The same with an async handler."""

    queue_name = os.environ.get("TEST_QUEUE", "work")

    async def handle(self, item: dict[str, Any]) -> None:
        await asyncio.sleep(HANDLER_DELAY_S)
        log.info("handled", n=item["n"], pid=os.getpid())
