"""CloudQueueListener: a pool of dequeue threads that turns a queue into an Rx observable.

Each dequeue thread repeats: get a batch (up to 32) with a visibility timeout; for each message,
decode it, deliver its item (or each of its items, one by one, for a message a ``Publisher``
batched) to every observer, and delete the message only when every observer's ``on_next``
returned for every item. An empty batch raises the ``queue_empty`` hook, which decides how long the
thread waits and whether it stops; a thread that was idle and finds work raises
``queue_work_detected``, whose handler may start more threads. Threads never die from errors:
storage outages and unexpected failures are logged and backed off; only ``stop`` ends the pool.
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
from listener.errors import ConfigurationError, QueueNotFoundError, StorageError
from listener.handling import MessageProcessor
from listener.leases import Lease, LeaseKeeper
from listener.location import CloudQueueLocation
from listener.messages.codec import Codec, MessageCodec
from listener.messages.poison import poison_queue_name
from listener.policies.backoff import RandomSource, default_rng, randomized_exponential_backoff
from listener.policies.delivery import DeliveryPolicy
from listener.pool import DequeuePool
from listener.stats import ListenerCounters
from listener.stores.payload_store import PayloadStore
from listener.stores.storage import MAX_BATCH_SIZE, QueueMessage, QueueStorage
from listener.subscribers import Subscribers
from listener.throughput import ThroughputMeter

T = TypeVar("T")

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class CloudQueueListenerInfo:
    """A point-in-time view of a listener's load (the seed's QueryState result)."""

    current_queue_depth: int
    active_dequeue_tasks: int
    total_dequeue_tasks: int


@dataclass(frozen=True, slots=True)
class QueueEmptyDecision:
    """What a queue_empty handler tells the dequeue thread that found the queue empty."""

    stop: bool
    delay_s: float


QueueEmptyHandler = Callable[["CloudQueueListener[Any]", int], QueueEmptyDecision]
"""Called with the listener and the thread's count of consecutive empty gets."""

QueueWorkDetectedHandler = Callable[["CloudQueueListener[Any]"], None]
"""Called when a dequeue thread that was idle gets messages again."""

BatchProcessedHandler = Callable[["CloudQueueListener[Any]"], None]
"""Called by a dequeue thread after each non-empty batch (the scaler re-evaluates from here)."""


@dataclass(frozen=True, slots=True)
class ListenerLoad:
    """What a scaler needs to know, measured at one moment."""

    approximate_depth: int
    """The queue's approximate count: visible and in-flight messages of every consumer."""
    in_flight: int
    """Messages this listener holds (fetched, not yet settled)."""
    active_threads: int
    per_thread_rate_per_s: float | None

    @property
    def visible_depth(self) -> int:
        """An estimate of the messages waiting for a consumer."""
        return max(0, self.approximate_depth - self.in_flight)


