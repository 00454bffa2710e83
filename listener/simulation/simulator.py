"""The discrete-event simulator: a listener's dequeue loop in virtual time, with its real policies.

Each simulated dequeue thread repeats what ``CloudQueueListener`` does: take the next fetched
message from the hand-off or get a batch (``fetch_size``), report an empty get to the scaler's
``on_queue_empty`` (or the fixed interval), work detected after an idle spell to
``on_queue_work_detected``, each stretch of work to ``ThroughputMeter`` and
``on_batch_processed``. The scaler is the real ``ElasticScaler`` (CPU guard off: a simulation
has no CPU), bound to the simulated pool (``pool``) through ``PoolControl``; push triggers call
its ``on_trigger`` and the watchdog is the real ``Watchdog.check``. Change a policy and the
simulation changes with it.

The parts: ``timeline`` (the clock and the events), ``pool`` (the threads, as the scaler sees
them), ``storage_line`` (when a storage call returns), ``settlement`` (delete, retry or poison,
as the real delivery policy says) and ``idle_waits`` (idle waits, in long strides when nothing can
arrive).

Not modelled: visibility renewals (handlers are assumed shorter than half the visibility
timeout), batched messages, the rate limiter, and the producer's puts as billed calls (they
cost the same under every policy, so they are left out of the comparison; a limited storage
service still answers them, in turn with the consumer's calls: ``storage_line``).
"""

from __future__ import annotations

import itertools
import random
from collections import deque
from typing import Any, cast

from cloudqueue.listener.consumer.dequeue import STRETCH_S
from cloudqueue.listener.consumer.handoff import fetch_size
from cloudqueue.listener.consumer.throughput import ThroughputMeter
from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.scaling.scaler import ElasticScaler
from cloudqueue.listener.scaling.waker import Watchdog
from cloudqueue.listener.simulation.idle_waits import IdlePolicy
from cloudqueue.listener.simulation.policies import PolicySpec
from cloudqueue.listener.simulation.pool import SimThread, SimulatedPool
from cloudqueue.listener.simulation.queue import SimulatedMessage, SimulatedQueue
from cloudqueue.listener.simulation.report import PolicyResult, Sample, ServiceModel
from cloudqueue.listener.simulation.settlement import Tally, settle
from cloudqueue.listener.simulation.stand_ins import QUIET_SCALER_LOG, NoCpu, WatchedListener
from cloudqueue.listener.simulation.storage_line import StorageLine
from cloudqueue.listener.simulation.timeline import (
    ARRIVAL,
    SAMPLE,
    THREAD,
    WATCHDOG,
    EventQueue,
    SimClock,
)
from cloudqueue.listener.simulation.workload import Workload

_DELETE_DUE = "delete due"
"""Marks a handled message whose delete has yet to be asked of a limited storage service."""

Finished = tuple[SimulatedMessage, int] | tuple[SimulatedMessage, int, str]
"""What a thread resumes with: a message and its receipt, handled (with ``_DELETE_DUE`` when
its delete is still to be asked for)."""


