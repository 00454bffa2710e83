"""Decorators that feed the metrics and probes from a listener's existing seams.

Nothing here edits the dequeue loop: the listener's storage, the pool control its scaler is given
and the handler it is subscribed with are each wrapped by something that records, then passes the
call on unchanged. Without metrics the host wraps nothing, so they cost nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from listener.consumer.current import current_envelope
from listener.consumer.pool_control import ListenerLoad, PoolControl, ScalingHooks
from listener.scaling.scaler import ScalingPolicy, targets
from listener.stores.forwarding import ForwardingStorage
from listener.stores.storage import QueueStorage
from workers.observability.health import Heartbeats, Reachability
from workers.observability.metrics import WorkerMetrics

R = TypeVar("R")


class ObservedStorage(ForwardingStorage):
    """A QueueStorage that beats as each call ends and tracks whether storage answers.

    It counts nothing: the host's ``MeteredStorage`` already counts every call by queue and
    operation, and the metrics copy its counts (``WorkerMetrics.sample_storage``).
    """

    def __init__(
        self, inner: QueueStorage, heartbeats: Heartbeats, reachability: Reachability
    ) -> None:
        super().__init__(inner)
        self._beat = heartbeats.beat
        self._reachability = reachability

    def _call(self, queue_name: str, operation: str, call: Callable[[], R]) -> R:
        # One beat as each call ends: a thread is silent from there until its next call ends,
        # which is one handler call (it beats as it starts) or one storage call.
        try:
            result = call()
        except BaseException as error:
            self._reachability.failed(error)
            raise
        finally:
            self._beat()
        self._reachability.succeeded()
        return result

    def __repr__(self) -> str:
        return f"ObservedStorage({self.inner!r}, outage={self._reachability.outage})"


def rule_target(load: ListenerLoad, policy: ScalingPolicy) -> int:
    """The thread count the scaler steers to for this load (grow now, shrink after a delay)."""
    grow, shrink = targets(load, policy)
    if grow > load.active_threads:
        return grow
    return min(shrink, load.active_threads)


class ObservedPool:
    """The PoolControl a scaler is given, counting the decisions that changed the pool.

    The depth and target gauges are not set here, from a measure that may be minutes old: the
    process samples them from the listener's known depth (``ProcessObservability.sample``).
    """

    def __init__(self, inner: PoolControl, policy: ScalingPolicy, metrics: WorkerMetrics) -> None:
        self.inner = inner
        self.policy = policy
        queue = inner.queue_name
        self._up = metrics.scaling_decisions.labels(queue, "up", policy.rule_name)
        self._down = metrics.scaling_decisions.labels(queue, "down", policy.rule_name)

    @property
    def queue_name(self) -> str:
        return self.inner.queue_name

    @property
    def active_threads(self) -> int:
        return self.inner.active_threads

    def measure_load(self) -> ListenerLoad:
        return self.inner.measure_load()

    def start_threads(self, count: int) -> None:
        self.inner.start_threads(count)
        self._up.inc()

    def reserve_stop(self, floor: int) -> bool:
        stopping = self.inner.reserve_stop(floor)
        if stopping:
            self._down.inc()
        return stopping

    def request_scale_in(self, count: int, *, floor: int) -> int:
        removed = self.inner.request_scale_in(count, floor=floor)
        if removed:
            self._down.inc()
        return removed

    def wake_idle(self) -> None:
        self.inner.wake_idle()

    def bind(self, hooks: ScalingHooks) -> None:
        self.inner.bind(hooks)

    def __repr__(self) -> str:
        return f"ObservedPool({self.inner!r})"


def observed_handler(
    handler: Callable[[Any], None], queue: str, metrics: WorkerMetrics, heartbeats: Heartbeats
) -> Callable[[Any], None]:
    """The handler, timed (handle and pickup histograms), beating as it starts."""
    handle_seconds = metrics.handle_seconds.labels(queue)
    pickup_seconds = metrics.pickup_seconds.labels(queue)
    beat = heartbeats.beat

    def handle(item: Any) -> None:
        beat()
        try:
            inserted_s = current_envelope().inserted_on.timestamp()
        except LookupError:  # called outside a listener's delivery (a test calling it directly)
            pass
        else:
            pickup_seconds.observe(max(0.0, time.time() - inserted_s))
        started = time.perf_counter()
        try:
            handler(item)
        finally:
            handle_seconds.observe(time.perf_counter() - started)

    return handle
