"""One worker process's metrics and probes, as the host uses them.

A process run alone serves its own endpoint. A child of ``cloudqueue run --processes N`` serves
nothing: prometheus_client writes its values to ``PROMETHEUS_MULTIPROC_DIR`` (set by the
supervisor before the child starts, as multiprocess mode requires), and it reports its probes as
the ``cloudqueue_live`` / ``cloudqueue_ready`` gauges, which the supervisor's endpoint reads.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Coroutine, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from cloudqueue.listener.consumer.event_loop.consumer import AsyncConsumer
from cloudqueue.listener.consumer.listener import CloudQueueListener
from cloudqueue.listener.consumer.middleware import Middleware
from cloudqueue.listener.consumer.pool_control import ListenerLoad
from cloudqueue.listener.scaling.scaler import ScalingPolicy
from cloudqueue.listener.stores.async_storage import AsyncQueueStorage
from cloudqueue.listener.stores.metered import CountsByQueue, MeteredStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers.host.child_slot import CHILD_SLOT_VARIABLE
from cloudqueue.workers.host.job_scheduler import JobScheduler
from cloudqueue.workers.observability.health import (
    Heartbeats,
    ProcessProbes,
    Reachability,
    WatchedPool,
)
from cloudqueue.workers.observability.observed import ObservedHandling, ObservedStorage, rule_target
from cloudqueue.workers.observability.observed_loop import ObservedAsyncStorage, loop_beat
from cloudqueue.workers.settings import CloudQueueSettings

if TYPE_CHECKING:  # prometheus_client and the endpoint: imported when metrics are on (__init__)
    from cloudqueue.workers.observability.metrics import WorkerMetrics
    from cloudqueue.workers.observability.server import ObservabilityServer


class ProcessObservability:
    """Metrics and probes of one worker process, and its endpoint unless a supervisor serves."""

    def __init__(self, settings: CloudQueueSettings, *, serve: bool) -> None:
        # Imported here, when metrics are on: a host without them never imports prometheus.
        from cloudqueue.workers.observability.metrics import WorkerMetrics
        from cloudqueue.workers.observability.server import ObservabilityServer, observability_app

        self.settings = settings.observability
        self.metrics: WorkerMetrics = WorkerMetrics()
        self.heartbeats = Heartbeats()
        self.reachability = Reachability()
        self.probes = ProcessProbes(
            stall_after_s=self.settings.stall_after_s,
            heartbeats=self.heartbeats,
            reachability=self.reachability,
        )
        self._listeners: list[CloudQueueListener[Any]] = []
        self._loops: list[AsyncConsumer[Any]] = []
        """The consumers of workers on the single event loop (``watch_loop``)."""
        self._policies: dict[str, ScalingPolicy] = {}
        self._jobs: list[JobScheduler] = []
        self._metered: MeteredStorage | None = None
        self._blob_counts: dict[str, CountsByQueue] = {}
        self.server: ObservabilityServer | None = None
        if serve and self.settings.metrics_port is not None:
            app = observability_app(self.metrics.registry, self.probes)
            self.server = ObservabilityServer(
                app, host=self.settings.metrics_host, port=self.settings.metrics_port
            )

    @classmethod
    def for_settings(cls, settings: CloudQueueSettings) -> ProcessObservability | None:
        """None when metrics are off; a recorder only in a supervisor's child."""
        if settings.observability.metrics_port is None:
            return None
        return cls(settings, serve=CHILD_SLOT_VARIABLE not in os.environ)

    def count_from(self, metered: MeteredStorage) -> None:
        """Where the storage call counts come from: the process's one meter."""
        self._metered = metered

    def count_blobs_from(self, blobs: Mapping[str, CountsByQueue]) -> None:
        """Blob calls billed beside the queue calls, by operation label
        (``cloudqueue.listener.stores.metered.blob_counts``)."""
        self._blob_counts = dict(blobs)

    def observe_storage(self, storage: QueueStorage) -> QueueStorage:
        """Watch the calls the listeners make (signs of life and reachability)."""
        return ObservedStorage(storage, self.heartbeats, self.reachability)

    def middleware(self, queues: Sequence[str], policy: ScalingPolicy) -> Middleware:
        """The middleware that times a listener's handling (of each of its ``queues``, highest
        priority first) and counts its scaling decisions."""
        for queue in queues:
            self.metrics.declare(queue, policy.rule_name)
        self._policies[queues[0]] = policy
        return ObservedHandling(
            queues[0], policy.rule_name, self.metrics, self.heartbeats, lower_queues=queues[1:]
        )

    def count_decisions(self, queue: str) -> Callable[[str], None]:
        """Counts a middleware's decisions on ``queue`` (``cloudqueue_message_decisions``)."""
        counter = self.metrics.message_decisions

        def count(decision: str) -> None:
            counter.labels(queue, decision).inc()

        return count

    def watch(
        self,
        listener: CloudQueueListener[Any],
        min_threads: int,
        max_stuck_threads: int | None = None,
    ) -> None:
        """Sample the listener's figures and watch its pool (once per hosted worker)."""
        queue = listener.queue_name
        self._listeners.append(listener)
        self.probes.pools = [
            *self.probes.pools,
            WatchedPool(
                queue,
                lambda: listener.threads_alive,
                min_threads,
                lambda: listener.poisoning_failing,
                lambda: listener.stuck_threads,
                listener.stuck_thread_ids,
                max_stuck_threads,
            ),
        ]

    def observe_async_storage(self, storage: AsyncQueueStorage) -> AsyncQueueStorage:
        """Watch the calls a single event loop awaits (signs of life and reachability)."""
        return ObservedAsyncStorage(storage, self.heartbeats, self.reachability)

    def watch_loop(
        self, consumer: AsyncConsumer[Any], min_tasks: int
    ) -> Callable[[], Coroutine[Any, Any, None]]:
        """Sample a single event loop's consumer and watch its dequeue tasks as a pool's
        threads; what to run on its loop beside it: the beat that shows the loop is free."""
        self._loops.append(consumer)
        self.probes.pools = [
            *self.probes.pools,
            WatchedPool(consumer.queue_name, lambda: consumer.active_tasks, min_tasks),
        ]
        return partial(loop_beat, self.heartbeats, self.settings.stall_after_s)

    def watch_jobs(self, schedulers: list[JobScheduler]) -> None:
        """Count the periodic jobs' runs (``cloudqueue_job_runs_total``), each from zero."""
        self._jobs = schedulers
        for scheduler in schedulers:
            self.metrics.job_runs.labels(scheduler.spec.name, "succeeded")

    def start(self) -> None:
        if self.server is not None:
            self.server.start()

    def started(self) -> None:
        self.probes.started = True
        self.sample()

    def draining(self) -> None:
        """Readiness turns red now, before the drain starts."""
        self.probes.draining = True
        self.metrics.ready.set(0)

    def sample(self) -> None:
        """Bring counters and gauges up to date (the host calls this every second)."""
        for listener in self._listeners:
            for queue in listener.queue_names:
                self.metrics.sample_counters(queue, listener.counters_of(queue))
            self.metrics.dequeue_threads.labels(listener.queue_name).set(
                listener.active_dequeue_tasks
            )
            self.metrics.stuck_threads.labels(listener.queue_name).set(listener.stuck_threads)
            known_depth = listener.meters.known_depth
            self._sample_depth(listener.queue_name, listener.known_load(), known_depth.age_s())
        for consumer in self._loops:
            for queue in consumer.queue_names:
                self.metrics.sample_counters(queue, consumer.counters_of(queue))
            queue = consumer.queue_name
            self.metrics.dequeue_threads.labels(queue).set(consumer.active_tasks)
            self.metrics.stuck_threads.labels(queue).set(0)  # cancelled at the limit: none stuck
            self._sample_depth(queue, consumer.known_load(), consumer.depth.known.age_s())
        for scheduler in self._jobs:
            self.metrics.sample_job_runs(scheduler.spec.name, scheduler.runs)
        if self._metered is not None:
            self.metrics.sample_storage(self._metered.counts_by_queue_and_operation())
        for operation, source in self._blob_counts.items():
            counts = source.counts_by_queue()
            self.metrics.sample_storage({(queue, operation): n for queue, n in counts.items()})
        self.metrics.live.set(1 if self.probes.liveness().ok else 0)
        self.metrics.ready.set(1 if self.probes.readiness().ok else 0)

    def _sample_depth(self, queue: str, load: ListenerLoad | None, age_s: float | None) -> None:
        """Depth, its age and the target from a consumer's known depth (``load`` at it, read
        ``age_s`` ago): no storage call."""
        policy = self._policies.get(queue)
        if load is None or age_s is None or policy is None:
            return  # nothing measured yet: no made-up zero
        self.metrics.queue_depth.labels(queue, "visible").set(load.visible_depth)
        self.metrics.queue_depth.labels(queue, "in_flight").set(load.in_flight)
        self.metrics.queue_depth_age.labels(queue).set(age_s)
        self.metrics.target_threads.labels(queue).set(rule_target(load, policy))

    def close(self) -> None:
        self.sample()
        if self.server is not None:
            self.server.close()
