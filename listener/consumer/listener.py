"""CloudQueueListener: a pool of dequeue threads that turns a queue into an Rx observable.

The facade wires the loop core's parts and keeps the design's contract: ``start_listener``,
``query_state``, ``stop``, and ``subscribe`` (an Observable of decoded items). What each part does:

* ``dequeue`` -- the loop every dequeue thread runs (get, hand-off, idle and error waits);
* ``processing`` -- one message read once, decoded, handed through the middleware to the
  observers; ``settlement`` -- where it ends (deleted, retried, poisoned, dropped, left);
* ``middleware`` / ``stack`` -- the seam around handling, and the listener's event bus (the
  scaler, metrics, tracing, rate limits and failure logs all plug in there);
* ``leases`` (visibility renewal), ``handoff`` (one get feeds every thread), ``in_flight`` (many
  messages per thread), ``pool`` and ``pool_control`` (the threads, and what a scaler may do).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import structlog
from reactivex import Observable, abc
from reactivex.disposable import Disposable

from cloudqueue.listener.clock import EVENT_SLEEPER, SYSTEM_CLOCK, Clock, Sleeper
from cloudqueue.listener.consumer.coroutines import LoopThread
from cloudqueue.listener.consumer.dequeue import DequeueLoop
from cloudqueue.listener.consumer.events import ListenerStarted, ListenerStopped
from cloudqueue.listener.consumer.handler_progress import HandlerProgress
from cloudqueue.listener.consumer.loop_parts import Inputs, LoopSettings, assemble
from cloudqueue.listener.consumer.middleware import Middleware
from cloudqueue.listener.consumer.pool_control import ListenerLoad, PoolControl
from cloudqueue.listener.consumer.processing import KeyFunction
from cloudqueue.listener.consumer.stats import ListenerCounters, ListenerMeters
from cloudqueue.listener.consumer.subscribers import BatchObserver, Subscribers
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.policies.backoff import RandomSource, default_rng
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.stores.payload_store import PayloadStore
from cloudqueue.listener.stores.prioritized import PrioritizedQueueStorage
from cloudqueue.listener.stores.storage import MAX_BATCH_SIZE, QueueStorage
from cloudqueue.listener.wire.codec import Codec, MessageCodec
from cloudqueue.listener.wire.limits import DEFAULT_LIMITS, DecodingLimits

T = TypeVar("T")

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class CloudQueueListenerInfo:
    """A point-in-time view of a listener's load (the design's ``QueryState`` result)."""

    current_queue_depth: int
    """The queue's approximate message count: visible and in-flight messages of every consumer."""
    active_dequeue_tasks: int
    """Dequeue threads running now and not committed to leave."""
    total_dequeue_tasks: int
    """The most dequeue threads ever active at once since the listener was created (the peak,
    as in the design) -- not a count of threads started over time, nor of those running now."""


