"""Keeping a listener's known depth fresh while work flows, at one count per interval at most.

The scaler counts the queue when it re-evaluates (``rescale_interval_s`` apart, but only as a
stretch of work ends), and an empty get tells the listener that nothing waits (free). Between
those, a handler that runs for minutes would leave the status line and ``/metrics`` showing a
depth minutes old. The host ticks a ``DepthRefresher`` per listener every second: while work
flows (messages held, or settled since the last tick) and the known depth is older than
``refresh_s``, it counts once, through the pool control the scaler uses (so ``/metrics`` sees the
same measure). Idle, it counts nothing: the empty gets keep the depth at 0. The ticks come from a
``DepthTicker`` thread the host starts with its listeners (``WorkerHost.start``), so a host
driven by ``start``/``stop`` (the demo, a host embedded in your own process) keeps its depth as
fresh as one under ``run``. A worker on the single event loop refreshes its own the same way, in
a task on its loop (``refresh_loop_depth``), when metrics are on (nothing else reads it there).

Cost: at most ``3600 / refresh_s`` counts an hour per queue (720 at the default 5 s; one count
per partition on a partitioned queue), and only while work flows and nothing else counted.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import structlog

from cloudqueue.listener.consumer.depth import KnownDepth
from cloudqueue.listener.consumer.event_loop.consumer import AsyncConsumer
from cloudqueue.listener.consumer.listener import CloudQueueListener
from cloudqueue.listener.consumer.pool_control import PoolControl
from cloudqueue.listener.errors import StorageError

DEFAULT_REFRESH_S = 5.0

TICK_S = 1.0
"""How often the ticker asks each refresher (a refresher shorter than this is asked as often as
its own interval)."""

log = structlog.get_logger(__name__)


class FlowCounters(Protocol):
    """What a listener's and a loop consumer's counters both tell of their messages."""

    processed: int
    failed: int
    poisoned: int
    in_flight: int


class StaleWhileFlowing:
    """Whether a queue's known depth is due a count: work flows (messages held, or settled
    since the last ask) and the depth is older than ``refresh_s``."""

    def __init__(self, known_depth: KnownDepth, refresh_s: float, counters: FlowCounters) -> None:
        self.known_depth, self.refresh_s, self.counters = known_depth, refresh_s, counters
        self._settled = self._settled_now()

    def due(self) -> bool:
        settled = self._settled_now()
        flowing = settled != self._settled or self.counters.in_flight > 0
        self._settled = settled
        age_s = self.known_depth.age_s()
        return flowing and (age_s is None or age_s >= self.refresh_s)

    def _settled_now(self) -> int:
        counters = self.counters
        return counters.processed + counters.failed + counters.poisoned


class DepthRefresher:
    """Counts one listener's queue when its known depth is stale and work flows."""

    def __init__(
        self,
        listener: CloudQueueListener[Any],
        pool: PoolControl,
        *,
        refresh_s: float = DEFAULT_REFRESH_S,
    ) -> None:
        self.listener = listener
        self.pool = pool
        self.refresh_s = refresh_s
        self._stale = StaleWhileFlowing(listener.meters.known_depth, refresh_s, listener.counters)

    def tick(self) -> bool:
        """Count now if due; True when it counted."""
        if not self._stale.due():
            return False
        try:
            self.pool.measure_load()  # records the listener's known depth
        except StorageError as failure:
            log.warning("depth_refresh_skipped", queue=self.listener.queue_name, error=str(failure))
            return False
        return True

    def __repr__(self) -> str:
        return f"DepthRefresher({self.listener.queue_name!r}, refresh_s={self.refresh_s})"


class DepthTicker:
    """A thread ticking the refreshers every ``TICK_S`` between ``start`` and ``close``."""

    def __init__(self, refreshers: Sequence[DepthRefresher]) -> None:
        self.refreshers = list(refreshers)
        shortest = min((refresher.refresh_s for refresher in self.refreshers), default=TICK_S)
        self.interval_s = min(TICK_S, shortest)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="depth-refresh", daemon=True)

    def start(self) -> DepthTicker:
        if self.refreshers:
            self._thread.start()
        return self

    def tick(self) -> None:
        """Ask every refresher once (each counts only if due)."""
        for refresher in self.refreshers:
            refresher.tick()

    def close(self) -> None:
        self._closed.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        # A periodic tick, not a wait for a condition: the interval is the refresh cadence.
        while not self._closed.wait(self.interval_s):
            self.tick()


async def refresh_loop_depth(consumer: AsyncConsumer[Any], refresh_s: float) -> None:
    """A single event loop's ``DepthRefresher`` and ticker in one: run on its loop beside the
    consumer until cancelled, it counts the queue when its known depth is stale while work
    flows."""
    stale = StaleWhileFlowing(consumer.depth.known, refresh_s, consumer.counters)
    while True:
        # A periodic tick, not a wait for a condition: the interval is the refresh cadence.
        await asyncio.sleep(min(TICK_S, refresh_s))
        if not stale.due():
            continue
        try:
            await consumer.depth.count()
        except StorageError as failure:
            log.warning("depth_refresh_skipped", queue=consumer.queue_name, error=str(failure))
