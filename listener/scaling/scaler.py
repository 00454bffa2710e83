"""Elastic scaling: the default QueueEmpty, QueueWorkDetected and busy-time rescale handlers.

* **Idle**: each empty get waits a randomized exponential back-off (``idle_delay_s``); once the
  delay has reached ``max_idle_s`` a surplus thread stops, down to ``min_threads`` (one poller, or
  zero when a push trigger can wake the listener).
* **Work detected**: an idle thread that finds work asks the scaling rule for the optimal thread
  count and starts the difference, never past ``max_threads``.
* **Busy**: every ``rescale_interval_s`` while batches flow, the target is re-evaluated; the pool
  grows at once when the backlog grows and shrinks (between batches, never abandoning a message)
  only after the target has stayed below the pool for ``scale_in_delay_s`` -- the hysteresis that
  keeps the count from flapping.
* **CPU-bound**: a scale-up is refused while the process uses ``cpu_saturation_cores`` or more
  (``scaling_capped``), and looked at again after ``rescale_interval_s`` on a timer of its own:
  slow messages that finish rarely must not hold the pool small.

The decisions are pure functions (``idle_delay_s``, ``should_stop_idle``, ``decide``); the
``ElasticScaler`` only measures, applies and logs them, through the listener's ``PoolControl``
(``cloudqueue.listener.consumer.pool_control``), the one thing it is given.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import structlog

from cloudqueue.listener.clock import EVENT_SLEEPER, SYSTEM_CLOCK, Clock, Sleeper
from cloudqueue.listener.consumer.events import QueueEmptyDecision
from cloudqueue.listener.consumer.pool_control import ListenerLoad, PoolControl
from cloudqueue.listener.errors import ConfigurationError, StorageError
from cloudqueue.listener.policies.backoff import (
    RandomSource,
    default_rng,
    randomized_exponential_backoff,
)
from cloudqueue.listener.policies.rate_limit import capped_by_limit
from cloudqueue.listener.policies.scaling_rules import (
    ScalingInput,
    ScalingRule,
    bounded,
    proportional,
    thread_capacity_per_s,
)
from cloudqueue.listener.scaling.cpu import CpuMeter, ProcessCpuMeter

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    """Bounds, back-off curve and timing of elastic scaling."""

    min_threads: int = 1
    max_threads: int = 16
    rule: ScalingRule = field(default_factory=lambda: proportional(32))
    rule_name: str = "proportional"
    delta_backoff_s: float = 0.1
    min_idle_s: float = 0.0
    max_idle_s: float = 1.5
    rescale_interval_s: float = 1.0
    scale_in_delay_s: float = 15.0
    cpu_saturation_cores: float = 0.9
    max_messages_per_s: float | None = None
    """The listener's rate limit: no more threads than it keeps busy (``threads_for_limit``)."""

    def __post_init__(self) -> None:
        if not 0 <= self.min_threads <= self.max_threads or self.max_threads < 1:
            raise ConfigurationError(
                f"need 0 <= min_threads <= max_threads and max_threads >= 1, got "
                f"min_threads={self.min_threads}, max_threads={self.max_threads}"
            )
        if self.min_idle_s < 0 or self.max_idle_s < self.min_idle_s or self.delta_backoff_s <= 0:
            raise ConfigurationError("need 0 <= min_idle_s <= max_idle_s and delta_backoff_s > 0")


def idle_delay_s(idle_count: int, policy: ScalingPolicy, rng: RandomSource) -> float:
    """How long a thread waits after ``idle_count`` consecutive empty gets."""
    return randomized_exponential_backoff(
        idle_count,
        delta_s=policy.delta_backoff_s,
        min_s=policy.min_idle_s,
        max_s=policy.max_idle_s,
        rng=rng,
    )


class _LowestJitter:
    """A random source that always draws the low end: the curve's shortest delays."""

    def uniform(self, a: float, b: float) -> float:
        return a


def idle_delay_floor_s(policy: ScalingPolicy) -> float:
    """The shortest idle wait the policy ever uses: the first, with the jitter at its lowest."""
    return idle_delay_s(1, policy, _LowestJitter())


def should_stop_idle(delay_s: float, active_threads: int, policy: ScalingPolicy) -> bool:
    """An idle thread may stop once its back-off reached the cap and the pool is above its floor."""
    return delay_s >= policy.max_idle_s and active_threads > policy.min_threads


