"""Workers and a host runner for the key tests: handlers that record what they handled, and when.

``KeyedRecordingWorker`` (sync) and ``AsyncKeyedRecordingWorker`` record each item's ``id`` with
the time its handler started and ended; both define ``key(item)`` as the item's ``id``. The
subprocess worker of the kill -9 test is in ``tests.support.crash_keys_worker``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost
from tests.support.polling import eventually


@dataclass
class Record:
    """What handlers of one test did: (id, key field, started, ended) per handled item."""

    spans: list[tuple[Any, Any, float, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, item: dict[str, Any], started: float) -> None:
        with self.lock:
            self.spans.append((item.get("id"), item.get("k"), started, time.monotonic()))

    @property
    def ids(self) -> list[Any]:
        with self.lock:
            return [span[0] for span in self.spans]


def recording_worker(
    record: Record,
    queue: str,
    *,
    asynchronous: bool = False,
    handler_s: float = 0.0,
    settings: dict[str, dict[str, Any]] | None = None,
    fail_first: int = 0,
) -> type[QueueWorker[dict[str, Any]]]:
    """A worker class on ``queue`` recording into ``record``; its first ``fail_first`` handler
    calls raise after working."""
    calls = [0]

    def work(item: dict[str, Any]) -> None:
        with record.lock:
            calls[0] += 1
            failing = calls[0] <= fail_first
        if failing:
            raise RuntimeError("the first tries fail")

    class Sync(QueueWorker[dict[str, Any]]):
        queue_name = queue

        def key(self, item: dict[str, Any]) -> str | None:
            return None if "id" not in item else str(item["id"])

        def handle(self, item: dict[str, Any]) -> None:
            started = time.monotonic()
            time.sleep(handler_s)  # the handler's own work
            work(item)
            record.add(item, started)

    class Async(Sync):
        async def handle(self, item: dict[str, Any]) -> None:  # type: ignore[override]
            started = time.monotonic()
            await asyncio.sleep(handler_s)
            work(item)
            record.add(item, started)

    chosen = Async if asynchronous else Sync
    chosen.settings = settings or {}
    return chosen


def host_settings(**sections: dict[str, Any]) -> CloudQueueSettings:
    """Settings for an in-process host: quick polling, a short grace period, ``sections``."""
    return CloudQueueSettings.model_validate(
        {"shutdown_grace_s": 10, "backoff": {"max_idle_s": 0.2}, **sections}
    )


@contextmanager
def hosting(
    worker: type[QueueWorker[Any]],
    storage: QueueStorage,
    settings: CloudQueueSettings,
    **host_options: Any,
) -> Iterator[WorkerHost]:
    """A started ``WorkerHost`` of one worker on ``storage``, always stopped afterwards."""
    host = WorkerHost([worker], settings, storage=storage, **host_options)
    host.start()
    try:
        yield host
    finally:
        host.stop()


def drained(storage: QueueStorage, queue: str, done: Callable[[], bool], timeout_s: float) -> None:
    """Wait until ``done()`` and the queue is empty (nothing visible or in flight)."""
    eventually(
        lambda: done() and storage.approximate_message_count(queue) == 0, timeout_s=timeout_s
    )
