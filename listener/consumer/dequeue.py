"""The loop each dequeue thread runs: take a fetched message or get a batch, hand it on, wait.

Each thread repeats: take the next fetched message from the listener's hand-off, or, when none is
waiting, get a batch (up to 32) with a visibility timeout and put it there -- so one get feeds
every thread and no thread keeps a batch of slow messages to itself. Each message goes to the
processor (``cloudqueue.listener.consumer.processing``) in one of the thread's in-flight slots. An
empty get raises ``QueueEmpty``, whose answer (the scaler's, as a middleware) says how long the
thread waits and whether it stops; a thread that was idle and finds work (and the listener's first
non-empty get) raises ``QueueWorkDetected``. Threads never die from errors: storage outages and
unexpected failures are logged and backed off; only ``stop`` (or a scale-in) ends a thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import structlog

from cloudqueue.listener.clock import Clock, Sleeper
from cloudqueue.listener.consumer.events import (
    BatchProcessed,
    QueueEmpty,
    QueueEmptyDecision,
    QueueWorkDetected,
)
from cloudqueue.listener.consumer.in_flight import InFlight
from cloudqueue.listener.consumer.leases import Lease
from cloudqueue.listener.consumer.loop_parts import LoopParts, LoopSettings
from cloudqueue.listener.policies.backoff import RandomSource, randomized_exponential_backoff
from cloudqueue.listener.stores.storage import QueueMessage

log = structlog.get_logger(__name__)

STRETCH_S = 0.1
"""A thread reports its rate and raises batch_processed after at least this long of work -- after
each message when handling is slower than that. Per-message reports would cost a lock per message,
which stalls fast handlers on several threads."""


@dataclass(slots=True)
class _LoopState:
    """One dequeue thread's streaks: consecutive empty gets and consecutive failures."""

    in_flight: InFlight
    slot_used: bool = False
    """True once the current iteration started a message in its reserved slot."""
    idle_count: int = 0
    error_count: int = 0
    stretch_started: float | None = None
    """When the thread's current stretch of work began (its gets included; idle waits not)."""
    stretch_handled: int = 0