class CloudQueueListener(Observable[T]):
    """Listens on one queue with an elastic pool of dequeue threads and emits decoded items.

    A location with ``lower_queues`` makes it listen on several queues in priority order: its
    ``storage`` is then a ``PrioritizedQueueStorage`` over the one given (gets shared by
    ``location.priority``, counts summed), and each message settles in the queue it came from.

    Threading: ``on_next`` is called on the dequeue thread that took the message -- on a handler
    thread when ``concurrency`` > 1 (messages each thread keeps in flight) -- so one observer
    receives items *concurrently* from several threads, and in no guaranteed order (queues do not
    guarantee order either). Observers must be thread-safe; stateful Rx operators (``scan``,
    ``buffer``, ``distinct``...) should be placed after ``ops.synchronize()`` or used with a
    single thread and ``concurrency = 1``. Exceptions raised by an observer's ``on_next`` leave
    the message for redelivery; they are logged and never turned into ``on_error`` (which would
    end the subscription) -- but an exception raised inside an operator of a ``pipe`` chain is
    turned into ``on_error`` by reactivex itself and ends that chain, so put fallible work in the
    final ``subscribe`` callback. ``on_completed`` is sent once, when the listener has stopped and
    its last thread has exited.

    ``middleware`` wrap the handling of each message and receive the listener's events, in order
    (``cloudqueue.listener.consumer.middleware``); every listener has ``FailureLogs`` and
    ``ConsumerTracing`` first. Messages sent by a ``Publisher`` may be compressed, batched or kept
    in a payload store; the listener unpacks them transparently (without a ``payload_store`` such
    messages are poisoned as undecodable). ``decoding`` bounds the work one message may cost before
    its items are built (over a limit: poisoned as ``over_limit``).
    """

    def __init__(
        self,
        storage: QueueStorage,
        location: CloudQueueLocation,
        item_type: type[T],
        *,
        codec: Codec[T] | None = None,
        middleware: Sequence[Middleware] = (),
        dequeue_batch_size: int = MAX_BATCH_SIZE,
        dequeue_interval_s: float = 1.0,
        max_error_delay_s: float = 30.0,
        delivery: DeliveryPolicy | None = None,
        payload_store: PayloadStore | None = None,
        create_queues: bool = True,
        concurrency: int = 1,
        clock: Clock = SYSTEM_CLOCK,
        sleeper: Sleeper = EVENT_SLEEPER,
        rng: RandomSource | None = None,
        decoding: DecodingLimits = DEFAULT_LIMITS,
        loop: LoopThread | None = None,
        time_limit_s: float = 0.0,
        adaptive_slots: bool = True,
        key: KeyFunction[T] | None = None,
    ) -> None:
        """``loop`` runs the coroutines of async middleware (by default one of its own).
        ``time_limit_s`` (0: none) bounds each message's handling
        (``cloudqueue.listener.consumer.time_limits``); ``adaptive_slots=False`` keeps every
        thread's ``concurrency`` slots in use however fast handlers return (a batch handler's);
        ``key`` gives the key of an item whose message carries none (``MessageContext.key``)."""
        super().__init__()
        rng = rng or default_rng()
        settings = LoopSettings(
            dequeue_batch_size,
            dequeue_interval_s,
            max_error_delay_s,
            concurrency,
            time_limit_s=time_limit_s,
            adaptive_slots=adaptive_slots,
        )
        if location.lower_queues:
            # Several queues read as one: gets by priority, counts summed, ids naming the queue.
            storage = PrioritizedQueueStorage(storage, location.queue_names, location.priority)
        self.storage = storage
        self.location = location
        self.codec: Codec[T] = codec or MessageCodec(
            item_type, max_json_depth=decoding.max_json_depth
        )
        self.clock, self.sleeper = clock, sleeper
        self.dequeue_batch_size = dequeue_batch_size
        self.payload_store = payload_store
        self.concurrency = concurrency
        """Messages each dequeue thread keeps in handling at once (see ``in_flight``)."""
        self.meters = ListenerMeters.new(clock)
        self._subscribers: Subscribers[T] = Subscribers()
        delivery = delivery or DeliveryPolicy()
        self._parts = assemble(
            Inputs(
                storage,
                location,
                self.codec,
                settings,
                delivery,
                payload_store,
                create_queues,
                decoding,
                clock,
                rng,
                middleware,
                loop,
                key,
            ),
            meters=self.meters,
            subscribers=self._subscribers,
            start_threads=self.start_listener,
        )
        self._loop = DequeueLoop(
            self.queue_name,
            settings=settings,
            parts=self._parts,
            clock=clock,
            sleeper=sleeper,
            rng=rng,
        )
        self._started = False
        self._log = log.bind(queue=self.queue_name)

    @property
    def queue_name(self) -> str:
        return self.location.queue_name

    @property
    def queue_names(self) -> tuple[str, ...]:
        """Every queue the listener reads, highest priority first (``queue_name`` is the first)."""
        return self.location.queue_names

    @property
    def counters(self) -> ListenerCounters:
        return self.meters.counters

    def counters_of(self, queue_name: str) -> dict[str, int]:
        """The counters' snapshot, with ``queue_name``'s own messages (processed, items
        processed, failed, poisoned, in flight) when the listener reads several queues; the
        errors are the listener's, shared by its queues."""
        counters = self.counters.snapshot()
        if self._parts.tally is not None:
            counters.update(self._parts.tally.counts(queue_name, in_flight=counters["in_flight"]))
        return counters

    @property
    def middleware(self) -> tuple[Middleware, ...]:
        """The listener's middleware, outermost first (the scaler's events among them)."""
        return self._parts.stack.middleware

    # -- the design's contract -----------------------------------------------------------------

    def start_listener(self, thread_count: int) -> None:
        """Start ``thread_count`` more dequeue threads (callable again to add more)."""
        if thread_count <= 0:
            raise ValueError(f"thread_count must be positive, got {thread_count}")
        if self.stopped:
            raise RuntimeError("the listener has been stopped; create a new one")
        self._parts.queues.ensure()
        if not self._started:
            self._started = True
            started = ListenerStarted(self.queue_name, thread_count, self._parts.signals.stopping)
            self._parts.stack.emit("on_start", started)
        active = self._parts.pool.start(thread_count, self._loop.run)
        self._log.info("dequeue_threads_started", started=thread_count, active=active)

    def query_state(self) -> CloudQueueListenerInfo:
        """Queue depth (visible and in flight), active threads now, and the most ever active.

        ``total_dequeue_tasks`` is the peak ("most tasks ever active", the design's meaning); it
        never goes down when the pool shrinks. One storage call (the approximate count).
        """
        return CloudQueueListenerInfo(
            current_queue_depth=self.storage.approximate_message_count(self.queue_name),
            active_dequeue_tasks=self._parts.pool.active,
            total_dequeue_tasks=self._parts.pool.peak,
        )

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop fetching, let in-flight items finish, and join all threads within one deadline.

        Returns True when every thread has exited. Messages fetched but not yet started are
        released back to the queue at once; anything unfinished simply reappears later.
        """
        self.request_stop()
        deadline = self.clock.monotonic() + timeout_s
        threads = self._parts.pool.threads()
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - self.clock.monotonic()))
        stragglers = [thread.name for thread in threads if thread.is_alive()]
        if stragglers:
            self._log.warning("dequeue_threads_still_running", threads=stragglers)
            return False
        self._parts.leases.close()
        if self._parts.time_limits is not None:
            self._parts.time_limits.close()
        self._parts.handlers.close()
        self._subscribers.complete()
        self._parts.stack.emit("on_stop", ListenerStopped(self.queue_name, self.counters.processed))
        self._parts.stack.close()
        self._log.info("listener_stopped", processed=self.counters.processed)
        return True

    def request_stop(self) -> None:
        """Stop fetching without waiting (``stop`` waits); threads finish their current item."""
        self._parts.signals.stopping.set()
        self._parts.signals.nudge.set()

    # -- what the scaler and the figures read --------------------------------------------------

    @property
    def pool_control(self) -> PoolControl:
        """The narrow interface a scaler is given to grow and shrink this listener's pool."""
        return self._parts.control

    def known_load(self) -> ListenerLoad | None:
        """The load now at the last known depth (``meters.known_depth``), no storage call."""
        return self._parts.load.known()

    def slots_per_thread(self) -> int:
        """Messages each dequeue thread keeps in flight now: ``concurrency`` while handlers wait,
        fewer while they return at once
        (``cloudqueue.listener.consumer.in_flight.slots_per_loop``)."""
        return self._parts.slots_per_thread()

    @property
    def active_dequeue_tasks(self) -> int:
        """Threads running and not committed to leave."""
        return self._parts.pool.active

    @property
    def peak_dequeue_tasks(self) -> int:
        """The most dequeue threads active at once so far (no storage call, unlike query_state)."""
        return self._parts.pool.peak

    @property
    def threads_alive(self) -> int:
        """Dequeue threads still running, including any finishing their last batch."""
        return len(self._parts.pool.threads())

    @property
    def loops_waiting_for_slots(self) -> int:
        """Dequeue threads waiting for one of their handler slots to free up."""
        return self._parts.handlers.loops_waiting

    @property
    def messages_waiting(self) -> int:
        """Messages fetched and held in the hand-off, not yet started (counted in flight)."""
        return len(self._parts.handoff)

    @property
    def visibility_renewals(self) -> int:
        """How many times a held message's visibility was extended so far."""
        return self._parts.leases.renewals

    def progress_reports(self) -> list[HandlerProgress]:
        """The last progress report of each message its handlers hold now (in memory: the host
        publishes them with its live state)."""
        return self._parts.leases.progress_reports()

    @property
    def stopped(self) -> bool:
        return self._parts.signals.stopping.is_set()

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
    def stuck_threads(self) -> int:
        """Handler threads still running past the time limit (their messages were released)."""
        limits = self._parts.time_limits
        return 0 if limits is None else limits.stuck_threads

    def stuck_thread_ids(self) -> frozenset[int]:
        """The idents of those threads."""
        limits = self._parts.time_limits
        return frozenset() if limits is None else limits.stuck_thread_ids()

    @property
    def time_limited(self) -> int:
        """Deliveries stopped at the time limit so far."""
        limits = self._parts.time_limits
        return 0 if limits is None else limits.expired

    @property
    def poisoning_failing(self) -> bool:
        """True from a failed move to the poison queue until a move succeeds (readiness)."""
        return self._parts.settlement.poison_mover.failing

    def subscribe_batches(self, observer: BatchObserver[T]) -> None:
        """Hand each message's items to ``observer`` at once, to be handled in batches with
        other messages' (``cloudqueue.workers.host.batch_handler``); at most one, before the
        listener starts."""
        if self._parts.signals.stopping.is_set() or self._started:
            raise RuntimeError("subscribe_batches must be called before start_listener")
        if self._subscribers.batches is not None:
            raise RuntimeError("the listener has a batch observer already")
        self._subscribers.batches = observer

    # -- Observable ----------------------------------------------------------------------------

    def _subscribe_core(
        self, observer: abc.ObserverBase[T], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        remove = self._subscribers.add(observer)
        if remove is None:
            observer.on_completed()
            return Disposable()
        return Disposable(remove)

    def __repr__(self) -> str:
        return (
            f"CloudQueueListener(queue={self.queue_name!r}, active={self.active_dequeue_tasks}, "
            f"counters={self.counters.snapshot()}, stopping={self.stopped})"
        )


__all__ = ["CloudQueueListener", "CloudQueueListenerInfo"]
