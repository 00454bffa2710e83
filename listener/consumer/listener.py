"""CloudQueueListener: a pool of dequeue threads that turns a queue into an Rx observable.

Each dequeue thread repeats: take the next fetched message from the listener's hand-off, or, when
none is waiting, get a batch (up to 32) with a visibility timeout and put it there -- so one get
feeds every thread and no thread keeps a batch of slow messages to itself. For each message it
decodes it, delivers its item (or each of its items, one by one, for a message a ``Publisher``
batched) to every observer, and deletes the message only when every observer's ``on_next``
returned for every item. An empty batch raises the ``queue_empty`` hook, which decides how long the
thread waits and whether it stops; a thread that was idle and finds work (and the listener's first
non-empty get) raises ``queue_work_detected``, whose handler may start more threads. Threads never
die from errors: storage outages and unexpected failures are logged and backed off; only ``stop``
ends the pool.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog
from reactivex import Observable, abc
from reactivex.disposable import Disposable

from listener.clock import EVENT_SLEEPER, SYSTEM_CLOCK, Clock, Sleeper
from listener.consumer.depth import KnownDepth
from listener.consumer.handoff import HandOff, fetch_size
from listener.consumer.in_flight import HandlerPool, InFlight, slots_per_loop
from listener.consumer.leases import Lease, LeaseKeeper
from listener.consumer.pool import DequeuePool
from listener.consumer.pool_control import (
    ListenerLoad,
    PoolControl,
    QueueEmptyDecision,
    ScalingHooks,
)
from listener.consumer.processing import MessageProcessor
from listener.consumer.stats import ListenerCounters
from listener.consumer.subscribers import Subscribers
from listener.consumer.throughput import ThroughputMeter
from listener.errors import ConfigurationError, QueueNotFoundError, StorageError
from listener.limits.limiter import RateLimiter
from listener.location import CloudQueueLocation
from listener.poison.admin import poison_queue_name
from listener.policies.backoff import RandomSource, default_rng, randomized_exponential_backoff
from listener.policies.delivery import DeliveryPolicy
from listener.stores.payload_store import PayloadStore
from listener.stores.storage import MAX_BATCH_SIZE, QueueMessage, QueueStorage
from listener.wire.codec import Codec, MessageCodec
from listener.wire.limits import DEFAULT_LIMITS, DecodingLimits

T = TypeVar("T")

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class CloudQueueListenerInfo:
    """A point-in-time view of a listener's load (the seed's QueryState result)."""

    current_queue_depth: int
    """The queue's approximate message count: visible and in-flight messages of every consumer."""
    active_dequeue_tasks: int
    """Dequeue threads running now and not committed to leave."""
    total_dequeue_tasks: int
    """The most dequeue threads ever active at once since the listener was created (the peak,
    as in the seed) -- not a count of threads started over time, nor of those running now."""


QueueEmptyHandler = Callable[["CloudQueueListener[Any]", int], QueueEmptyDecision]
"""Called with the listener and the thread's count of consecutive empty gets."""

QueueWorkDetectedHandler = Callable[["CloudQueueListener[Any]"], None]
"""Called when a dequeue thread that was idle gets messages again, and on the listener's first
non-empty get (so a listener started on a backlog can scale at once)."""

BatchProcessedHandler = Callable[["CloudQueueListener[Any]"], None]
"""Called by a dequeue thread after each stretch of work: every ``STRETCH_S`` of handling, or
every message when handling is slower (the scaler re-evaluates from here)."""


@dataclass(slots=True)
class _LoopState:
    """One dequeue thread's streaks: consecutive empty gets and consecutive failures."""

    in_flight: InFlight
    """The thread's slots for messages being handled."""
    slot_used: bool = False
    """True once the current iteration started a message in its reserved slot."""
    idle_count: int = 0
    error_count: int = 0
    stretch_started: float | None = None
    """When the thread's current stretch of work began (its gets included; idle waits not)."""
    stretch_handled: int = 0


STRETCH_S = 0.1
"""A thread reports its rate and raises batch_processed after at least this long of work -- after
each message when handling is slower than that. Per-message reports would cost a lock per message,
which stalls fast handlers on several threads."""


