"""A worker on one event loop end to end: ``listener.event_loop = "single"``.

The host gives such a worker an ``AsyncConsumer`` (``cloudqueue.listener.consumer.event_loop
.consumer``) instead of a threaded listener: its dequeue tasks, handlers and settlements are tasks
on one loop, the worker's ``LoopThread``, where its ``startup`` and ``shutdown`` run too, so
a session opened at startup serves every handler and no message crosses a thread. The store's
awaitable side (the aio SDK's clients for Azure, direct calls for SQLite and memory) opens on that
loop at the first call, is counted on the host's meter, and is closed there after ``shutdown``.

A push trigger for its queue wakes it with one ``call_soon_threadsafe``; while all its tasks are
gone (``scaling.min_threads = 0``, which needs triggers) a watchdog counts the queue every
``triggers.watchdog_interval_s``, the threaded path's net under lost triggers. With metrics on,
its known depth is counted again while work flows, as a listener's is (``depth_refresh``).
``request_stop``
then ``stop`` drain as a listener does: fetching stops, handlers get the grace, the ones still
running then are cancelled and their messages reappear after their visibility timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog
from reactivex.abc import DisposableBase

from cloudqueue.listener.consumer.coroutines import LoopThread
from cloudqueue.listener.consumer.event_loop.consumer import AsyncConsumer
from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.push.triggers import TriggerChannel, WorkDetected
from cloudqueue.listener.stores.async_metered import MeteredAsyncStorage
from cloudqueue.listener.stores.async_partitioned import AsyncPartitionedStorage
from cloudqueue.listener.stores.async_storage import AsyncQueueStorage, async_storage_for
from cloudqueue.listener.stores.metered import MeteredStorage
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.payload_store import PayloadStore
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.wire.codec import reading_codec
from cloudqueue.listener.workflows.completion import GroupCompletion
from cloudqueue.listener.workflows.keep_results import KeepResults
from cloudqueue.listener.workflows.result_signals import ResultSignals
from cloudqueue.workers.api.worker import QueueWorker
from cloudqueue.workers.host.async_batches import loop_handler
from cloudqueue.workers.host.chains import chain_step_for
from cloudqueue.workers.host.controls import controls_for
from cloudqueue.workers.host.cost_meter import QueueCost
from cloudqueue.workers.host.depth_refresh import refresh_loop_depth
from cloudqueue.workers.host.lifecycle import start_up, wind_down
from cloudqueue.workers.host.live_state import QueueLiveState
from cloudqueue.workers.host.seam import (
    HostParts,
    completion_in,
    keep_results_for,
    worker_middleware,
)
from cloudqueue.workers.settings import CloudQueueSettings

log = structlog.get_logger(__name__)


@dataclass
class LoopWorker:
    """One worker, its consumer and the loop they share."""

    worker: QueueWorker[Any]
    settings: CloudQueueSettings
    consumer: AsyncConsumer[Any]
    storage: AsyncQueueStorage
    loop: LoopThread
    started_up: bool = False
    """Its ``startup`` returned: ``shutdown`` is due at the end."""
    peak_tasks: int = 0
    """The most dequeue tasks seen at once (sampled at each live-state publish)."""
    completion: GroupCompletion | None = None
    """Its group completion, whose announcements the host points at itself."""
    results: KeepResults | None = None
    """Keeps its handler's return values (``keep_results``), announced on the host's triggers."""
    beat: Callable[[], Coroutine[Any, Any, None]] | None = None
    """Run beside the consumer when metrics are on: shows the probes the loop is free."""
    depth_refresh_s: float | None = None
    """With metrics on: how stale its known depth may grow while work flows."""
    _running: concurrent.futures.Future[None] | None = None
    _subscription: DisposableBase | None = None
    _stop_requested: bool = False

    @property
    def name(self) -> str:
        """``module:Class``, as the command line names the worker."""
        return _name(self.worker)

    @property
    def queue_names(self) -> tuple[str, ...]:
        """The queues it reads, highest priority first."""
        return self.consumer.queue_names

    def start_up(self) -> None:
        """Run the worker's ``startup`` on the consumer's loop; ``StartupFailedError`` (logged in
        one line) when it raises."""
        start_up(self.worker, self.loop, worker=self.name)
        self.started_up = True

    def start(self, triggers: TriggerChannel | None = None, *, account: str = "") -> None:
        """Run the consumer on its loop; with ``triggers``, wake it on those for its queue."""
        watchdog_s = None if triggers is None else self.settings.triggers.watchdog_interval_s
        if triggers is not None and self.results is not None:
            self.results.signals = ResultSignals(triggers, account=account)
        self._running = self.loop.submit(self._serve(watchdog_s))
        if triggers is not None:  # after: a wake-up finds the consumer running
            self._subscription = triggers.events.subscribe(partial_wake(self, account))

    @property
    def ended_early(self) -> bool:
        """Its consumer ended unasked (a bug, logged then): the host exits rather than idle."""
        running = self._running
        return running is not None and running.done() and not self._stop_requested

    def wake(self) -> None:
        """Work was announced for its queue: idle tasks get now (from any thread)."""
        if not self._stop_requested:  # a closed LoopThread would start a new loop for it
            self.loop.call_soon(self.consumer.wake)

    def request_stop(self) -> None:
        """Stop fetching (from any thread); ``stop`` then waits for the drain."""
        self._stop_requested = True
        if self._subscription is not None:
            self._subscription.dispose()
        if self._running is not None:
            self.loop.call_soon(self.consumer.stop)

    def stop(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the drain; True when no handler had to be cancelled."""
        if self._running is None:
            return True
        try:
            self._running.result(timeout_s)
        except TimeoutError:
            log.warning("event_loop_drain_timed_out", queue=self.consumer.queue_name)
            return False
        except Exception:  # a bug in the consumer: its messages reappear after their timeout
            log.exception("event_loop_consumer_failed", queue=self.consumer.queue_name)
            return False
        return self.consumer.cancelled_at_stop == 0

    def finish(self) -> None:
        """After the drain: cancel what outlived it, ``on_stop``, ``shutdown`` on the same loop,
        then close the store's connections there and the loop (errors logged, not raised)."""
        wind_down(
            self.worker,
            self.loop,
            started_up=self.started_up,
            on_stop_failed="worker_on_stop_failed",
            queue=self.consumer.queue_name,
            worker=self.name,
        )
        try:
            self.loop.run(self.storage.aclose())
        except Exception:
            log.exception("event_loop_store_not_closed", queue=self.consumer.queue_name)
        self.loop.close()

    def live_state(self, cost: QueueCost, queue: str) -> QueueLiveState:
        """What ``cloudqueue status`` shows of its ``queue``, from its counters and its
        handlers' progress reports (no storage call); its tasks are shared by its queues, as a
        listener's threads are."""
        counts, consumer = self.consumer.counters_of(queue), self.consumer
        active = consumer.active_tasks
        self.peak_tasks = max(self.peak_tasks, active)
        return QueueLiveState(
            queue=queue,
            active_threads=active,
            peak_threads=self.peak_tasks,
            processed=counts["processed"],
            failed=counts["failed"],
            poisoned=counts["poisoned"],
            dequeue_errors=consumer.counters.dequeue_errors,
            in_flight=counts["in_flight"],
            per_thread_rate_per_s=None,
            storage_transactions_per_hour=cost.storage_transactions_per_hour,
            projected_cost_per_month_usd=cost.projected_cost_per_month_usd,
            cost_counted_s=None
            if cost.storage_transactions_per_hour is not None
            else cost.counted_s,
            # A consumer of one queue holds only its messages (a partition's name included).
            progress=tuple(
                r
                for r in consumer.progress_reports()
                if len(consumer.queue_names) == 1 or r.queue == queue
            ),
        )

    async def _serve(self, watchdog_s: float | None) -> None:
        beside = [] if self.beat is None else [self.beat()]
        beside += [] if watchdog_s is None else [self._watch(watchdog_s)]
        if self.depth_refresh_s is not None:
            beside.append(refresh_loop_depth(self.consumer, self.depth_refresh_s))
        watching = [asyncio.create_task(side) for side in beside]
        try:
            await self.consumer.run()
        finally:
            for task in watching:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _watch(self, interval_s: float) -> None:
        """While no task fetches, count the queue every ``interval_s``; wake on a backlog."""
        queue = self.consumer.queue_name
        while True:
            await asyncio.sleep(interval_s)
            if self.consumer.active_tasks > 0:
                continue
            try:
                depth = await self.storage.approximate_message_count(queue)
            except StorageError as failure:
                log.warning("watchdog_check_failed", queue=queue, error=str(failure))
                continue
            if depth > 0:
                log.info("watchdog_woke", queue=queue, depth=depth)
                self.consumer.wake()


