"""The worker of the checkpoint kill -9 test: three steps, each checkpointed when done. Each
event is one line appended with O_APPEND (whole, on disk before the process can be killed):
``started STEP DEQUEUE_COUNT pid``, ``done STEP pid``, ``finished pid``. With
``TEST_HANG_IN_STEP`` set, the worker blocks inside that step, to be killed there. The same
steps as an ``async def`` handler, which awaits each checkpoint: on dequeue threads (the loop the
process's coroutines share) or on the single event loop (``listener.event_loop``)."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

from cloudqueue import current_envelope
from cloudqueue.workers import QueueWorker
from tests.support.crash_group_workers import record

STEPS = 3


class ThreeCheckpointedSteps(QueueWorker[dict[str, Any]]):
    queue_name = os.environ.get("TEST_QUEUE", "steps")

    def handle(self, item: dict[str, Any]) -> None:
        envelope = current_envelope()
        resumed = envelope.checkpoint or {"done": 0}
        for step in range(int(resumed["done"]) + 1, STEPS + 1):
            record("started", step, envelope.dequeue_count)
            envelope.progress((step - 1) / STEPS, f"step {step} of {STEPS}")
            if os.environ.get("TEST_HANG_IN_STEP") == str(step):
                threading.Event().wait()  # the step's work, never ending: killed here
            envelope.save_checkpoint({"done": step})
            record("done", step)
        record("finished")


class AsyncThreeCheckpointedSteps(QueueWorker[dict[str, Any]]):
    queue_name = os.environ.get("TEST_QUEUE", "steps")

    async def handle(self, item: dict[str, Any]) -> None:
        envelope = current_envelope()
        resumed = envelope.checkpoint or {"done": 0}
        for step in range(int(resumed["done"]) + 1, STEPS + 1):
            record("started", step, envelope.dequeue_count)
            envelope.progress((step - 1) / STEPS, f"step {step} of {STEPS}")
            if os.environ.get("TEST_HANG_IN_STEP") == str(step):
                await asyncio.Event().wait()  # the step's work, never ending: killed here
            await envelope.save_checkpoint({"done": step})
            record("done", step)
        record("finished")
