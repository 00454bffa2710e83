"""Metrics and probes of a worker on ``listener.event_loop = "single"``, over real HTTP in a host
on SQLite: its counters, timings and storage calls reach /metrics, its probes are green while it
works, and a handler that blocks the loop turns /healthz red naming the loop's thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener import Publisher, SqliteQueueStorage
from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost
from tests.support.polling import eventually
from tests.support.scrape import get, scrape, value

RELEASE = threading.Event()


class Blocking(QueueWorker[dict[str, int]]):
    """Handles on the single loop; item -1 blocks the loop's thread until ``RELEASE``."""

    queue_name = "observed-loop"
    settings: ClassVar[dict[str, Any]] = {"listener": {"event_loop": "single"}}

    async def handle(self, item: dict[str, int]) -> None:
        await asyncio.sleep(0)
        if item["n"] < 0:
            RELEASE.wait(30)  # a sync wait in an async handler: nothing else on the loop runs


@pytest.fixture
def host(tmp_path: Path) -> Iterator[WorkerHost]:
    """A started host of ``Blocking`` serving metrics on a free port, stopped afterwards."""
    storage = SqliteQueueStorage(tmp_path / "q.db")
    storage.create_queue(Blocking.queue_name)
    Publisher(storage, Blocking.queue_name, dict).publish_many([{"n": n} for n in range(5)])
    settings = CloudQueueSettings.model_validate(
        {
            "shutdown_grace_s": 5,
            "backoff": {"max_idle_s": 0.1},
            "observability": {"metrics_port": 0, "stall_after_s": 1},
        }
    )
    made = WorkerHost([Blocking], settings, storage=storage)
    assert made.observability is not None
    made.observability.start()
    made.start()
    RELEASE.clear()
    yield made
    RELEASE.set()
    made.stop()


def port_of(host: WorkerHost) -> int:
    assert host.observability is not None
    assert host.observability.server is not None
    return host.observability.server.port


def test_a_loop_workers_counts_and_timings_reach_metrics_and_its_probes_are_green(
    host: WorkerHost,
) -> None:
    """Five messages handled on the loop: counted processed, each timed, its gets and deletes
    counted by operation; /readyz and /healthz answer 200, the loop's task counted."""
    [looped] = host.looped
    eventually(lambda: looped.consumer.counters.processed == 5)
    assert host.observability is not None
    host.observability.sample()
    samples = scrape(port_of(host))
    queue = Blocking.queue_name
    assert value(samples, "cloudqueue_messages_total", queue=queue, outcome="processed") == 5
    assert value(samples, "cloudqueue_handle_seconds_count", queue=queue) == 5
    deletes = {"queue": queue, "operation": "delete_message"}
    assert value(samples, "cloudqueue_storage_operations_total", **deletes) == 5
    assert value(samples, "cloudqueue_dequeue_threads", queue=queue) >= 1
    assert get(port_of(host), "/readyz") == (200, "ok\n")
    assert get(port_of(host), "/healthz") == (200, "ok\n")


def test_a_handler_blocking_the_loop_turns_healthz_red_naming_its_thread(
    host: WorkerHost,
) -> None:
    """A handler that blocks the loop's thread silences it: past ``stall_after_s`` /healthz
    answers 503 naming that thread, and a warning names the handler
    (``listener.loop_blocked_after_s``); released, the loop beats again and /healthz is green."""
    [looped] = host.looped
    eventually(lambda: looped.consumer.counters.processed == 5)

    def healthz() -> tuple[int, str]:
        return get(port_of(host), "/healthz")

    with capture_logs() as logs:
        Publisher(host.storage, Blocking.queue_name, dict).publish({"n": -1})
        red = eventually(lambda: next((body for code, body in [healthz()] if code == 503), ""))
        assert red == f"wedged: cloudqueue:{Blocking.queue_name}:event-loop\n"
        blocked = eventually(lambda: [e for e in logs if e["event"] == "event_loop_blocked"])
    assert blocked[0]["handler"] == f"{__name__}.Blocking.handle"
    RELEASE.set()
    eventually(lambda: healthz() == (200, "ok\n"), timeout_s=20)
    eventually(lambda: looped.consumer.counters.processed == 6)
