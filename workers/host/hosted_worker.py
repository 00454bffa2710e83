"""One hosted worker: its listener with its middleware and scaler, its handler's event loop, and
the push triggers that wake it; built from its settings, finished when the host stops."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import structlog

from cloudqueue.listener.consumer.listener import CloudQueueListener
from cloudqueue.listener.push.triggers import TriggerChannel
from cloudqueue.listener.scaling.scaler import ElasticScaler
from cloudqueue.listener.scaling.waker import TriggerWaker, Watchdog
from cloudqueue.listener.simulation.profile import ProfileRecorder
from cloudqueue.listener.stores.key_records import KeyLedger
from cloudqueue.listener.stores.payload_store import PayloadStore
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.wire.codec import reading_codec
from cloudqueue.listener.workflows.completion import GroupCompletion
from cloudqueue.listener.workflows.keep_results import KeepResults
from cloudqueue.listener.workflows.result_signals import ResultSignals
from cloudqueue.workers.api.worker import QueueWorker
from cloudqueue.workers.host.async_handler import AsyncHandlerRunner
from cloudqueue.workers.host.batch_handler import Batcher
from cloudqueue.workers.host.chains import chain_step_for
from cloudqueue.workers.host.controls import controls_for, subscribe_handler
from cloudqueue.workers.host.depth_refresh import DepthRefresher
from cloudqueue.workers.host.lifecycle import start_up, wind_down
from cloudqueue.workers.host.process_observability import ProcessObservability
from cloudqueue.workers.host.seam import (
    HostParts,
    completion_in,
    keep_results_for,
    returning_to,
    worker_middleware,
)
from cloudqueue.workers.settings import CloudQueueSettings

log = structlog.get_logger(__name__)


@dataclass
class HostedWorker:
    """One worker with its listener, its effective settings and its handler runner."""

    worker: QueueWorker[Any]
    listener: CloudQueueListener[Any]
    settings: CloudQueueSettings
    runner: AsyncHandlerRunner
    scaler: ElasticScaler
    depth: DepthRefresher
    push: list[TriggerWaker | Watchdog] = field(default_factory=list)
    batcher: Batcher[Any] | None = None
    """Gathers a batch worker's items into ``handle_batch`` calls."""
    results: KeepResults | None = None
    """Keeps its handler's return values (``keep_results``)."""
    completion: GroupCompletion | None = None
    """Counts its messages that are group members, and sends their groups' ``GroupDone``."""
    started_up: bool = False
    """Its ``startup`` returned: ``shutdown`` is due at the end."""

    @property
    def name(self) -> str:
        """``module:Class``, as the command line names the worker."""
        worker_type = type(self.worker)
        return f"{worker_type.__module__}:{worker_type.__qualname__}"

    def start_up(self) -> None:
        """Run the worker's ``startup`` on its handlers' event loop; ``StartupFailedError``
        (logged in one line) when it raises."""
        start_up(self.worker, self.runner.loop, worker=self.name)
        self.started_up = True


def host_worker(
    worker: QueueWorker[Any],
    settings: CloudQueueSettings,
    storage: QueueStorage,
    payload_store: PayloadStore | None,
    observability: ProcessObservability | None = None,
    *,
    recorder: ProfileRecorder | None = None,
    key_ledger: KeyLedger | None = None,
    triggers: TriggerChannel | None = None,
) -> HostedWorker:
    """Build a worker's listener with its middleware, its scaler and its (possibly async)
    handler; ``key_ledger`` serves its idempotency and cancelling; ``triggers`` announce what
    its chain step (``then``) puts."""
    options = settings.listener
    location = worker.location(options.visibility_timeout_s, options.priority_policy())
    policy = settings.scaling_policy()
    controls = controls_for(type(worker), settings)
    if observability is not None:
        storage = observability.observe_storage(storage)
    chain = chain_step_for(type(worker), storage, settings, key_ledger, triggers)
    results = keep_results_for(worker, storage)
    parts = HostParts(observability, recorder, key_ledger)
    middleware = worker_middleware(
        worker, settings, storage, location, controls, parts=parts, results=results, chain=chain
    )
    runner = AsyncHandlerRunner(worker.handle)
    listener: CloudQueueListener[Any] = CloudQueueListener(
        storage,
        location,
        worker.item_type,
        codec=reading_codec(
            worker.item_type,
            options.encoding,
            max_json_depth=settings.decoding.max_json_depth,
        ),
        middleware=middleware,
        dequeue_batch_size=options.dequeue_batch_size,
        max_error_delay_s=options.max_error_delay_s,
        delivery=controls.delivery,
        payload_store=payload_store,
        create_queues=options.create_queues,
        concurrency=controls.concurrency,
        decoding=settings.decoding.limits(),
        loop=runner.loop,
        time_limit_s=controls.time_limit_s,
        adaptive_slots=controls.adaptive_slots,
        key=worker.key_function(),
    )
    if observability is not None:
        # A pool started below its floor grows only on work: liveness holds it to what it had.
        observability.watch(
            listener, min(policy.min_threads, options.threads), options.max_stuck_threads
        )
    scaler = ElasticScaler(listener.pool_control, policy)
    handler = returning_to(runner, results, chain)
    batcher = subscribe_handler(listener, worker, settings, handler=handler, loop=runner.loop)
    depth = DepthRefresher(
        listener, listener.pool_control, refresh_s=settings.scaling.depth_refresh_s
    )
    return HostedWorker(
        worker=worker,
        listener=listener,
        settings=settings,
        runner=runner,
        scaler=scaler,
        depth=depth,
        batcher=batcher,
        results=results,
        completion=completion_in(middleware),
    )


def wake_on_triggers(
    hosted: HostedWorker, channel: TriggerChannel, account: str
) -> list[TriggerWaker | Watchdog]:
    """Wake on triggers; and, as the net under lost triggers, a watchdog at zero threads.
    A worker that keeps results announces them on the same channel."""
    if hosted.results is not None:
        hosted.results.signals = ResultSignals(channel, account=account)
    waker = TriggerWaker(hosted.listener, hosted.scaler, channel, account=account)
    watchdog = Watchdog(
        hosted.listener, hosted.scaler, interval_s=hosted.settings.triggers.watchdog_interval_s
    ).start()
    return [waker, watchdog]


def finish(hosted: HostedWorker) -> None:
    """After the drain: cancel the coroutines that outlived it, call the worker's ``on_stop``,
    then its ``shutdown`` on the same loop, and close the loop (hook errors logged, not raised)."""
    wind_down(
        hosted.worker,
        hosted.runner.loop,
        started_up=hosted.started_up,
        on_stop_failed="worker_on_stop_failed",
        queue=hosted.listener.queue_name,
        worker=hosted.name,
    )
    hosted.runner.close()


__all__ = ["HostedWorker", "finish", "host_worker", "wake_on_triggers"]
