"""Decorators that feed the metrics and probes from a listener's existing seams.

Nothing here edits the dequeue loop: the listener's storage is wrapped by something that records,
then passes each call on unchanged, and a middleware times its handling and counts its scaler's
decisions. Without metrics the host adds neither, so they cost nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from cloudqueue.listener.consumer.events import Scaled
from cloudqueue.listener.consumer.middleware import CallNext, MessageContext, Middleware
from cloudqueue.listener.consumer.pool_control import ListenerLoad
from cloudqueue.listener.consumer.wrapping import Wrapper
from cloudqueue.listener.errors import BatchFailed
from cloudqueue.listener.policies.retry import GIVE_UP_PREFIX
from cloudqueue.listener.scaling.scaler import ScalingPolicy, targets
from cloudqueue.listener.stores.forwarding import ForwardingStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers.observability.health import Heartbeats, Reachability

if TYPE_CHECKING:  # prometheus_client is imported only when metrics are on
    from cloudqueue.workers.observability.metrics import WorkerMetrics

R = TypeVar("R")


class WatchedCalls:
    """Around each storage call (``with``): a sign of life as it starts and ends, and whether
    storage answered it. One serves every thread: the signs are kept per thread."""

    __slots__ = ("_enter", "_leave", "reachability")

    def __init__(self, heartbeats: Heartbeats, reachability: Reachability) -> None:
        self._enter, self._leave = heartbeats.enter, heartbeats.leave
        self.reachability = reachability

    def __enter__(self) -> None:
        self._enter()

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> None:
        self._leave()
        if error is None:
            self.reachability.succeeded()
        else:
            self.reachability.failed(error)


class ObservedStorage(ForwardingStorage):
    """A QueueStorage that shows a sign of life as each call starts and ends, and tracks whether
    storage answers.

    It counts nothing: the host's ``MeteredStorage`` already counts every call by queue and
    operation, and the metrics copy its counts (``WorkerMetrics.sample_storage``).
    """

    def __init__(
        self, inner: QueueStorage, heartbeats: Heartbeats, reachability: Reachability
    ) -> None:
        super().__init__(inner)
        self._watched = WatchedCalls(heartbeats, reachability)

    def _call(self, queue_name: str, operation: str, call: Callable[[], R]) -> R:
        # A thread is silent from here until the call ends, and after it until its next call:
        # one storage call, or one handler call (which shows signs the same way).
        with self._watched:
            return call()

    def __repr__(self) -> str:
        return f"ObservedStorage({self.inner!r}, outage={self._watched.reachability.outage})"


def rule_target(load: ListenerLoad, policy: ScalingPolicy) -> int:
    """The thread count the scaler steers to for this load (grow now, shrink after a delay)."""
    grow, shrink = targets(load, policy)
    if grow > load.active_threads:
        return grow
    return min(shrink, load.active_threads)


class ObservedHandling(Middleware):
    """A listener's handling timed (the handle and pickup histograms), its scaler's decisions
    counted, and a heartbeat as each message starts.

    The depth and target gauges are not set here, from a measure that may be minutes old: the
    process samples them from the listener's known depth (``ProcessObservability.sample``).
    """

    def __init__(
        self,
        queue: str,
        rule_name: str,
        metrics: WorkerMetrics,
        heartbeats: Heartbeats,
        *,
        lower_queues: Sequence[str] = (),
    ) -> None:
        """``lower_queues``: the further queues of a listener on several, each timed apart
        (its scaling decisions are counted under ``queue``, its first)."""
        self._timers = {
            name: (metrics.handle_seconds.labels(name), metrics.pickup_seconds.labels(name))
            for name in (queue, *lower_queues)
        }
        self._first = self._timers[queue]
        self._up = metrics.scaling_decisions.labels(queue, "up", rule_name)
        self._down = metrics.scaling_decisions.labels(queue, "down", rule_name)
        self._enter, self._leave = heartbeats.enter, heartbeats.leave
        self._queue = queue
        self._decisions = metrics.control_decisions

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> Wrapper:
        """A generator (``yield`` for ``call_next()``): no thread hop on the event loop."""
        if not context.deliverable:  # settled without a handler call: nothing to time
            yield
            return
        handle_seconds, pickup_seconds = self._timers.get(context.queue_name, self._first)
        inserted_s = context.message.inserted_on.timestamp()
        pickup_seconds.observe(max(0.0, time.time() - inserted_s))
        started = time.perf_counter()
        self._enter()
        try:
            yield
        finally:
            handle_seconds.observe(time.perf_counter() - started)
            self._leave()

    def after_settle(self, context: MessageContext[Any]) -> None:
        decision = control_decision(context)
        if decision is not None:
            self._decisions.labels(self._queue, decision).inc()

    def on_scaled(self, event: Scaled) -> None:
        (self._up if event.direction == "up" else self._down).inc()


def control_decision(context: MessageContext[Any]) -> str | None:
    """Which handler control decided how the message was settled, if one did (the
    ``decision`` label of ``cloudqueue_control_decisions``)."""
    outcome = context.outcome
    reason = None if outcome is None else outcome.reason
    if reason in ("time_limit", "retry_later"):
        return reason
    if reason is not None and reason.startswith(GIVE_UP_PREFIX):
        return "give_up"
    if any(isinstance(e, BatchFailed) for item in context.failures for e in item.failures):
        return "batch_partial"
    return None