class CloudQueueListener(Observable[T]):
    """Listens on one queue with an elastic pool of dequeue threads and emits decoded items.

    Threading: ``on_next`` is called on the dequeue thread that fetched the message, so with
    several threads one observer receives items *concurrently* from several threads, and in no
    guaranteed order (queues do not guarantee order either). Observers must be thread-safe;
    stateful Rx operators (``scan``, ``buffer``, ``distinct``...) should be placed after
    ``ops.synchronize()`` or used with a single thread. Exceptions raised by an observer's
    ``on_next`` leave the message for redelivery; they are logged and never turned into
    ``on_error`` (which would end the subscription) -- but an exception raised inside an operator
    of a ``pipe`` chain is turned into ``on_error`` by reactivex itself and ends that chain, so
    put fallible work in the final ``subscribe`` callback. ``on_completed`` is sent once, when
    the listener has stopped and its last thread has exited.

    Messages sent by a ``Publisher`` may be compressed, batched or kept in a payload store; the
    listener unpacks them transparently. ``payload_store`` is where it fetches stored payloads
    (and deletes them once their message is deleted); without one such messages are poisoned as
    undecodable. A batched message is retried as a whole: see ``listener.handling``.
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
        create_queues: bool = True,
        clock: Clock = SYSTEM_CLOCK,
        sleeper: Sleeper = EVENT_SLEEPER,
        rng: RandomSource | None = None,
    ) -> None:
        super().__init__()
        if not 1 <= dequeue_batch_size <= MAX_BATCH_SIZE:
            raise ConfigurationError(f"dequeue_batch_size must be 1..32, got {dequeue_batch_size}")
        if dequeue_interval_s < 0 or max_error_delay_s < 0:
            raise ConfigurationError("dequeue_interval_s and max_error_delay_s must be >= 0")
        self.storage = storage
        self.location = location
        self.codec: Codec[T] = codec or MessageCodec(item_type)
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
        self.create_queues = create_queues
        """False: the queue and its -poison queue exist already, and the credential (a SAS or
        role without the create permission) may not create them, so never try."""
        self.counters = ListenerCounters()
        self.throughput = ThroughputMeter()
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
        )
        self._leases = LeaseKeeper(
            storage,
            location.queue_name,
            location.visibility_timeout_s,
            clock=clock,
            renew=self.delivery.renew_visibility,
        )
        self._pool = DequeuePool(f"cloudqueue:{location.queue_name}")
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
        """Queue depth (visible and in flight) and the number of dequeue threads now and at most."""
        depth = self.storage.approximate_message_count(self.queue_name)
        return CloudQueueListenerInfo(
            current_queue_depth=depth,
            active_dequeue_tasks=self._pool.active,
            total_dequeue_tasks=self._pool.peak,
        )

    def measure_load(self) -> ListenerLoad:
        """Depth, in-flight messages, active threads and measured rate, for scaling decisions."""
        depth = self.storage.approximate_message_count(self.queue_name)
        return ListenerLoad(
            approximate_depth=depth,
            in_flight=self.counters.in_flight,
            active_threads=self._pool.active,
            per_thread_rate_per_s=self.throughput.per_thread_rate_per_s,
        )

    @property
    def active_dequeue_tasks(self) -> int:
        """Threads running and not committed to leave."""
        return self._pool.active

    def reserve_stop(self, floor: int) -> bool:
        """For queue_empty handlers: may the calling thread stop and leave > ``floor`` running?"""
        return self._pool.reserve_stop(floor)

    def request_scale_in(self, count: int, *, floor: int) -> int:
        """Ask up to ``count`` threads to stop after their current batch; return how many will."""
        return self._pool.request_scale_in(count, floor=floor)

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
        if stragglers:
            self._log.warning("dequeue_threads_still_running", threads=stragglers)
            return False
        self._subscribers.complete()
        self._log.info("listener_stopped", processed=self.counters.processed)
        return True

    def wake_idle(self) -> None:
        """End the back-off waits of idle threads now (a push trigger says work is waiting)."""
        self._nudge.set()

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
    def messages_failed(self) -> int:
        return self.counters.failed

    @property
    def messages_poisoned(self) -> int:
        return self.counters.poisoned

    @property
    def dequeue_errors(self) -> int:
        return self.counters.dequeue_errors

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
        try:
            self._dequeue_loop()
        except BaseException:  # pragma: no cover - the loop catches everything it can
            self._log.critical("dequeue_thread_crashed", exc_info=True)
            raise
        finally:
            self._retire_current_thread()

    def _dequeue_loop(self) -> None:
        idle_count = 0
        error_count = 0
        while not self._stopping.is_set() and not self._pool.take_scale_in_request():
            started = self.clock.monotonic()
            try:
                messages = self._get_batch()
            except Exception as failure:
                error_count += 1
                self.counters.add("dequeue_errors")
                self._log_get_failure(failure, error_count)
                if self.sleeper.wait(self._stopping, self._error_delay_s(error_count)):
                    break
                continue
            error_count = 0
            if not messages:
                idle_count += 1
                decision = self._raise_queue_empty(idle_count)
                if decision.stop or self._idle_wait(decision.delay_s):
                    break
                continue
            if idle_count > 0:
                idle_count = 0
                self._raise_hook(self.queue_work_detected, "queue_work_detected")
            self._process_batch(messages, started)

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
                max_messages=self.dequeue_batch_size,
                visibility_timeout_s=self.location.visibility_timeout_s,
            )
        except QueueNotFoundError:
            # Someone deleted the queue (or an emulator restarted empty): recreate it next time.
            self._queues_ready = False
            self._ensure_queues()
            raise
        self.counters.add("in_flight", len(messages))
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

    def _process_batch(self, messages: list[QueueMessage], started: float) -> None:
        leases = self._leases.hold(messages)
        for position, lease in enumerate(leases):
            if self._stopping.is_set():
                self._processor.release(leases[position:])
                self._end_leases(leases[position:])
                return
            try:
                self._processor.process(lease)
            finally:
                self._end_leases([lease])
        self.throughput.record(len(messages), self.clock.monotonic() - started)
        self._raise_hook(self.batch_processed, "batch_processed")

    def _end_leases(self, leases: list[Lease]) -> None:
        for lease in leases:
            self._leases.end(lease)
        self.counters.add("in_flight", -len(leases))

    def _raise_queue_empty(self, idle_count: int) -> QueueEmptyDecision:
        if self.queue_empty is None:
            return QueueEmptyDecision(stop=False, delay_s=self.dequeue_interval_s)
        try:
            return self.queue_empty(self, idle_count)
        except Exception:
            self._log.exception("queue_empty_handler_failed")
            return QueueEmptyDecision(stop=False, delay_s=self.dequeue_interval_s)

    def _raise_hook(
        self, hook: Callable[[CloudQueueListener[Any]], None] | None, name: str
    ) -> None:
        if hook is None:
            return
        try:
            hook(self)
        except Exception:
            self._log.exception("handler_failed", hook=name)

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
        self._log.info("dequeue_thread_stopped", active=self._pool.active)
        if remaining == 0 and self._stopping.is_set():
            self._subscribers.complete()

    def __repr__(self) -> str:
        return (
            f"CloudQueueListener(queue={self.queue_name!r}, active={self.active_dequeue_tasks}, "
            f"counters={self.counters.snapshot()}, stopping={self._stopping.is_set()})"
        )
