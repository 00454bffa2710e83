"""The event-loop consumer: an ``async def`` handler's queue fetched, handled, settled on one loop.

The threaded listener runs dequeue threads and sends each ``async def`` handler's coroutine to a
loop of its own, a thread hop per message. Here the dequeue loops are *tasks* on the handler's
loop, awaiting an ``AsyncQueueStorage`` (the aio SDK on Azure, direct calls on the embedded
stores): a message never crosses a thread. The decisions are the threaded path's pure ones:
``fetch_size`` how many to get (1..32), ``idle_delay_s`` / ``should_stop_idle`` the idle back-off
and when a surplus task leaves, ``targets`` (read as tasks) how many fetch once work appears, the
CPU guard whether they may grow, ``randomized_exponential_backoff`` the wait after a failed get;
``async_settling`` settles each message by the delivery policy. At most ``max_threads x
concurrency`` handlers run at once, and a get waits until there are free slots for all it asks:
every message held is being handled, none waits hidden for a slot.

``await consumer.run()`` until ``stop()`` (a SIGTERM handler calls it): fetching stops, messages
not yet started are released at once, handlers get ``grace_s`` to finish, and the ones still
running then are cancelled: their messages reappear after their timeout.

``wake()`` is the push trigger's way in: idle tasks get at once, and a consumer whose tasks all
left (``scaling.min_threads = 0``) starts one. The worker host runs it for a worker with
``listener.event_loop = "single"`` (``cloudqueue.workers.host.loop_worker``).

Not yet here (the threaded path has them; see issue 41): the middleware seam and its events
(rate limits, per-key limits, idempotency, groups, metrics, tracing), batch handlers, payloads
kept in blobs, re-publishing only the failed items of a publisher's batch (a failed item here
retries the whole message), and long delays' hops.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import structlog

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.consumer.async_leases import AsyncLeases, HeldMessage
from cloudqueue.listener.consumer.async_settling import AsyncCounters, AsyncSettler
from cloudqueue.listener.consumer.handoff import fetch_size
from cloudqueue.listener.consumer.in_flight import DEFAULT_CONCURRENCY
from cloudqueue.listener.consumer.pool_control import ListenerLoad
from cloudqueue.listener.consumer.throughput import ThroughputMeter
from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.policies.backoff import (
    RandomSource,
    default_rng,
    randomized_exponential_backoff,
)
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.queue_limits import MAX_BATCH_SIZE
from cloudqueue.listener.scaling.cpu import ProcessCpuMeter
from cloudqueue.listener.scaling.scaler import (
    ScalingPolicy,
    idle_delay_s,
    should_stop_idle,
    targets,
)
from cloudqueue.listener.stores.async_storage import AsyncQueueStorage
from cloudqueue.listener.stores.storage import QueueMessage
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
    ) -> None:
        self.storage, self.queue_name = storage, queue_name
        self.policy = scaling or ScalingPolicy()
        self.delivery = delivery or DeliveryPolicy()
        self.concurrency, self.batch_size = concurrency, batch_size
        self.visibility_timeout_s, self.grace_s = visibility_timeout_s, grace_s
        self.max_error_delay_s = max_error_delay_s
        """Longest back-off after failed gets (as the threaded listener's)."""
        self.rng = rng or default_rng()
        self.counters = AsyncCounters()
        self.gets = 0
        """Get Messages calls made (empty ones included): the idle cost in transactions."""
        self.leases = AsyncLeases(
            storage,
            queue_name,
            visibility_timeout_s=visibility_timeout_s,
            renew=self.delivery.renew_visibility,
        )
        self.settler = AsyncSettler(
            storage,
            queue_name,
            handler,
            codec,
            delivery=self.delivery,
            time_limit_s=time_limit_s,
            limits=limits,
            clock=clock,
            rng=self.rng,
            counters=self.counters,
        )
        self._active = 0
        """Dequeue tasks running and not leaving."""
        self._capacity = self.policy.max_threads * concurrency
        """Handlers that may run at once: the in-flight bound."""
        self._taken = 0
        """Slots spoken for: messages held (every one of them handling) and gets on their way
        for the rest, so no get asks for a message no slot is free for (it would wait hidden,
        its visibility renewed, while another consumer could take it)."""
        self._freed = asyncio.Event()
        """Set when enough slots are free for the get a dequeue task waits to make."""
        self._waiting_for = 1
        """The room the waiting tasks want before they get (one batch, or what fetch_size asks):
        waking them for every single free slot would cost a wake-up per task per message and a
        get of one message each."""
        self._stopping = asyncio.Event()
        self._woken = asyncio.Event()
        """Set by ``wake()`` (then replaced by a fresh one) and by ``stop()``: ends idle waits."""
        self.cancelled_at_stop = 0
        """Handlers still running when the grace ran out, cancelled (their messages reappear)."""
        self._scaling = asyncio.Lock()
        self._dequeuers: set[asyncio.Task[None]] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._found_work = False
        self._latency = ThroughputMeter()  # seconds per message, one at a time: the latency
        self._cpu = ProcessCpuMeter()

    @property
    def active_tasks(self) -> int:
        """Dequeue tasks fetching now (the threaded listener's active dequeue threads)."""
        return self._active

    @property
    def handlers_running(self) -> int:
        return len(self._handlers)

    def stop(self) -> None:
        """Stop fetching; ``run`` then drains and returns."""
        self._stopping.set()
        self._woken.set()  # an idle wait, or a consumer scaled to zero, sees the stop
        self._freed.set()  # a task waiting for a free slot sees the stop

    def wake(self) -> None:
        """Work was announced (a push trigger): idle dequeue tasks get at once, and a consumer
        scaled to zero tasks starts one. Call it on the consumer's loop (from another thread:
        ``loop.call_soon_threadsafe(consumer.wake)``)."""
        if self._stopping.is_set():
            return
        woken, self._woken = self._woken, asyncio.Event()
        woken.set()
        if self._active == 0:
            self._found_work = False  # its first batch then scales the tasks to the backlog
            self._start_dequeuers(1)

    async def run(self) -> None:
        """Consume until ``stop()``; then release, drain within ``grace_s``, cancel the rest."""
        await self._create_queues()
        # Renewal goes on through the drain: a handler finishing in its grace keeps its message.
        drained = asyncio.Event()
        renewing = asyncio.create_task(self.leases.keep_renewed(drained))
        self._start_dequeuers(max(1, self.policy.min_threads))
        try:
            while self._dequeuers or not self._stopping.is_set():
                if not self._dequeuers:  # scaled to zero: until wake() starts one, or stop()
                    await self._woken.wait()
                    continue
                # Tasks started while waiting are awaited in the next round.
                done, _ = await asyncio.wait(set(self._dequeuers))
                for task in done:
                    task.result()  # a bug in a dequeue loop surfaces here instead of being lost
            await self._drain()
        finally:
            drained.set()
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
        log.info("async_consumer_stopped", queue=self.queue_name, processed=self.counters.processed)

    async def _create_queues(self) -> None:
        """The queue and its poison queue, created before the first get; a failure (storage down
        at start) is logged and tried again after a back-off, as a failed get is, until stop()."""
        failures = 0
        while not self._stopping.is_set():
            try:
                await self.storage.create_queue(self.queue_name)
                await self.storage.create_queue(poison_queue_name(self.queue_name))
                return
            except StorageError as failure:
                failures += 1
                log.warning("queue_creation_failed", queue=self.queue_name, error=str(failure))
                await self._wait(self._error_delay_s(failures))

    async def _drain(self) -> None:
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=self.grace_s)
        late = set(self._handlers)
        for task in late:
            task.cancel()  # its message reappears after its visibility timeout
        self.cancelled_at_stop = len(late)
        if late:
            log.warning("handlers_cancelled_at_stop", queue=self.queue_name, count=len(late))
            await asyncio.wait(late)

    def _start_dequeuers(self, count: int) -> None:
        for _ in range(count):
            self._active += 1
            task = asyncio.create_task(self._dequeue())
            self._dequeuers.add(task)
            task.add_done_callback(self._dequeuers.discard)

    async def _dequeue(self) -> None:
        try:
            await self._dequeue_until_stop_or_surplus()
        finally:
            self._active -= 1  # at once on return: a neighbour deciding next sees one fewer

    async def _dequeue_until_stop_or_surplus(self) -> None:
        idle_count = error_count = 0
        while not self._stopping.is_set():
            room = await self._room()
            if room == 0:
                continue  # stopping
            woken = self._woken  # a wake-up while this get is on its way ends the wait after it
            try:
                messages = await self._get_batch(room)
            except Exception as failure:  # never end the loop on a failed get: back off
                self._give_back(room)
                error_count += 1
                self.counters.dequeue_errors += 1
                log.warning("dequeue_failed", error=str(failure), consecutive_errors=error_count)
                await self._wait(self._error_delay_s(error_count))
                continue
            error_count = 0
            self._give_back(room - len(messages))  # what the get did not fill is free again
            if not messages:
                idle_count += 1
                delay_s = idle_delay_s(idle_count, self.policy, self.rng)
                if should_stop_idle(delay_s, self.active_tasks, self.policy):
                    return  # no await since the check: no neighbour left in between
                await self._wait(delay_s, woken)
                continue
            if idle_count or not self._found_work:
                idle_count, self._found_work = 0, True
                await self._grow()
            await self._start_handlers([self.leases.hold(message) for message in messages])

    async def _room(self) -> int:
        """Reserve slots for the next get: as many as ``fetch_size`` wants (a whole batch until
        handling is measured), waiting until that many are free, as a hand-written loop waits
        for its batch to finish; 0 once stopping."""
        latency_s = self._latency.seconds_per_message
        wanted = fetch_size(
            batch_size=self.batch_size,
            threads=self.active_tasks,
            per_thread_rate_per_s=None if latency_s is None else self.concurrency / latency_s,
            visibility_timeout_s=self.visibility_timeout_s,
        )
        enough = min(wanted, self._capacity)
        while not self._stopping.is_set():
            if self._capacity - self._taken >= enough:
                self._taken += enough
                return enough
            self._waiting_for = enough
            self._freed.clear()
            await self._freed.wait()
        return 0

    def _give_back(self, slots: int) -> None:
        """Free reserved slots, waking the waiting tasks once their get fits: from a settled
        message, and from a get that came back short -- without the latter, tasks waiting while
        every get came back empty (its messages hidden by a get whose answer was lost) would
        wait for a settlement that never comes."""
        self._taken -= slots
        if self._capacity - self._taken >= self._waiting_for:
            self._freed.set()

    async def _get_batch(self, room: int) -> list[QueueMessage]:
        self.gets += 1
        return await self.storage.get_messages(
            self.queue_name, max_messages=room, visibility_timeout_s=self.visibility_timeout_s
        )

    async def _grow(self) -> None:
        """Work found after an idle spell: run as many dequeue tasks as the scaling rule wants."""
        async with self._scaling:  # one decision at a time, or two would both add the difference
            try:
                depth = await self.storage.approximate_message_count(self.queue_name)
            except Exception as failure:
                log.warning("rescale_skipped", error=str(failure))
                return
            load = ListenerLoad(
                approximate_depth=depth,
                in_flight=self.counters.in_flight,
                active_threads=self.active_tasks,
                per_thread_rate_per_s=None,
                message_latency_s=self._latency.seconds_per_message,
                concurrency=self.concurrency,
            )
            grow_target, _ = targets(load, self.policy)
            if grow_target <= self.active_tasks:
                return
            cores = self._cpu.cores_used()  # None: the first reading, which only starts a window
            if cores is not None and cores >= self.policy.cpu_saturation_cores:
                log.warning("scaling_capped", active=self.active_tasks, target=grow_target)
                return
            self._start_dequeuers(grow_target - self.active_tasks)

    async def _start_handlers(self, held: list[HeldMessage]) -> None:
        """Start a handler for each (their slots were reserved before the get)."""
        if self._stopping.is_set():  # stopped while the get was on its way: give them back now
            for unstarted in held:
                await self.leases.release(unstarted)
                self._give_back(1)
            return
        for one in held:
            self.counters.in_flight += 1
            task = asyncio.create_task(self._settle(one))
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)

    async def _settle(self, held: HeldMessage) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await self.settler.handle(held)
        finally:
            self.leases.end(held)
            self.counters.in_flight -= 1
            self._give_back(1)
            self._latency.record(1, loop.time() - started)

    async def _wait(self, delay_s: float, woken: asyncio.Event | None = None) -> None:
        """Sleep on the stop event, so stop() ends a wait at once; an idle wait sleeps on the
        wake-up current at its get (``woken``: stop() or wake() sets it) instead."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for((woken or self._stopping).wait(), delay_s)

    def _error_delay_s(self, error_count: int) -> float:
        return randomized_exponential_backoff(
            error_count, delta_s=0.1, min_s=0.0, max_s=self.max_error_delay_s, rng=self.rng
        )

    def __repr__(self) -> str:
        return (
            f"AsyncConsumer(queue={self.queue_name!r}, tasks={self.active_tasks}, "
            f"counters={self.counters})"
        )
