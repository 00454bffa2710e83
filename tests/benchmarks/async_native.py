"""A prototype, for measurement only: ``async def`` handlers on dequeue *tasks* of one event loop.

cloudqueue runs dequeue threads and sends ``async def handle`` coroutines to an event loop of their
own (``cloudqueue.workers.host.async_handler``). This sketch is the design's other shape: the
dequeue loops are tasks on that same loop, talking to the aio SDK (aiohttp), so a message never
crosses a thread. ``tests/benchmarks/bench_async_path.py`` measures it against the product; it is
not product code.

What it shares with the product: the pure policies decide -- ``fetch_size`` how many to get,
``idle_delay_s`` / ``should_stop_idle`` the idle back-off and when a surplus task stops,
``targets`` (the scaling rule, bounded by ``max_threads``, read as tasks) how many dequeue tasks run
once work appears, the CPU guard whether they may grow; ``MessageCodec`` decodes; the client gets
the listener's retry curve (``FastRetry``) and timeouts; at most ``max_threads x concurrency``
handlers run at once (16 x 8 by default). A message is deleted only after its handler returned; a
failed handler (or decode) leaves it in the queue, to reappear after its visibility timeout.

What it leaves out -- what a product path would still need:

* the storage protocol: Azure only (no SQLite or memory store), no translation of SDK errors;
* retry delays, the poison queue and item failures: a failing message reappears forever;
* visibility renewal (``LeaseKeeper``) of messages waiting for a slot or running long, and their
  release on stop (they reappear after their timeout);
* busy-time rescaling with hysteresis (tasks only leave when idle), rate limits, push triggers;
* observers and Rx subscriptions, counters, stats, live state, per-message log context, payloads
  kept in blobs;
* a grace period on stop: ``run`` waits for every handler it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import structlog
from azure.storage.queue import QueueMessage
from azure.storage.queue.aio import QueueClient

from cloudqueue.listener.consumer.handoff import fetch_size
from cloudqueue.listener.consumer.in_flight import DEFAULT_CONCURRENCY
from cloudqueue.listener.consumer.pool_control import ListenerLoad
from cloudqueue.listener.consumer.throughput import ThroughputMeter
from cloudqueue.listener.policies.backoff import (
    RandomSource,
    default_rng,
    randomized_exponential_backoff,
)
from cloudqueue.listener.queue_limits import MAX_BATCH_SIZE
from cloudqueue.listener.scaling.cpu import ProcessCpuMeter
from cloudqueue.listener.scaling.scaler import (
    ScalingPolicy,
    idle_delay_s,
    should_stop_idle,
    targets,
)
from cloudqueue.listener.wire.codec import Codec

T = TypeVar("T")

log = structlog.get_logger(__name__)

MAX_ERROR_DELAY_S = 30.0
"""Longest back-off after failed gets (the listener's ``max_error_delay_s`` default)."""


class AsyncNativeConsumer(Generic[T]):
    """Dequeue tasks on the running loop, feeding ``handler`` coroutines under an in-flight limit.

    ``await consumer.run()`` until ``consumer.stop()``; ``deleted`` counts settled messages.
    """

    def __init__(
        self,
        queue: QueueClient,
        handler: Callable[[T], Awaitable[None]],
        codec: Codec[T],
        *,
        policy: ScalingPolicy,
        concurrency: int = DEFAULT_CONCURRENCY,
        batch_size: int = MAX_BATCH_SIZE,
        visibility_timeout_s: int = 30,
        rng: RandomSource | None = None,
    ) -> None:
        self.queue = queue
        self.handler = handler
        self.codec = codec
        self.policy = policy
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.visibility_timeout_s = visibility_timeout_s
        self.rng = rng or default_rng()
        self.deleted = self.failed = self.in_flight = 0
        self._active = 0
        """Dequeue tasks running and not leaving (the set below drops them a step later)."""
        self._slots = asyncio.Semaphore(policy.max_threads * concurrency)
        self._stopping = asyncio.Event()
        self._scaling = asyncio.Lock()
        self._dequeuers: set[asyncio.Task[None]] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._found_work = False
        self._latency = ThroughputMeter()  # seconds per message, one at a time: the latency
        self._cpu = ProcessCpuMeter()

    @property
    def active_tasks(self) -> int:
        return self._active

    async def run(self) -> None:
        """Dequeue until ``stop()``; then wait for the handlers already started."""
        self._start_dequeuers(max(1, self.policy.min_threads))
        while self._dequeuers:  # tasks started while waiting are waited for in the next round
            done, _ = await asyncio.wait(set(self._dequeuers))
            for task in done:
                task.result()  # a bug in a dequeue loop surfaces here instead of being lost
        while self._handlers:
            await asyncio.wait(set(self._handlers))

    def stop(self) -> None:
        self._stopping.set()

    def _start_dequeuers(self, count: int) -> None:
        for _ in range(count):
            self._active += 1
            task = asyncio.create_task(self._dequeue())
            self._dequeuers.add(task)
            task.add_done_callback(self._dequeuers.discard)

    async def _dequeue(self) -> None:
        """One dequeue loop: get, start handlers, back off when idle; leave when surplus."""
        try:
            await self._dequeue_until_stop_or_surplus()
        finally:
            self._active -= 1  # at once on return: a neighbour deciding next sees one fewer

    async def _dequeue_until_stop_or_surplus(self) -> None:
        idle_count = error_count = 0
        while not self._stopping.is_set():
            try:
                messages = await self._get_batch()
            except Exception as failure:  # never end the loop on a failed get: back off, retry
                error_count += 1
                log.warning("dequeue_failed", error=str(failure), consecutive_errors=error_count)
                await self._wait(self._error_delay_s(error_count))
                continue
            error_count = 0
            if not messages:
                idle_count += 1
                delay_s = idle_delay_s(idle_count, self.policy, self.rng)
                if should_stop_idle(delay_s, self.active_tasks, self.policy):
                    return  # no await since the check: no neighbour left in between
                await self._wait(delay_s)
                continue
            if idle_count or not self._found_work:
                idle_count, self._found_work = 0, True
                await self._grow()
            await self._start_handlers(messages)

    async def _get_batch(self) -> list[QueueMessage]:
        latency_s = self._latency.seconds_per_message
        wanted = fetch_size(
            batch_size=self.batch_size,
            threads=self.active_tasks,
            per_thread_rate_per_s=None if latency_s is None else self.concurrency / latency_s,
            visibility_timeout_s=self.visibility_timeout_s,
        )
        return [
            message
            async for message in self.queue.receive_messages(
                messages_per_page=wanted,
                max_messages=wanted,
                visibility_timeout=self.visibility_timeout_s,
            )
        ]

    async def _grow(self) -> None:
        """Work found after an idle spell: run as many dequeue tasks as the scaling rule wants."""
        async with self._scaling:  # one decision at a time, or two would both add the difference
            try:
                properties = await self.queue.get_queue_properties()
            except Exception as failure:
                log.warning("rescale_skipped", error=str(failure))
                return
            load = ListenerLoad(
                approximate_depth=properties.approximate_message_count or 0,
                in_flight=self.in_flight,
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

    async def _start_handlers(self, messages: list[QueueMessage]) -> None:
        for message in messages:
            await self._slots.acquire()  # back-pressure: the dequeue task waits for a free slot
            self.in_flight += 1
            task = asyncio.create_task(self._settle(message))
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)

    async def _settle(self, message: QueueMessage) -> None:
        """Handle one message; delete it only when its handler returned."""
        started = time.monotonic()
        try:
            await self.handler(self.codec.decode(message.content))
            await self.queue.delete_message(message.id, message.pop_receipt)
        except Exception as failure:  # left in the queue: it reappears after its timeout
            self.failed += 1
            log.warning("message_failed", message_id=message.id, error=repr(failure))
        else:
            self.deleted += 1
        finally:
            self.in_flight -= 1
            self._slots.release()
            self._latency.record(1, time.monotonic() - started)

    async def _wait(self, delay_s: float) -> None:
        """Sleep on the stop event, so stop() ends an idle wait at once."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), delay_s)

    def _error_delay_s(self, error_count: int) -> float:
        return randomized_exponential_backoff(
            error_count, delta_s=0.1, min_s=0.0, max_s=MAX_ERROR_DELAY_S, rng=self.rng
        )

    def __repr__(self) -> str:
        return (
            f"AsyncNativeConsumer(tasks={self.active_tasks}, in_flight={self.in_flight}, "
            f"deleted={self.deleted}, failed={self.failed})"
        )