def _name(worker: QueueWorker[Any]) -> str:
    kind = type(worker)
    return f"{kind.__module__}:{kind.__qualname__}"


def partial_wake(worker: LoopWorker, account: str) -> Any:
    """The trigger observer of ``worker``: a wake for each event naming its queue."""

    def on_event(event: WorkDetected) -> None:
        if any(event.matches(account, queue) for queue in worker.queue_names):
            worker.wake()

    return on_event


def host_loop_worker(
    worker: QueueWorker[Any],
    settings: CloudQueueSettings,
    meter: MeteredStorage,
    payloads: PayloadStore | None = None,
    parts: HostParts | None = None,
    *,
    triggers: TriggerChannel | None = None,
    listening: QueueStorage | None = None,
) -> LoopWorker:
    """The worker's consumer on a loop of its own, over the awaitable side of the store that
    ``meter`` counts, with the host's ``payloads`` (large items) and the middleware a threaded
    listener would have (``seam``), its chain step announcing what it puts on ``triggers``; its
    partitions as the host's ``listening`` storage lays them out; ConfigurationError when the
    worker cannot run there (``loop_checks``)."""
    options = settings.listener
    controls = controls_for(type(worker), settings)
    storage: AsyncQueueStorage = MeteredAsyncStorage(async_storage_for(meter.inner), meter)
    if isinstance(listening, PartitionedQueueStorage):  # its queues may be partitioned
        storage = AsyncPartitionedStorage.beside(listening, storage)
    parts = parts or HostParts()
    observability = parts.observability
    if observability is not None:  # signs of life and reachability, as a listener's storage
        storage = observability.observe_async_storage(storage)
    location = worker.location(options.visibility_timeout_s, options.priority_policy())
    # The middleware's own storage calls (group ledgers, completions, results, a chain's puts)
    # are the threaded store's: the seam runs them off the loop (``event_loop.stack``).
    chain = chain_step_for(type(worker), meter, settings, parts.key_ledger, triggers)
    results = keep_results_for(worker, meter)
    middleware = worker_middleware(
        worker, settings, meter, location, controls, parts=parts, results=results, chain=chain
    )
    consumer: AsyncConsumer[Any] = AsyncConsumer(
        storage,
        location.queue_name,
        loop_handler(worker, settings, results, chain),
        reading_codec(
            worker.item_type, options.encoding, max_json_depth=settings.decoding.max_json_depth
        ),
        scaling=settings.scaling_policy(),
        delivery=controls.delivery,
        concurrency=controls.concurrency,
        batch_size=options.dequeue_batch_size,
        visibility_timeout_s=options.visibility_timeout_s,
        time_limit_s=controls.time_limit_s,
        grace_s=settings.shutdown_grace_s,
        max_error_delay_s=options.max_error_delay_s,
        limits=settings.decoding.limits(),
        middleware=middleware,
        payload_store=payloads,
        key=worker.key_function(),
        create_queues=options.create_queues,
        lower_queues=location.lower_queues,
        priority=location.priority,
        blocked_after_s=options.loop_blocked_after_s,
    )
    loop = LoopThread(f"cloudqueue:{consumer.queue_name}:event-loop")
    beat, depth_refresh_s = None, None
    if observability is not None:
        beat = observability.watch_loop(consumer, settings.scaling_policy().min_threads)
        depth_refresh_s = settings.scaling.depth_refresh_s
    return LoopWorker(
        worker,
        settings,
        consumer,
        storage,
        loop,
        completion=completion_in(middleware),
        results=results,
        beat=beat,
        depth_refresh_s=depth_refresh_s,
    )


__all__ = ["LoopWorker", "host_loop_worker"]
