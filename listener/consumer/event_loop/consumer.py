"""The event-loop consumer: an ``async def`` handler's queue fetched, handled, settled on one loop.

The threaded listener runs dequeue threads and sends each ``async def`` handler's coroutine to a
loop of its own, a thread hop per message. Here the dequeue loops are *tasks* on the handler's
loop, awaiting an ``AsyncQueueStorage`` (the aio SDK on Azure, direct calls on the embedded
stores): a message never crosses a thread. Each task fetches as a dequeue thread does
(``event_loop.dequeue_tasks``); how many run and how much each gets are the threaded path's pure
decisions (``event_loop.task_scaling``); each message held is handled in a task of its own under
the in-flight bound (``event_loop.handler_tasks``) and settled by the delivery policy
(``event_loop.settling``).

``await consumer.run()`` until ``stop()`` (a SIGTERM handler calls it): fetching stops, messages
not yet started are released at once, handlers get ``grace_s`` to finish, and the ones still
running then are cancelled: their messages reappear after their timeout.

The middleware seam is the threaded path's (``middleware=``, the same ``Middleware`` objects,
after the failure logs and tracing every listener has):
``on_start`` / ``on_stop``, ``before_fetch`` / ``after_fetch`` around each get, ``before_handle``
before each handler starts (in its dequeue task), ``around_handle`` around each message,
``after_settle`` with its outcome, and the bus events ``on_queue_empty`` (may decide a task's
idle wait), ``on_queue_work_detected``, ``on_batch_processed`` and ``on_scaled``;
``event_loop.stack`` says how each kind of hook runs on the loop, and why.

``wake()`` is the push trigger's way in: idle tasks get at once, and a consumer whose tasks all
left (``scaling.min_threads = 0``) starts one. The worker host runs it for a worker with
``listener.event_loop = "single"`` (``cloudqueue.workers.host.loop_worker``).

A handler that blocks the loop (a sync call inside ``async def``) holds up every other handler
and the renewals: with ``blocked_after_s``, a ``LoopWatch`` thread logs one that holds it that
long, naming it and, once it lets go, how long it held the loop (``event_loop.watch``).

Large items kept in the ``payload_store`` are fetched, and their payloads retired after the
delete, on a worker thread (``event_loop.handling``); ``key`` is the worker's key of an item, for a
message that carries none, as on threads.

What a handler writes to its message through ``current_envelope()`` works as on threads: its
``progress`` rides on the next visibility renewal and shows in ``progress_reports()`` (the host's
live state), and ``save_checkpoint`` starts its write at once, to be awaited
(``event_loop.reporting``).

A message delayed beyond 7 days that is not due yet is hidden again (``event_loop.hops``). A batch
handler is a handler the host gives it (``cloudqueue.workers.host.async_batches``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import structlog

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.consumer.event_loop.counters import AsyncCounters
from cloudqueue.listener.consumer.event_loop.depth import AsyncDepth
from cloudqueue.listener.consumer.event_loop.dequeue_tasks import DequeueTasks
from cloudqueue.listener.consumer.event_loop.handler_tasks import HandlerTasks
from cloudqueue.listener.consumer.event_loop.handling import AsyncHandling
from cloudqueue.listener.consumer.event_loop.leases import AsyncLeases
from cloudqueue.listener.consumer.event_loop.settling import AsyncSettler
from cloudqueue.listener.consumer.event_loop.slots import HandlerSlots
from cloudqueue.listener.consumer.event_loop.stack import AsyncMiddlewareStack
from cloudqueue.listener.consumer.event_loop.task_scaling import TaskScaling
from cloudqueue.listener.consumer.event_loop.watch import LoopWatch
from cloudqueue.listener.consumer.events import ListenerStarted, ListenerStopped
from cloudqueue.listener.consumer.failure_logs import FailureLogs
from cloudqueue.listener.consumer.handler_progress import HandlerProgress
from cloudqueue.listener.consumer.in_flight import DEFAULT_CONCURRENCY
from cloudqueue.listener.consumer.middleware import Middleware
from cloudqueue.listener.consumer.pool_control import ListenerLoad
from cloudqueue.listener.consumer.processing import KeyFunction
from cloudqueue.listener.consumer.queue_tally import QueueTally
from cloudqueue.listener.consumer.tracing import ConsumerTracing
from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.policies.backoff import RandomSource, default_rng
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.policies.priority import STRICT, Priority
from cloudqueue.listener.queue_limits import MAX_BATCH_SIZE
from cloudqueue.listener.scaling.scaler import ScalingPolicy
from cloudqueue.listener.stores.async_prioritized import AsyncPrioritizedStorage
from cloudqueue.listener.stores.async_storage import AsyncQueueStorage
from cloudqueue.listener.stores.payload_store import PayloadStore
from cloudqueue.listener.wire.codec import Codec
from cloudqueue.listener.wire.limits import DEFAULT_LIMITS, DecodingLimits

T = TypeVar("T")

log = structlog.get_logger(__name__)


class AsyncConsumer(Generic[T]):
    """Dequeue tasks on the running loop, feeding ``handler`` tasks under an in-flight limit."""

    def __init__(
        self,
        storage: AsyncQueueStorage,
        queue_name: str,
        handler: Callable[[T], Awaitable[None]],
        codec: Codec[T],
        *,
        scaling: ScalingPolicy | None = None,
        delivery: DeliveryPolicy | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        batch_size: int = MAX_BATCH_SIZE,
        visibility_timeout_s: int = 30,
        time_limit_s: float = 0.0,
        grace_s: float = 30.0,
        max_error_delay_s: float = 30.0,
        limits: DecodingLimits = DEFAULT_LIMITS,
        clock: Clock = SYSTEM_CLOCK,
        rng: RandomSource | None = None,
        middleware: Sequence[Middleware] = (),
        payload_store: PayloadStore | None = None,
        key: KeyFunction[T] | None = None,
        create_queues: bool = True,
        lower_queues: Sequence[str] = (),
        priority: Priority = STRICT,
        blocked_after_s: float | None = None,
    ) -> None:
        self.queue_names = (queue_name, *lower_queues)
        """Every queue it reads, highest priority first (``lower_queues`` after the first)."""
        queue_of = None
        if lower_queues:  # read as one, as a listener on several queues reads them
            location = CloudQueueLocation(
                queue_name, visibility_timeout_s, tuple(lower_queues), priority
            )
            storage = AsyncPrioritizedStorage(storage, location.queue_names, priority)
            queue_of = location.queue_of
        self.storage, self.queue_name = storage, queue_name
        self.create_queues = create_queues
        """False: the queues exist already, and the credential (a SAS, a role without the
        create permission) may not create them, so it never tries (as ``QueueCreator``)."""
        self.policy = scaling or ScalingPolicy()
        self.delivery = delivery or DeliveryPolicy()
        self.concurrency, self.batch_size = concurrency, batch_size
        self.visibility_timeout_s, self.grace_s = visibility_timeout_s, grace_s
        self.max_error_delay_s = max_error_delay_s
        """Longest back-off after failed gets (as the threaded listener's)."""
        self.rng = rng or default_rng()
        self.counters = AsyncCounters()
        self.leases = AsyncLeases(
            storage,
            queue_name,
            visibility_timeout_s=visibility_timeout_s,
            renew=self.delivery.renew_visibility,
        )
        self.depth = AsyncDepth(storage, queue_name, self.leases, clock)
        """The queue's depth as last known (the figures read ``depth.known``)."""
        in_flight = self.policy.max_threads * concurrency
        # As every threaded listener: the failure logs and tracing first, then its own.
        self.tally = None if queue_of is None else QueueTally(self.queue_names, queue_of)
        """Each queue's own counts, for a consumer of several (``counters_of``)."""
        tallies = [] if self.tally is None else [self.tally]
        own = [FailureLogs(), ConsumerTracing(), *tallies, *middleware]
        self.stack = AsyncMiddlewareStack(own, queue_name=queue_name, in_flight=in_flight)
        settler = AsyncSettler(
            storage,
            queue_name,
            delivery=self.delivery,
            clock=clock,
            rng=self.rng,
            counters=self.counters,
            payload_store=payload_store,
            create_poison_queue=create_queues,
            queue_of=queue_of,
        )
        self.handling = AsyncHandling(
            settler,
            self.stack,
            handler,
            codec,
            self.leases,
            time_limit_s=time_limit_s,
            limits=limits,
            key=key,
        )
        self._stopping = asyncio.Event()
        self._slots = HandlerSlots(in_flight, self._stopping)
        """Handlers that may run at once, reserved before each get (``event_loop.slots``)."""
        self._scaling = TaskScaling(
            queue_name,
            policy=self.policy,
            stack=self.stack,
            depth=self.depth,
            counters=self.counters,
            rng=self.rng,
            concurrency=concurrency,
            batch_size=batch_size,
            visibility_timeout_s=visibility_timeout_s,
            max_error_delay_s=max_error_delay_s,
        )
        """The dequeue tasks' count, and the decisions that change it."""
        self._handlers = HandlerTasks(
            self.handling,
            stack=self.stack,
            leases=self.leases,
            slots=self._slots,
            counters=self.counters,
            latency=self._scaling.latency,
            stopping=self._stopping,
        )
        self._fetching = DequeueTasks(
            storage,
            queue_name,
            visibility_timeout_s=visibility_timeout_s,
            stack=self.stack,
            leases=self.leases,
            depth=self.depth,
            counters=self.counters,
            slots=self._slots,
            scaling=self._scaling,
            handlers=self._handlers,
            stopping=self._stopping,
        )
        self._stop_signal = threading.Event()
        """The stop as a thread's event: a middleware waiting on a worker thread (a rate limit)
        waits on it (``ListenerStarted.stopping``)."""
        self.cancelled_at_stop = 0
        """Handlers still running when the grace ran out, cancelled (their messages reappear)."""
        self._watch = (
            None
            if blocked_after_s is None
            else LoopWatch(queue_name, blocked_after_s=blocked_after_s)
        )
        """Logs a handler that blocks the loop longer than ``blocked_after_s`` (None: off)."""

    def counters_of(self, queue_name: str) -> dict[str, int]:
        """What became of ``queue_name``'s messages (``processed``, ``failed``, ``poisoned``,
        ``in_flight``; ``delay_hops``): all of them for a consumer of one queue; that queue's own
        for one of several (``QueueTally``; its hops are the consumer's, as on threads)."""
        counters = self.counters
        counts = {
            "processed": counters.processed,
            "failed": counters.failed,
            "poisoned": counters.poisoned,
            "in_flight": counters.in_flight,
            "delay_hops": counters.delay_hops,
        }
        if self.tally is not None:
            counts.update(self.tally.counts(queue_name, in_flight=counters.in_flight))
        return counts

    @property
    def gets(self) -> int:
        """Get Messages calls made (empty ones included): the idle cost in transactions."""
        return self._fetching.gets

    @property
    def active_tasks(self) -> int:
        """Dequeue tasks fetching now (the threaded listener's active dequeue threads)."""
        return self._scaling.active

    def progress_reports(self) -> list[HandlerProgress]:
        """The last progress report of each message its handlers hold now (in memory: the host
        publishes them with its live state); callable from any thread."""
        return self.leases.progress_reports()

    @property
    def handlers_running(self) -> int:
        return self._handlers.running

    def stop(self) -> None:
        """Stop fetching; ``run`` then drains and returns."""
        self._stopping.set()
        self._stop_signal.set()  # a rate limit waiting on a worker thread ends its wait
        self._fetching.stop()  # an idle wait, or a consumer scaled to zero, sees the stop
        self._slots.wake()  # a task waiting for a free slot sees the stop

    def wake(self) -> None:
        """Work was announced (a push trigger): idle dequeue tasks get at once, and a consumer
        scaled to zero tasks starts one. Call it on the consumer's loop (from another thread:
        ``loop.call_soon_threadsafe(consumer.wake)``)."""
        if not self._stopping.is_set():
            self._fetching.wake()

    async def run(self) -> None:
        """Consume until ``stop()``; then release, drain within ``grace_s``, cancel the rest."""
        if self._watch is not None:
            self._watch.start()
        try:
            await self._consume()
        finally:
            if self._watch is not None:
                self._watch.stop()

    async def _consume(self) -> None:
        await self._create_queues()
        # Renewal goes on through the drain: a handler finishing in its grace keeps its message.
        drained = asyncio.Event()
        renewing = asyncio.create_task(self.leases.keep_renewed(drained))
        first = max(1, self.policy.min_threads)
        await self.stack.emit(
            "on_start", ListenerStarted(self.queue_name, first, self._stop_signal)
        )
        try:
            await self._fetching.run(first)
            self.cancelled_at_stop = await self._handlers.drain(self.grace_s, self.queue_name)
        finally:
            drained.set()
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
        processed = self.counters.processed
        await self.stack.emit("on_stop", ListenerStopped(self.queue_name, processed))
        self.stack.close()
        log.info("async_consumer_stopped", queue=self.queue_name, processed=processed)

    async def _create_queues(self) -> None:
        """The queue and its poison queue, created before the first get (unless
        ``create_queues`` is False); a failure (storage down at start) is logged and tried again
        after a back-off, as a failed get is, until stop()."""
        failures = 0
        while self.create_queues and not self._stopping.is_set():
            try:
                for queue in self.queue_names:
                    await self.storage.create_queue(queue)
                    await self.storage.create_queue(poison_queue_name(queue))
                return
            except StorageError as failure:
                failures += 1
                log.warning("queue_creation_failed", queue=self.queue_name, error=str(failure))
                await self._fetching.wait(self._scaling.error_delay_s(failures))

    def known_load(self) -> ListenerLoad | None:
        """The load now at the last known depth, without a storage call (None before one)."""
        return self._scaling.known_load()

    def __repr__(self) -> str:
        return (
            f"AsyncConsumer(queue={self.queue_name!r}, tasks={self.active_tasks}, "
            f"counters={self.counters})"
        )
