"""The discrete-event simulator: a listener's dequeue loop in virtual time, with its real policies.

Each simulated dequeue thread repeats what ``CloudQueueListener`` does: take the next fetched
message from the hand-off or get a batch (``fetch_size``), report an empty get to the scaler's
``on_queue_empty`` (or the fixed interval), work detected after an idle spell to
``on_queue_work_detected``, each stretch of work to ``ThroughputMeter`` and
``on_batch_processed``. The scaler is the real ``ElasticScaler`` (CPU guard off: a simulation
has no CPU), bound to this simulated pool through ``PoolControl``; push triggers call its
``on_trigger`` and the watchdog is the real ``Watchdog.check``. Change a policy and the
simulation changes with it.

Failed deliveries (``ServiceModel.failure_rate``) follow the real delivery policy:
``retry_visibility_s`` hides them for the retry back-off, ``exhausted`` poisons them (a put to the
poison queue and a delete).

Storage answers each call after ``ServiceModel.request_latency_s``; with ``storage_calls_per_s``
set it answers one call at a time at that rate, so a burst's deletes wait for it (as on an
emulator; Azure serves 2,000 messages/s on one queue).

Not modelled: visibility renewals (handlers are assumed shorter than half the visibility
timeout), batched messages, the rate limiter, and the producer's puts (they
cost the same under every policy, so they are left out of the comparison).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

import structlog

from listener.consumer.dequeue import STRETCH_S
from listener.consumer.events import QueueEmptyDecision
from listener.consumer.handoff import fetch_size
from listener.consumer.pool_control import ListenerLoad, ScalingHooks
from listener.consumer.throughput import ThroughputMeter
from listener.errors import ConfigurationError
from listener.policies.delivery import exhausted, retry_visibility_s
from listener.scaling.scaler import ElasticScaler
from listener.scaling.waker import Watchdog
from listener.simulation.policies import PolicySpec
from listener.simulation.queue import SimulatedMessage, SimulatedQueue
from listener.simulation.report import PolicyResult, Sample, ServiceModel
from listener.simulation.workload import Workload
from listener.testing import START

_ARRIVAL, _THREAD, _SAMPLE, _WATCHDOG = 0, 1, 2, 3
"""Event kinds, in the order they run at one instant: puts first, charts last."""

SIMULATED_QUEUE = "simulated"
_DELETE_DUE = "delete due"
"""Marks a handled message whose delete has yet to be asked of a limited storage service."""


QUIET_SCALER_LOG = structlog.wrap_logger(
    None, wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING)
)
"""A simulated day scales thousands of times: its scaler keeps warnings only. Its own logger,
not a global setting, so the process's other threads keep logging as configured."""


@dataclass(slots=True)
class _Thread:
    """One simulated dequeue thread's loop state (as the listener's ``_LoopState``)."""

    number: int
    idle_count: int = 0
    stretch_started: float | None = None
    stretch_handled: int = 0
    wake_generation: int = 0
    idle_waiting: bool = False
    retire_at_wake: bool = False


@dataclass(slots=True)
class _Stats:
    latencies_s: list[float] = field(default_factory=list)
    longest_to_done_s: float | None = None
    thread_seconds: float = 0.0
    peak_threads: int = 0
    handled: int = 0
    failed: int = 0
    poisoned: int = 0
    samples: list[Sample] = field(default_factory=list)


class _SimClock:
    """The scaler's clock: virtual seconds from the start."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def monotonic(self) -> float:
        return 1_000.0 + self.now_s

    def now(self) -> datetime:
        return START + timedelta(seconds=self.now_s)


class _NoCpu:
    """A simulation spends no CPU on handlers: the CPU guard never caps scaling."""

    def cores_used(self) -> float:
        return 0.0


class _WatchedListener:
    """What ``Watchdog.check`` reads of a listener: the queue's name and the billed count."""

    def __init__(self, queue: SimulatedQueue) -> None:
        self.queue_name = SIMULATED_QUEUE
        self.storage = self
        self._queue = queue

    def approximate_message_count(self, queue_name: str) -> int:
        return self._queue.approximate_count()


