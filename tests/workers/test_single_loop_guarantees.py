"""A worker on the single loop (``listener.event_loop = "single"``) in the host keeps its
guarantees as set by its settings: a graceful drain, on the embedded store and on Azurite (the aio
SDK) -- the handlers running at the stop finish and their messages are deleted, nothing more is
fetched, the rest stays queued untouched -- and ``listener.time_limit_s`` (SIGTERM's way to
``WorkerHost.stop`` is tested in a real process: tests/workers/cli/test_cli_run_event_loop.py;
the single loop's guarantee tests, listed: docs/concepts/in-flight.md)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest

from cloudqueue.listener import Publisher, poison_queue_name
from cloudqueue.listener.poison.record import parse_record
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost
from tests.conftest import make_storage
from tests.support.polling import eventually

IN_FLIGHT = 3
"""Handlers at once: one fetch task with three slots."""


@pytest.fixture(params=["sqlite", "azure"])
def stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[QueueStorage, QueueStorage]]:
    """The host's connection to the store (it closes it at its stop) and the test's own."""
    host_side, own = (make_storage(request.param, request, tmp_path) for _ in range(2))
    yield host_side, own
    own.close()


@dataclass
class Handlings:
    """The items whose handlers started, and those that finished."""

    started: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)


def held_worker(
    queue: str, release: threading.Event, seen: Handlings
) -> type[QueueWorker[dict[str, int]]]:
    """An async worker on ``queue`` whose handlers wait for ``release`` (on a worker thread, so
    the loop goes on), noting in ``seen`` the items they started and finished."""

    class Held(QueueWorker[dict[str, int]]):
        queue_name = queue
        settings: ClassVar[dict[str, Any]] = {
            "listener": {"event_loop": "single", "concurrency": IN_FLIGHT},
            "scaling": {"max_threads": 1},
        }

        async def handle(self, item: dict[str, int]) -> None:
            seen.started.append(item["n"])
            await asyncio.to_thread(release.wait)  # the handler's own work, until released
            seen.finished.append(item["n"])

    return Held


def test_a_stop_lets_running_handlers_finish_and_fetches_nothing_more(
    stores: tuple[QueueStorage, QueueStorage], queue_name: str
) -> None:
    """Stopped with three handlers running and seven messages queued: fetching ends at once;
    released, the three finish within the grace and are deleted (the stop reports a clean
    drain); the seven are still queued, visible, and never delivered."""
    host_side, storage = stores
    release, seen = threading.Event(), Handlings()
    worker = held_worker(queue_name, release, seen)
    storage.create_queue(queue_name)
    Publisher(storage, queue_name, dict).publish_many([{"n": n} for n in range(10)])
    settings = CloudQueueSettings.model_validate(
        {"shutdown_grace_s": 30, "backoff": {"max_idle_s": 0.2}}
    )
    host = WorkerHost([worker], settings, storage=host_side)
    [looped] = host.looped
    consumer = looped.consumer
    host.start()
    with ThreadPoolExecutor(1) as stopper:
        try:
            eventually(lambda: len(seen.started) == IN_FLIGHT)
            stopping = stopper.submit(host.stop)
            eventually(lambda: consumer.active_tasks == 0)  # the fetch task has left
            gets_at_stop = consumer.gets
        finally:
            release.set()
        assert stopping.result(60)  # drained: no handler cancelled
    assert consumer.gets == gets_at_stop
    assert sorted(seen.finished) == sorted(seen.started)
    assert storage.approximate_message_count(queue_name) == 10 - IN_FLIGHT
    left = storage.get_messages(queue_name, max_messages=32, visibility_timeout_s=30)
    assert sorted(m.dequeue_count for m in left) == [1] * (10 - IN_FLIGHT)  # first delivery


class Endless(QueueWorker[dict[str, int]]):
    """Its handler never returns on its own; it notes each cancellation."""

    queue_name = "endless"
    settings: ClassVar[dict[str, Any]] = {
        "listener": {"event_loop": "single", "time_limit_s": 0.1, "retry_delay_s": 0},
        "poison": {"max_dequeue_count": 2},
    }
    cancelled: ClassVar[list[int]] = []

    async def handle(self, item: dict[str, int]) -> None:
        try:
            await asyncio.Event().wait()  # never set: only the time limit ends it
        except asyncio.CancelledError:
            self.cancelled.append(item["n"])
            raise


def test_the_time_limit_setting_cancels_the_handler_retries_then_poisons(
    tmp_path: Path,
) -> None:
    """``listener.time_limit_s`` reaches the single loop: each delivery's handler is cancelled
    at the limit, the message retried once, then poisoned as time_limit (the store's part is the
    consumer's, tested on each store in tests/listener/consumer/test_async_consumer.py)."""
    Endless.cancelled.clear()
    storage = SqliteQueueStorage(tmp_path / "queues.db")
    storage.create_queue(Endless.queue_name)
    Publisher(storage, Endless.queue_name, dict).publish({"n": 5})
    settings = CloudQueueSettings.model_validate({"shutdown_grace_s": 5})
    host = WorkerHost([Endless], settings, storage=SqliteQueueStorage(tmp_path / "queues.db"))
    host.start()
    try:
        poison = poison_queue_name(Endless.queue_name)
        eventually(lambda: len(Endless.cancelled) == 2, timeout_s=30)
        eventually(lambda: storage.approximate_message_count(poison) == 1)
    finally:
        assert host.stop()
    assert Endless.cancelled == [5, 5]
    [record] = storage.get_messages(poison, max_messages=1, visibility_timeout_s=30)
    assert parse_record(record.content).reason == "time_limit"
    assert storage.approximate_message_count(Endless.queue_name) == 0
    storage.close()
