"""Figures users alert on: depth fresh or dated, the target following the pool, items counted."""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from rich.console import Console

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryQueueStorage,
    Publisher,
)
from cloudqueue.listener.scaling.scaler import ScalingPolicy
from cloudqueue.listener.stores.metered import MeteredStorage
from cloudqueue.listener.testing import ManualClock
from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost
from cloudqueue.workers.host.depth_refresh import DepthRefresher
from cloudqueue.workers.host.live_state import QueueLiveState
from cloudqueue.workers.progress import LiveProgress, QueueProgress
from cloudqueue.workers.views.sampler import Sampler
from tests.support.polling import eventually

QUEUE = "figures"
BACKLOG = 351


class Quick(QueueWorker[str]):
    queue_name: ClassVar[str] = QUEUE
    item_type = str

    def handle(self, item: str) -> None:
        pass


def _settings() -> CloudQueueSettings:
    # The scaler counts only when work is found (no periodic rescale within the test): the last
    # count is then the backlog, as in the run that kept showing "last depth 351".
    return CloudQueueSettings.model_validate(
        {
            "observability": {"metrics_port": 0},
            "scaling": {
                "rescale_interval_s": 3600,
                "max_threads": 4,
                "scale_in_delay_s": 0,
                "cpu_saturation_cores": 64,  # grow on a busy test machine too
            },
            "backoff": {"max_idle_s": 0.05, "delta_backoff_s": 0.01},
        }
    )


@pytest.fixture
def host() -> Iterator[WorkerHost]:
    storage = InMemoryQueueStorage()
    storage.create_queue(QUEUE)
    for n in range(BACKLOG):
        storage.put_message(QUEUE, f"item {n}")
    host = WorkerHost([Quick], _settings(), storage=storage)
    host.start()
    yield host
    host.stop()


def _gauge(host: WorkerHost, name: str, **labels: str) -> float | None:
    assert host.observability is not None
    return host.observability.metrics.registry.get_sample_value(name, {"queue": QUEUE, **labels})


def test_after_a_drain_the_status_line_and_metrics_read_depth_zero(host: WorkerHost) -> None:
    """Once the backlog is done, depth reads 0 in the status line and /metrics, not 351."""
    (listener,) = host.listeners
    eventually(lambda: listener.messages_processed == BACKLOG)
    eventually(lambda: listener.meters.known_depth.reading() is not None)

    def all_read_zero() -> bool:
        host.refresh_depths()  # what the host's one-second loop does
        assert host.observability is not None
        host.observability.sample()
        figures = QueueProgress.of(listener).fields()["figures"]
        visible = _gauge(host, "cloudqueue_queue_depth", kind="visible")
        return figures.startswith("depth 0 ") and visible == 0

    eventually(all_read_zero)
    assert _gauge(host, "cloudqueue_queue_depth_age_seconds") is not None


def test_after_a_drain_the_dashboard_reads_depth_zero_at_its_next_sample(
    host: WorkerHost, tmp_path: Path
) -> None:
    """The dashboard counts at every sample (1 s): the first one after the drain reads 0."""
    (listener,) = host.listeners
    sampler = Sampler(
        host.storage, queues=[QUEUE], state_dir=tmp_path, where="memory", policy=ScalingPolicy()
    )
    eventually(lambda: listener.messages_processed == BACKLOG)
    sampler.sample()
    (queue,) = sampler.state()["queues"]
    assert (queue["depth"], queue["visible_depth"]) == (0, 0)
    assert queue["history"]["visible_depth"][-1] == 0


def test_the_target_threads_gauge_follows_the_pool_after_scale_in(host: WorkerHost) -> None:
    """After the pool shrinks back to one thread, target_threads says 1, not the burst's target."""
    (listener,) = host.listeners
    eventually(lambda: listener.peak_dequeue_tasks > 1)  # the backlog grew the pool
    eventually(lambda: listener.messages_processed == BACKLOG)
    eventually(lambda: listener.active_dequeue_tasks == 1)
    assert host.observability is not None
    host.observability.sample()
    assert _gauge(host, "cloudqueue_dequeue_threads") == 1
    assert _gauge(host, "cloudqueue_target_threads") == 1