class PolicySimulation:
    """One policy run against one workload."""

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
        self.clock = SimClock()
        self.throughput = ThroughputMeter()
        self.tally = Tally()
        self.pool = SimulatedPool(
            self.queue, self.clock, self.throughput, run=self._resume, wake=self._wake
        )
        self.storage = StorageLine(service)
        self.idle = IdlePolicy(spec, self.pool, self.rng, latency_s=service.request_latency_s)
        self._fast_forward = fast_forward
        self._events = EventQueue()
        self._handoff: deque[tuple[SimulatedMessage, int]] = deque()
        self._found_work = False
        self._depth_since_sample = 0
        self._sample_every_s = workload.duration_s / max(1, samples)
        self._next_sample_s = 0.0
        self._arrival_groups = (
            (time_s, sum(1 for _ in group))
            for time_s, group in itertools.groupby(workload.arrivals_s)
        )
        self._next_arrival_s = float("inf")
        self.scaler, self._watchdog = _scaling(spec, self.pool, self.rng, self.clock, self.queue)

    # -- the run -------------------------------------------------------------------------------

    def run(self) -> PolicyResult:
        """Simulate the whole workload; the result of this policy."""
        self._schedule_next_arrival()
        self._events.schedule(0.0, SAMPLE, None)
        if self.spec.push:
            self._events.schedule(self.spec.watchdog_interval_s, WATCHDOG, None)
        self.pool.start_threads(self.spec.threads)
        end_s = self.workload.duration_s
        while (event := self._events.pop_before(end_s)) is not None:
            self.clock.now_s, kind, payload = event
            self._dispatch(kind, payload)
        self.clock.now_s = end_s
        self.pool.account()
        self._sample()
        self.tally.thread_seconds = self.pool.thread_seconds
        self.tally.peak_threads = self.pool.peak
        return PolicyResult.of(
            self.spec.name, self.workload, self.queue, self.tally, left_in_queue=self.queue.depth
        )

    def _dispatch(self, kind: int, payload: Any) -> None:
        if kind == ARRIVAL:
            self._arrive(payload)
        elif kind == THREAD:
            thread, generation, finished = payload
            if thread.number in self.pool.threads and generation == thread.wake_generation:
                self._thread_event(thread, finished)
        elif kind == SAMPLE:
            self._sample()
            self._next_sample_s = self.clock.now_s + self._sample_every_s
            self._events.schedule(self._next_sample_s, SAMPLE, None)
        elif self._watchdog is not None:
            if self.pool.active_threads == 0:
                self._watchdog.check()
            self._events.schedule(self.clock.now_s + self.spec.watchdog_interval_s, WATCHDOG, None)

    def _thread_event(self, thread: SimThread, finished: Finished | None) -> None:
        """A thread runs again: it leaves, asks for a handled message's delete, or goes on."""
        thread.idle_waiting = False
        if thread.retire_at_wake:
            self._retire(thread)
            return
        if finished is not None and len(finished) == 3:
            message, receipt, _ = finished
            self._resume(thread, self.storage.answers_s(self.clock.now_s), (message, receipt))
            return
        if finished is not None:
            self._finish(thread, finished[0], finished[1])
        self._step(thread)

    def _schedule_next_arrival(self) -> None:
        group = next(self._arrival_groups, None)
        self._next_arrival_s = float("inf") if group is None else group[0]
        if group is not None:
            self._events.schedule(group[0], ARRIVAL, group[1])

    def _arrive(self, count: int) -> None:
        self._schedule_next_arrival()
        for _ in range(count):
            self.queue.put(self.clock.now_s)
            if self.storage.limited:  # a put takes its turn at a limited service too
                self.storage.answers_s(self.clock.now_s)
        self._depth_since_sample = max(self._depth_since_sample, self.queue.depth)
        if self.spec.push and self.scaler is not None:
            self.scaler.on_trigger()  # as TriggerWaker does for a matching WorkDetected

    # -- one dequeue thread --------------------------------------------------------------------

    def _step(self, thread: SimThread) -> None:
        """Iterations of the dequeue loop, as ``CloudQueueListener._iterate``, until a wait."""
        while True:
            if self.pool.take_scale_in_request():
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
                    threads=self.pool.active_threads,
                    per_thread_rate_per_s=self.throughput.per_thread_rate_per_s,
                    visibility_timeout_s=self.spec.visibility_timeout_s,
                ),
                visibility_timeout_s=self.spec.visibility_timeout_s,
            )
            if not messages:
                self._idle(thread, self.storage.answers_s(now_s))
                return
            self._handoff.extend((message, message.pop_receipt) for message in messages)
            if thread.idle_count > 0 or not self._found_work:
                thread.idle_count = 0
                self._found_work = True
                if self.pool.hooks is not None:
                    self.pool.current = thread
                    self.pool.hooks.on_queue_work_detected()
            answered_s = self.storage.answers_s(now_s)
            if answered_s > now_s:
                self._resume(thread, answered_s)
                return

    def _handle(self, thread: SimThread, message: SimulatedMessage, receipt: int) -> None:
        """Start a message now; the thread deletes it and resumes once it is handled."""
        now_s = self.clock.now_s
        if message.dequeue_count == 1:
            self.tally.latencies_s.append(now_s - message.enqueued_s)
        self.pool.processing += 1
        handled_s = now_s + self.service.draw_s(self.rng)
        if not self.storage.limited:
            self._resume(thread, handled_s + self.service.request_latency_s, (message, receipt))
        else:  # the delete waits its turn at storage: asked for when the handler returns
            self._resume(thread, handled_s, (message, receipt, _DELETE_DUE))

    def _finish(self, thread: SimThread, message: SimulatedMessage, receipt: int) -> None:
        """The handler returned: settle, count the stretch (as ``_handle_one``), go on."""
        self.pool.processing -= 1
        settle(
            self.queue,
            message,
            receipt,
            failed=self._failures.random() < self.service.failure_rate,
            now_s=self.clock.now_s,
            policy=self.spec.delivery,
            rng=self.rng,
            tally=self.tally,
        )
        thread.stretch_handled += 1
        started = thread.stretch_started
        if started is not None and self.clock.now_s - started >= STRETCH_S:
            self._end_stretch(thread, self.clock.now_s)

    def _idle(self, thread: SimThread, now_s: float) -> None:
        """An empty get: end the stretch, ask the idle policy, wait or stop."""
        self._end_stretch(thread, self.clock.now_s)
        thread.idle_count += 1
        decision = self.idle.decide(thread)
        if decision.stop:
            self._retire(thread)
            return
        wake_s, waiting = now_s + decision.delay_s, True
        if self._fast_forward and not self._handoff and self.queue.idle_until_put():
            horizon_s = min(self._next_arrival_s, self._next_sample_s, self.workload.duration_s)
            wake_s, waiting = self.idle.stride(self.queue, thread, wake_s, horizon_s=horizon_s)
        self._resume(thread, wake_s)
        thread.idle_waiting = waiting

    def _end_stretch(self, thread: SimThread, now_s: float) -> None:
        started, handled = thread.stretch_started, thread.stretch_handled
        thread.stretch_started, thread.stretch_handled = None, 0
        if started is None or handled == 0:
            return
        self.throughput.record(handled, now_s - started)
        if self.pool.hooks is not None:
            self.pool.current = thread
            self.pool.hooks.on_batch_processed()

    def _retire(self, thread: SimThread) -> None:
        self.pool.retire(thread)
        while not self.pool.threads and self._handoff:
            # The last thread gives unstarted messages back (``MessageProcessor.release``).
            message, receipt = self._handoff.popleft()
            self.queue.update_visibility(message, receipt, self.clock.now_s, 0.0)

    def _wake(self, thread: SimThread, at_s: float) -> None:
        """End an idle wait early (a nudge): the scheduled wake-up is superseded."""
        thread.wake_generation += 1
        thread.idle_waiting = False
        self._resume(thread, at_s)

    def _resume(self, thread: SimThread, at_s: float, finished: Finished | None = None) -> None:
        self._events.schedule(at_s, THREAD, (thread, thread.wake_generation, finished))

    def _sample(self) -> None:
        """The state now, with the highest depth and thread count since the last sample, so a
        short burst between two samples still shows on the chart."""
        active = self.pool.active_threads
        self.tally.samples.append(
            Sample(
                time_s=self.clock.now_s,
                depth=max(self.queue.depth, self._depth_since_sample),
                threads=max(active, self.pool.peak_since_sample),
                transactions=self.queue.billed,
            )
        )
        self._depth_since_sample = self.queue.depth
        self.pool.peak_since_sample = active


def _scaling(
    spec: PolicySpec,
    pool: SimulatedPool,
    rng: random.Random,
    clock: SimClock,
    queue: SimulatedQueue,
) -> tuple[ElasticScaler | None, Watchdog | None]:
    """The real scaler for the policy's scaling (bound to ``pool``), and the real watchdog when
    it is pushed (never started: the simulation calls its check on schedule)."""
    if spec.scaling is None:
        if spec.push:
            raise ConfigurationError(f"{spec.name}: push needs a scaling policy to wake")
        return None, None
    scaler = ElasticScaler(
        pool, spec.scaling, rng=rng, clock=clock, cpu_meter=NoCpu(), logger=QUIET_SCALER_LOG
    )
    if not spec.push:
        return scaler, None
    watched = cast(Any, WatchedListener(queue))
    return scaler, Watchdog(watched, scaler, interval_s=spec.watchdog_interval_s)