class CloudQueueListener(Observable[T]):
    """Listens on one queue with an elastic pool of dequeue threads and emits decoded items.

    Threading: ``on_next`` is called on the dequeue thread that took the message -- on a handler
    thread when ``concurrency`` > 1 (``listener.consumer.in_flight``)
    -- so one observer receives items *concurrently* from several threads, and in no guaranteed
    order (queues do not guarantee order either). Observers must be thread-safe; stateful Rx
    operators (``scan``, ``buffer``, ``distinct``...) should be placed after
    ``ops.synchronize()`` or used with a single thread and ``concurrency = 1``. Exceptions
    raised by an observer's ``on_next`` leave the message for redelivery; they are logged and
    never turned into ``on_error`` (which would end the subscription) -- but an exception raised
    inside an operator of a ``pipe`` chain is turned into ``on_error`` by reactivex itself and
    ends that chain, so put fallible work in the final ``subscribe`` callback. ``on_completed``
    is sent once, when the listener has stopped and its last thread has exited.

    Messages sent by a ``Publisher`` may be compressed, batched or kept in a payload store; the
    listener unpacks them transparently. ``payload_store`` is where it fetches stored payloads
    (and deletes them once their message is deleted); without one such messages are poisoned as
    undecodable. A batched message retries only its failed items.
    ``decoding`` bounds the work one message may cost before its items are built (a message
    over a limit is poisoned as ``over_limit``: ``listener.wire.limits``).
    """

    def __init__(
        self,
        storage: QueueStorage,
        location: CloudQueueLocation,
        item_type: type[T],
        *,
        codec: Codec[T] | None = None,
        dequeue_batch_size: int = MAX_BATCH_SIZE,
        dequeue_interval_s: float = 1.0,
        max_error_delay_s: float = 30.0,
        queue_empty: QueueEmptyHandler | None = None,
        queue_work_detected: QueueWorkDetectedHandler | None = None,
        batch_processed: BatchProcessedHandler | None = None,
        delivery: DeliveryPolicy | None = None,
        payload_store: PayloadStore | None = None,
        rate_limiter: RateLimiter | None = None,
        create_queues: bool = True,
        concurrency: int = 1,
        clock: Clock = SYSTEM_CLOCK,
        sleeper: Sleeper = EVENT_SLEEPER,
        rng: RandomSource | None = None,
        decoding: DecodingLimits = DEFAULT_LIMITS,
    ) -> None:
        super().__init__()
        if not 1 <= dequeue_batch_size <= MAX_BATCH_SIZE:
            raise ConfigurationError(f"dequeue_batch_size must be 1..32, got {dequeue_batch_size}")
        if dequeue_interval_s < 0 or max_error_delay_s < 0:
            raise ConfigurationError("dequeue_interval_s and max_error_delay_s must be >= 0")
        if concurrency < 1:
            raise ConfigurationError(f"concurrency must be >= 1, got {concurrency}")
        self.storage = storage
        self.location = location
        self.codec: Codec[T] = codec or MessageCodec(
            item_type, max_json_depth=decoding.max_json_depth
        )
        self.dequeue_batch_size = dequeue_batch_size
        self.dequeue_interval_s = dequeue_interval_s
        self.max_error_delay_s = max_error_delay_s
        self.queue_empty = queue_empty
        self.queue_work_detected = queue_work_detected
        self.batch_processed = batch_processed
        self.clock = clock
        self.sleeper = sleeper
        self.rng: RandomSource = rng or default_rng()
        self.delivery = delivery or DeliveryPolicy()
        self.payload_store = payload_store
        self.rate_limiter = rate_limiter
        self.create_queues = create_queues
        self.concurrency = concurrency
        """Messages each dequeue thread keeps in handling at once ."""
        """False: the queue and its -poison queue exist already, and the credential (a SAS or
        role without the create permission) may not create them, so never try."""
        self.counters = ListenerCounters()
        self.throughput = ThroughputMeter()
        self.latency = ThroughputMeter()
        """Seconds from a message's start to its settlement, measured when several are in flight
        per thread (the scaler's rules size in-flight capacity from it)."""
        self.handler_time = ThroughputMeter()
        """Seconds the observers take on one message, settlement excluded: how many messages a
        thread keeps in flight follows from it (``listener.consumer.in_flight.slots_per_loop``)."""
        self.known_depth = KnownDepth(clock)
        """The visible depth last counted, or 0 after an empty get: the figures read it."""
        self._subscribers: Subscribers[T] = Subscribers()
        self._processor = MessageProcessor(
            storage=storage,
            queue_name=location.queue_name,
            codec=self.codec,
            subscribers=self._subscribers,
            counters=self.counters,
            clock=clock,
            policy=self.delivery,
            rng=self.rng,
            payload_store=payload_store,
            limits=decoding,
            # Only a thread with several slots sizes them from the handlers' time.
            record_handler_time=self.handler_time.record if concurrency > 1 else None,
            create_poison_queue=create_queues,
        )
        self._leases = LeaseKeeper(
            storage,
            location.queue_name,
            location.visibility_timeout_s,
            clock=clock,
            renew=self.delivery.renew_visibility,
        )
        self._pool = DequeuePool(f"cloudqueue:{location.queue_name}")
        self._handoff = HandOff()
        self._handlers = HandlerPool(f"cloudqueue:{location.queue_name}")
        self._found_work = False
        self._scaling: ScalingHooks | None = None
        self._control = _ListenerPoolControl(self)
        self._stopping = threading.Event()
        self._nudge = threading.Event()
        """Set by stop and by wake_idle: ends every idle wait at once."""
        self._queues_ready = False
        self._log = log.bind(queue=location.queue_name)

    @property
    def queue_name(self) -> str:
        return self.location.queue_name

    # -- the seed's contract -------------------------------------------------------------------

    def start_listener(self, thread_count: int) -> None:
        """Start ``thread_count`` more dequeue threads (callable again to add more)."""
        if thread_count <= 0:
            raise ValueError(f"thread_count must be positive, got {thread_count}")
        if self._stopping.is_set():
            raise RuntimeError("the listener has been stopped; create a new one")
        self._ensure_queues()
        active = self._pool.start(thread_count, self._dequeue_task)
        self._log.info("dequeue_threads_started", started=thread_count, active=active)

    def query_state(self) -> CloudQueueListenerInfo:
        """Queue depth (visible and in flight), active threads now, and the most ever active.

        ``total_dequeue_tasks`` is the peak ("most tasks ever active", the seed's meaning); it
        never goes down when the pool shrinks. One storage call (the approximate count).
        """
        depth = self.storage.approximate_message_count(self.queue_name)
        return CloudQueueListenerInfo(
            current_queue_depth=depth,
            active_dequeue_tasks=self._pool.active,
            total_dequeue_tasks=self._pool.peak,
        )

    @property
    def active_dequeue_tasks(self) -> int:
        """Threads running and not committed to leave."""
        return self._pool.active

    @property
    def pool_control(self) -> PoolControl:
        """The narrow interface a scaler is given to grow and shrink this listener's pool."""
        return self._control

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop fetching, let in-flight items finish, and join all threads within one deadline.

        Returns True when every thread has exited. Messages fetched but not yet started are
        released back to the queue at once; anything unfinished simply reappears later.
        """
        self.request_stop()
        deadline = self.clock.monotonic() + timeout_s
        threads = self._pool.threads()
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - self.clock.monotonic()))
        stragglers = [thread.name for thread in threads if thread.is_alive()]
        if not stragglers:
            self._leases.close()
            self._handlers.close()
        if stragglers:
            self._log.warning("dequeue_threads_still_running", threads=stragglers)
            return False
        self._subscribers.complete()
        self._log.info("listener_stopped", processed=self.counters.processed)
        return True

    def slots_per_thread(self) -> int:
        """Messages each dequeue thread keeps in flight now: ``concurrency`` while handlers wait,
        fewer while they return at once (``listener.consumer.in_flight.slots_per_loop``)."""
        return slots_per_loop(self.concurrency, self.handler_time.seconds_per_message)

    @property
    def threads_alive(self) -> int:
        """Dequeue threads still running, including any finishing their last batch."""
        return len(self._pool.threads())

    @property
    def visibility_renewals(self) -> int:
        """How many times a held message's visibility was extended so far."""
        return self._leases.renewals

    @property
    def peak_dequeue_tasks(self) -> int:
        """The most dequeue threads active at once so far (no storage call, unlike query_state)."""
        return self._pool.peak

    def request_stop(self) -> None:
        """Stop fetching without waiting (``stop`` waits); threads finish their current item."""
        self._stopping.set()
        self._nudge.set()

    @property
    def stopped(self) -> bool:
        return self._stopping.is_set()

    @property
    def messages_processed(self) -> int:
        return self.counters.processed

    @property
    def items_processed(self) -> int:
        """Items handled: a batched message counts each of its items."""
        return self.counters.items_processed

    @property
    def messages_failed(self) -> int:
        return self.counters.failed

    @property
    def messages_poisoned(self) -> int:
        return self.counters.poisoned

    @property
    def dequeue_errors(self) -> int:
        return self.counters.dequeue_errors

    @property
    def poisoning_failing(self) -> bool:
        """True from a failed move to the poison queue until a move succeeds (readiness)."""
        return self._processor.poison_mover.failing

    # -- Observable ----------------------------------------------------------------------------

    def _subscribe_core(
        self, observer: abc.ObserverBase[T], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        remove = self._subscribers.add(observer)
        if remove is None:
            observer.on_completed()
            return Disposable()
        return Disposable(remove)

    # -- the dequeue loop ----------------------------------------------------------------------

    def _dequeue_task(self) -> None:
        in_flight = InFlight(self.concurrency, self._handlers, self.slots_per_thread)
        try:
            self._dequeue_loop(in_flight)
        except BaseException:  # pragma: no cover - the loop catches everything it can
            self._log.critical("dequeue_thread_crashed", exc_info=True)
            raise
        finally:
            # A thread leaves (stop or scale-in) only once its own messages are settled.
            in_flight.drain()
            self._retire_current_thread()

    def _dequeue_loop(self, in_flight: InFlight) -> None:
        state = _LoopState(in_flight)
        while not self._stopping.is_set() and not self._pool.take_scale_in_request():
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
            if self._stopping.is_set():  # stopped while this thread waited for a slot
                return True
            return self._iterate_in_slot(state)
        finally:
            if not state.slot_used:
                state.in_flight.cancel()
            state.slot_used = False

    def _iterate_in_slot(self, state: _LoopState) -> bool:
        if state.stretch_started is None:
            state.stretch_started = self.clock.monotonic()
        lease = self._handoff.take()
        if lease is not None:
            return self._handle_one(lease, state)
        try:
            messages = self._get_batch()
        except Exception as failure:
            self.counters.add("dequeue_errors")
            self._log_get_failure(failure, state.error_count + 1)
            return self._error_wait(state)
        if not messages:
            self._end_stretch(state)  # idle waits are not handling time
            if self.counters.in_flight == 0:
                # Free news for the figures. Held messages mean work still flows: a count will
                # come (and on a partitioned queue, this get read one partition only).
                self.known_depth.emptied()
            state.error_count = 0
            state.idle_count += 1
            decision = self._raise_queue_empty(state.idle_count)
            return decision.stop or self._idle_wait(decision.delay_s)
        self._hand_off(messages)
        if state.idle_count > 0 or not self._found_work:
            # Also on the listener's first batch: a listener started on a backlog scales now,
            # not after its first thread has worked through a batch alone.
            state.idle_count = 0
            self._found_work = True
            self._raise_work_detected()
        return False

    def _hand_off(self, messages: list[QueueMessage]) -> None:
        leases = self._leases.hold(messages)
        self.counters.add("in_flight", len(leases))
        self._handoff.put(leases)

    def _handle_one(self, lease: Lease, state: _LoopState) -> bool:
        """Process one message and count it in the thread's stretch; True when it should end."""
        if self.rate_limiter is not None:
            # The message waits its turn here, its lease renewed meanwhile; the wait is the
            # limit's, not the thread's, so it stays out of the measured throughput.
            waited_s = self.rate_limiter.acquire(self._stopping)
            if state.stretch_started is not None:
                state.stretch_started += waited_s
            if self._stopping.is_set():
                self._release([lease])
                return True
        state.slot_used = True
        task = self._timed_process if state.in_flight.concurrency > 1 else self._process
        if not state.in_flight.start(lambda: task(lease)):
            return self._error_wait(state)
        state.error_count = 0
        state.stretch_handled += 1
        started = state.stretch_started
        if started is not None and self.clock.monotonic() - started >= STRETCH_S:
            self._end_stretch(state)
        return False

    def _end_stretch(self, state: _LoopState) -> None:
        """Report the thread's rate over its stretch and raise batch_processed; start anew."""
        started, handled = state.stretch_started, state.stretch_handled
        state.stretch_started, state.stretch_handled = None, 0
        if started is None or handled == 0:
            return
        self.throughput.record(handled, self.clock.monotonic() - started)
        self._raise_batch_processed()

    def _error_wait(self, state: _LoopState) -> bool:
        """Back off after a failure; True when the listener is stopping."""
        state.error_count += 1
        state.stretch_started, state.stretch_handled = None, 0  # the back-off is not handling
        return self.sleeper.wait(self._stopping, self._error_delay_s(state.error_count))

    def _idle_wait(self, delay_s: float) -> bool:
        """Wait out an idle back-off, or less if nudged; True when the listener is stopping."""
        if self.sleeper.wait(self._nudge, delay_s) and not self._stopping.is_set():
            # Nudged by a trigger: poll now. Clearing lets the next idle wait sleep again;
            # threads woken by the same nudge have all returned from their waits by then.
            self._nudge.clear()
        return self._stopping.is_set()

    def _get_batch(self) -> list[QueueMessage]:
        try:
            messages = self.storage.get_messages(
                self.queue_name,
                max_messages=fetch_size(
                    batch_size=self.dequeue_batch_size,
                    threads=self._pool.active,
                    per_thread_rate_per_s=self.throughput.per_thread_rate_per_s,
                    visibility_timeout_s=self.location.visibility_timeout_s,
                ),
                visibility_timeout_s=self.location.visibility_timeout_s,
            )
        except QueueNotFoundError:
            # Someone deleted the queue (or an emulator restarted empty): recreate it next time.
            self._queues_ready = False
            self._ensure_queues()
            raise
        return messages

    def _log_get_failure(self, failure: Exception, error_count: int) -> None:
        if isinstance(failure, StorageError):
            self._log.warning(
                "dequeue_failed",
                error=str(failure),
                kind=type(failure).__name__,
                consecutive_errors=error_count,
            )
        else:
            self._log.error(
                "dequeue_failed_unexpectedly", consecutive_errors=error_count, exc_info=failure
            )

    def _error_delay_s(self, error_count: int) -> float:
        return randomized_exponential_backoff(
            error_count, delta_s=0.1, min_s=0.0, max_s=self.max_error_delay_s, rng=self.rng
        )

    def _process(self, lease: Lease) -> bool:
        """Process one message; False when something raised that the processor did not expect.

        The processor settles every outcome it knows; anything else (a bug in a store or a
        codec) must not end the thread. The lease ends either way, so the message reappears
        when its visibility timeout runs out and is delivered again.
        """
        try:
            self._processor.process(lease)
        except Exception as failure:
            self.counters.add("failed")
            self._log.error(
                "message_failed_unexpectedly", message_id=lease.message.id, exc_info=failure
            )
            return False
        finally:
            self._end_leases([lease])
        return True

    def _timed_process(self, lease: Lease) -> bool:
        started = self.clock.monotonic()
        succeeded = self._process(lease)
        self.latency.record(1, self.clock.monotonic() - started)
        return succeeded

    def _release(self, leases: list[Lease]) -> None:
        """Un-hide unstarted messages; if that fails they reappear after their timeout anyway."""
        try:
            self._processor.release(leases)
        except Exception as failure:
            self._log.error("release_failed_unexpectedly", count=len(leases), exc_info=failure)
        finally:
            self._end_leases(leases)

    def _end_leases(self, leases: list[Lease]) -> None:
        for lease in leases:
            self._leases.end(lease)
        self.counters.add("in_flight", -len(leases))

    def _raise_queue_empty(self, idle_count: int) -> QueueEmptyDecision:
        """Ask the bound scaler, else the queue_empty handler, else wait dequeue_interval_s."""
        try:
            if self._scaling is not None:
                return self._scaling.on_queue_empty(idle_count)
            if self.queue_empty is not None:
                return self.queue_empty(self, idle_count)
        except Exception:
            self._log.exception("queue_empty_handler_failed")
        return QueueEmptyDecision(stop=False, delay_s=self.dequeue_interval_s)

    def _raise_work_detected(self) -> None:
        self._raise_hook(self.queue_work_detected, "queue_work_detected")
        if self._scaling is not None:
            self._raise_hook(_call(self._scaling.on_queue_work_detected), "scaler_work_detected")

    def _raise_batch_processed(self) -> None:
        self._raise_hook(self.batch_processed, "batch_processed")
        if self._scaling is not None:
            self._raise_hook(_call(self._scaling.on_batch_processed), "scaler_batch_processed")

    def _raise_hook(
        self, hook: Callable[[CloudQueueListener[Any]], None] | None, name: str
    ) -> None:
        if hook is None:
            return
        try:
            hook(self)
        except Exception:
            self._log.exception("handler_failed", hook=name)

    def _measure_load(self) -> ListenerLoad:
        load = self._load_at(self.storage.approximate_message_count(self.queue_name))
        self.known_depth.counted(load.visible_depth)
        return load

    def known_load(self) -> ListenerLoad | None:
        """The load now at the last known depth (``known_depth``), without a storage call."""
        reading = self.known_depth.reading()
        if reading is None:
            return None
        return self._load_at(reading.visible + self._held_by_handlers())

    def _held_by_handlers(self) -> int:
        return max(0, self.counters.in_flight - len(self._handoff))

    def _load_at(self, depth: int) -> ListenerLoad:
        return ListenerLoad(
            approximate_depth=depth,
            in_flight=self._held_by_handlers(),
            active_threads=self._pool.active,
            per_thread_rate_per_s=self.throughput.per_thread_rate_per_s,
            message_latency_s=self.latency.seconds_per_message,
            concurrency=self.slots_per_thread(),
        )

    # -- bookkeeping ---------------------------------------------------------------------------

    def _ensure_queues(self) -> None:
        if self._queues_ready or not self.create_queues:
            return
        try:
            self.storage.create_queue(self.queue_name)
            self.storage.create_queue(poison_queue_name(self.queue_name))
        except StorageError as failure:
            self._log.warning("queue_creation_failed", error=str(failure))
            return
        self._queues_ready = True

    def _retire_current_thread(self) -> None:
        remaining = self._pool.retire_current()
        if self._stopping.is_set() or remaining == 0:
            # Nobody is left to start the waiting messages: give them back to the queue now.
            waiting = self._handoff.take_all()
            if waiting:
                self._release(waiting)
        self._log.info("dequeue_thread_stopped", active=self._pool.active)
        if remaining == 0 and self._stopping.is_set():
            self._subscribers.complete()

    def __repr__(self) -> str:
        return (
            f"CloudQueueListener(queue={self.queue_name!r}, active={self.active_dequeue_tasks}, "
            f"counters={self.counters.snapshot()}, stopping={self._stopping.is_set()})"
        )


def _call(event: Callable[[], None]) -> Callable[[CloudQueueListener[Any]], None]:
    """A scaler's event as a hook taking the listener, so one guard serves both kinds."""
    return lambda _: event()


class _ListenerPoolControl:
    """The listener's side of ``PoolControl``: what its scaler may see and do, nothing more."""

    def __init__(self, listener: CloudQueueListener[Any]) -> None:
        self._listener = listener

    @property
    def queue_name(self) -> str:
        return self._listener.queue_name

    @property
    def active_threads(self) -> int:
        return self._listener._pool.active

    def measure_load(self) -> ListenerLoad:
        return self._listener._measure_load()

    def start_threads(self, count: int) -> None:
        # A scaling decision made just before stop() may land after it: a stopping pool stays.
        if not self._listener.stopped:
            self._listener.start_listener(count)

    def reserve_stop(self, floor: int) -> bool:
        return self._listener._pool.reserve_stop(floor)

    def request_scale_in(self, count: int, *, floor: int) -> int:
        return self._listener._pool.request_scale_in(count, floor=floor)

    def wake_idle(self) -> None:
        self._listener._nudge.set()

    def bind(self, hooks: ScalingHooks) -> None:
        if self._listener.queue_empty is not None:
            # Only one of them can decide how long an idle thread waits; never ignore one silently.
            raise ConfigurationError(
                "this listener has its own queue_empty handler; a scaler decides idle waits "
                "itself: use one or the other"
            )
        self._listener._scaling = hooks

    def __repr__(self) -> str:
        return f"PoolControl(queue={self.queue_name!r}, active={self.active_threads})"