class PolicySimulation:
    """One policy run against one workload; also the ``PoolControl`` its scaler is given."""

    def __init__(
        self,
        spec: PolicySpec,
        workload: Workload,
        service: ServiceModel,
        *,
        seed: int = 1,
        samples: int = 500,
        fast_forward: bool = True,
    ) -> None:
        self.spec = spec
        self.workload = workload
        self.service = service
        self.rng = random.Random(seed)
        # Failures draw from their own source, so every policy meets the same luck.
        self._failures = random.Random(seed + 1)
        self.queue = SimulatedQueue()
        self.clock = _SimClock()
        self.throughput = ThroughputMeter()
        self.stats = _Stats()
        self._fast_forward = fast_forward
        self._events: list[tuple[float, int, int, Any]] = []
        self._sequence = itertools.count()
        self._numbers = itertools.count(1)
        self._threads: dict[int, _Thread] = {}
        self._leaving: set[int] = set()
        self._scale_in_requests = 0
        self._handoff: deque[tuple[SimulatedMessage, int]] = deque()
        self._storage_free_s = 0.0
        self._processing = 0
        self._found_work = False
        self._current: _Thread | None = None
        self._last_change_s = 0.0
        self._depth_since_sample = 0
        self._threads_since_sample = 0
        self._sample_every_s = workload.duration_s / max(1, samples)
        self._next_sample_s = 0.0
        self._hooks: ScalingHooks | None = None
        self._arrival_groups = (
            (time_s, sum(1 for _ in group))
            for time_s, group in itertools.groupby(workload.arrivals_s)
        )
        self._next_arrival_s = float("inf")
        self.scaler: ElasticScaler | None = None
        if spec.scaling is not None:
            self.scaler = ElasticScaler(
                self,
                spec.scaling,
                rng=self.rng,
                clock=self.clock,
                cpu_meter=_NoCpu(),
                logger=QUIET_SCALER_LOG,
            )
        self._watchdog: Watchdog | None = None
        if spec.push:
            if self.scaler is None:
                raise ConfigurationError(f"{spec.name}: push needs a scaling policy to wake")
            # The real watchdog, never started: the simulation calls its check on schedule.
            self._watchdog = Watchdog(
                cast(Any, _WatchedListener(self.queue)),
                self.scaler,
                interval_s=spec.watchdog_interval_s,
            )

    # -- PoolControl ---------------------------------------------------------------------------

    @property
    def queue_name(self) -> str:
        return SIMULATED_QUEUE

    @property
    def active_threads(self) -> int:
        return len(self._threads) - len(self._leaving) - self._scale_in_requests

    def measure_load(self) -> ListenerLoad:
        return ListenerLoad(
            approximate_depth=self.queue.approximate_count(),
            in_flight=self._processing,
            active_threads=self.active_threads,
            per_thread_rate_per_s=self.throughput.per_thread_rate_per_s,
        )

    def start_threads(self, count: int) -> None:
        self._account_threads()
        for _ in range(count):
            thread = _Thread(next(self._numbers))
            self._threads[thread.number] = thread
            self._resume(thread, self.clock.now_s)
        self.stats.peak_threads = max(self.stats.peak_threads, self.active_threads)
        self._threads_since_sample = max(self._threads_since_sample, self.active_threads)

    def reserve_stop(self, floor: int) -> bool:
        if self._current is None or self.active_threads <= floor:
            return False
        self._leaving.add(self._current.number)
        return True

    def request_scale_in(self, count: int, *, floor: int) -> int:
        granted = max(0, min(count, self.active_threads - floor))
        self._scale_in_requests += granted
        return granted

    def wake_idle(self) -> None:
        for thread in self._threads.values():
            if thread.idle_waiting:
                self._wake(thread, self.clock.now_s)

    def bind(self, hooks: ScalingHooks) -> None:
        self._hooks = hooks

    # -- the run -------------------------------------------------------------------------------

    def run(self) -> PolicyResult:
        """Simulate the whole workload; the result of this policy."""
        self._schedule_next_arrival()
        self._schedule(0.0, _SAMPLE, None)
        if self.spec.push:
            self._schedule(self.spec.watchdog_interval_s, _WATCHDOG, None)
        self.start_threads(self.spec.threads)
        end_s = self.workload.duration_s
        while self._events and self._events[0][0] < end_s:
            time_s, kind, _, payload = heapq.heappop(self._events)
            self.clock.now_s = time_s
            self._dispatch(kind, payload)
        self.clock.now_s = end_s
        self._account_threads()
        self._sample()
        return PolicyResult.of(
            self.spec.name, self.workload, self.queue, self.stats, left_in_queue=self.queue.depth
        )

    def _dispatch(self, kind: int, payload: Any) -> None:
        if kind == _ARRIVAL:
            self._arrive(payload)
        elif kind == _THREAD:
            thread, generation, finished = payload
            if thread.number in self._threads and generation == thread.wake_generation:
                thread.idle_waiting = False
                if thread.retire_at_wake:
                    self._retire(thread)
                    return
                if finished is not None and len(finished) == 3:
                    message, receipt, _ = finished
                    answered_s = self._storage_answers_s(self.clock.now_s)
                    self._resume(thread, answered_s, (message, receipt))
                    return
                if finished is not None:
                    self._finish(thread, *finished)
                self._step(thread)
        elif kind == _SAMPLE:
            self._sample()
            self._next_sample_s = self.clock.now_s + self._sample_every_s
            self._schedule(self._next_sample_s, _SAMPLE, None)
        elif self._watchdog is not None:
            if self.active_threads == 0:
                self._watchdog.check()
            self._schedule(self.clock.now_s + self.spec.watchdog_interval_s, _WATCHDOG, None)

    def _schedule_next_arrival(self) -> None:
        group = next(self._arrival_groups, None)
        self._next_arrival_s = float("inf") if group is None else group[0]
        if group is not None:
            self._schedule(group[0], _ARRIVAL, group[1])

    def _arrive(self, count: int) -> None:
        self._schedule_next_arrival()
        for _ in range(count):
            self.queue.put(self.clock.now_s)
        self._depth_since_sample = max(self._depth_since_sample, self.queue.depth)
        if self.spec.push and self.scaler is not None:
            self.scaler.on_trigger()  # as TriggerWaker does for a matching WorkDetected

    # -- one dequeue thread --------------------------------------------------------------------

    def _step(self, thread: _Thread) -> None:
        """Iterations of the dequeue loop, as ``CloudQueueListener._iterate``, until a wait."""
        while True:
            if self._scale_in_requests > 0:
                self._scale_in_requests -= 1
                self._retire(thread)
                return
            now_s = self.clock.now_s
            if thread.stretch_started is None:
                thread.stretch_started = now_s
            if self._handoff:
                self._handle(thread, *self._handoff.popleft())
                return
            messages = self.queue.get(
                now_s,
                max_messages=fetch_size(
                    batch_size=self.spec.batch_size,
                    threads=self.active_threads,
                    per_thread_rate_per_s=self.throughput.per_thread_rate_per_s,
                    visibility_timeout_s=self.spec.visibility_timeout_s,
                ),
                visibility_timeout_s=self.spec.visibility_timeout_s,
            )
            if not messages:
                self._idle(thread, self._storage_answers_s(now_s))
                return
            self._handoff.extend((message, message.pop_receipt) for message in messages)
            if thread.idle_count > 0 or not self._found_work:
                thread.idle_count = 0
                self._found_work = True
                if self._hooks is not None:
                    self._current = thread
                    self._hooks.on_queue_work_detected()
            answered_s = self._storage_answers_s(now_s)
            if answered_s > now_s:
                self._resume(thread, answered_s)
                return

    def _handle(self, thread: _Thread, message: SimulatedMessage, receipt: int) -> None:
        """Start a message now; the thread deletes it and resumes once it is handled."""
        now_s = self.clock.now_s
        if message.dequeue_count == 1:
            self.stats.latencies_s.append(now_s - message.enqueued_s)
        self._processing += 1
        handled_s = now_s + self.service.draw_s(self.rng)
        if self.service.storage_calls_per_s is None:
            self._resume(thread, handled_s + self.service.request_latency_s, (message, receipt))
        else:  # the delete waits its turn at storage: asked for when the handler returns
            self._resume(thread, handled_s, (message, receipt, _DELETE_DUE))

    def _storage_answers_s(self, asked_s: float) -> float:
        """When a storage call asked for at ``asked_s`` returns: after its latency, and with a
        limited service after the calls ahead of it (one at a time, in the order asked)."""
        latency_s = self.service.request_latency_s
        rate = self.service.storage_calls_per_s
        if rate is None:
            return asked_s + latency_s
        starts_s = max(asked_s, self._storage_free_s)
        self._storage_free_s = starts_s + 1.0 / rate
        return max(asked_s + latency_s, self._storage_free_s)

    def _finish(self, thread: _Thread, message: SimulatedMessage, receipt: int) -> None:
        """The handler returned: settle, count the stretch (as ``_handle_one``), go on."""
        self._processing -= 1
        if self._failures.random() < self.service.failure_rate:
            self._after_failure(message, receipt)
        elif self.queue.delete(message, receipt):
            self.stats.handled += 1
            to_done_s = self.clock.now_s - message.enqueued_s
            if self.stats.longest_to_done_s is None or to_done_s > self.stats.longest_to_done_s:
                self.stats.longest_to_done_s = to_done_s
        thread.stretch_handled += 1
        started = thread.stretch_started
        if started is not None and self.clock.now_s - started >= STRETCH_S:
            self._end_stretch(thread, self.clock.now_s)

    def _after_failure(self, message: SimulatedMessage, receipt: int) -> None:
        """As ``MessageProcessor._after_failure``: poison on the last delivery, else retry later."""
        self.stats.failed += 1
        policy = self.spec.delivery
        if exhausted(message.dequeue_count, policy):
            if self.queue.poison(message, receipt):
                self.stats.poisoned += 1
            return
        delay_s = retry_visibility_s(message.dequeue_count, policy, self.rng)
        self.queue.update_visibility(message, receipt, self.clock.now_s, delay_s)

    def _idle(self, thread: _Thread, now_s: float) -> None:
        """An empty get: end the stretch, ask the idle policy, wait or stop."""
        self._end_stretch(thread, self.clock.now_s)
        thread.idle_count += 1
        decision = self._queue_empty(thread)
        if decision.stop:
            self._retire(thread)
            return
        wake_s = now_s + decision.delay_s
        if self._fast_forward and not self._handoff and self.queue.idle_until_put():
            if self._fixed_interval:
                wake_s = self._skip_fixed_polls(thread, wake_s)
            else:
                self._run_idle_polls(thread, wake_s)
                return
        self._resume(thread, wake_s)
        thread.idle_waiting = True

    def _queue_empty(self, thread: _Thread) -> QueueEmptyDecision:
        """The scaler's decision, else the policy's function, else the fixed interval."""
        if self._hooks is not None:
            self._current = thread
            return self._hooks.on_queue_empty(thread.idle_count)
        if self.spec.queue_empty is not None:
            return self.spec.queue_empty(thread.idle_count, self.rng)
        return QueueEmptyDecision(stop=False, delay_s=self.spec.dequeue_interval_s)

    @property
    def _fixed_interval(self) -> bool:
        return self._hooks is None and self.spec.queue_empty is None

    def _horizon_s(self) -> float:
        """Until the next put (or chart sample), an idle thread's gets on an empty queue are
        empty whatever happens elsewhere: nothing else can store a message."""
        return min(self._next_arrival_s, self._next_sample_s, self.workload.duration_s)

    def _skip_fixed_polls(self, thread: _Thread, wake_s: float) -> float:
        """A fixed interval repeats itself exactly: count its empty gets at once; the next wake."""
        horizon_s = self._horizon_s()
        period_s = self.spec.dequeue_interval_s + self.service.request_latency_s
        if period_s <= 0 or wake_s + period_s >= horizon_s:
            return wake_s
        polls = int((horizon_s - wake_s) // period_s)
        self.queue.transactions["get_messages"] += polls
        thread.idle_count += polls
        return wake_s + polls * period_s

    def _run_idle_polls(self, thread: _Thread, wake_s: float) -> None:
        """The empty gets before the horizon, in place: each billed, each asking the policy.

        The same calls in the same order for one thread; with several idle threads only the
        interleaving of their random draws (and which of them stops first) differs.
        """
        horizon_s = self._horizon_s()
        latency_s = self.service.request_latency_s
        while wake_s < horizon_s:
            self.queue.transactions["get_messages"] += 1
            thread.idle_count += 1
            decision = self._queue_empty(thread)
            if decision.stop:
                thread.retire_at_wake = True  # counted as running until that get returns
                break
            wake_s += latency_s + decision.delay_s
        else:
            self._resume(thread, wake_s)
            thread.idle_waiting = True
            return
        self._resume(thread, wake_s + latency_s)

    def _end_stretch(self, thread: _Thread, now_s: float) -> None:
        started, handled = thread.stretch_started, thread.stretch_handled
        thread.stretch_started, thread.stretch_handled = None, 0
        if started is None or handled == 0:
            return
        self.throughput.record(handled, now_s - started)
        if self._hooks is not None:
            self._current = thread
            self._hooks.on_batch_processed()

    def _retire(self, thread: _Thread) -> None:
        self._account_threads()
        del self._threads[thread.number]
        self._leaving.discard(thread.number)
        while not self._threads and self._handoff:
            # The last thread gives unstarted messages back (``MessageProcessor.release``).
            message, receipt = self._handoff.popleft()
            self.queue.update_visibility(message, receipt, self.clock.now_s, 0.0)

    def _wake(self, thread: _Thread, at_s: float) -> None:
        """End an idle wait early (a nudge): the scheduled wake-up is superseded."""
        thread.wake_generation += 1
        thread.idle_waiting = False
        self._resume(thread, at_s)

    def _resume(
        self,
        thread: _Thread,
        at_s: float,
        finished: tuple[SimulatedMessage, int] | tuple[SimulatedMessage, int, str] | None = None,
    ) -> None:
        self._schedule(at_s, _THREAD, (thread, thread.wake_generation, finished))

    # -- bookkeeping ---------------------------------------------------------------------------

    def _schedule(self, at_s: float, kind: int, payload: Any) -> None:
        heapq.heappush(self._events, (at_s, kind, next(self._sequence), payload))

    def _account_threads(self) -> None:
        now_s = self.clock.now_s
        self.stats.thread_seconds += len(self._threads) * (now_s - self._last_change_s)
        self._last_change_s = now_s

    def _sample(self) -> None:
        """The state now, with the highest depth and thread count since the last sample, so a
        short burst between two samples still shows on the chart."""
        self.stats.samples.append(
            Sample(
                time_s=self.clock.now_s,
                depth=max(self.queue.depth, self._depth_since_sample),
                threads=max(self.active_threads, self._threads_since_sample),
                transactions=self.queue.billed,
            )
        )
        self._depth_since_sample = self.queue.depth
        self._threads_since_sample = self.active_threads
