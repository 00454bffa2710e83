"""``run_until_drained`` runs a worker with its own concurrency in virtual time: coroutines await
side by side on a virtual-time event loop, plain handlers run on several handler threads, so a
handler that is not safe to run concurrently is caught; ``serial=True`` keeps one at a time."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from typing import Any, ClassVar

import pytest

from cloudqueue.workers import QueueWorker
from cloudqueue.workers.testing import run_until_drained


class Sleepy(QueueWorker[int]):
    """Each item awaits 0.2 s; notes the event loop's time (virtual here) around it."""

    queue_name = "sleepy"
    settings: ClassVar[dict[str, dict[str, Any]]] = {"listener": {"concurrency": 8}}

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []

    async def handle(self, item: int) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.sleep(0.2)
        self.spans.append((started, loop.time()))


def test_fifty_coroutines_awaiting_a_fifth_of_a_second_on_eight_slots_drain_in_virtual_time() -> (
    None
):
    """Done-when: 50 items each awaiting 0.2 s with concurrency 8 drain in <= 2 s of virtual time
    (7 rounds of 8: 1.4 s; one at a time would take 10 s), measured both as the run's
    ``virtual_s`` and on the handlers' own event-loop clock; each await lasts 0.2 s there."""
    worker = Sleepy()
    result = run_until_drained(worker, range(50))
    assert sorted(result) == list(range(50))
    starts, ends = zip(*worker.spans, strict=True)
    assert max(ends) - min(starts) == pytest.approx(1.4)
    assert result.virtual_s == pytest.approx(1.4)
    assert {round(end - start, 6) for start, end in worker.spans} == {0.2}


def test_serial_runs_them_one_at_a_time() -> None:
    """With ``serial=True`` no two calls overlap: each starts after the previous one ended."""
    worker = Sleepy()
    result = run_until_drained(worker, range(5), serial=True)
    assert sorted(result) == list(range(5))
    spans = sorted(worker.spans)
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans))


class RacyAsync(QueueWorker[int]):
    """Counts its items by read-modify-write, awaiting between the read and the write: two
    coroutines in flight at once lose an update."""

    queue_name = "racy"
    settings: ClassVar[dict[str, dict[str, Any]]] = {"listener": {"concurrency": 8}}

    def __init__(self) -> None:
        self.count = 0

    async def handle(self, item: int) -> None:
        seen = self.count
        await asyncio.sleep(0.01)  # a database round-trip, say
        self.count = seen + 1


class RacyThreads(QueueWorker[int]):
    """The same race in a plain handler: threads interleave between the read and the write."""

    queue_name = "racy"
    settings: ClassVar[dict[str, dict[str, Any]]] = {"listener": {"concurrency": 8}}

    def __init__(self) -> None:
        self.count = 0
        self.overlapped = threading.Event()
        self._inside = 0
        self._lock = threading.Lock()

    def handle(self, item: int) -> None:
        with self._lock:
            self._inside += 1
            if self._inside > 1:
                self.overlapped.set()
        seen = self.count
        time.sleep(0.02)  # the handler's own work between read and write, in real time
        self.count = seen + 1
        with self._lock:
            self._inside -= 1


def test_a_racy_async_handler_loses_updates_when_run_concurrently_and_not_serially() -> None:
    """Concurrently, coroutines read the same count before any writes: updates are lost (every
    handler returned, so nothing else would tell); serially the count is exact."""
    concurrent = RacyAsync()
    assert len(run_until_drained(concurrent, range(50))) == 50
    assert concurrent.count < 50

    serial = RacyAsync()
    assert len(run_until_drained(serial, range(50), serial=True)) == 50
    assert serial.count == 50


def test_a_racy_plain_handler_runs_on_several_threads_at_once_and_loses_updates() -> None:
    """A plain handler runs on up to eight handler threads at once: they overlap and the
    unguarded count comes out short; serially they never overlap and it is exact."""
    concurrent = RacyThreads()
    assert len(run_until_drained(concurrent, range(24))) == 24
    assert concurrent.overlapped.is_set()
    assert concurrent.count < 24

    serial = RacyThreads()
    assert len(run_until_drained(serial, range(8), serial=True)) == 8
    assert not serial.overlapped.is_set()
    assert serial.count == 8
