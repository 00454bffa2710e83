"""The metric families a worker process exports, named after Prometheus conventions.

Counters that the listener already keeps (``ListenerCounters``) are not counted twice on the hot
path: ``sample`` adds what they grew by since the last sample. Storage calls, handler times and
scaling decisions are recorded as they happen by the decorators in ``observed``.

Under a supervisor each child writes its values to ``PROMETHEUS_MULTIPROC_DIR`` and the parent
serves them all (``multiprocess``); the gauges' ``multiprocess_mode`` says how children combine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

HANDLE_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
PICKUP_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
"""Waiting in a queue takes longer than handling: its buckets reach an hour."""

CONTROL_DECISIONS = ("time_limit", "give_up", "batch_partial")
"""The ``decision`` label of ``cloudqueue_control_decisions`` (``observed.control_decision``)."""

OUTCOMES = {
    "processed": "processed",
    "retried": "failed",
    "poisoned": "poisoned",
    "delayed": "delay_hops",
}
"""The ``outcome`` label and the ``ListenerCounters`` field it follows (``delayed``: hidden
again unhandled, not due yet: the hops of delays beyond 7 days)."""


class WorkerMetrics:
    """Every metric of one worker process, registered in its own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.messages = Counter(
            "cloudqueue_messages",
            "Messages settled, by outcome (retried counts failed deliveries).",
            ["queue", "outcome"],
            registry=r,
        )
        self.message_decisions = Counter(
            "cloudqueue_message_decisions",
            "Decisions of the key controls, by name: duplicate_skipped, cancelled, "
            "cancel_too_late, key_busy (a message deferred while its key is busy).",
            ["queue", "decision"],
            registry=r,
        )
        self.storage_operations = Counter(
            "cloudqueue_storage_operations",
            "Storage calls made (each is a billed transaction on Azure): queue operations, and "
            "the blob calls of large payloads (payload_blob) and key records (key_record_blob).",
            ["queue", "operation"],
            registry=r,
        )
        self.dequeue_threads = Gauge(
            "cloudqueue_dequeue_threads",
            "Dequeue threads active now.",
            ["queue"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.queue_depth = Gauge(
            "cloudqueue_queue_depth",
            "Messages in the queue: visible at the last count or empty get (its age is "
            "cloudqueue_queue_depth_age_seconds), and in flight here now.",
            ["queue", "kind"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.queue_depth_age = Gauge(
            "cloudqueue_queue_depth_age_seconds",
            "Seconds since the visible depth was measured (a count, or a get that found none).",
            ["queue"],
            registry=r,
            multiprocess_mode="livemin",
        )
        self.target_threads = Gauge(
            "cloudqueue_target_threads",
            "The thread count the scaling rule steers the pool to, for the visible depth and "
            "the pool now.",
            ["queue"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.handle_seconds = Histogram(
            "cloudqueue_handle_seconds",
            "Time a handler took for one item.",
            ["queue"],
            buckets=HANDLE_BUCKETS_S,
            registry=r,
        )
        self.pickup_seconds = Histogram(
            "cloudqueue_pickup_seconds",
            "Time from a message's insertion to the start of its handler.",
            ["queue"],
            buckets=PICKUP_BUCKETS_S,
            registry=r,
        )
        self.scaling_decisions = Counter(
            "cloudqueue_scaling_decisions",
            "Scaling decisions that changed the pool, by direction and scaling rule.",
            ["queue", "direction", "rule"],
            registry=r,
        )
        self.control_decisions = Counter(
            "cloudqueue_control_decisions",
            "Messages a handler control decided about: time_limit (a delivery stopped at "
            "listener.time_limit_s), give_up (poisoned at once by the worker's Retry), "
            "batch_partial (retried alone from a batch that raised BatchFailed), retry_later "
            "(hidden for the delay its handler asked for by raising RetryLater).",
            ["queue", "decision"],
            registry=r,
        )
        self.stuck_threads = Gauge(
            "cloudqueue_stuck_threads",
            "Handler threads still running past listener.time_limit_s (their messages were "
            "released).",
            ["queue"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.job_runs = Counter(
            "cloudqueue_job_runs",
            "Ticks of periodic jobs this process fired, by how the run ended (skipped: a tick "
            "that came while the previous run went on).",
            ["job", "outcome"],
            registry=r,
        )
        self.live = Gauge(
            "cloudqueue_live",
            "1 while this process's /healthz is green (the supervisor reads its children's).",
            registry=r,
            multiprocess_mode="livemin",
        )
        self.ready = Gauge(
            "cloudqueue_ready",
            "1 while this process's /readyz is green (the supervisor reads its children's).",
            registry=r,
            multiprocess_mode="livemin",
        )
        self._sampled: dict[tuple[str, str], int] = {}
        """What each counter had reached at the last sample, by (queue, outcome)."""
        self._sampled_storage: dict[tuple[str, str], int] = {}
        self._sampled_job_runs: dict[tuple[str, str], int] = {}

    def sample_counters(self, queue: str, totals: Mapping[str, int]) -> None:
        """Add what a listener's counters on ``queue`` (``counters_of``) grew by since the last
        sample."""
        for outcome, field in OUTCOMES.items():
            now = totals[field]
            grew = now - self._sampled.get((queue, outcome), 0)
            if grew > 0:
                self.messages.labels(queue, outcome).inc(grew)
                self._sampled[queue, outcome] = now

    def sample_storage(self, counts: dict[tuple[str, str], int]) -> None:
        """Add what the host's storage call counts (by queue, operation) grew by."""
        for (queue, operation), now in counts.items():
            grew = now - self._sampled_storage.get((queue, operation), 0)
            if grew > 0:
                self.storage_operations.labels(queue, operation).inc(grew)
                self._sampled_storage[queue, operation] = now

    def sample_job_runs(self, job: str, runs: Mapping[str, int]) -> None:
        """Add what a job's run counts (by outcome) grew by since the last sample."""
        for outcome, now in runs.items():
            grew = now - self._sampled_job_runs.get((job, outcome), 0)
            if grew > 0:
                self.job_runs.labels(job, outcome).inc(grew)
                self._sampled_job_runs[job, outcome] = now

    def declare(self, queue: str, rule: str) -> None:
        """Show a queue's series at zero from the start, so rates need no first event."""
        for outcome in OUTCOMES:
            self.messages.labels(queue, outcome)
        for direction in ("up", "down"):
            self.scaling_decisions.labels(queue, direction, rule)
        self.handle_seconds.labels(queue)
        self.pickup_seconds.labels(queue)
        for decision in CONTROL_DECISIONS:
            self.control_decisions.labels(queue, decision)
        self.stuck_threads.labels(queue)

    def __repr__(self) -> str:
        families: list[Any] = list(self.registry.collect())
        return f"WorkerMetrics(families={len(families)})"