def test_a_stale_depth_is_counted_again_while_work_flows_and_never_while_idle() -> None:
    """One count per refresh interval while messages are held; none at all while idle."""
    clock = ManualClock()
    storage = MeteredStorage(InMemoryQueueStorage())
    storage.create_queue(QUEUE)
    for n in range(5):
        storage.put_message(QUEUE, f"item {n}")
    listener: CloudQueueListener[str] = CloudQueueListener(
        storage, CloudQueueLocation(QUEUE), str, clock=clock
    )
    refresher = DepthRefresher(listener, listener.pool_control, refresh_s=5.0)
    listener.pool_control.measure_load()
    counts = storage.counts().get("approximate_message_count", 0)
    listener.counters.add("in_flight", 1)  # a long handler holds a message: work flows
    clock.advance(4.9)
    assert not refresher.tick()
    clock.advance(0.1)
    assert refresher.tick()
    assert storage.counts()["approximate_message_count"] == counts + 1
    assert listener.meters.known_depth.age_s() == 0
    listener.counters.add("in_flight", -1)  # it settled (as failed: left for a retry)
    listener.counters.add("failed")
    clock.advance(5)
    assert refresher.tick()  # something settled since the last tick: count once more
    for _ in range(100):  # idle for 500 s
        clock.advance(5)
        assert not refresher.tick()
    assert storage.counts()["approximate_message_count"] == counts + 2


GATE = threading.Event()


class Holding(QueueWorker[str]):
    """On the single event loop, one message at a time; item ``hold`` waits for ``GATE``."""

    queue_name: ClassVar[str] = QUEUE
    item_type = str
    settings: ClassVar[dict[str, Any]] = {"listener": {"event_loop": "single", "concurrency": 1}}

    async def handle(self, item: str) -> None:
        if item == "hold":
            await asyncio.to_thread(GATE.wait, 30)  # off the loop: it goes on renewing


def test_a_single_loop_workers_depth_gauges_follow_its_counts_and_its_empty_gets() -> None:
    """On the single loop, as on threads: the count taken when work appears sets the visible
    depth (held messages apart), a stale one is counted again while a handler holds its
    message, and an empty get after the drain reads 0."""
    storage = InMemoryQueueStorage()
    storage.create_queue(QUEUE)
    for item in ["hold", "a", "b", "c", "d"]:
        storage.put_message(QUEUE, item)
    settings = CloudQueueSettings.model_validate(
        {
            "observability": {"metrics_port": 0},
            "scaling": {"max_threads": 1, "depth_refresh_s": 0.1},
            "backoff": {"max_idle_s": 0.05, "delta_backoff_s": 0.01},
        }
    )
    GATE.clear()
    host = WorkerHost([Holding], settings, storage=storage)
    host.start()

    def depth(kind: str) -> float | None:
        assert host.observability is not None
        host.observability.sample()
        return _gauge(host, "cloudqueue_queue_depth", kind=kind)

    try:
        eventually(lambda: depth("visible") == 4 and depth("in_flight") == 1)
        for item in ["e", "f", "g"]:
            storage.put_message(QUEUE, item)
        eventually(lambda: depth("visible") == 7)  # counted again: the handler holds its message
        assert _gauge(host, "cloudqueue_queue_depth_age_seconds") is not None
        GATE.set()
        [looped] = host.looped
        eventually(lambda: looped.consumer.counters.processed == 8)
        eventually(lambda: depth("visible") == 0 and depth("in_flight") == 0)
    finally:
        GATE.set()
        host.stop()