class DequeueLoop:
    """The body of every dequeue thread of one listener, and what they share."""

    def __init__(
        self,
        queue_name: str,
        *,
        settings: LoopSettings,
        parts: LoopParts,
        clock: Clock,
        sleeper: Sleeper,
        rng: RandomSource,
    ) -> None:
        self.queue_name = queue_name
        self.settings = settings
        self.parts = parts
        self.clock = clock
        self.sleeper = sleeper
        self.rng = rng
        self._found_work = False
        self._log = log.bind(queue=self.queue_name)

    def run(self) -> None:
        """A dequeue thread's target: loop until stopped or asked to leave."""
        parts = self.parts
        # Under a time limit a handler runs off the loop even with one slot: an overrunning
        # one then holds that slot until the limit gives it back, never the loop itself.
        inline = self.settings.concurrency == 1 and parts.time_limits is None
        in_flight = InFlight(
            self.settings.concurrency,
            parts.handlers,
            parts.slots_per_thread,
            inline=inline,
            follow_on=self._follow_on,
        )
        try:
            self._loop(_LoopState(in_flight))
        except BaseException:  # pragma: no cover - the loop catches everything it can
            self._log.critical("dequeue_thread_crashed", exc_info=True)
            raise
        finally:
            # A thread leaves (stop or scale-in) only once its own messages are settled.
            in_flight.drain()
            self._retire_current_thread()

    def release(self, leases: list[Lease]) -> None:
        """Un-hide unstarted messages; if that fails they reappear after their timeout anyway."""
        try:
            self.parts.processor.release(leases)
        except Exception as failure:
            self._log.error("release_failed_unexpectedly", count=len(leases), exc_info=failure)
        finally:
            self._end_leases(leases)

    def _loop(self, state: _LoopState) -> None:
        stopping, pool = self.parts.signals.stopping, self.parts.pool
        while not stopping.is_set() and not pool.take_scale_in_request():
            try:
                if self._iterate(state):
                    return
            except Exception:
                # A bug outside the per-message guard: log it, back off, go on. Only stop ends us.
                self._log.error(
                    "dequeue_iteration_failed",
                    consecutive_errors=state.error_count + 1,
                    exc_info=True,
                )
                if self._error_wait(state):
                    return

    def _iterate(self, state: _LoopState) -> bool:
        """Handle the next waiting message, or fetch a batch; True when this thread should end."""
        if state.in_flight.take_failures():
            return self._error_wait(state)
        # The slot first: a message taken from the hand-off is started at once, never held
        # back from the other threads while this one waits for its handlers.
        state.in_flight.reserve()
        try:
            if self.parts.signals.stopping.is_set():  # stopped while waiting for a slot
                return True
            return self._iterate_in_slot(state)
        finally:
            if not state.slot_used:
                state.in_flight.cancel()
            state.slot_used = False

    def _iterate_in_slot(self, state: _LoopState) -> bool:
        if state.stretch_started is None:
            state.stretch_started = self.clock.monotonic()
        lease = self.parts.handoff.take()
        if lease is not None:
            return self._handle_one(lease, state)
        if self.parts.deferrals.full:
            # Enough messages wait for busy keys: fetch no more until one is resumed (a resume
            # nudges the waiting threads).
            return self._idle_wait(self.settings.idle_wait_s)
        try:
            messages = self.parts.fetcher.get_batch()
        except Exception as failure:
            self.parts.meters.counters.add("dequeue_errors")
            self.parts.fetcher.log_failure(failure, state.error_count + 1)
            return self._error_wait(state)
        if not messages:
            return self._after_empty_get(state)
        self._hand_off(messages)
        if state.idle_count > 0 or not self._found_work:
            # Also on the listener's first batch: a listener started on a backlog scales now,
            # not after its first thread has worked through a batch alone.
            state.idle_count = 0
            self._found_work = True
            self.parts.stack.emit(
                "on_queue_work_detected", QueueWorkDetected(self.queue_name, len(messages))
            )
        return False

    def _after_empty_get(self, state: _LoopState) -> bool:
        self._end_stretch(state)  # idle waits are not handling time
        meters = self.parts.meters
        if meters.counters.in_flight == 0:
            # Free news for the figures. Held messages mean work still flows: a count will come
            # (and on a partitioned queue, this get read one partition only).
            meters.known_depth.emptied()
        state.error_count = 0
        state.idle_count += 1
        decision = self._queue_empty(state.idle_count)
        return decision.stop or self._idle_wait(decision.delay_s)

    def _queue_empty(self, idle_count: int) -> QueueEmptyDecision:
        """The deciding middleware's answer (the scaler's), else wait ``idle_wait_s``."""
        event = QueueEmpty(self.queue_name, idle_count, self.parts.pool.active)
        decision = self.parts.stack.queue_empty(event)
        return decision or QueueEmptyDecision(stop=False, delay_s=self.settings.idle_wait_s)

    def _hand_off(self, messages: list[QueueMessage]) -> None:
        leases = self.parts.leases.hold(messages)
        self.parts.meters.counters.add("in_flight", len(leases))
        self.parts.handoff.put(leases)

    def _handle_one(self, lease: Lease, state: _LoopState) -> bool:
        """Process one message and count it in the thread's stretch; True when it should end."""
        parts = self.parts
        if parts.stack.gates:
            # A wait here (a rate limit) is the middleware's, not the thread's: it stays out of
            # the measured throughput; the message's lease is renewed meanwhile.
            waited_from = self.clock.monotonic()
            parts.stack.emit("before_handle", lease.message)
            if state.stretch_started is not None:
                state.stretch_started += self.clock.monotonic() - waited_from
            if parts.signals.stopping.is_set():
                self.release([lease])
                return True
        state.slot_used = True
        task = self._timed_process if state.in_flight.concurrency > 1 else self._process
        if not state.in_flight.start(lambda: task(lease)):
            return self._error_wait(state)
        state.error_count = 0
        state.stretch_handled += 1 + state.in_flight.take_followed()
        started = state.stretch_started
        if started is not None and self.clock.monotonic() - started >= STRETCH_S:
            self._end_stretch(state)
        return False

    def _follow_on(self) -> Callable[[], bool] | None:
        """The next waiting message for a handler thread of this loop that just settled one
        (``InFlight``): none while stopping, or where a middleware gates each start (a rate
        limit waits on the loop, not in a slot)."""
        parts = self.parts
        if parts.stack.gates or parts.signals.stopping.is_set():
            return None
        lease = parts.handoff.take()
        if lease is None:
            return None
        return lambda: self._timed_process(lease)

    def _end_stretch(self, state: _LoopState) -> None:
        """Report the thread's rate over its stretch and raise batch_processed; start anew."""
        state.stretch_handled += state.in_flight.take_followed()
        started, handled = state.stretch_started, state.stretch_handled
        state.stretch_started, state.stretch_handled = None, 0
        if started is None or handled == 0:
            return
        seconds = self.clock.monotonic() - started
        self.parts.meters.throughput.record(handled, seconds)
        self.parts.stack.emit(
            "on_batch_processed", BatchProcessed(self.queue_name, handled, seconds)
        )

    def _error_wait(self, state: _LoopState) -> bool:
        """Back off after a failure; True when the listener is stopping."""
        state.error_count += 1
        state.stretch_started, state.stretch_handled = None, 0  # the back-off is not handling
        delay_s = randomized_exponential_backoff(
            state.error_count,
            delta_s=0.1,
            min_s=0.0,
            max_s=self.settings.max_error_delay_s,
            rng=self.rng,
        )
        return self.sleeper.wait(self.parts.signals.stopping, delay_s)

    def _idle_wait(self, delay_s: float) -> bool:
        """Wait out an idle back-off, or less if nudged; True when the listener is stopping."""
        signals = self.parts.signals
        if self.sleeper.wait(signals.nudge, delay_s) and not signals.stopping.is_set():
            # Nudged by a trigger: poll now. Clearing lets the next idle wait sleep again;
            # threads woken by the same nudge have all returned from their waits by then.
            signals.nudge.clear()
        return signals.stopping.is_set()

    def _process(self, lease: Lease) -> bool:
        """Process one message; False when something raised that the processor did not expect.

        The processor settles every outcome it knows; anything else (a bug in a store or a
        codec) must not end the thread. The lease ends either way, so the message reappears
        when its visibility timeout runs out and is delivered again.
        """
        try:
            self.parts.processor.process(lease)
        except Exception as failure:
            self.parts.meters.counters.add("failed")
            self._log.error(
                "message_failed_unexpectedly", message_id=lease.message.id, exc_info=failure
            )
            return False
        finally:
            if lease.parked:  # deferred: still held, it comes back in line when resumed
                self.parts.deferrals.parked(lease)
            elif not lease.abandoned:  # else its time limit ended it already
                self._end_leases([lease])
        return True

    def _timed_process(self, lease: Lease) -> bool:
        started = self.clock.monotonic()
        succeeded = self._process(lease)
        self.parts.meters.latency.record(1, self.clock.monotonic() - started)
        return succeeded

    def _end_leases(self, leases: list[Lease]) -> None:
        for lease in leases:
            self.parts.leases.end(lease)
        self.parts.meters.counters.add("in_flight", -len(leases))

    def _retire_current_thread(self) -> None:
        parts = self.parts
        remaining = parts.pool.retire_current()
        stopping = parts.signals.stopping.is_set()
        if stopping or remaining == 0:
            # Nobody is left to start the waiting messages: give them back to the queue now.
            waiting = parts.handoff.take_all() + parts.deferrals.take_all()
            if waiting:
                self.release(waiting)
        self._log.info("dequeue_thread_stopped", active=parts.pool.active)
        if remaining == 0 and stopping:
            parts.on_last_thread_stopped()


__all__ = ["STRETCH_S", "DequeueLoop"]