def targets(load: ListenerLoad, policy: ScalingPolicy) -> tuple[int, int]:
    """(grow target from the visible backlog, shrink target from visible + in-flight)."""

    def ask(depth: int) -> int:
        measured = ScalingInput(
            depth,
            load.active_threads,
            load.per_thread_rate_per_s,
            message_latency_s=load.message_latency_s,
            concurrency=load.concurrency,
        )
        wanted = capped_by_limit(
            policy.rule(measured),
            policy.max_messages_per_s,
            per_thread_rate_per_s=thread_capacity_per_s(measured),
        )
        return bounded(wanted, min_threads=policy.min_threads, max_threads=policy.max_threads)

    return ask(load.visible_depth), ask(load.visible_depth + load.in_flight)


@dataclass(frozen=True, slots=True)
class Rescale:
    """A decision: how many threads to add (> 0) or remove (< 0), and why."""

    change: int
    reason: str
    below_since: float | None
    """When the target first fell below the pool (carried between decisions for hysteresis)."""


def decide(
    *,
    active: int,
    grow_target: int,
    shrink_target: int,
    below_since: float | None,
    now: float,
    scale_in_delay_s: float,
) -> Rescale:
    """Grow at once to ``grow_target``; shrink to ``shrink_target`` only after a steady fall."""
    if grow_target > active:
        return Rescale(grow_target - active, "backlog_above_pool", None)
    if shrink_target >= active:
        return Rescale(0, "on_target", None)
    since = now if below_since is None else below_since
    if now - since >= scale_in_delay_s:
        return Rescale(shrink_target - active, "backlog_below_pool", None)
    return Rescale(0, "hysteresis", since)


