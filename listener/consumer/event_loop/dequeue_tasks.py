"""The event-loop consumer's dequeue tasks: the loop each of them runs, as a dequeue thread does.

A task reserves handler slots for all it asks (``event_loop.slots``), gets that many between the
``before_fetch`` and ``after_fetch`` hooks, and starts a handler for each message it got
(``event_loop.handler_tasks``). An empty get ends its stretch of work and waits the idle back-off,
or leaves as a surplus; a failed get is logged, backed off, and never ends the loop; work after an
idle spell may start more tasks. Each of those decisions is ``event_loop.task_scaling``'s.

An idle wait ends at once on a ``wake()`` (the push trigger's way in: one task is started when
all of them left) or a stop; every other wait ends on the stop.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from cloudqueue.listener.consumer.dequeue import STRETCH_S
from cloudqueue.listener.consumer.event_loop.counters import AsyncCounters
from cloudqueue.listener.consumer.event_loop.depth import AsyncDepth
from cloudqueue.listener.consumer.event_loop.handler_tasks import HandlerTasks
from cloudqueue.listener.consumer.event_loop.leases import AsyncLeases
from cloudqueue.listener.consumer.event_loop.slots import HandlerSlots
from cloudqueue.listener.consumer.event_loop.stack import AsyncMiddlewareStack
from cloudqueue.listener.consumer.event_loop.task_scaling import Stretch, TaskScaling
from cloudqueue.listener.stores.async_storage import AsyncQueueStorage
from cloudqueue.listener.stores.storage import QueueMessage

log = structlog.get_logger(__name__)


class DequeueTasks:
    """One consumer's dequeue tasks on its loop, each fetching until stop or left as a surplus."""

    def __init__(
        self,
        storage: AsyncQueueStorage,
        queue_name: str,
        *,
        visibility_timeout_s: int,
        stack: AsyncMiddlewareStack,
        leases: AsyncLeases,
        depth: AsyncDepth,
        counters: AsyncCounters,
        slots: HandlerSlots,
        scaling: TaskScaling,
        handlers: HandlerTasks,
        stopping: asyncio.Event,
    ) -> None:
        self.storage, self.queue_name = storage, queue_name
        self.visibility_timeout_s = visibility_timeout_s
        self.stack, self.leases, self.depth, self.counters = stack, leases, depth, counters
        self.slots, self.scaling, self.handlers = slots, scaling, handlers
        self._stopping = stopping
        self.gets = 0
        """Get Messages calls made (empty ones included): the idle cost in transactions."""
        self._woken = asyncio.Event()
        """Set by ``wake()`` (then replaced by a fresh one) and by ``stop()``: ends idle waits."""
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, first: int) -> None:
        """Start ``first`` tasks and run them until the stop, when every task has returned."""
        self.start(first)
        while self._tasks or not self._stopping.is_set():
            if not self._tasks:  # scaled to zero: until wake() starts one, or stop()
                await self._woken.wait()
                continue
            # Tasks started while waiting are awaited in the next round.
            done, _ = await asyncio.wait(set(self._tasks))
            for task in done:
                task.result()  # a bug in a dequeue loop surfaces here instead of being lost

    def start(self, count: int) -> None:
        for _ in range(count):
            self.scaling.active += 1
            task = asyncio.create_task(self._dequeue())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def wake(self) -> None:
        """Idle tasks get at once; with none running, one starts."""
        woken, self._woken = self._woken, asyncio.Event()
        woken.set()
        if self.scaling.active == 0:
            self.scaling.found_work = False  # its first batch then scales the tasks to the backlog
            self.start(1)

    def stop(self) -> None:
        """An idle wait, or a consumer scaled to zero, sees the stop (set before this)."""
        self._woken.set()

    async def wait(self, delay_s: float, woken: asyncio.Event | None = None) -> None:
        """Sleep on the stop event, so stop() ends a wait at once; an idle wait sleeps on the
        wake-up current at its get (``woken``: stop() or wake() sets it) instead."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for((woken or self._stopping).wait(), delay_s)

    async def _dequeue(self) -> None:
        try:
            surplus = await self._dequeue_until_stop_or_surplus()
        finally:
            self.scaling.active -= 1  # at once on return: a neighbour deciding next sees one fewer
        if surplus:
            await self.scaling.left()

    async def _dequeue_until_stop_or_surplus(self) -> bool:
        """Fetch and start handlers until stopping (False) or left idle as a surplus (True)."""
        idle_count = error_count = 0
        stretch = Stretch()
        scaling = self.scaling
        while not self._stopping.is_set():
            room = await self._room()
            if room == 0:
                continue  # stopping
            woken = self._woken  # a wake-up while this get is on its way ends the wait after it
            try:
                messages = await self._get_batch(room)
            except Exception as failure:  # never end the loop on a failed get: back off
                self.slots.give_back(room)
                error_count += 1
                self.counters.dequeue_errors += 1
                log.warning("dequeue_failed", error=str(failure), consecutive_errors=error_count)
                await self.wait(scaling.error_delay_s(error_count))
                continue
            error_count = 0
            self.slots.give_back(room - len(messages))  # what the get did not fill is free
            if not messages:
                self.depth.empty_get()
                await scaling.stretch_ended(stretch)
                idle_count += 1
                stop, delay_s = scaling.idle_decision(idle_count)
                if stop:
                    return True  # no await since the check: no neighbour left in between
                await self.wait(delay_s, woken)
                continue
            if idle_count or not scaling.found_work:
                idle_count = 0
                await scaling.work_found(len(messages), self.start)
            await self.handlers.start([self.leases.hold(message) for message in messages])
            if stretch.add(len(messages)) >= STRETCH_S:
                await scaling.stretch_ended(stretch)
        return False

    async def _room(self) -> int:
        """Reserve slots for the next get: as many as ``fetch_size`` wants (a whole batch until
        handling is measured), waiting until that many are free, as a hand-written loop waits
        for its batch to finish; 0 once stopping."""
        return await self.slots.reserve(self.scaling.fetch_size())

    async def _get_batch(self, room: int) -> list[QueueMessage]:
        self.gets += 1
        stack = self.stack
        if stack.wants("before_fetch"):
            await stack.emit("before_fetch", self.queue_name)
        messages = await self.storage.get_messages(
            self.queue_name, max_messages=room, visibility_timeout_s=self.visibility_timeout_s
        )
        if stack.wants("after_fetch"):
            await stack.emit("after_fetch", self.queue_name, messages)
        return messages
