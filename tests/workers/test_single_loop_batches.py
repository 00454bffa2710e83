"""``async def handle_batch`` on ``listener.event_loop = "single"``: many messages' items in one
call on the worker's loop, each message settled on its own -- ``BatchFailed`` retries only the
messages of the items it names; a plain ``def handle_batch`` is refused at load (SQLite)."""

from __future__ import annotations

import asyncio
import collections
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest

from cloudqueue.listener import BatchFailed, ConfigurationError, Publisher, SqliteQueueStorage
from cloudqueue.workers import QueueWorker, WorkerHost
from cloudqueue.workers.host.async_batches import AsyncBatcher
from tests.support.keyed_workers import host_settings
from tests.support.polling import eventually

SETTINGS: dict[str, Any] = {
    "listener": {"event_loop": "single"},
    "batch": {"max_items": 10, "max_wait_s": 0.2},
}


class Bulk(QueueWorker[int]):
    """Fails the items ending in 3 the first time it sees them, with ``BatchFailed``; notes every
    call's items and the thread it ran on."""

    queue_name = "bulk"
    settings: ClassVar[dict[str, Any]] = SETTINGS

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.threads: set[int] = set()

    async def handle_batch(self, items: list[int]) -> None:
        await asyncio.sleep(0)
        seen = collections.Counter(item for call in self.calls for item in call)
        self.calls.append(list(items))
        self.threads.add(threading.get_ident())
        first = [p for p, item in enumerate(items) if item % 10 == 3 and seen[item] == 0]
        if first:
            raise BatchFailed(first, "downstream refused them")


def test_batch_failed_retries_only_the_messages_of_the_items_it_names(tmp_path: Path) -> None:
    """40 items in calls of at most ten on the loop's one thread: the four items ``BatchFailed``
    named are handled again (twice in all), every other once; none is poisoned."""
    storage = SqliteQueueStorage(tmp_path / "q.db")
    storage.create_queue(Bulk.queue_name)
    Publisher(storage, Bulk.queue_name, int).publish_many(range(40))
    host = WorkerHost([Bulk], host_settings(), storage=storage)
    [looped] = host.looped
    worker = looped.worker
    assert isinstance(worker, Bulk)
    host.start()
    try:
        eventually(
            lambda: (
                sum(map(len, worker.calls)) == 44
                and storage.approximate_message_count(Bulk.queue_name) == 0
            ),
            timeout_s=30,
        )
    finally:
        assert host.stop()
    counts = collections.Counter(item for call in worker.calls for item in call)
    assert {item for item, seen in counts.items() if seen == 2} == set(range(3, 40, 10))
    assert set(counts.values()) == {1, 2}
    assert all(len(call) <= 10 for call in worker.calls)
    assert any(len(call) > 1 for call in worker.calls)
    assert len(worker.threads) == 1
    counters = looped.consumer.counters
    assert (counters.processed, counters.poisoned) == (40, 0)


def test_a_plain_batch_handler_is_refused_naming_it(tmp_path: Path) -> None:
    """A ``def handle_batch`` would stall the loop: refused at load, the way back named."""

    class PlainBulk(QueueWorker[int]):
        queue_name = "bulk"
        settings: ClassVar[dict[str, Any]] = SETTINGS

        def handle_batch(self, items: list[int]) -> None:
            pass

    storage = SqliteQueueStorage(tmp_path / "q.db")
    with pytest.raises(ConfigurationError, match=r"plain def handle_batch.*async def handle_batch"):
        WorkerHost([PlainBulk], host_settings(), storage=storage)
    storage.close()


def test_a_call_past_the_time_limit_fails_its_items_as_stopped() -> None:
    """A batch call that never returns is cancelled at ``listener.time_limit_s``: each of its
    items' waits raises ``BatchFailed`` naming the time limit, and the next batch is called."""
    called: list[list[int]] = []

    async def handle_batch(items: list[int]) -> None:
        called.append(items)
        if items == [1, 2]:
            await asyncio.Event().wait()  # stuck for good

    async def run() -> list[BaseException | None]:
        batcher: AsyncBatcher[int] = AsyncBatcher(
            handle_batch, max_items=2, max_wait_s=60, time_limit_s=0.05
        )
        stuck = await asyncio.gather(batcher.handle(1), batcher.handle(2), return_exceptions=True)
        done = await asyncio.gather(batcher.handle(3), batcher.handle(4), return_exceptions=True)
        return [*stuck, *done]

    outcomes = asyncio.run(run())
    assert [type(outcome) for outcome in outcomes[:2]] == [BatchFailed, BatchFailed]
    assert all("time limit" in str(outcome) for outcome in outcomes[:2])
    assert outcomes[2:] == [None, None]
    assert called == [[1, 2], [3, 4]]