class ElasticScaler:
    """Grows and shrinks one listener's pool: ``ElasticScaler(listener.pool_control, policy)``.

    It binds itself to the pool's events when made (``PoolControl.bind``); the listener's own
    queue_empty, queue_work_detected and batch_processed handlers are left alone.
    """

    def __init__(
        self,
        pool: PoolControl,
        policy: ScalingPolicy | None = None,
        *,
        rng: RandomSource | None = None,
        clock: Clock = SYSTEM_CLOCK,
        cpu_meter: CpuMeter | None = None,
        logger: Any = None,
        sleeper: Sleeper = EVENT_SLEEPER,
    ) -> None:
        """``logger`` receives the scaling events (default: this module's structlog logger);
        ``sleeper`` waits out the re-check of a capped scale-up."""
        self.policy = policy or ScalingPolicy()
        self._log = log if logger is None else logger
        self.rng = rng or default_rng()
        self.clock = clock
        self.cpu_meter = cpu_meter or ProcessCpuMeter()
        self._lock = threading.Lock()
        self._below_since: float | None = None
        self._poll_lock = threading.Lock()
        self._poll_requested = False
        self._last_rescale = clock.monotonic()
        self.sleeper = sleeper
        self._closed = threading.Event()
        self._recheck_pending = False
        self.pool = pool
        pool.bind(self)

    def close(self) -> None:
        """Cancel a pending re-check (the listener is stopping)."""
        self._closed.set()

    def on_queue_empty(self, idle_count: int) -> QueueEmptyDecision:
        delay = idle_delay_s(idle_count, self.policy, self.rng)
        poll_now = QueueEmptyDecision(stop=False, delay_s=0.0)
        if self._take_poll_request():
            # A trigger arrived since this thread's empty get: look again now rather than stop.
            return poll_now
        if not should_stop_idle(delay, self.pool.active_threads, self.policy):
            return QueueEmptyDecision(stop=False, delay_s=delay)
        with self._lock:
            # Serialized with rescale: a trigger either set its flag before this check, or its
            # rescale measures after this thread has reserved its stop (and starts another).
            if self._take_poll_request():
                return poll_now
            if not self.pool.reserve_stop(self.policy.min_threads):
                return QueueEmptyDecision(stop=False, delay_s=delay)
        self._log_scaled("scaled_down", depth=0, target=self.pool.active_threads, reason="idle")
        return QueueEmptyDecision(stop=True, delay_s=0.0)

    def on_queue_work_detected(self) -> None:
        self.rescale(trigger="work_detected", wait=True)

    def on_batch_processed(self) -> None:
        if self.clock.monotonic() - self._last_rescale >= self.policy.rescale_interval_s:
            self.rescale(trigger="periodic")

    def on_trigger(self, *, trigger: str = "push") -> None:
        """A push trigger (or the watchdog) says there is work: make sure someone looks."""
        with self._poll_lock:
            self._poll_requested = True  # set before measuring: see on_queue_empty
        self.pool.wake_idle()
        self.rescale(trigger=trigger, at_least=1, wait=True)

    def rescale(
        self,
        *,
        trigger: str,
        at_least: int = 0,
        wait: bool = False,
    ) -> None:
        """Measure the load, ask the rule, and grow or shrink the pool (one decision at a time).

        Periodic re-evaluations skip when another decision is under way (it covers them);
        work-detected and trigger decisions wait their turn, so none is lost. ``at_least``
        makes sure that many threads run (a trigger's work must be looked at even when the
        approximate count lags behind the put).
        """
        if not self._lock.acquire(blocking=wait):
            return
        try:
            self._last_rescale = self.clock.monotonic()
            try:
                load = self.pool.measure_load()
            except StorageError as failure:
                self._log.warning("rescale_skipped", queue=self.pool.queue_name, error=str(failure))
                if at_least and self.pool.active_threads < at_least:
                    self.pool.start_threads(at_least - self.pool.active_threads)
                return
            self._apply(load, trigger, at_least)
        finally:
            self._lock.release()

    def _take_poll_request(self) -> bool:
        with self._poll_lock:
            requested, self._poll_requested = self._poll_requested, False
            return requested

    def _apply(self, load: ListenerLoad, trigger: str, at_least: int) -> None:
        grow_target, shrink_target = targets(load, self.policy)
        grow_target = max(grow_target, min(at_least, self.policy.max_threads))
        active = self.pool.active_threads
        decision = decide(
            active=active,
            grow_target=grow_target,
            shrink_target=shrink_target,
            below_since=self._below_since,
            now=self.clock.monotonic(),
            scale_in_delay_s=self.policy.scale_in_delay_s,
        )
        self._below_since = decision.below_since
        if decision.change > 0:
            self._grow(load, active, decision.change, trigger)
        elif decision.change < 0:
            removed = self.pool.request_scale_in(-decision.change, floor=self.policy.min_threads)
            if removed:
                self._log_scaled(
                    "scaled_down",
                    depth=load.visible_depth + load.in_flight,
                    target=active - removed,
                    reason=f"{trigger}:{decision.reason}",
                )

    def _grow(self, load: ListenerLoad, active: int, change: int, trigger: str) -> None:
        cores = self.cpu_meter.cores_used()
        if cores is not None and cores >= self.policy.cpu_saturation_cores:
            self._log.warning(
                "scaling_capped",
                queue=self.pool.queue_name,
                depth=load.visible_depth,
                active=active,
                target=active + change,
                rule=self.policy.rule_name,
                reason="cpu_saturated",
                cpu_cores_used=round(cores, 2),
            )
            self._recheck_later()
            if active > 0:
                return
            change = 1  # never none at all: with no thread, nobody would look at the queue
        self.pool.start_threads(change)
        self._log_scaled(
            "scaled_up",
            depth=load.visible_depth,
            target=active + change,
            reason=f"{trigger}:backlog_above_pool",
        )

    def _recheck_later(self) -> None:
        """Look at a capped scale-up again after ``rescale_interval_s``, whether or not a
        message finishes by then (one re-check pending at a time)."""
        with self._poll_lock:
            if self._recheck_pending or self._closed.is_set():
                return
            self._recheck_pending = True
        threading.Thread(
            target=self._recheck, name=f"cloudqueue:{self.pool.queue_name}:recheck", daemon=True
        ).start()

    def _recheck(self) -> None:
        closed = self.sleeper.wait(self._closed, self.policy.rescale_interval_s)
        with self._poll_lock:
            self._recheck_pending = False  # before rescaling: a decision capped again re-arms
        if not closed and self.pool.active_threads > 0:
            self.rescale(trigger="cpu_recheck", wait=True)  # never skipped: nothing else re-arms it

    def _log_scaled(self, event: str, *, depth: int, target: int, reason: str) -> None:
        self._log.info(
            event,
            queue=self.pool.queue_name,
            depth=depth,
            active=self.pool.active_threads,
            target=target,
            rule=self.policy.rule_name,
            reason=reason,
        )
