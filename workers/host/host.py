"""Hosting workers in a long-lived process: build listeners, run until a signal, drain, exit.

The first SIGTERM/SIGINT stops fetching and lets in-flight items finish within
``shutdown_grace_s``; a second one exits at once. Nothing is lost either way: a message is deleted
only after its handler returned, so anything unfinished reappears after its visibility timeout.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import suppress
from functools import partial
from typing import Any

import structlog

from cloudqueue.listener.clock import SYSTEM_CLOCK
from cloudqueue.listener.consumer.event_loop.consumer import AsyncConsumer
from cloudqueue.listener.consumer.listener import CloudQueueListener
from cloudqueue.listener.push.triggers import WorkDetected, account_of
from cloudqueue.listener.simulation.profile import ProfileRecorder
from cloudqueue.listener.stores.connection import describe_storage
from cloudqueue.listener.stores.key_records import KeyLedger
from cloudqueue.listener.stores.metered import MeteredPayloadStore, MeteredStorage, blob_counts
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.payload_store import PayloadStore
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.stores.tick_ledger import TickLedger
from cloudqueue.workers.api.periodic_job import PeriodicJob
from cloudqueue.workers.api.sending import send_with
from cloudqueue.workers.api.worker import QueueWorker
from cloudqueue.workers.host.child_slot import (
    CHILD_SLOT_VARIABLE,
    RECYCLE_EXIT_CODE,
    STARTUP_FAILED_EXIT_CODE,
)
from cloudqueue.workers.host.cost_meter import CostMeter
from cloudqueue.workers.host.depth_refresh import DepthTicker
from cloudqueue.workers.host.host_keys import HostKeyLedger
from cloudqueue.workers.host.hosted_jobs import HostedJobs
from cloudqueue.workers.host.hosted_worker import finish, host_worker, wake_on_triggers
from cloudqueue.workers.host.key_controls import completes_groups
from cloudqueue.workers.host.lifecycle import StartupFailedError, call_plain_hook
from cloudqueue.workers.host.live_state import LiveStatePublisher
from cloudqueue.workers.host.loop_worker import LoopWorker, host_loop_worker
from cloudqueue.workers.host.partitioning import (
    layout_of,
    partitioned_storage,
    settle_layout,
    worker_queues,
)
from cloudqueue.workers.host.plain_queue import PlainQueueWatch
from cloudqueue.workers.host.process_observability import ProcessObservability
from cloudqueue.workers.host.seam import HostParts
from cloudqueue.workers.host.signal_latch import SignalLatch
from cloudqueue.workers.settings import CloudQueueSettings, ListenerSettings
from cloudqueue.workers.settings.connections import (
    open_payload_store_from_settings,
    open_storage_from_settings,
    open_trigger_channel,
)

log = structlog.get_logger(__name__)

LIVE_STATE_INTERVAL_S = 1.0


class WorkerHost:
    """Runs one listener per worker on a shared storage connection, and the periodic jobs."""

    def __init__(
        self,
        worker_types: list[type[QueueWorker[Any]]],
        settings: CloudQueueSettings,
        *,
        storage: QueueStorage | None = None,
        payload_store: PayloadStore | None = None,
        jobs: Sequence[type[PeriodicJob]] = (),
        tick_ledger: TickLedger | None = None,
        key_ledger: KeyLedger | None = None,
    ) -> None:
        self.settings = settings
        send_with(settings)  # a worker or job here that sends sends where this host reads
        # Jobs are checked (and their ledger opened) before any queue is touched.
        self.jobs = HostedJobs(jobs, settings, ledger=tick_ledger)
        # Every worker's settings are validated before storage is opened or a queue touched.
        prepared = [
            (
                worker_type,
                settings.for_worker(
                    worker_type.settings, source=f"settings of {_name(worker_type)}"
                ),
            )
            for worker_type in worker_types
        ]
        for worker_type in worker_types:
            worker_type.check(_name(worker_type))
        # Counted so that `cloudqueue status --watch` can show what the process costs per hour.
        self.storage = MeteredStorage(storage or open_storage_from_settings(settings))
        # What the host opened it closes; what it was given belongs to the caller.
        self._owned_payload_store: PayloadStore | None = None
        if payload_store is None and storage is None:
            payload_store = open_payload_store_from_settings(settings)
            self._owned_payload_store = payload_store
        # Blob calls for large payloads are billed too: the live cost meter counts them.
        self.payloads = None if payload_store is None else MeteredPayloadStore(payload_store)
        self._live: LiveStatePublisher | None = None
        # Metrics and probes watch the listeners through wrappers; off, nothing is wrapped.
        self.observability = ProcessObservability.for_settings(settings)
        if self.observability is not None:
            # Counted once, by the meter, under the names the listeners' calls use.
            self.observability.count_from(self.storage)
            self.observability.watch_jobs(self.jobs.schedulers)
        record_path = settings.observability.record_path
        self.recorder = None if record_path is None else ProfileRecorder(record_path)
        workers = [(worker_type(), worker_settings) for worker_type, worker_settings in prepared]
        # Before any queue is touched: idempotency without a ledger is refused here.
        chains = any(type(worker).then is not None for worker, _ in workers)
        completions = any(completes_groups(type(worker)) for worker, _ in workers)
        self.keys = HostKeyLedger(
            settings,
            self.storage,
            key_ledger,
            [s for _, s in workers],
            chains=chains,
            completions=completions,
        )
        # Billed beside the queue calls: counted by the live cost and the metrics alike.
        self.blobs = blob_counts(self.payloads, self.keys.ledger)
        if self.observability is not None:
            self.observability.count_blobs_from(self.blobs)
        queues = _queues(workers)
        listening = self.listening = partitioned_storage(self.storage, settings, queues)
        # The further accounts of partitioned queues are opened here: the host closes them.
        self._further_accounts = (
            listening.accounts[1:] if isinstance(listening, PartitionedQueueStorage) else []
        )
        try:
            _settle_layouts(listening, self.storage, queues)
        except BaseException:
            for account in self._further_accounts:
                account.close()
            raise
        self._plain_watches: list[PlainQueueWatch] = []
        # Opened before the workers: a chain step (``then``) announces what it puts on it.
        self.triggers = open_trigger_channel(settings)
        try:
            # A worker with listener.event_loop = "single": its own loop, no listener.
            self.looped: list[LoopWorker] = [
                host_loop_worker(
                    worker,
                    worker_settings,
                    self.storage,
                    self.payloads,
                    HostParts(self.observability, self.recorder, self.keys.ledger),
                    triggers=self.triggers,
                    listening=listening,
                )
                for worker, worker_settings in workers
                if worker_settings.listener.event_loop == "single"
            ]
            self.hosted = [
                host_worker(
                    worker,
                    worker_settings,
                    listening,
                    self.payloads,
                    self.observability,
                    recorder=self.recorder,
                    key_ledger=self.keys.ledger,
                    triggers=self.triggers,
                )
                for worker, worker_settings in workers
                if worker_settings.listener.event_loop == "threads"
            ]
        except BaseException:
            if self.triggers is not None:
                self.triggers.close()
            raise
        self._depths = DepthTicker([hosted.depth for hosted in self.hosted])
        self._recyclable = CHILD_SLOT_VARIABLE in os.environ
        """A supervisor's child, which it replaces when asked (``RECYCLE_EXIT_CODE``)."""

    @property
    def listeners(self) -> list[CloudQueueListener[Any]]:
        return [hosted.listener for hosted in self.hosted]

    @property
    def consumers(self) -> list[AsyncConsumer[Any]]:
        """The event-loop consumers of the workers with ``listener.event_loop = "single"``."""
        return [looped.consumer for looped in self.looped]

    def start(self) -> None:
        """Run every worker's and job's ``startup`` (``StartupFailedError`` when one raises:
        nothing started, call ``stop``), then each worker's on_start and its dequeue threads."""
        for hosted in self.hosted:
            hosted.start_up()
        for looped in self.looped:
            looped.start_up()
        self.jobs.start_up()
        account = account_of(self.settings.connection_string_value())
        completions = [hosted.completion for hosted in self.hosted]
        completions += [looped.completion for looped in self.looped]
        for completion in completions:
            if completion is not None:
                completion.announce = partial(self._work_sent, account)
        for hosted in self.hosted:
            call_plain_hook(hosted.worker.on_start, hosted.listener)
            if self.triggers is not None:
                hosted.push = wake_on_triggers(hosted, self.triggers, account)
            hosted.listener.start_listener(hosted.settings.listener.threads)
        for looped in self.looped:
            looped.start(self.triggers, account=account)
        if isinstance(self.listening, PartitionedQueueStorage):
            read = [q for hosted in self.hosted for q in hosted.listener.queue_names]
            read += [q for looped in self.looped for q in looped.queue_names]
            self._plain_watches = [
                PlainQueueWatch(self.listening, queue).start()
                for queue in read
                if queue not in (p.queue_name for p in self.listening.partitions_of(queue))
            ]
        self.jobs.start()
        self._depths.start()  # started, not only run: a host driven by start/stop too
        if self.observability is not None:
            self.observability.started()
        log.info(
            "host_started",
            queues=[q for hosted in self.hosted for q in hosted.listener.queue_names],
            event_loop_queues=[q for looped in self.looped for q in looped.queue_names],
            jobs=self.jobs.names,
        )

    def _work_sent(self, account: str, queue: str) -> None:
        """This host put a message on ``queue``: wake its own listeners of it, and announce it on
        the trigger channel for the others."""
        for hosted in self.hosted:
            if queue in hosted.listener.queue_names and not hosted.listener.stopped:
                hosted.scaler.on_trigger()
        for looped in self.looped:
            if queue in looped.queue_names:
                looped.wake()
        if self.triggers is not None:
            self.triggers.publish(WorkDetected(account, queue, message_count=1))

    def stop(self) -> bool:
        """Stop all listeners against one deadline, then on_stop and close; True if drained."""
        deadline = SYSTEM_CLOCK.monotonic() + self.settings.shutdown_grace_s
        self._depths.close()
        for watch in self._plain_watches:
            watch.close()
        for hosted in self.hosted:
            for part in hosted.push:
                part.close()
            hosted.scaler.close()
            hosted.listener.request_stop()  # stop fetching everywhere before waiting on any
        for looped in self.looped:
            looped.request_stop()
        self.jobs.request_stop()  # and firing
        drained = [
            hosted.listener.stop(max(0.0, deadline - SYSTEM_CLOCK.monotonic()))
            for hosted in self.hosted
        ]
        drained += [
            looped.stop(max(0.0, deadline - SYSTEM_CLOCK.monotonic())) for looped in self.looped
        ]
        drained.append(self.jobs.stop(deadline))
        for hosted in self.hosted:
            finish(hosted)
        for looped in self.looped:
            looped.finish()
        if self.triggers is not None:
            self.triggers.close()
        self.storage.close()
        for account in self._further_accounts:
            account.close()
        if self.observability is not None:
            self.observability.close()
        if self._owned_payload_store is not None:
            self._owned_payload_store.close()
        self.keys.close()
        if self.recorder is not None:
            self.recorder.close()
        log.info("host_stopped", drained=all(drained))
        return all(drained)

    def refresh_depths(self) -> None:
        """Count the queues whose known depth is stale while work flows (see ``depth_refresh``);
        the host's ticker does so every second between ``start`` and ``stop``."""
        self._depths.tick()

    def _exit_at_once(self, signum: int) -> None:
        """A second SIGTERM/SIGINT, from inside the signal handler: nothing that takes a lock
        (``signal_latch``), so no log line; unfinished messages reappear after their visibility
        timeout."""
        if self._live is not None:
            with suppress(OSError):  # `cloudqueue status` must not show a process that is gone
                self._live.path.unlink(missing_ok=True)
        os._exit(128 + signum)

    def _draining(self, signal_name: str) -> None:
        log.info("shutdown_requested", signal=signal_name, grace_s=self.settings.shutdown_grace_s)
        if self.observability is not None:
            self.observability.draining()  # readiness turns red before the drain starts

    def run(self) -> int:
        """Start, wait for SIGTERM/SIGINT, drain and return the exit code."""
        with SignalLatch(on_second=self._exit_at_once) as signals:
            return self._run_until(signals)

    def _run_until(self, signals: SignalLatch) -> int:
        where = describe_storage(
            self.settings.connection_string_value(), credential=self.settings.credential
        )
        live = self._live = LiveStatePublisher(
            self.settings.state_dir,
            worker=" ".join(
                [
                    *(_name(type(hosted.worker)) for hosted in self.hosted),
                    *(looped.name for looped in self.looped),
                    *self.jobs.names,
                ]
            ),
            storage=where,
        )
        log.info("store_opened", storage=where)
        if self.observability is not None:
            self.observability.start()  # /readyz answers "starting" while workers start
        try:
            self.start()
        except StartupFailedError:
            self.stop()  # the hooks that did start are shut down; no message was taken
            live.remove()
            return STARTUP_FAILED_EXIT_CODE
        meter = CostMeter(
            self.storage,
            self.blobs,
            price_per_10k_usd=self.settings.cost.price_per_10k_transactions_usd,
        )
        self._publish(live, meter)
        # A timed wait keeps the main thread responsive to signals; each wake publishes the
        # live state that `cloudqueue status` shows (a local file: no storage transaction).
        recycling = failed = False
        while not signals.wait(LIVE_STATE_INTERVAL_S):
            self._publish(live, meter)
            if self.observability is not None:
                self.observability.sample()
            if self._recyclable and (recycling := self._too_many_stuck()):
                break  # a fresh process replaces this one: its stuck threads end with it
            if failed := any(looped.ended_early for looped in self.looped):
                break  # a worker fetches no more: exit, for the supervisor to start another
        if signals.first is not None:
            self._draining(signals.first)
        drained = self.stop()
        live.remove()
        if recycling:
            return RECYCLE_EXIT_CODE
        return 0 if drained and not failed else 1

    def _too_many_stuck(self) -> bool:
        """True (and logged) when a worker has more handler threads stuck past its time limit
        than ``listener.max_stuck_threads``."""
        over = {
            hosted.listener.queue_name: hosted.listener.stuck_threads
            for hosted in self.hosted
            if hosted.listener.stuck_threads > hosted.settings.listener.max_stuck_threads
        }
        if over:
            log.error("stuck_threads_recycling", stuck_threads=over)
        return bool(over)

    def _publish(self, live: LiveStatePublisher, meter: CostMeter) -> None:
        live.publish(
            self.listeners,
            transactions=self.storage.transactions,
            meter=meter,
            jobs=self.jobs.states(),
            loop_workers=self.looped,
        )


def _queues(
    workers: list[tuple[QueueWorker[Any], CloudQueueSettings]],
) -> dict[str, ListenerSettings]:
    """Each queue the workers read and its listener settings (which say how it is partitioned)."""
    return {
        queue: listener
        for worker, options in workers
        for queue, listener in worker_queues(type(worker), options.listener).items()
    }


def _settle_layouts(
    listening: QueueStorage, account: QueueStorage, queues: dict[str, ListenerSettings]
) -> None:
    """Check each worker's partition layout against the one recorded in the store, and record
    it: ConfigurationError (exit code 2) when they disagree."""
    accounts = listening.accounts if isinstance(listening, PartitionedQueueStorage) else [account]
    for queue, options in queues.items():
        settle_layout(accounts, queue, layout_of(options), create=options.create_queues)


def _name(worker_type: type[QueueWorker[Any]]) -> str:
    """``module:Class``, as the command line names a worker."""
    return f"{worker_type.__module__}:{worker_type.__qualname__}"