def test_a_single_loop_worker_has_its_status_line() -> None:
    """`cloudqueue run` on a terminal draws a line per queue for a worker on the single loop
    too: its dequeue tasks as threads, its counts, its known depth."""
    storage = InMemoryQueueStorage()
    storage.create_queue(QUEUE)
    for item in ["a", "b", "c"]:
        storage.put_message(QUEUE, item)
    settings = CloudQueueSettings.model_validate({"backoff": {"max_idle_s": 0.05}})
    host = WorkerHost([Holding], settings, storage=storage)
    screen = io.StringIO()
    host.start()
    try:
        with LiveProgress(
            host.listeners, loops=host.consumers, console=Console(file=screen, width=200)
        ) as live:
            [looped] = host.looped
            eventually(lambda: looped.consumer.counters.processed == 3)
            eventually(lambda: QueueProgress.of_loop(looped.consumer).depth == 0)
            live.refresh()
    finally:
        host.stop()
    [line] = [line for line in screen.getvalue().splitlines() if QUEUE in line][-1:]
    assert "depth 0 · threads 1 · in flight 0 · processed 3 · poisoned 0" in line


def test_a_batch_of_200_items_counts_200_processed_beside_its_one_message() -> None:
    """`enqueue --batch` sends 200 items in one message: the figures say 200 items (1 message)."""
    storage = InMemoryQueueStorage()
    storage.create_queue(QUEUE)
    Publisher(storage, QUEUE, str, batch=True).publish_many(f"item {n}" for n in range(200))
    assert storage.approximate_message_count(QUEUE) == 1
    host = WorkerHost([Quick], CloudQueueSettings(), storage=storage)
    host.start()
    try:
        (listener,) = host.listeners
        eventually(lambda: listener.messages_processed == 1)
    finally:
        host.stop()
    assert listener.items_processed == 200
    assert "processed 200 items (1 message)" in QueueProgress.of(listener).fields()["figures"]
    state = QueueLiveState.of(listener)
    assert (state.items_processed, state.processed) == (200, 1)


def test_the_status_line_dates_a_depth_a_second_old_or_more() -> None:
    """A fresh depth reads bare; an older one carries its age, so a stale figure says so."""
    fresh = QueueProgress(QUEUE, 1, 0, 5, 0, depth=351, depth_age_s=0.4)
    stale = QueueProgress(QUEUE, 1, 0, 5, 0, depth=351, depth_age_s=12.2)
    assert fresh.fields()["figures"].startswith("depth 351 · threads 1")
    assert stale.fields()["figures"].startswith("depth 351 (12 s ago) · threads 1")


class Held(QueueWorker[str]):
    """Holds each message until released: work flows, no stretch of work ends."""

    queue_name: ClassVar[str] = QUEUE
    item_type = str
    release: ClassVar[threading.Event] = threading.Event()

    def handle(self, item: str) -> None:
        self.release.wait(30)


def test_a_host_driven_by_start_and_stop_keeps_its_depth_fresh() -> None:
    """Under start/stop (as the demo and an embedding drive a host, without run's loop), a
    depth counted while handlers hold messages is counted again within the refresh interval:
    the status line's depth does not stay at its first count while "processed" rises."""
    storage = InMemoryQueueStorage()
    storage.create_queue(QUEUE)
    for n in range(20):
        storage.put_message(QUEUE, f"item {n}")
    settings = CloudQueueSettings.model_validate(
        {
            "scaling": {"rescale_interval_s": 3600, "max_threads": 1, "depth_refresh_s": 0.05},
            "listener": {"concurrency": 2},
            "backoff": {"max_idle_s": 0.05, "delta_backoff_s": 0.01},
        }
    )
    host = WorkerHost([Held], settings, storage=storage)
    (listener,) = host.listeners
    Held.release.clear()
    host.start()
    try:
        eventually(lambda: listener.counters.in_flight > 0)
        eventually(lambda: listener.meters.known_depth.reading() is not None)
        first = listener.meters.known_depth.reading()
        eventually(lambda: listener.meters.known_depth.reading() is not first)
    finally:
        Held.release.set()
        host.stop()
